"""NNReductionSpatialMeanNode, its gradient node and NNReductionFeatureChannelsSumNode: results against numpy
and torch autograd (batches, clip_rect_source), finite differences, a convolution trained through the spatial
mean against PyTorch SGD, the missing gradient of the feature channel sum, properties and bad input."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import (Handle, assert_uninitialized_raise, float32_graph, run_results,
                     train_between_convolution_and_fully_connected)

# (x, y, z, width, height, depth) or None, and the numpy slices of the source it reads.
CLIPS = [(None, np.s_[:, :]), ((1, 2, 0, 3, 2, 1), np.s_[2:4, 1:4]), ((-3, 1, 0, 5, 100, 1), np.s_[1:, :2]),
         ((2, 0, 7, 2**40, 2**40, 0), np.s_[:, 2:])]
CLIP_IDS = ["no_clip", "inside", "clipped_left_bottom", "clipped_right"]


def graph_inputs(rng, shape=(3, 5, 4, 6)):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("clip, part", CLIPS, ids=CLIP_IDS)
def test_spatial_mean_and_its_gradient_match_torch_autograd(device, rng, clip, part):
    x = graph_inputs(rng)
    dy = rng.standard_normal((3, 5, 1, 1)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNReductionSpatialMeanNode(source)
    node.clip_rect_source = clip
    gradient = node.gradient_filter_with_source(g)
    assert type(gradient) is mpsx.NNReductionSpatialMeanGradientNode
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = xt[(slice(None), slice(None)) + part].mean(dim=(2, 3), keepdim=True)
    yt.backward(torch.tensor(dy, dtype=torch.float64))
    assert y.shape == (3, 5, 1, 1)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("clip, part", CLIPS, ids=CLIP_IDS)
@pytest.mark.parametrize("weight", [1.0, -0.25])
def test_feature_channels_sum_matches_numpy(device, rng, clip, part, weight):
    x = graph_inputs(rng)
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.NNReductionFeatureChannelsSumNode.node_with_source(source)
    node.clip_rect_source = clip
    node.weight = weight
    (y,) = run_results(device, [node.result_image], dict(x=x))
    expected = (weight * x.astype(np.float64)).sum(axis=1, keepdims=True)[(slice(None), slice(None)) + part]
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_spatial_mean_gradient_matches_finite_differences(device, rng):
    """d/dx of sum(w * mean(x)) by central differences in float64 numpy, against the graph's gradient."""
    x = graph_inputs(rng, (2, 3, 3, 2))
    w = rng.standard_normal((2, 3, 1, 1))
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNReductionSpatialMeanNode(source)
    (dx,) = run_results(device, [node.gradient_filter_with_source(g).result_image],
                        dict(x=x, dy=w.astype(np.float32)))

    def loss(v):
        return float((w * v.mean(axis=(2, 3), keepdims=True)).sum())

    numeric = np.zeros(x.shape)
    h = 1e-4
    base = x.astype(np.float64)
    for index in np.ndindex(x.shape):
        plus, minus = base.copy(), base.copy()
        plus[index] += h
        minus[index] -= h
        numeric[index] = (loss(plus) - loss(minus)) / (2 * h)
    np.testing.assert_allclose(dx, numeric, rtol=1e-4, atol=1e-6)


def test_convolution_trains_through_the_spatial_mean_as_pytorch(device):
    """conv 3x3 -> spatial mean (global average pooling) -> fully connected -> softmax cross entropy."""
    made = train_between_convolution_and_fully_connected(
        device, mpsx.NNReductionSpatialMeanNode, lambda h: h.mean(dim=(2, 3), keepdim=True), node_size=1)
    assert type(made["NNReductionSpatialMeanNode"]) is mpsx.NNReductionSpatialMeanGradientNode


def test_the_feature_channel_sum_has_no_gradient_node(device):
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNReductionFeatureChannelsSumNode(source)
    assert node.result_states == [] and node.result_state is None
    with pytest.raises(TypeError, match="MPSNNReductionFeatureChannelsSumNode has no gradient filter"):
        node.gradient_filter_with_source(g)
    with pytest.raises(TypeError, match="MPSNNReductionFeatureChannelsSumNode has no gradient filter"):
        node.training_graph(g)
    # A graph of its forward pass alone computes.
    x = np.ones((1, 3, 2, 2), np.float32)
    (y,) = run_results(device, [node.result_image], dict(x=x))
    np.testing.assert_allclose(y, np.full((1, 1, 2, 2), 3.0))


def test_a_gradient_node_made_by_hand_computes_the_same(device, rng):
    x = graph_inputs(rng, (2, 2, 3, 3))
    dy = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNReductionSpatialMeanNode(source)
    by_hand = mpsx.NNReductionSpatialMeanGradientNode.node_with_source_gradient(g, source, node.result_state)
    (dx,) = run_results(device, [by_hand.result_image], dict(x=x, dy=dy))
    np.testing.assert_allclose(dx, np.broadcast_to(dy / 9, x.shape), rtol=1e-6)


def test_float16_graph(device, rng):
    x = graph_inputs(rng, (2, 4, 3, 5))
    source = mpsx.NNImageNode(Handle("x"))
    mean = mpsx.NNReductionSpatialMeanNode(source)
    total = mpsx.NNReductionFeatureChannelsSumNode(source)
    results = [mean.result_image, total.result_image]
    for r in results:
        r.synchronize_resource = True
    graph = mpsx.NNGraph(device, result_images=results)
    assert graph.format == mpsx.DataType.FLOAT16
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.Image.from_numpy(device, x)], intermediate_images=True)
    cb.commit()
    cb.wait_until_completed()
    first, rest = y
    outputs = [first.to_numpy()] + [r.to_numpy() for r in rest]
    np.testing.assert_allclose(outputs[0], x.mean(axis=(2, 3), keepdims=True), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(outputs[1], x.sum(axis=1, keepdims=True), rtol=1e-2, atol=1e-2)


def test_properties_and_wiring(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    mean = mpsx.NNReductionSpatialMeanNode.node_with_source(source)
    total = mpsx.NNReductionFeatureChannelsSumNode(source)
    for node in (mean, total):
        assert isinstance(node, mpsx.NNUnaryReductionNode)
        assert node.clip_rect_source is None
        node.clip_rect_source = (1, 2, 0, 3, 4, 1)
        assert node.clip_rect_source == mpsx.Region(1, 2, 0, 3, 4, 1)
        node.clip_rect_source = None
        assert node.clip_rect_source is None
    assert total.weight == 1.0
    total.weight = 0.5
    assert total.weight == 0.5
    assert not hasattr(mean, "weight")
    assert isinstance(mean.result_state, mpsx.NNGradientStateNode)
    gradient = mean.gradient_filter_with_source(g)
    assert gradient.source_images == [g, source]
    assert gradient.source_states == [mean.result_state]


def test_bad_input(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    mean = mpsx.NNReductionSpatialMeanNode(source)
    total = mpsx.NNReductionFeatureChannelsSumNode(source)
    with pytest.raises(TypeError, match="NNUnaryReductionNode is abstract"):
        mpsx.NNUnaryReductionNode(source)
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.NNReductionSpatialMeanNode(None)
    with pytest.raises(ValueError, match="clip_rect_source sizes must be non-negative; given width -1"):
        mean.clip_rect_source = (0, 0, 0, -1, 1, 1)
    with pytest.raises(ValueError, match=r"clip_rect_source is \(x, y, z, width, height, depth\) or None"):
        mean.clip_rect_source = (0, 0, 1, 1)
    with pytest.raises(TypeError, match="clip_rect_source.x must be an int"):
        mean.clip_rect_source = (0.5, 0, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="clip_rect_source.y must be"):
        mean.clip_rect_source = (0, 2**50, 0, 1, 1, 1)
    assert mean.clip_rect_source is None  # nothing was set
    with pytest.raises(ValueError, match="weight must be finite, given nan"):
        total.weight = float("nan")
    with pytest.raises(TypeError, match="weight must be a float"):
        total.weight = "1"
    assert total.weight == 1.0
    upsampling_state = mpsx.CNNUpsamplingNearestNode(source, 2, 2).result_state
    with pytest.raises(TypeError, match="MPSNNReductionSpatialMeanGradientNode: expected the result state of an "
                                        "MPSNNReductionSpatialMeanNode, given the result state of an "
                                        "MPSCNNUpsamplingNearestNode"):
        mpsx.NNReductionSpatialMeanGradientNode(g, source, upsampling_state)
    with pytest.raises(TypeError, match="gradient_state"):
        mpsx.NNReductionSpatialMeanGradientNode(g, source, None)
    with pytest.raises(ValueError, match="source_image must be the source image of the MPSNNReductionSpatialMeanNode"):
        mpsx.NNReductionSpatialMeanGradientNode(g, mean.result_image, mean.result_state)
    with pytest.raises(TypeError, match="no gradients of gradients"):
        mean.gradient_filter_with_source(g).gradient_filter_with_source(g)


def test_a_clip_rect_source_outside_the_source_raises_before_encoding(device):
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.NNReductionSpatialMeanNode(source)
    node.clip_rect_source = (10, 0, 0, 2, 2, 1)
    graph = float32_graph(device, node.result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match=r"clip_rect_source \(x 10, y 0, width 2, height 2\) does not intersect "
                                              r"the 4x3 source"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, np.ones((1, 2, 3, 4), np.float32))])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


@pytest.mark.parametrize("cls", [mpsx.NNReductionSpatialMeanNode, mpsx.NNReductionFeatureChannelsSumNode,
                                 mpsx.NNReductionSpatialMeanGradientNode])
def test_uninitialized_objects_raise(device, cls):
    assert_uninitialized_raise(cls, ("result_image", "clip_rect_source", "weight", "source_images"),
                               only_those_it_has=True)
