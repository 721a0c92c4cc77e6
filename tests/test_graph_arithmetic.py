"""Arithmetic nodes in NNGraph: residual blocks and products of branches trained with training_graph
against PyTorch autograd and SGD, gradients summed where one image feeds both inputs, properties,
defaults and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, one_hot_labels

N, C, SIZE, CLASSES, LR, STEPS = 2, 4, 6, 3, 0.1, 3


def parameters(names, seed=7):
    rng = np.random.default_rng(seed)
    p = {}
    for name in names:
        p[name + "_w"] = (rng.standard_normal((C, 3, 3, C)) * 0.3).astype(np.float32)
        p[name + "_b"] = (rng.standard_normal(C) * 0.1).astype(np.float32)
    p["fc_w"] = (rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32)
    p["fc_b"] = (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)
    return p


def batch(seed=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    return x, labels


def relu_node(image):
    return mpsx.CNNNeuronNode(image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).result_image


# Each model: h = conv1(x), then a combination of branches of h, then fully connected and softmax cross
# entropy; (mpsx builder, torch function of (h, convs)).
def residual(nodes, h):
    return mpsx.NNAdditionNode(relu_node(nodes["conv2"](h)), h)


def residual_torch(h, conv):
    return torch.relu(conv["conv2"](h)) + h


def product(nodes, h):
    return mpsx.NNMultiplicationNode(relu_node(nodes["conv2"](h)), nodes["conv3"](h))


def product_torch(h, conv):
    return torch.relu(conv["conv2"](h)) * conv["conv3"](h)


def scaled_difference(nodes, h):
    node = mpsx.NNSubtractionNode(nodes["conv2"](h), relu_node(h))
    node.primary_scale, node.secondary_scale, node.bias = 0.5, 2.0, 0.25
    return node


def scaled_difference_torch(h, conv):
    return 0.5 * conv["conv2"](h) - 2.0 * torch.relu(h) + 0.25


def square(nodes, h):  # one image read by both inputs: its two gradients add up
    return mpsx.NNMultiplicationNode(h, h)


def square_torch(h, conv):
    return h * h


def sources_form(nodes, h):  # initWithSources:, and an image read by both a conv and the addition
    return mpsx.NNAdditionNode(sources=[nodes["conv2"](h), h])


def sources_form_torch(h, conv):
    return conv["conv2"](h) + h


MODELS = {
    "residual": (residual, residual_torch, ["conv1", "conv2"]),
    "product": (product, product_torch, ["conv1", "conv2", "conv3"]),
    "scaled_difference": (scaled_difference, scaled_difference_torch, ["conv1", "conv2"]),
    "square": (square, square_torch, ["conv1"]),
    "sources_form": (sources_form, sources_form_torch, ["conv1", "conv2"]),
}


def build(device, name, p):
    make, _, convs = MODELS[name]
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    weights = {c: mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C, C), p[c + "_w"], p[c + "_b"],
                                          optimizer=sgd) for c in convs}
    weights["fc"] = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), p["fc_w"],
                                            p["fc_b"], optimizer=sgd)
    nodes = {c: (lambda image, c=c: mpsx.CNNConvolutionNode(image, weights[c]).result_image) for c in convs}
    source = mpsx.NNImageNode(Handle("x"))
    h = nodes["conv1"](source)
    combined = make(nodes, h)
    fc = mpsx.CNNFullyConnectedNode(combined.result_image, weights["fc"])
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, d)
    loss.input_labels.handle = Handle("labels")
    return loss, weights, combined


def torch_run(name, p, x, labels, steps):
    """The input gradient of the first step and the parameters after `steps` SGD steps."""
    _, function, convs = MODELS[name]
    params = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    conv = {c: (lambda t, c=c: F.conv2d(t, params[c + "_w"].permute(0, 3, 1, 2), params[c + "_b"], padding=1))
            for c in convs}
    optimizer = torch.optim.SGD(list(params.values()), lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    first_dx = None
    for _ in range(steps):
        optimizer.zero_grad()
        xt = torch.tensor(x, requires_grad=True)
        s = function(conv["conv1"](xt), conv)
        logits = s.permute(0, 2, 3, 1).reshape(N, -1) @ params["fc_w"].reshape(CLASSES, -1).T + params["fc_b"]
        F.cross_entropy(logits, target).backward()
        optimizer.step()
        if first_dx is None:
            first_dx = xt.grad.numpy()
    return first_dx, {k: v.detach().numpy() for k, v in params.items()}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_graph_trains_as_pytorch(device, name):
    convs = MODELS[name][2]
    p = parameters(convs)
    x, labels = batch()
    loss, weights, _ = build(device, name, p)
    termini = loss.training_graph()
    assert len(termini) == 1 and isinstance(termini[0], mpsx.CNNConvolutionGradientNode)
    dx_node = termini[0].result_image
    dx_node.synchronize_resource = True
    graph = float32_graph(device, dx_node, True)
    images, loss_labels = mpsx.ImageBatch.from_numpy(device, x), mpsx.CNNLossLabels(device, labels)
    dxs = []
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        dxs.append(graph.encode_batch(cb, [images], [loss_labels]))
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
    dx, expected = torch_run(name, p, x, labels, STEPS)
    np.testing.assert_allclose(dxs[0].to_numpy(), dx, rtol=1e-4, atol=1e-6)
    for c in convs + ["fc"]:
        np.testing.assert_allclose(weights[c].weights(), expected[c + "_w"], rtol=1e-4, atol=1e-5, err_msg=c)
        np.testing.assert_allclose(weights[c].bias_terms(), expected[c + "_b"], rtol=1e-4, atol=1e-5, err_msg=c)


def test_training_graph_sums_the_gradients_of_an_image_read_twice(device):
    loss, _, combined = build(device, "square", parameters(["conv1"]))
    seen = []
    loss.training_graph(node_handler=lambda *a: seen.append(a))
    kinds = [type(a[0]).__name__ for a in seen]
    assert kinds == ["CNNFullyConnectedGradientNode", "NNMultiplicationGradientNode",
                     "NNMultiplicationGradientNode", "NNAdditionNode", "CNNConvolutionGradientNode"]
    primary, secondary = seen[1][0], seen[2][0]
    assert (primary.is_secondary_source_filter, secondary.is_secondary_source_filter) == (False, True)
    # The addition sums the two gradients of h, then the convolution's gradient reads the sum.
    assert seen[3][0].source_images == [primary.result_image, secondary.result_image]
    assert seen[4][0].source_images[0] == seen[3][0].result_image


def inference(device, node, *arrays):
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, node.result_image)
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.Image.from_numpy(device, a) for a in arrays])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return y.to_numpy()


@pytest.mark.parametrize("cls, op", [(mpsx.NNAdditionNode, np.add), (mpsx.NNSubtractionNode, np.subtract),
                                     (mpsx.NNMultiplicationNode, np.multiply),
                                     (mpsx.NNDivisionNode, np.divide)])
def test_inference_with_scales_bias_and_clamp(device, rng, cls, op):
    a = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    b = (rng.uniform(0.5, 2, (2, 4, 3, 5)) * rng.choice([-1, 1], (2, 4, 3, 5))).astype(np.float32)
    left, right = mpsx.NNImageNode(Handle("a")), mpsx.NNImageNode(Handle("b"))
    node = cls(left, right)
    node.primary_scale, node.secondary_scale, node.bias = 1.5, -0.5, 0.125
    node.minimum_value, node.maximum_value = -1.0, 2.0
    expected = np.clip(op(1.5 * a, -0.5 * b) + 0.125, -1, 2)
    np.testing.assert_allclose(inference(device, node, a, b), expected, rtol=1e-5, atol=1e-6)


def test_comparison_and_broadcasting(device, rng):
    a = rng.integers(0, 3, (2, 4, 3, 5)).astype(np.float32)
    b = rng.integers(0, 3, (2, 1, 1, 1)).astype(np.float32)
    node = mpsx.NNComparisonNode(mpsx.NNImageNode(Handle("a")), mpsx.NNImageNode(Handle("b")))
    assert node.comparison_type == mpsx.NNComparisonType.EQUAL
    node.comparison_type = mpsx.NNComparisonType.GREATER
    node.secondary_stride_in_pixels_x = node.secondary_stride_in_pixels_y = 0
    node.secondary_stride_in_feature_channels = 0
    np.testing.assert_array_equal(inference(device, node, a, b), (a > b).astype(np.float32))
    assert node.result_states == []
    with pytest.raises(TypeError, match="MPSNNComparisonNode has no gradient filter"):
        node.gradient_filters_with_sources([mpsx.NNImageNode()])
    division = mpsx.NNDivisionNode(mpsx.NNImageNode(), mpsx.NNImageNode())
    with pytest.raises(TypeError, match="MPSNNDivisionNode has no gradient filter"):
        division.gradient_filters_with_source(mpsx.NNImageNode())


def test_broadcast_gradient_is_summed_as_pytorch(device, rng):
    """A (N, C, 1, 1) secondary broadcast over x and y by strides 0: its gradient is the sum over the
    pixels, as torch's broadcasting."""
    x, labels = batch()
    scale = rng.standard_normal((N, C, 1, 1)).astype(np.float32)
    p = parameters(["conv1"])
    weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C, C), p["conv1_w"], p["conv1_b"])
    conv_s = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("s")), mpsx.ConvolutionWeights(
        mpsx.CNNConvolutionDescriptor(1, 1, C, C), np.eye(C, dtype=np.float32).reshape(C, 1, 1, C)))
    conv_s.training_style = "none"
    conv = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("x")), weights)
    conv.training_style = "none"
    node = mpsx.NNMultiplicationNode(conv.result_image, conv_s.result_image)
    node.secondary_stride_in_pixels_x = node.secondary_stride_in_pixels_y = 0
    g = mpsx.NNImageNode(Handle("dy"))
    primary, secondary = node.gradient_filters_with_sources([g])
    assert secondary.secondary_stride_in_pixels_x == 1  # it reads the primary (the other) image
    assert primary.secondary_stride_in_pixels_x == 0  # it reads the broadcast secondary image
    assert primary.source_images[1] == conv_s.result_image and secondary.source_images[1] == conv.result_image
    secondary.result_image.synchronize_resource = True
    primary.result_image.export_from_graph = True
    primary.result_image.synchronize_resource = True
    graph = float32_graph(device, result_images=[secondary.result_image, primary.result_image])
    dy = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    by_handle = {"x": x, "s": scale, "dy": dy}
    cb = device.command_queue.command_buffer()
    ds, (dh,) = graph.encode(cb, [mpsx.Image.from_numpy(device, by_handle[h.label])
                                  for h in graph.source_image_handles], intermediate_images=True)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    h = F.conv2d(torch.tensor(x), torch.tensor(p["conv1_w"]).permute(0, 3, 1, 2), torch.tensor(p["conv1_b"]),
                 padding=1)
    st = torch.tensor(scale, requires_grad=True)
    ht = h.clone().requires_grad_(True)
    (ht * st).backward(torch.tensor(dy))
    np.testing.assert_allclose(ds.to_numpy(), st.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dh.to_numpy(), ht.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_properties_and_defaults():
    left, right = mpsx.NNImageNode(), mpsx.NNImageNode()
    node = mpsx.NNSubtractionNode(left, right)
    assert node.source_images == [left, right]
    assert (node.primary_scale, node.secondary_scale, node.bias) == (1.0, 1.0, 0.0)
    assert node.minimum_value == -np.finfo(np.float32).max and node.maximum_value == np.finfo(np.float32).max
    for name in ("primary_stride_in_pixels_x", "primary_stride_in_pixels_y", "primary_stride_in_feature_channels",
                 "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
                 "secondary_stride_in_feature_channels"):
        assert getattr(node, name) == 1
    assert type(node.result_state) is mpsx.NNArithmeticGradientStateNode  # an NNBinaryGradientStateNode
    assert node.binary_gradient_state == node.result_state
    node.primary_scale, node.secondary_scale, node.minimum_value = 3.0, 0.25, -5.0
    g = mpsx.NNImageNode()
    primary, secondary = node.gradient_filters_with_source(g)
    assert type(primary) is mpsx.NNSubtractionGradientNode and type(secondary) is mpsx.NNSubtractionGradientNode
    assert (primary.primary_scale, primary.secondary_scale, primary.minimum_value) == (3.0, 0.25, -5.0)
    assert primary.source_images == [g, left] and secondary.source_images == [g, right]
    assert primary.source_states == [node.result_state]
    assert isinstance(primary.source_states[0], mpsx.NNBinaryGradientStateNode)
    assert node.gradient_filter_with_sources([g]).is_secondary_source_filter is False
    made = mpsx.NNSubtractionGradientNode.with_gradient_images([g], node, True)
    assert made.is_secondary_source_filter and made.source_images == [g, right]
    direct = mpsx.NNSubtractionGradientNode(g, right, node.result_state, True)
    assert direct.is_secondary_source_filter and direct.secondary_scale == 1.0
    product = mpsx.NNMultiplicationNode(left, right)
    p, s = product.gradient_filters_with_sources([g])
    assert p.source_images == [g, right] and s.source_images == [g, left]  # each reads the other image
    assert isinstance(mpsx.NNMultiplicationNode.node_with_sources([left, right]), mpsx.NNMultiplicationNode)


def test_bad_input(device):
    left, right = mpsx.NNImageNode(), mpsx.NNImageNode()
    with pytest.raises(TypeError, match="abstract"):
        mpsx.NNBinaryArithmeticNode(left, right)
    with pytest.raises(TypeError, match="right_source: expected an NNImageNode, given int"):
        mpsx.NNAdditionNode(left, 3)
    with pytest.raises(ValueError, match="sources must be a list of two"):
        mpsx.NNAdditionNode(sources=[left])
    with pytest.raises(TypeError, match="not both"):
        mpsx.NNAdditionNode(left, sources=[left, right])
    node = mpsx.NNAdditionNode(left, right)
    with pytest.raises(ValueError, match=r"primary_stride_in_pixels_x must be 0 \(broadcast\) or 1, given 2"):
        node.primary_stride_in_pixels_x = 2
    with pytest.raises(TypeError):
        node.bias = "one"
    with pytest.raises(ValueError, match="comparison_type must be"):
        mpsx.NNComparisonNode(left, right).comparison_type = 9
    g = mpsx.NNImageNode()
    with pytest.raises(TypeError, match="expected the gradient state of a MPSNNMultiplicationNode, given the state "
                                        "of a MPSNNAdditionNode"):
        mpsx.NNMultiplicationGradientNode(g, left, node.result_state, False)
    relu = mpsx.CNNNeuronNode(left, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    with pytest.raises(TypeError, match="expected an NNBinaryGradientStateNode, given MPSNNGradientStateNode"):
        mpsx.NNAdditionGradientNode(g, left, relu.result_state, False)
    with pytest.raises(TypeError, match="abstract"):
        mpsx.NNArithmeticGradientNode(g, left, node.result_state, False)
    with pytest.raises(TypeError, match="whose gradient is a NNAdditionGradientNode"):
        mpsx.NNSubtractionGradientNode.with_gradient_images([g], node, False)
    primary = node.gradient_filters_with_sources([g])[0]
    with pytest.raises(TypeError, match="no gradients of gradients"):
        primary.gradient_filters_with_sources([g])
    # Strides the forward did not use are refused when the graph compiles, before anything is encoded.
    primary.secondary_stride_in_pixels_x = 0
    primary.result_image.synchronize_resource = True
    with pytest.raises(ValueError, match="must be the forward node's strides"):
        float32_graph(device, primary.result_image)
    # Shapes the kernel refuses raise at encode, naming the node's kernel.
    graph = float32_graph(device, node.result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="MPSCNNAdd"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, np.zeros((1, 4, 2, 2), np.float32)),
                          mpsx.Image.from_numpy(device, np.zeros((1, 3, 2, 2), np.float32))])


@pytest.mark.parametrize("cls", [mpsx.NNAdditionNode, mpsx.NNComparisonNode, mpsx.NNAdditionGradientNode,
                                 mpsx.NNMultiplicationGradientNode, mpsx.NNBinaryGradientStateNode])
def test_uninitialized_objects_raise(cls):
    assert_uninitialized_raise(cls, ("result_image", "primary_scale", "is_secondary_source_filter", "handle"),
                               only_those_it_has=True)
