"""NNGraph and its nodes: inference graphs against numpy, training graphs
built with training_graph against PyTorch, and the graph's bad input."""

import functools

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, one_hot_labels
from mpsx.benchmarks.reference_cnn import HostSGD

N, C_IN, C, SIZE, CLASSES, LR, STEPS = 4, 2, 4, 6, 3, 0.1, 3


def parameters(seed=3):
    rng = np.random.default_rng(seed)
    return dict(conv_w=(rng.standard_normal((C, 3, 3, C_IN)) * 0.3).astype(np.float32),
                conv_b=(rng.standard_normal(C) * 0.1).astype(np.float32),
                fc_w=(rng.standard_normal((CLASSES, SIZE // 2, SIZE // 2, C)) * 0.1).astype(np.float32),
                fc_b=(rng.standard_normal(CLASSES) * 0.1).astype(np.float32))


def batch(seed=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    return x, labels


def loss_descriptor():
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    return d


def model(p, optimizer=None, data_source=None, fused_relu=False):
    """conv 3x3 same -> relu -> max pool 2 -> fully connected -> softmax cross entropy, as nodes; the
    weights ConvolutionWeights (with `optimizer`) or data_source(descriptor, weights, biases); with
    fused_relu the relu is the convolution's fused neuron (no "relu" node)."""
    relu_d = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    conv_d = mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C, fused_neuron_descriptor=relu_d if fused_relu else None)
    fc_d = mpsx.CNNConvolutionDescriptor(SIZE // 2, SIZE // 2, C, CLASSES)
    if data_source is None:
        data_source = lambda d, w, b: mpsx.ConvolutionWeights(d, w, b, optimizer=optimizer)
    conv_w = data_source(conv_d, p["conv_w"], p["conv_b"])
    fc_w = data_source(fc_d, p["fc_w"], p["fc_b"])
    source = mpsx.NNImageNode(Handle("images"))
    conv = mpsx.CNNConvolutionNode(source, conv_w)
    relu = None if fused_relu else mpsx.CNNNeuronNode(conv.result_image, relu_d)
    pool = mpsx.CNNPoolingMaxNode((conv if fused_relu else relu).result_image, 2)
    fc = mpsx.CNNFullyConnectedNode(pool.result_image, fc_w)
    loss = mpsx.CNNLossNode(fc.result_image, loss_descriptor())
    loss.input_labels.handle = Handle("labels")
    return dict(source=source, conv=conv, relu=relu, pool=pool, fc=fc, loss=loss, conv_w=conv_w, fc_w=fc_w)


def torch_trajectory(p, x, labels, steps=STEPS):
    conv = torch.nn.Conv2d(C_IN, C, 3, padding=1)
    conv.weight.data = torch.tensor(p["conv_w"]).permute(0, 3, 1, 2).contiguous()
    conv.bias.data = torch.tensor(p["conv_b"])
    fc = torch.nn.Linear((SIZE // 2) ** 2 * C, CLASSES)
    fc.weight.data = torch.tensor(p["fc_w"]).reshape(CLASSES, -1)
    fc.bias.data = torch.tensor(p["fc_b"])
    optimizer = torch.optim.SGD([conv.weight, conv.bias, fc.weight, fc.bias], lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    for _ in range(steps):
        optimizer.zero_grad()
        h = torch.nn.functional.max_pool2d(torch.relu(conv(torch.tensor(x))), 2)
        loss = torch.nn.functional.cross_entropy(fc(h.permute(0, 2, 3, 1).reshape(N, -1)), target)
        loss.backward()
        optimizer.step()
    return dict(conv_w=conv.weight.detach().permute(0, 2, 3, 1).numpy(), conv_b=conv.bias.detach().numpy(),
                fc_w=fc.weight.detach().reshape(CLASSES, SIZE // 2, SIZE // 2, C).numpy(),
                fc_b=fc.bias.detach().numpy())


def test_inference_graph_against_numpy(device, rng):
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    relu = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    pool = mpsx.CNNPoolingMaxNode(relu.result_image, 2)
    pool.result_image.synchronize_resource = True  # the host reads it
    graph = float32_graph(device, pool.result_image)
    assert [h.label for h in graph.source_image_handles] == ["x"]
    assert graph.number_of_filters == 2
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    # Padding SIZE_SAME with the remainder top left: the 5 columns pool as
    # [-1, 0], [1, 2], [3, 4], and MPS's pooling nodes clamp column -1 to 0.
    r = np.maximum(x, 0)
    padded = np.concatenate([r[..., :1], r], axis=3)
    expected = padded.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-6)


def test_gradient_filters_are_wired_to_the_forward_node(device):
    m = model(parameters())
    g = mpsx.NNImageNode()
    gradient = m["relu"].gradient_filter_with_source(g)
    assert isinstance(gradient, mpsx.CNNNeuronGradientNode)
    assert gradient.source_images == [g, m["conv"].result_image]
    assert gradient.source_states == [m["relu"].result_state]
    assert isinstance(m["conv"].result_state, mpsx.CNNConvolutionGradientStateNode)
    assert isinstance(m["loss"].input_labels, mpsx.NNLabelsNode)
    pool_gradient = m["pool"].gradient_filter_with_source(g)
    assert isinstance(pool_gradient, mpsx.CNNPoolingMaxGradientNode)
    assert (pool_gradient.kernel_width, pool_gradient.stride_in_pixels_x) == (2, 2)
    with pytest.raises(TypeError, match="no gradients of gradients"):
        gradient.gradient_filter_with_source(g)
    with pytest.raises(TypeError, match="MPSCNNLossNode has no gradient filter"):
        m["loss"].gradient_filter_with_source(g)


def test_training_graph_mirrors_the_model(device):
    m = model(parameters())
    seen = []
    termini = m["loss"].training_graph(node_handler=lambda *a: seen.append(a))
    kinds = [type(a[0]).__name__ for a in seen]
    assert kinds == ["CNNFullyConnectedGradientNode", "CNNPoolingMaxGradientNode", "CNNNeuronGradientNode",
                     "CNNConvolutionGradientNode"]
    assert [type(a[1]).__name__ for a in seen] == ["CNNFullyConnectedNode", "CNNPoolingMaxNode", "CNNNeuronNode",
                                                 "CNNConvolutionNode"]
    assert seen[0][2] == m["pool"].result_image and seen[0][3] == m["loss"].result_image
    assert len(termini) == 1 and isinstance(termini[0], mpsx.CNNConvolutionGradientNode)
    # Without a handler each gradient result takes its inference source's handle.
    termini = model(parameters())["loss"].training_graph()
    assert termini[0].result_image.handle.label == "images"


@pytest.mark.parametrize("fused_relu", [False, True], ids=["relu-node", "fused-relu"])
@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_training_graph_trains_as_pytorch(device, style, fused_relu):
    """Also with the relu fused into the convolution: its gradient takes the gradient at the result through the
    neuron first, for the weights gradient too (which a training graph computes beside the rest of the backward
    pass where the update runs there)."""
    p = parameters()
    x, labels = batch()
    if style == "cpu":  # the host update of a Python data source
        m = model(p, data_source=functools.partial(HostSGD, learning_rate=LR), fused_relu=fused_relu)
    else:  # ConvolutionWeights with an optimizer, on the command buffer
        m = model(p, optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR),
                  fused_relu=fused_relu)
    m["conv"].training_style = style
    m["fc"].training_style = style
    termini = m["loss"].training_graph()
    graph = float32_graph(device, termini[0].result_image, False)
    assert graph.source_image_handles[0].label == "images"
    assert [h.label for h in graph.source_state_handles] == ["labels"]
    images = mpsx.ImageBatch.from_numpy(device, x)
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        assert graph.encode_batch(cb, [images], [mpsx.CNNLossLabels(device, labels)]) is None
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
    assert_trained_as_pytorch(m, p, x, labels)


def assert_trained_as_pytorch(m, p, x, labels):
    """The weights and biases of the model m (model(p)), trained STEPS steps on x and labels, equal PyTorch's."""
    expected = torch_trajectory(p, x, labels)
    np.testing.assert_allclose(m["conv_w"].weights(), expected["conv_w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["conv_w"].bias_terms(), expected["conv_b"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["fc_w"].weights(), expected["fc_w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["fc_w"].bias_terms(), expected["fc_b"], rtol=1e-4, atol=1e-5)


def test_a_recorded_graph_step_replays(device):
    """One training step of the graph recorded on a replayable command buffer and replayed gives the
    weights of steps encoded one by one."""
    p = parameters()
    x, labels = batch()
    sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    m = model(p, optimizer=sgd())
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    images, loss_labels = mpsx.ImageBatch.from_numpy(device, x), mpsx.CNNLossLabels(device, labels)
    cb = device.command_queue.command_buffer(replayable=True)
    graph.encode_batch(cb, [images], [loss_labels])
    for step in range(STEPS):
        cb.commit() if step == 0 else cb.replay()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
    expected = torch_trajectory(p, x, labels)
    np.testing.assert_allclose(m["conv_w"].weights(), expected["conv_w"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["fc_w"].bias_terms(), expected["fc_b"], rtol=1e-4, atol=1e-5)


def test_training_style_cpu_needs_the_host_update(device):
    m = model(parameters(), optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    m["fc"].training_style = "cpu"
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    x, labels = batch()
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError, match="training style CPU calls the data source's update"):
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [mpsx.CNNLossLabels(device, labels)])
    cb.commit()  # nothing of the failed encode is left on it
    cb.wait_until_completed()
    assert cb.status == "completed"
    np.testing.assert_array_equal(m["fc_w"].weights(), parameters()["fc_w"])


def test_training_style_none_leaves_the_weights(device):
    p = parameters()
    x, labels = batch()
    m = model(p, optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    m["conv"].training_style = mpsx.NNTrainingStyle.NONE
    termini = m["loss"].training_graph()
    termini[0].result_image.synchronize_resource = True
    graph = float32_graph(device, termini[0].result_image, True)
    cb = device.command_queue.command_buffer()
    dx = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [mpsx.CNNLossLabels(device, labels)])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_array_equal(m["conv_w"].weights(), p["conv_w"])
    assert not np.allclose(m["fc_w"].weights(), p["fc_w"])  # its style stays gpu
    # The gradient of the images through the whole model, against torch autograd.
    xt = torch.tensor(x, requires_grad=True)
    conv = torch.nn.functional.conv2d(xt, torch.tensor(p["conv_w"]).permute(0, 3, 1, 2), torch.tensor(p["conv_b"]),
                                      padding=1)
    h = torch.nn.functional.max_pool2d(torch.relu(conv), 2).permute(0, 2, 3, 1).reshape(N, -1)
    logits = h @ torch.tensor(p["fc_w"]).reshape(CLASSES, -1).T + torch.tensor(p["fc_b"])
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels.reshape(N, -1).argmax(1))).backward()
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_pruning_keeps_what_results_and_updates_need(device):
    m = model(parameters())
    inference = float32_graph(device, m["pool"].result_image)
    assert inference.number_of_filters == 3
    termini = m["loss"].training_graph()
    full = float32_graph(device, termini[0].result_image, True)
    assert full.number_of_filters == 9  # 5 forward, 4 gradient
    # The gradient nodes take the style their forward node has when they are made.
    m = model(parameters())
    m["conv"].training_style = "none"
    m["fc"].training_style = "none"
    termini = m["loss"].training_graph()
    assert float32_graph(device, termini[0].result_image, True).number_of_filters == 9
    # No result needed and no weights to update: nothing to encode.
    with pytest.raises(ValueError, match="nothing to encode"):
        float32_graph(device, termini[0].result_image, False)


def test_execute_async_calls_the_handler_once_with_the_result(device, rng):
    import threading
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    relu = mpsx.CNNNeuronNode(mpsx.NNImageNode(Handle("x")), mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    graph = float32_graph(device, relu.result_image)
    done, calls = threading.Event(), []

    def handler(result, error):
        calls.append((result.to_numpy(), error))
        done.set()
    graph.execute_async([mpsx.Image.from_numpy(device, x)], handler)
    assert done.wait(30)
    assert len(calls) == 1 and calls[0][1] is None
    np.testing.assert_array_equal(calls[0][0], np.maximum(x, 0))
    with pytest.raises(TypeError, match="callable"):
        graph.execute_async([mpsx.Image.from_numpy(device, x)], None)
    training = float32_graph(device, model(parameters())["loss"].training_graph()[0].result_image, True)
    with pytest.raises(ValueError, match="takes no source states"):
        training.execute_async([mpsx.Image.from_numpy(device, batch()[0])], handler)


def test_several_results_exports_and_stop_gradient(device, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    relu = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    relu.result_image.handle = Handle("relu")
    relu.result_image.export_from_graph = True
    relu.result_image.synchronize_resource = True
    pool = mpsx.CNNPoolingAverageNode(relu.result_image, 2)
    pool.result_image.handle = Handle("pool")
    pool.result_image.synchronize_resource = True
    sigmoid = mpsx.CNNNeuronNode(relu.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    sigmoid.result_image.synchronize_resource = True
    sigmoid.result_image.handle = Handle("sigmoid")
    graph = float32_graph(device, result_images=[pool.result_image, sigmoid.result_image],
                         results_are_needed=[True, True])
    assert graph.number_of_filters == 3
    assert [h.label for h in graph.intermediate_image_handles] == ["relu", "sigmoid"]
    assert graph.result_handle.label == "pool"
    cb = device.command_queue.command_buffer()
    result, intermediates = graph.encode(cb, [mpsx.Image.from_numpy(device, x)], intermediate_images=True)
    cb.commit()
    cb.wait_until_completed()
    r = np.maximum(x, 0)
    np.testing.assert_allclose(result.to_numpy(), r.reshape(2, 3, 2, 2, 2, 2).mean(axis=(3, 5)), rtol=1e-6)
    np.testing.assert_allclose(intermediates[0].to_numpy(), r, rtol=1e-6)
    np.testing.assert_allclose(intermediates[1].to_numpy(), 1 / (1 + np.exp(-r)), rtol=1e-5)
    # A result not needed prunes what only it needs.
    assert float32_graph(device, result_images=[pool.result_image, sigmoid.result_image],
                        results_are_needed=[True, False]).number_of_filters == 2
    # stop_gradient: training_graph does not go past the image.
    m = model(parameters())
    m["relu"].result_image.stop_gradient = True
    termini = m["loss"].training_graph()
    assert [type(t).__name__ for t in termini] == ["CNNPoolingMaxGradientNode"]


def test_reload_from_data_sources(device, rng):
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)

    p = parameters()
    source = HostSGD(mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C), p["conv_w"], p["conv_b"])
    conv = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("x")), source)
    conv.result_image.synchronize_resource = True
    graph = float32_graph(device, conv.result_image)

    def run():
        cb = device.command_queue.command_buffer()
        y = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
        cb.commit()
        cb.wait_until_completed()
        return y.to_numpy()
    before = run()
    source.b = source.b + 1
    np.testing.assert_array_equal(run(), before)  # loaded when the graph was made
    graph.reload_from_data_sources()
    np.testing.assert_allclose(run(), before + 1, rtol=1e-5, atol=1e-6)


def test_an_encode_while_the_graph_encodes_is_refused(device):
    """A data source whose update (run during the graph's encode) encodes the same graph again gets a
    StateError, not a deadlock or a corrupted encode."""
    caught = []

    class Reentrant(HostSGD):
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            try:
                graph.encode_batch(device.command_queue.command_buffer(), [images], [labels])
            except mpsx.StateError as e:
                caught.append(str(e))
            return None
    p = parameters()
    m = model(p, data_source=Reentrant)
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    x, y = batch()
    images, labels = mpsx.ImageBatch.from_numpy(device, x), mpsx.CNNLossLabels(device, y)
    cb = device.command_queue.command_buffer()
    graph.encode_batch(cb, [images], [labels])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    assert caught and all("the graph is being encoded already" in c for c in caught)


def test_bad_input(device):
    m = model(parameters())
    graph = float32_graph(device, m["fc"].result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match=r"expected 1 source images \(source_image_handles\), given 0"):
        graph.encode(cb, [])
    with pytest.raises(ValueError, match="a result image is a source image"):
        float32_graph(device, mpsx.NNImageNode())
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.CNNNeuronNode(None, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    with pytest.raises(TypeError, match="a handle is an object with a label"):
        mpsx.NNImageNode(3)
    with pytest.raises(TypeError):
        mpsx.NNStateNode()
    with pytest.raises(AttributeError):
        m["relu"].training_style = "gpu"  # not a trainable node
    with pytest.raises(ValueError, match="training_style must be"):
        m["conv"].training_style = "sometimes"
    loss = m["loss"]
    termini = loss.training_graph()
    g = float32_graph(device, termini[0].result_image, True)
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match=r"expected 1 source states"):
        g.encode(cb, [mpsx.Image.from_numpy(device, batch()[0])])
    # An error in a node handler comes back as itself, and nothing is made.
    with pytest.raises(KeyError, match="handler"):
        model(parameters())["loss"].training_graph(node_handler=lambda *a: {}["handler"])


@pytest.mark.parametrize("cls", [mpsx.NNImageNode, mpsx.NNFilterNode, mpsx.CNNNeuronNode, mpsx.NNGraph,
                                 mpsx.CNNConvolutionNode, mpsx.CNNPoolingMaxNode, mpsx.CNNLossNode])
def test_uninitialized_objects_raise(device, cls):
    assert_uninitialized_raise(cls, ("result_image", "handle", "source_image_handles", "label"), only_those_it_has=True)


def test_dilated_pooling_node_takes_mps_forms_only():
    # MPSCNNDilatedPoolingMaxNode: filterSize alone, filterSize:stride:dilationRate:, or all six sizes.
    source = mpsx.NNImageNode(Handle("x"))
    assert mpsx.CNNDilatedPoolingMaxNode(source, 2).dilation_rate_x == 1
    node = mpsx.CNNDilatedPoolingMaxNode(source, 3, 1, 2)
    assert (node.dilation_rate_x, node.dilation_rate_y) == (2, 2)
    node = mpsx.CNNDilatedPoolingMaxNode(source, kernel_width=3, kernel_height=2, stride_in_pixels_x=1,
                                         stride_in_pixels_y=1, dilation_rate_x=2, dilation_rate_y=3)
    assert (node.dilation_rate_x, node.dilation_rate_y) == (2, 3)
    with pytest.raises(TypeError, match="expected an int dilation_rate, given None"):
        mpsx.CNNDilatedPoolingMaxNode(source, 2, 2, None)
    with pytest.raises(TypeError, match="given 2 and None"):
        mpsx.CNNDilatedPoolingMaxNode(source, kernel_width=2, kernel_height=2, dilation_rate_x=2)
    with pytest.raises(TypeError, match="not both"):
        mpsx.CNNDilatedPoolingMaxNode(source, 2, 2, 2, dilation_rate_x=2)
    with pytest.raises(TypeError, match="must be an int"):
        mpsx.CNNDilatedPoolingMaxNode(source, 2, 2, 1.5)
