"""What NNGraph does when it compiles: the format of the images it makes, the
memory plan (storage reused within an encode, neurons in place) and the
fusion of batch normalization with its neuron. Each against numpy or PyTorch,
and fused or planned graphs against the same graph with the fusion or reuse
prevented (an exported image)."""

import time

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, float32_graph, one_hot_labels, tolerance
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, TorchReferenceCNN, random_batch

N, C_IN, C, SIZE, CLASSES, EPSILON = 3, 2, 4, 6, 3, 1e-5
RELU = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)


def settled_bytes_in_use(device):
    """bytes_in_use once the last command buffer's images are released: a GPU backend's completion thread
    may drop them just after wait_until_completed returns."""
    last, deadline = device.bytes_in_use, time.monotonic() + 2
    while time.monotonic() < deadline:
        time.sleep(0.002)
        now = device.bytes_in_use
        if now == last:
            return now
        last = now
    return last


def encode(device, graph, inputs, labels=None):
    """Encodes `graph` on numpy batches by handle label, commits and waits; returns the result, the
    exported images (numpy) and the bytes in use on the device right after the encode (before commit)."""
    images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
    states = [mpsx.CNNLossLabels(device, labels)] if labels is not None else None
    cb = device.command_queue.command_buffer()
    before = settled_bytes_in_use(device)
    result, intermediates = graph.encode_batch(cb, images, states, intermediate_images=True)
    encoded = device.bytes_in_use - before
    for image in [result] + intermediates:
        if image is not None:
            image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return result, [i.to_numpy() for i in intermediates], encoded


def sigmoid_chain(length):
    x = mpsx.NNImageNode(Handle("x"))
    node = x
    for _ in range(length):
        node = mpsx.CNNNeuronNode(node, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID)).result_image
    node.synchronize_resource = True
    return node


def sigmoid(x, times):
    for _ in range(times):
        x = 1 / (1 + np.exp(-x))
    return x


# ---------------------------------------------------------------- format

def test_format_is_float16_by_default_and_float32_when_set(device, rng):
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    graph = mpsx.NNGraph(device, sigmoid_chain(2))
    assert graph.format == mpsx.DataType.FLOAT16
    result, _, _ = encode(device, graph, {"x": x})
    assert result.data_type == mpsx.DataType.FLOAT16
    np.testing.assert_allclose(result.to_numpy(), sigmoid(x, 2), *tolerance(np.float16))
    graph.format = mpsx.DataType.FLOAT32  # read at each encode
    result, _, _ = encode(device, graph, {"x": x})
    assert result.data_type == mpsx.DataType.FLOAT32
    np.testing.assert_allclose(result.to_numpy(), sigmoid(x, 2), *tolerance(np.float32))
    assert float32_graph(device, sigmoid_chain(1)).format == mpsx.DataType.FLOAT32


def test_an_image_node_format_overrides_the_graph_format(device, rng):
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    first = mpsx.CNNNeuronNode(mpsx.NNImageNode(Handle("x")), mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    second = mpsx.CNNNeuronNode(first.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    assert first.result_image.format is None
    first.result_image.format = mpsx.DataType.FLOAT32
    first.result_image.export_from_graph = True
    assert first.result_image.format == mpsx.DataType.FLOAT32
    graph = mpsx.NNGraph(device, second.result_image)
    cb = device.command_queue.command_buffer()
    result, (exported,) = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], intermediate_images=True)
    for image in (result, exported):
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert (exported.data_type, result.data_type) == (mpsx.DataType.FLOAT32, mpsx.DataType.FLOAT16)
    np.testing.assert_allclose(exported.to_numpy(), sigmoid(x, 1), *tolerance(np.float32))
    np.testing.assert_allclose(result.to_numpy(), sigmoid(x, 2), *tolerance(np.float16))
    first.result_image.format = None
    assert first.result_image.format is None


def test_bad_formats(device):
    graph = mpsx.NNGraph(device, sigmoid_chain(1))
    with pytest.raises(ValueError, match=r"NNGraph.format: expected DataType.FLOAT16 or DataType.FLOAT32, given "
                                         r"<DataType.BFLOAT16: 2>"):
        graph.format = mpsx.DataType.BFLOAT16
    with pytest.raises(TypeError, match=r"NNGraph.format: expected DataType.FLOAT16 or DataType.FLOAT32, given 'half'"):
        graph.format = "half"
    with pytest.raises(ValueError, match=r"given <DataType.UINT8: 3>"):
        mpsx.NNGraph(device, sigmoid_chain(1), format=mpsx.DataType.UINT8)
    node = mpsx.NNImageNode()
    with pytest.raises(ValueError, match=r"NNImageNode.format: expected DataType.FLOAT16 or DataType.FLOAT32"):
        node.format = mpsx.DataType.UINT8
    assert graph.format == mpsx.DataType.FLOAT16 and node.format is None


def test_the_reference_cnn_trains_in_float16_within_float16_tolerance(device):
    """The whole training step with float16 images against PyTorch in float32: the losses of 3 steps."""
    images, labels = random_batch(8)
    model = GraphReferenceCNN(device, 8, format=mpsx.DataType.FLOAT16)
    reference = TorchReferenceCNN(model.initial_parameters)
    losses, expected = [], []
    for _ in range(3):
        model.train_step(images, labels)
        losses.append(model.loss())
        expected.append(reference.train_step(images, labels).item())
    np.testing.assert_allclose(losses, expected, rtol=1e-2)


def test_output_state_is_temporary_is_kept_and_states_stay_readable(device, rng):
    p = parameters(rng)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = np.zeros((N, CLASSES, 1, 1), np.float32)
    labels[:, 0] = 1
    dx = model(p)
    state = dx.producer.source_states[0]  # the first convolution's gradient state
    state.export_from_graph = True
    graph = float32_graph(device, dx, False)
    assert graph.output_state_is_temporary is False
    graph.output_state_is_temporary = True
    assert graph.output_state_is_temporary is True
    cb = device.command_queue.command_buffer()
    images, loss_labels = mpsx.ImageBatch.from_numpy(device, x), mpsx.CNNLossLabels(device, labels)
    _, (exported,) = graph.encode_batch(cb, [images], [loss_labels], destination_states=True)
    state = exported[0] if isinstance(exported, tuple) else exported
    assert state.is_temporary and state.read_count == 1  # MPSNNGraph.h: "be temporary objects"
    exported.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert np.abs(exported.gradient_for_weights.to_numpy()).max() > 0
    other = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode_batch(
            other, images, images, state)
    graph.output_state_is_temporary = False
    cb = device.command_queue.command_buffer()
    _, (exported,) = graph.encode_batch(cb, [images], [loss_labels], destination_states=True)
    state = exported[0] if isinstance(exported, tuple) else exported
    assert not state.is_temporary and state.read_count == 0


# ---------------------------------------------------------------- memory plan

def test_neurons_write_over_a_source_nothing_reads_later(device, rng):
    """A chain of 6 sigmoids makes one image: the first neuron cannot write over the graph's source,
    each later one writes over its source (metal: each makes its own, MPS refuses in place)."""
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    graph = float32_graph(device, sigmoid_chain(6))
    graph.capture_encodes = False  # the plan of the steps' encode; a recording keeps its own images
    encode(device, graph, {"x": x})  # the caching allocator has the blocks from now on
    result, _, encoded = encode(device, graph, {"x": x})
    np.testing.assert_allclose(result.to_numpy(), sigmoid(x, 6), rtol=1e-5, atol=1e-6)
    in_use = settled_bytes_in_use(device)
    one_image = mpsx.ImageBatch.from_numpy(device, x)
    image_bytes = device.bytes_in_use - in_use
    del one_image
    assert encoded == (6 if device.backend == "metal" else 1) * image_bytes


def model(p, export_all=False):
    """conv -> relu -> conv -> relu -> conv -> fc -> loss, every image exported with export_all (which
    keeps the graph from reusing any storage)."""
    x = mpsx.NNImageNode(Handle("x"))
    node = x
    for i in range(3):
        d = mpsx.CNNConvolutionDescriptor(3, 3, C_IN if i == 0 else C, C)
        conv = mpsx.CNNConvolutionNode(node, mpsx.ConvolutionWeights(d, p[f"w{i}"], p[f"b{i}"]))
        conv.training_style = "none"
        node = conv.result_image
        if i < 2:
            node = mpsx.CNNNeuronNode(node, RELU).result_image
    fc = mpsx.CNNFullyConnectedNode(node, mpsx.ConvolutionWeights(
        mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), p["fc_w"], p["fc_b"]))
    fc.training_style = "none"
    loss = mpsx.CNNLossNode(fc.result_image, loss_descriptor())
    loss.input_labels.handle = Handle("labels")
    dx = loss.training_graph()[0].result_image
    if export_all:
        for f in filters_of(dx):
            f.result_image.export_from_graph = True
    return dx


def filters_of(image):
    """Every filter node upstream of `image`."""
    seen, pending = {}, [image]
    while pending:
        producer = pending.pop().producer
        if producer is not None and id(producer) not in seen:
            seen[id(producer)] = producer
            pending.extend(producer.source_images)
    return list(seen.values())


def loss_descriptor():
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    return d


def parameters(rng):
    p = {f"w{i}": (rng.standard_normal((C, 3, 3, C_IN if i == 0 else C)) * 0.3).astype(np.float32) for i in range(3)}
    p.update({f"b{i}": (rng.standard_normal(C) * 0.1).astype(np.float32) for i in range(3)})
    p["fc_w"] = (rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32)
    p["fc_b"] = (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)
    return p


def test_a_training_step_reuses_the_storage_of_images_no_later_step_reads(device, rng):
    p = parameters(rng)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    planned = float32_graph(device, model(p))
    kept = float32_graph(device, model(p, export_all=True))
    for graph in (planned, kept):  # the caching allocator has the blocks from now on
        encode(device, graph, {"x": x}, labels)
    dx, _, planned_bytes = encode(device, planned, {"x": x}, labels)
    dx_kept, _, kept_bytes = encode(device, kept, {"x": x}, labels)
    # The gradient images of the backward pass share storage: a third less here.
    assert planned_bytes < 0.75 * kept_bytes, (planned_bytes, kept_bytes)
    np.testing.assert_array_equal(dx.to_numpy(), dx_kept.to_numpy())
    # And both are PyTorch's gradient.
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = xt
    for i in range(3):
        w = torch.tensor(p[f"w{i}"], dtype=torch.float64).permute(0, 3, 1, 2)
        y = torch.nn.functional.conv2d(y, w, torch.tensor(p[f"b{i}"], dtype=torch.float64), padding=1)
        if i < 2:
            y = torch.relu(y)
    fc_w = torch.tensor(p["fc_w"], dtype=torch.float64).reshape(CLASSES, -1)
    logits = y.permute(0, 2, 3, 1).reshape(N, -1) @ fc_w.T + torch.tensor(p["fc_b"], dtype=torch.float64)
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels.reshape(N, -1).argmax(1))).backward()
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_peak_bytes_in_use(device):
    device.reset_peak_bytes_in_use()
    assert device.peak_bytes_in_use == device.bytes_in_use
    before = device.bytes_in_use
    image = mpsx.Image(device, mpsx.ImageDescriptor(width=64, height=64, feature_channels=8))
    held = device.bytes_in_use - before
    assert held >= 64 * 64 * 8 * 4
    del image
    assert device.peak_bytes_in_use >= before + held
    device.reset_peak_bytes_in_use()
    assert device.peak_bytes_in_use == device.bytes_in_use


# ---------------------------------------------------------------- fusion

def normalization(gamma, beta):
    """Fixed gamma and beta, mean 0 and variance 1, no optimizer (training style NONE)."""
    return mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(len(gamma), np.float32),
                                          np.ones(len(gamma), np.float32), EPSILON)


def normalization_model(rng, neuron, export=None):
    """x -> batch normalization -> neuron -> loss (mean squared error against the labels); the input
    gradient. `export`: 'normalized' exports the normalization's result, 'neuron gradient' the
    gradient the neuron's gradient node writes."""
    gamma = (1 + rng.standard_normal(C) * 0.2).astype(np.float32)
    beta = (rng.standard_normal(C) * 0.2).astype(np.float32)
    bn = mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(Handle("x")), normalization(gamma, beta))
    bn.training_style = "none"
    neuron = mpsx.CNNNeuronNode(bn.result_image, neuron)
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
    loss = mpsx.CNNLossNode(neuron.result_image, d)
    loss.input_labels.handle = Handle("labels")
    made = {}
    dx = loss.training_graph(node_handler=lambda g, f, s, gs: made.setdefault(type(g).__name__, g))[0]
    if export == "normalized":
        bn.result_image.export_from_graph = True
    elif export == "neuron gradient":
        made["CNNNeuronGradientNode"].result_image.export_from_graph = True
    return dx.result_image, gamma, beta


NEURONS = {
    "relu": (mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU), torch.relu),
    "leaky relu": (mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, a=0.1),
                   lambda t: torch.nn.functional.leaky_relu(t, 0.1)),
    "sigmoid": (mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID), torch.sigmoid),
    "tanh": (mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, a=1.5, b=0.5), lambda t: 1.5 * torch.tanh(0.5 * t)),
}


@pytest.mark.parametrize("neuron", NEURONS)
def test_batch_normalization_runs_its_neuron_and_the_neuron_gradient(device, rng, neuron):
    x = (rng.standard_normal((N, C, SIZE, SIZE)) * 2 + 1).astype(np.float32)
    labels = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    results = {}
    for export in (None, "normalized", "neuron gradient"):
        dx_node, gamma, beta = normalization_model(np.random.default_rng(1), NEURONS[neuron][0], export)
        graph = float32_graph(device, dx_node, True)
        # The neuron and its gradient run in the normalization and its gradient unless an image between is exported.
        assert graph.number_of_fused_filters == (2 if export is None else 0)
        assert graph.number_of_filters == (3 if export is None else 5)
        dx, _, _ = encode(device, graph, {"x": x}, labels)
        results[export] = dx.to_numpy()
    for export in ("normalized", "neuron gradient"):
        np.testing.assert_allclose(results[None], results[export], rtol=1e-5, atol=1e-6)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.batch_norm(xt, None, None, torch.tensor(gamma, dtype=torch.float64),
                                       torch.tensor(beta, dtype=torch.float64), training=True, eps=EPSILON)
    activation = NEURONS[neuron][1]
    ((activation(y) - torch.tensor(labels, dtype=torch.float64)) ** 2).sum().backward()
    np.testing.assert_allclose(results[None], xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_no_fusion_where_the_normalization_feeds_more_than_its_neuron(device, rng):
    bn = mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(Handle("x")),
                                        normalization(np.ones(C, np.float32), np.zeros(C, np.float32)))
    relu = mpsx.CNNNeuronNode(bn.result_image, RELU)
    both = mpsx.NNAdditionNode(relu.result_image, bn.result_image)
    graph = float32_graph(device, both.result_image)
    assert (graph.number_of_filters, graph.number_of_fused_filters) == (3, 0)
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    result, _, _ = encode(device, graph, {"x": x})
    normalized = x / np.sqrt(1 + EPSILON)  # inference: the data source's mean 0 and variance 1
    np.testing.assert_allclose(result.to_numpy(), np.maximum(normalized, 0) + normalized, rtol=1e-5, atol=1e-6)
