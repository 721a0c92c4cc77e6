"""NNForwardLossNode and NNLossGradientNode: training graphs seeded by an
NNInitialGradientNode on the loss values, against PyTorch autograd and SGD;
the labels gradient node; the property callback; bad input."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, float32_graph
from test_graph import C, C_IN, CLASSES, LR, N, SIZE, STEPS, assert_trained_as_pytorch, batch, parameters

LT = mpsx.CNNLossType
RT = mpsx.CNNReductionType


def forward_model(p, optimizer=None, weights=False, d=None):
    """conv 3x3 same -> relu -> max pool 2 -> fully connected -> NNForwardLossNode (labels, weights image nodes)."""
    conv_w = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C), p["conv_w"], p["conv_b"],
                                     optimizer=optimizer)
    fc_w = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE // 2, SIZE // 2, C, CLASSES), p["fc_w"],
                                   p["fc_b"], optimizer=optimizer)
    source = mpsx.NNImageNode(Handle("images"))
    conv = mpsx.CNNConvolutionNode(source, conv_w)
    relu = mpsx.CNNNeuronNode(conv.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    pool = mpsx.CNNPoolingMaxNode(relu.result_image, 2)
    fc = mpsx.CNNFullyConnectedNode(pool.result_image, fc_w)
    if d is None:
        d = mpsx.CNNLossDescriptor(LT.SOFTMAX_CROSS_ENTROPY, RT.MEAN, reduce_across_batch=True)
    labels = mpsx.NNImageNode(Handle("labels"))
    w = mpsx.NNImageNode(Handle("weights")) if weights else None
    loss = mpsx.NNForwardLossNode(fc.result_image, labels, w, d)
    return dict(source=source, conv=conv, fc=fc, loss=loss, labels=labels, conv_w=conv_w, fc_w=fc_w)


def encode(device, graph, inputs):
    images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
    cb = device.command_queue.command_buffer()
    result = graph.encode_batch(cb, images, intermediate_images=True)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    first, intermediates = result
    return (None if first is None else first.to_numpy()), [i.to_numpy() for i in intermediates]


def test_training_graph_from_initial_gradient_trains_as_pytorch(device):
    p = parameters()
    x, labels = batch()
    m = forward_model(p, optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    seed = mpsx.NNInitialGradientNode(m["loss"].result_image)
    termini = seed.training_graph()
    assert sorted(type(t).__name__ for t in termini) == ["CNNConvolutionGradientNode", "NNLossGradientNode"]
    labels_gradient = next(t for t in termini if isinstance(t, mpsx.NNLossGradientNode))
    assert labels_gradient.is_labels_gradient_filter
    assert labels_gradient.result_image.handle.label == "labels"  # the default handler copies the handle
    conv_gradient = next(t for t in termini if isinstance(t, mpsx.CNNConvolutionGradientNode))
    graph = float32_graph(device, conv_gradient.result_image, False)
    assert sorted(h.label for h in graph.source_image_handles) == ["images", "labels"]
    assert graph.source_state_handles == []
    for _ in range(STEPS):
        assert encode(device, graph, {"images": x, "labels": labels})[0] is None
    assert_trained_as_pytorch(m, p, x, labels)


@pytest.mark.parametrize("reduction", [RT.NONE, RT.SUM_BY_NON_ZERO_WEIGHTS])
def test_input_and_labels_gradients_match_torch_autograd(device, rng, reduction):
    p = parameters()
    x, _ = batch()
    labels = rng.uniform(0, 1, (N, CLASSES, 1, 1)).astype(np.float32)
    weights = rng.uniform(0.5, 2, (N, CLASSES, 1, 1)).astype(np.float32)
    weights[0, 1] = 0
    d = mpsx.CNNLossDescriptor(LT.SIGMOID_CROSS_ENTROPY, reduction, weight=0.5, label_smoothing=0.1)
    m = forward_model(p, weights=True, d=d)
    for node in (m["conv"], m["fc"]):
        node.training_style = "none"
    seed = mpsx.NNInitialGradientNode(m["loss"].result_image)
    termini = seed.training_graph()
    dx = next(t for t in termini if isinstance(t, mpsx.CNNConvolutionGradientNode)).result_image
    dt = next(t for t in termini if isinstance(t, mpsx.NNLossGradientNode)).result_image
    for image in (dx, dt, m["loss"].result_image):
        image.synchronize_resource = True
    graph = float32_graph(device, result_images=[dx, dt, m["loss"].result_image])
    assert sorted(h.label for h in graph.source_image_handles) == ["images", "labels", "weights"]
    got_dx, (got_dt, got_loss) = encode(device, graph, {"images": x, "labels": labels, "weights": weights})

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tt = torch.tensor(labels, dtype=torch.float64, requires_grad=True)
    conv = torch.nn.functional.conv2d(xt, torch.tensor(p["conv_w"], dtype=torch.float64).permute(0, 3, 1, 2),
                                      torch.tensor(p["conv_b"], dtype=torch.float64), padding=1)
    h = torch.nn.functional.max_pool2d(torch.relu(conv), 2)
    y = h.permute(0, 2, 3, 1).reshape(N, -1) @ torch.tensor(p["fc_w"], dtype=torch.float64).reshape(CLASSES, -1).T
    y = (y + torch.tensor(p["fc_b"], dtype=torch.float64)).reshape(N, CLASSES, 1, 1)
    smoothed = tt * 0.9 + 0.05
    w = 0.5 * torch.tensor(weights, dtype=torch.float64)
    values = w * (torch.clamp(y, min=0) - y * smoothed + torch.log1p(torch.exp(-torch.abs(y))))
    if reduction == RT.SUM_BY_NON_ZERO_WEIGHTS:
        values = values.sum(dim=(1, 2, 3)) / (w != 0).sum(dim=(1, 2, 3))
    values.sum().backward()
    np.testing.assert_allclose(got_loss.reshape(-1), values.detach().numpy().reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got_dt, tt.grad.numpy(), rtol=1e-4, atol=1e-6)


class Scale:
    def __init__(self, value):
        self.value = value
        self.calls = []

    def scalar_weight_for_source_image(self, source_image, destination_image):
        self.calls.append((type(source_image), type(destination_image), destination_image.feature_channels))
        return self.value


def test_property_call_back_sets_the_weight(device, rng):
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    labels = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    d = mpsx.CNNLossDescriptor(LT.MEAN_SQUARED_ERROR, RT.SUM)
    loss = mpsx.NNForwardLossNode(mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("labels")), d)
    assert loss.property_call_back is None
    forward_scale = Scale(3.0)
    loss.property_call_back = forward_scale
    assert loss.property_call_back is forward_scale
    g = mpsx.NNImageNode(Handle("g"))
    plain, labels_node = loss.gradient_filters_with_source(g)
    scaled = loss.gradient_filter_with_source(g)
    gradient_scale = Scale(-2.0)
    scaled.property_call_back = gradient_scale
    for node in (loss, plain, labels_node, scaled):
        node.result_image.synchronize_resource = True
    graph = float32_graph(device, result_images=[loss.result_image, plain.result_image, labels_node.result_image,
                                                scaled.result_image])
    dl = rng.uniform(0.5, 1.5, (2, 1, 1, 1)).astype(np.float32)
    values, (dx, dt, dx_scaled) = encode(device, graph, {"x": x, "labels": labels, "g": dl})
    assert forward_scale.calls == [(mpsx.Image, mpsx.Image, 1)]
    assert gradient_scale.calls == [(mpsx.Image, mpsx.Image, 3)]
    np.testing.assert_allclose(values.reshape(-1), 3 * ((x - labels) ** 2).sum(axis=(1, 2, 3)), rtol=1e-5)
    # The plain gradient nodes take the forward encode's weight (3) from its state.
    np.testing.assert_allclose(dx, dl * 3 * 2 * (x - labels), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dt, -dl * 3 * 2 * (x - labels), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx_scaled, dl * -2 * 2 * (x - labels), rtol=1e-5, atol=1e-6)

    def fail(source_image, destination_image):
        raise KeyError("no weight")

    forward_scale.scalar_weight_for_source_image = fail
    cb = device.command_queue.command_buffer()
    with pytest.raises(KeyError, match="no weight"):
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, a) for a in (x, labels, dl)])
    assert cb.command_count == 0


def test_nodes_constructors_and_properties(device):
    d = mpsx.CNNLossDescriptor(LT.HUBER, RT.MEAN, delta=0.5, weight=2.0, number_of_classes=3,
                               reduce_across_batch=True)
    x, t, w = (mpsx.NNImageNode(Handle(n)) for n in ("x", "t", "w"))
    loss = mpsx.NNForwardLossNode(x, t, w, d)
    assert loss.source_images == [x, t, w]
    assert mpsx.NNForwardLossNode(x, t, d).source_images == [x, t]
    assert mpsx.NNForwardLossNode.node_with_sources([x, t, w], d).source_images == [x, t, w]
    assert mpsx.NNForwardLossNode(x, t, loss_descriptor=d).loss_descriptor == d
    assert (loss.loss_type, loss.reduction_type, loss.number_of_classes, loss.reduce_across_batch) == \
        (LT.HUBER, RT.MEAN, 3, True)
    assert (loss.weight, loss.delta, loss.label_smoothing) == (2.0, 0.5, 0.0)
    assert loss.epsilon == pytest.approx(1e-7)
    assert type(loss.result_state).__name__ == "NNGradientStateNode"
    g = mpsx.NNImageNode(Handle("g"))
    gradient, labels_gradient = loss.gradient_filters_with_sources([g])
    assert (gradient.is_labels_gradient_filter, labels_gradient.is_labels_gradient_filter) == (False, True)
    assert gradient.source_images == [g, x, t, w] and gradient.source_states == [loss.result_state]
    assert gradient.loss_descriptor == d and gradient.delta == 0.5 and gradient.weight == 2.0
    assert gradient.property_call_back is None
    first = loss.gradient_filter_with_source(g)
    assert isinstance(first, mpsx.NNLossGradientNode) and not first.is_labels_gradient_filter
    with pytest.raises(TypeError, match="no gradients of gradients"):
        gradient.gradient_filter_with_source(g)
    made = mpsx.NNLossGradientNode(g, x, t, None, loss.result_state, d, True)
    assert made.source_images == [g, x, t] and made.is_labels_gradient_filter
    stateless = mpsx.NNLossGradientNode.node_with_sources([g, x, t, w], None, d)
    assert stateless.source_images == [g, x, t, w] and stateless.source_states == []
    assert not stateless.is_labels_gradient_filter


def test_bad_input(device):
    d = mpsx.CNNLossDescriptor(LT.MEAN_SQUARED_ERROR, RT.SUM)
    x, t = mpsx.NNImageNode(), mpsx.NNImageNode()
    with pytest.raises(TypeError, match="labels: expected an NNImageNode, given NoneType"):
        mpsx.NNForwardLossNode(x, None, d)
    with pytest.raises(TypeError, match="loss_descriptor: expected a CNNLossDescriptor, given NoneType"):
        mpsx.NNForwardLossNode(x, t)
    with pytest.raises(TypeError, match="weights: expected an NNImageNode, given int"):
        mpsx.NNForwardLossNode(x, t, 3, d)
    with pytest.raises(ValueError, match=r"expected 2 or 3 sources \(source, labels\[, weights\]\), given 1"):
        mpsx.NNForwardLossNode.node_with_sources([x], d)
    with pytest.raises(ValueError, match="expected 3 or 4 sources .* given 2"):
        mpsx.NNLossGradientNode.node_with_sources([x, t], None, d)
    loss = mpsx.NNForwardLossNode(x, t, d)
    with pytest.raises(ValueError, match="the gradient of the loss values cannot be the loss values; give "
                                         "training_graph a source gradient, or start it at an "
                                         "NNInitialGradientNode"):
        loss.training_graph()
    with pytest.raises(ValueError, match="MPSNNForwardLossNode: expected one gradient image .* given 2"):
        loss.gradient_filters_with_sources([x, t])
    relu = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    with pytest.raises(TypeError, match="MPSNNLossGradientNode: expected the result state of an "
                                        "MPSNNForwardLossNode, given the result state of an MPSCNNNeuronNode"):
        mpsx.NNLossGradientNode(x, x, t, None, relu.result_state, d)
    with pytest.raises(TypeError, match="gradient_state: expected None or an NNGradientStateNode, given str"):
        mpsx.NNLossGradientNode(x, x, t, None, "state", d)
    with pytest.raises(TypeError, match="is_labels_gradient_filter: expected a bool, given str"):
        mpsx.NNLossGradientNode(x, x, t, None, None, d, "yes")
    with pytest.raises(TypeError, match="property_call_back: expected None or an object with a "
                                        "scalar_weight_for_source_image"):
        loss.property_call_back = 1.5
    for cls in (mpsx.NNForwardLossNode, mpsx.NNLossGradientNode):
        with pytest.raises(TypeError):
            cls.__new__(cls).property_call_back
