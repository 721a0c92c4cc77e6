"""CNNUpsamplingNearestNode, CNNUpsamplingBilinearNode and their gradient
nodes: forward results and gradients against torch interpolate and autograd
(bilinear with align_corners both ways, odd sizes), a chain built with
training_graph, a convolution trained through upsampling against PyTorch
SGD, properties and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import (Handle, assert_uninitialized_raise, float32_graph,
                     run_results, train_between_convolution_and_fully_connected)

N, C_IN, C, SIZE, SCALE, CLASSES, LR, STEPS = 3, 2, 3, 3, 2, 3, 0.2, 3


MODES = [("nearest", False), ("bilinear", False), ("bilinear", True)]
MODE_IDS = ["nearest", "bilinear", "bilinear_align_corners"]


def make_node(source, mode, align_corners, sx, sy):
    if mode == "nearest":
        return mpsx.CNNUpsamplingNearestNode(source, sx, sy)
    return mpsx.CNNUpsamplingBilinearNode(source, sx, sy, align_corners)


def torch_upsample(x, mode, align_corners, sx, sy):
    return F.interpolate(x, scale_factor=(sy, sx), mode=mode, align_corners=align_corners if mode != "nearest" else None)


@pytest.mark.parametrize("mode, align_corners", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("sx, sy", [(2, 2), (3, 2), (1, 3)])
def test_forward_and_gradient_match_torch_autograd(device, rng, mode, align_corners, sx, sy):
    x = rng.standard_normal((2, 3, 5, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 5 * sy, 3 * sx)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = make_node(source, mode, align_corners, sx, sy)
    gradient = node.gradient_filter_with_source(g)
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_upsample(xt, mode, align_corners, sx, sy)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_training_graph_of_a_chain_matches_torch_autograd(device, rng):
    """x -> nearest x2 -> bilinear (3, 2) with aligned corners -> bilinear x2."""
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 2, 3 * 2 * 2 * 2, 4 * 2 * 3 * 2)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    a = mpsx.CNNUpsamplingNearestNode(source, 2, 2)
    b = mpsx.CNNUpsamplingBilinearNode(a.result_image, 3, 2, True)
    c = mpsx.CNNUpsamplingBilinearNode(b.result_image, 2, 2)
    termini = c.training_graph(g)
    assert len(termini) == 1 and type(termini[0]) is mpsx.CNNUpsamplingNearestGradientNode
    assert termini[0].result_image.handle.label == "x"  # the default handler copies the handle
    (dx,) = run_results(device, [termini[0].result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    h = F.interpolate(xt, scale_factor=2, mode="nearest")
    h = F.interpolate(h, scale_factor=(2, 3), mode="bilinear", align_corners=True)
    F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode, align_corners", MODES, ids=MODE_IDS)
def test_convolution_trains_through_upsampling_as_pytorch(device, mode, align_corners):
    """conv 3x3 -> upsampling x2 -> fully connected -> softmax cross entropy, SGD on the graph and in torch."""
    train_between_convolution_and_fully_connected(
        device, lambda image: make_node(image, mode, align_corners, SCALE, SCALE),
        lambda h: torch_upsample(h, mode, align_corners, SCALE, SCALE), c_in=C_IN, c=C, size=SIZE, classes=CLASSES,
        n=N, lr=LR, steps=STEPS, node_size=SIZE * SCALE)


def test_properties_and_wiring(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    nearest = mpsx.CNNUpsamplingNearestNode.node_with_source(source, 2, 3)
    assert (nearest.scale_factor_x, nearest.scale_factor_y) == (2.0, 3.0)
    assert isinstance(nearest.scale_factor_x, float)  # MPS's double
    assert not hasattr(nearest, "align_corners")
    bilinear = mpsx.CNNUpsamplingBilinearNode(source, 4, 1)
    assert (bilinear.scale_factor_x, bilinear.scale_factor_y, bilinear.align_corners) == (4.0, 1.0, False)
    aligned = mpsx.CNNUpsamplingBilinearNode.node_with_source(source, 2, 2, True)
    assert aligned.align_corners is True
    for node, cls in ((nearest, mpsx.CNNUpsamplingNearestGradientNode),
                      (aligned, mpsx.CNNUpsamplingBilinearGradientNode)):
        assert isinstance(node.result_state, mpsx.NNGradientStateNode)
        gradient = node.gradient_filter_with_source(g)
        assert type(gradient) is cls
        assert gradient.source_images == [g, source]
        assert gradient.source_states == [node.result_state]
        assert (gradient.scale_factor_x, gradient.scale_factor_y) == (node.scale_factor_x, node.scale_factor_y)
        # By hand, with the scale factors as numbers (MPS's doubles).
        by_hand = cls(g, source, node.result_state, node.scale_factor_x, int(node.scale_factor_y))
        assert by_hand.scale_factor_x == node.scale_factor_x
    # The bilinear gradient node takes align_corners from its forward node (MPS's has none).
    assert mpsx.CNNUpsamplingBilinearGradientNode(g, source, aligned.result_state, 2, 2).align_corners is True
    assert bilinear.gradient_filter_with_source(g).align_corners is False


def test_a_gradient_node_made_by_hand_computes_the_same(device, rng):
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 6, 9)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.CNNUpsamplingBilinearNode(source, 3, 2, True)
    by_hand = mpsx.CNNUpsamplingBilinearGradientNode(g, source, node.result_state, 3.0, 2.0)
    (dx,) = run_results(device, [by_hand.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    F.interpolate(xt, scale_factor=(2, 3), mode="bilinear", align_corners=True).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_bad_input(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    nearest = mpsx.CNNUpsamplingNearestNode(source, 2, 2)
    bilinear = mpsx.CNNUpsamplingBilinearNode(source, 2, 3)
    with pytest.raises(ValueError, match="integer_scale_factor_x must be an int of at least 1, given 0"):
        mpsx.CNNUpsamplingNearestNode(source, 0, 2)
    with pytest.raises(TypeError, match="integer_scale_factor_y must be an int, given float 2.0"):
        mpsx.CNNUpsamplingBilinearNode(source, 2, 2.0)
    with pytest.raises(ValueError, match="integer_scale_factor_x"):
        mpsx.CNNUpsamplingBilinearNode(source, 2**40, 2)
    with pytest.raises(TypeError, match="align_corners must be a bool"):
        mpsx.CNNUpsamplingBilinearNode(source, 2, 2, 1)
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.CNNUpsamplingNearestNode(None, 2, 2)
    for sx, sy in ((2.5, 3), (2, 2), (float("nan"), 3), (1e300, 3)):
        with pytest.raises(ValueError, match=r"scale_factor_x and scale_factor_y must be the forward node's, 2 and 3"):
            mpsx.CNNUpsamplingBilinearGradientNode(g, source, bilinear.result_state, sx, sy)
    with pytest.raises(TypeError, match="scale_factor_x must be a float"):
        mpsx.CNNUpsamplingNearestGradientNode(g, source, nearest.result_state, "2", 2)
    with pytest.raises(TypeError, match="MPSCNNUpsamplingBilinearGradientNode: expected the result state of an "
                                        "MPSCNNUpsamplingBilinearNode, given the result state of an "
                                        "MPSCNNUpsamplingNearestNode"):
        mpsx.CNNUpsamplingBilinearGradientNode(g, source, nearest.result_state, 2, 2)
    with pytest.raises(ValueError, match="source_image must be the source image of the MPSCNNUpsamplingNearestNode"):
        mpsx.CNNUpsamplingNearestGradientNode(g, nearest.result_image, nearest.result_state, 2, 2)
    with pytest.raises(TypeError, match="no gradients of gradients"):
        nearest.gradient_filter_with_source(g).gradient_filter_with_source(g)


def test_a_graph_refuses_an_image_too_large_to_upsample_before_encoding(device):
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNUpsamplingNearestNode(source, 2**30, 1)
    graph = float32_graph(device, node.result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="image sizes must be at most"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, np.ones((1, 1, 1, 2), np.float32))])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


@pytest.mark.parametrize("cls", [mpsx.CNNUpsamplingNearestNode, mpsx.CNNUpsamplingBilinearNode,
                                 mpsx.CNNUpsamplingNearestGradientNode, mpsx.CNNUpsamplingBilinearGradientNode])
def test_uninitialized_objects_raise(device, cls):
    assert_uninitialized_raise(cls, ("result_image", "scale_factor_x", "scale_factor_y", "source_images"))
