"""NNPadNode, NNReshapeNode and their gradient nodes: results and gradients against torch autograd, training graphs
through them against PyTorch SGD, properties, wiring and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, assert_uninitialized_raise, run_results, train_between_convolution_and_fully_connected

E = mpsx.ImageEdgeMode


def torch_hwc_reshape(t, w, h, c):
    return t.permute(0, 2, 3, 1).reshape(t.shape[0], h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("mode,torch_mode", [(E.ZERO, "constant"), (E.CLAMP, "replicate"), (E.MIRROR, "reflect")],
                         ids=["constant", "replicate", "reflect"])
def test_pad_node_forward_and_gradient_match_torch_autograd(device, rng, mode, torch_mode):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNPadNode(source, (2, 1, 0), (1, 3, 0), mode)
    gradient = node.gradient_filter_with_source(g)
    assert type(gradient) is mpsx.NNPadGradientNode
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = F.pad(xt, (2, 1, 1, 3), mode=torch_mode)
    dy = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    yt.backward(torch.tensor(dy, dtype=torch.float64))
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_pad_node_constant_fill_and_channels(device, rng):
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.NNPadNode.node_with_source(source, (0, 1, 1), (1, 0, 2), E.CONSTANT)
    node.fill_value = -4.0
    (y,) = run_results(device, [node.result_image], dict(x=x))
    expected = np.pad(x, ((0, 0), (1, 2), (1, 0), (0, 1)), constant_values=-4.0)
    np.testing.assert_array_equal(y, expected)


def test_reshape_node_forward_and_gradient_match_torch_autograd(device, rng):
    x = rng.standard_normal((2, 3, 4, 2)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNReshapeNode(source, 6, 1, 4)
    gradient = node.gradient_filter_with_source(g)
    assert type(gradient) is mpsx.NNReshapeGradientNode
    dy = rng.standard_normal((2, 4, 1, 6)).astype(np.float32)
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_hwc_reshape(xt, 6, 1, 4)
    yt.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(dx, xt.grad.numpy())


def test_training_graph_of_a_chain_matches_torch_autograd(device, rng):
    """x -> reshape -> mirror pad (x, y and channels) -> reshape: training_graph makes both gradient nodes."""
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    a = mpsx.NNReshapeNode(source, 6, 2, 2)
    b = mpsx.NNPadNode(a.result_image, (1, 1, 1), (2, 0, 1), E.MIRROR_WITH_EDGE)
    c = mpsx.NNReshapeNode(b.result_image, 3, 9, 4)
    termini = c.training_graph(g)
    assert len(termini) == 1 and type(termini[0]) is mpsx.NNReshapeGradientNode
    dy = rng.standard_normal((2, 4, 9, 3)).astype(np.float32)
    (dx,) = run_results(device, [termini[0].result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = torch_hwc_reshape(xt, 6, 2, 2)
    # MIRROR_WITH_EDGE is numpy's "symmetric": the edge repeated, built from flips in torch.
    h = torch.cat([h[:, :1], h, h[:, -1:]], 1)
    h = torch.cat([h[:, :, :1], h, ], 2)
    h = torch.cat([h[:, :, :, :1], h, h[:, :, :, -1:], h[:, :, :, -2:-1]], 3)
    torch_hwc_reshape(h, 3, 9, 4).backward(torch.tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_convolution_trains_through_pad_as_pytorch(device):
    """conv 3x3 -> reflect pad 1 -> fully connected -> softmax cross entropy, SGD on the graph and in torch."""
    seen = train_between_convolution_and_fully_connected(
        device, lambda image: mpsx.NNPadNode(image, (1, 1, 0), (1, 1, 0), E.MIRROR),
        lambda h: F.pad(h, (1, 1, 1, 1), mode="reflect"), size=4, node_size=6)
    assert type(seen["NNPadNode"]) is mpsx.NNPadGradientNode


def test_convolution_trains_through_reshape_and_channel_pad_as_pytorch(device):
    """conv 3x3 (4 channels, 4x4) -> reshape to 8x8x1 -> zero pad to 4 channels -> fully connected (8x8x4)."""
    def make(image):
        return mpsx.NNPadNode(mpsx.NNReshapeNode(image, 8, 8, 1).result_image, (0, 0, 0), (0, 0, 3), E.ZERO)

    seen = train_between_convolution_and_fully_connected(
        device, make, lambda h: F.pad(torch_hwc_reshape(h, 8, 8, 1), (0, 0, 0, 0, 0, 3)), c=4, size=4, node_size=8)
    assert type(seen["NNReshapeNode"]) is mpsx.NNReshapeGradientNode


def test_properties_wiring_and_bad_input(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    pad = mpsx.NNPadNode(source, (1, 2, 3), (4, 5, 6), E.CLAMP)
    assert pad.padding_size_before == mpsx.ImageCoordinate(1, 2, 3)
    assert (pad.padding_size_after, pad.edge_mode, pad.fill_value) == ((4, 5, 6), E.CLAMP, 0.0)
    reshape = mpsx.NNReshapeNode.node_with_source(source, 2, 3, 4)
    assert (reshape.result_width, reshape.result_height, reshape.result_feature_channels) == (2, 3, 4)
    for node, cls in ((pad, mpsx.NNPadGradientNode), (reshape, mpsx.NNReshapeGradientNode)):
        gradient = cls.node_with_source_gradient(g, source, node.result_state)
        assert gradient.source_images == [g, source] and gradient.source_states == [node.result_state]
        with pytest.raises(ValueError, match="source_image must be the source image of the"):
            cls(g, g, node.result_state)
    with pytest.raises(TypeError, match="MPSNNPadNode"):
        mpsx.NNPadGradientNode(g, source, reshape.result_state)
    with pytest.raises(TypeError, match="MPSNNReshapeNode"):
        mpsx.NNReshapeGradientNode(g, source, pad.result_state)
    with pytest.raises(ValueError, match="at least 0"):
        mpsx.NNPadNode(source, (0, -1, 0), (0, 0, 0), E.ZERO)
    with pytest.raises(ValueError):
        mpsx.NNPadNode(source, (0, 0, 0), (0, 0, 0), 7)
    with pytest.raises(ValueError, match="result_height must be positive, given 0"):
        mpsx.NNReshapeNode(source, 1, 0, 1)
    # A reshape whose sizes do not hold the source's elements fails when the graph encodes, before anything runs.
    bad = mpsx.NNReshapeNode(mpsx.NNImageNode(Handle("x")), 5, 1, 1)
    with pytest.raises(ValueError, match="holds 12 elements per image; the reshaped 5x1x1 holds 5"):
        run_results(device, [bad.result_image], dict(x=np.zeros((1, 3, 2, 2), np.float32)))


@pytest.mark.parametrize("cls", [mpsx.NNPadNode, mpsx.NNPadGradientNode, mpsx.NNReshapeNode,
                                 mpsx.NNReshapeGradientNode])
def test_made_without_init(cls):
    obj = assert_uninitialized_raise(cls, ("result_image", "source_images", "padding_size_before", "edge_mode",
                                           "fill_value", "result_width", "result_feature_channels"),
                                     only_those_it_has=True)
    if cls is mpsx.NNPadNode:
        with pytest.raises(TypeError):
            obj.fill_value = 1.0
