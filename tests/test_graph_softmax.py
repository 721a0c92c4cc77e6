"""CNNSoftMaxNode, CNNLogSoftMaxNode and their gradient nodes: forward results
and gradients against PyTorch autograd, a chain built with training_graph, a
convolution trained through a softmax node against PyTorch SGD, properties and
bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import (Handle, assert_uninitialized_raise, float32_graph,
                     run_results, train_between_convolution_and_fully_connected)

N, C_IN, C, SIZE, CLASSES, LR, STEPS = 3, 2, 4, 4, 3, 0.5, 3


def node_class(log):
    return mpsx.CNNLogSoftMaxNode if log else mpsx.CNNSoftMaxNode


def torch_softmax(log):
    return F.log_softmax if log else F.softmax


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_forward_and_gradient_match_torch_autograd(device, rng, log):
    x = (rng.standard_normal((2, 5, 3, 4)) * 2).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = node_class(log)(source)
    gradient = node.gradient_filter_with_source(g)
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_softmax(log)(xt, dim=1)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_training_graph_of_a_chain_matches_torch_autograd(device, rng):
    """x -> softmax -> log-softmax: each gradient node reads its own forward node's result."""
    x = rng.standard_normal((2, 6, 2, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    softmax = mpsx.CNNSoftMaxNode(source)
    log_softmax = mpsx.CNNLogSoftMaxNode(softmax.result_image)
    seen = []
    termini = log_softmax.training_graph(g, lambda *a: seen.append(a))
    assert [type(a[0]) for a in seen] == [mpsx.CNNLogSoftMaxGradientNode, mpsx.CNNSoftMaxGradientNode]
    assert seen[0][0].source_images == [g, log_softmax.result_image]
    assert seen[1][0].source_images == [seen[0][0].result_image, softmax.result_image]
    assert termini == [seen[1][0]]
    (dx,) = run_results(device, [termini[0].result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    F.log_softmax(F.softmax(xt, dim=1), dim=1).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_convolution_trains_through_the_node_as_pytorch(device, log):
    """conv 3x3 -> (log-)softmax -> fully connected -> softmax cross entropy, SGD on the graph and in torch."""
    train_between_convolution_and_fully_connected(device, node_class(log), lambda h: torch_softmax(log)(h, dim=1),
                                                  c_in=C_IN, c=C, size=SIZE, classes=CLASSES, n=N, lr=LR, steps=STEPS)


def test_properties_and_wiring(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    for log in (False, True):
        node = node_class(log).node_with_source(source)
        assert type(node) is node_class(log)
        assert node.source_images == [source]
        assert isinstance(node.result_state, mpsx.NNGradientStateNode)
        assert node.result_image.producer == node
        assert node.padding_policy == mpsx.NNPaddingMethod.SIZE_SAME
        gradient = node.gradient_filter_with_source(g)
        # The secondary source is the forward *result*; the state is the forward's.
        assert gradient.source_images == [g, node.result_image]
        assert gradient.source_states == [node.result_state]
        assert isinstance(gradient, mpsx.NNGradientFilterNode)
        # Made by hand, as MPS's initWithSourceGradient:sourceImage:gradientState:.
        cls = mpsx.CNNLogSoftMaxGradientNode if log else mpsx.CNNSoftMaxGradientNode
        by_hand = cls(g, node.result_image, node.result_state)
        assert by_hand.source_images == gradient.source_images


def test_a_gradient_node_made_by_hand_computes_the_same(device, rng):
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.CNNSoftMaxNode(source)
    by_hand = mpsx.CNNSoftMaxGradientNode(g, node.result_image, node.result_state)
    (dx,) = run_results(device, [by_hand.result_image], dict(x=x, dy=dy))
    xt = torch.tensor(x, requires_grad=True)
    F.softmax(xt, dim=1).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_bad_input(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    softmax, log_softmax = mpsx.CNNSoftMaxNode(source), mpsx.CNNLogSoftMaxNode(source)
    relu = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    with pytest.raises(TypeError, match="expected an NNImageNode, given NoneType"):
        mpsx.CNNSoftMaxNode(None)
    with pytest.raises(TypeError, match="expected an NNImageNode, given int"):
        mpsx.CNNLogSoftMaxNode(3)
    with pytest.raises(TypeError, match="MPSCNNSoftMaxGradientNode: expected the result state of an "
                                        "MPSCNNSoftMaxNode, given the result state of an MPSCNNLogSoftMaxNode"):
        mpsx.CNNSoftMaxGradientNode(g, log_softmax.result_image, log_softmax.result_state)
    with pytest.raises(TypeError, match="given the result state of an MPSCNNNeuronNode"):
        mpsx.CNNLogSoftMaxGradientNode(g, relu.result_image, relu.result_state)
    with pytest.raises(ValueError, match="source_image must be the result image of the MPSCNNSoftMaxNode"):
        mpsx.CNNSoftMaxGradientNode(g, source, softmax.result_state)  # the forward source, not its result
    with pytest.raises(TypeError):
        mpsx.CNNSoftMaxGradientNode(g, softmax.result_image, None)
    with pytest.raises(TypeError, match="no gradients of gradients"):
        softmax.gradient_filter_with_source(g).gradient_filter_with_source(g)
    with pytest.raises(AttributeError):
        softmax.training_style = "gpu"  # not a trainable node


def test_a_graph_refuses_images_of_another_shape_before_encoding(device, rng):
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.CNNSoftMaxNode(source)
    graph = float32_graph(device, node.gradient_filter_with_source(g).result_image)
    images = {"x": mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 2, 2)).astype(np.float32)),
              "dy": mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 2, 3)).astype(np.float32))}
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="source gradient shaped as the forward result"):
        graph.encode(cb, [images[h.label] for h in graph.source_image_handles])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


@pytest.mark.parametrize("cls", [mpsx.CNNSoftMaxNode, mpsx.CNNLogSoftMaxNode, mpsx.CNNSoftMaxGradientNode,
                                 mpsx.CNNLogSoftMaxGradientNode])
def test_uninitialized_objects_raise(device, cls):
    obj = assert_uninitialized_raise(cls, ("result_image", "result_state", "source_images", "label"))
    with pytest.raises(TypeError):
        obj.gradient_filter_with_source(mpsx.NNImageNode())
