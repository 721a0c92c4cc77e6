"""CNNSpatialNormalizationNode and its gradient node in NNGraph: forward
results and input gradients against the torch formula of
tests/test_spatial_normalization.py (pad + avg_pool2d) and autograd
(float64), a model with a trainable convolution and fully connected layer
around the node trained by training_graph against PyTorch SGD, the properties
and their defaults (MPSNNGraphNodes.h), and bad input."""

import numpy as np
import pytest

import mpsx
from helpers import (assert_finite_parameters, assert_nodes_match_torch, assert_normalization_nodes_match_torch,
                     assert_uninitialized_raise, float32_graph, gradient_node_copied_forward, gradient_node_refusals,
                     node_refusals, train_normalization_node)
from test_graph import Handle
from test_graph_cross_channel_normalization import CASES, K, NORM
from test_spatial_normalization import torch_forward


@pytest.mark.parametrize("k, alpha, beta, delta", CASES)
def test_forward_and_gradient_match_torch(device, rng, k, alpha, beta, delta):
    gradient = assert_normalization_nodes_match_torch(
        device, rng, (2, 3, 6, 5), mpsx.CNNSpatialNormalizationNode, mpsx.CNNSpatialNormalizationGradientNode, k,
        dict(alpha=alpha, beta=beta, delta=delta), torch_forward, k, alpha, beta, delta)
    assert (gradient.kernel_width, gradient.kernel_height, gradient.alpha, gradient.beta, gradient.delta) == \
        (k, k, alpha, beta, delta)


def test_gradient_node_made_by_hand(device, rng):
    """The header's initializer: the header's defaults, which must be set as on the forward node."""
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNSpatialNormalizationNode(source, 3)
    node.alpha, node.beta, node.delta = 0.25, 0.5, 2.0
    gradient = mpsx.CNNSpatialNormalizationGradientNode(mpsx.NNImageNode(Handle("dy")), source, node.result_state, 3)
    assert (gradient.kernel_width, gradient.kernel_height, gradient.alpha, gradient.beta, gradient.delta) == \
        (3, 3, 1.0, 5.0, 1.0)
    with pytest.raises(ValueError, match="alpha is 1 but its forward node's is 0.25"):
        float32_graph(device, gradient.result_image)
    gradient.alpha, gradient.beta, gradient.delta = 0.25, 0.5, 2.0
    assert_nodes_match_torch(device, node, gradient, x, dy, torch_forward, 3, 0.25, 0.5, 2.0)


def test_training_graph_trains_as_pytorch(device):
    """conv 3x3 -> spatial normalization -> fully connected -> softmax cross entropy, trained by the
    graph training_graph makes, against the same model in PyTorch with SGD."""
    made = train_normalization_node(device, mpsx.CNNSpatialNormalizationNode, mpsx.CNNSpatialNormalizationGradientNode,
                                    K, NORM, lambda h: torch_forward(h, K, **NORM))
    assert made.alpha == NORM["alpha"]


def test_defaults_and_properties(device):
    node = mpsx.CNNSpatialNormalizationNode(mpsx.NNImageNode(), 5)
    # The header's defaults: alpha 1, beta 5, delta 1, kernelHeight = kernelWidth = kernelSize.
    assert (node.kernel_width, node.kernel_height, node.alpha, node.beta, node.delta) == (5, 5, 1.0, 5.0, 1.0)
    assert node.padding_policy == mpsx.NNPaddingMethod.SIZE_SAME
    assert [type(s) for s in node.result_states] == [mpsx.NNGradientStateNode]
    node.kernel_width = node.kernel_height = 3
    node.alpha, node.beta, node.delta = 0.1, -0.5, 0.25
    assert (node.kernel_width, node.kernel_height, node.alpha, node.beta, node.delta) == \
        (3, 3, np.float32(0.1), -0.5, 0.25)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode())
    assert (gradient.kernel_width, gradient.kernel_height, gradient.alpha, gradient.beta, gradient.delta) == \
        (3, 3, np.float32(0.1), -0.5, 0.25)
    gradient.kernel_width = 4  # read-write on the gradient node too (header)
    assert gradient.kernel_width == 4
    assert mpsx.CNNSpatialNormalizationNode.node_with_source(mpsx.NNImageNode(), 2).kernel_height == 2


def test_forward_changed_after_the_gradient_node_was_made(device):
    node, _ = gradient_node_copied_forward(device, mpsx.CNNSpatialNormalizationNode, "delta", 0.5, 1.0,
                                           r"delta is 1 but its forward node's is 0.5", settable_on_gradient=True)
    again = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert (again.kernel_width, again.delta) == (5, 0.5)
    float32_graph(device, again.result_image)


def test_bad_input(device):
    source, node = node_refusals(mpsx.CNNSpatialNormalizationNode, "kernel_width", 2.5)
    assert_finite_parameters(node)
    with pytest.raises(TypeError, match="beta must be a float"):
        node.beta = None
    with pytest.raises(ValueError, match="kernel_height must be positive"):
        node.kernel_height = -3
    with pytest.raises(ValueError, match="kernel_height must be at most"):
        node.kernel_height = 1 << 40
    assert node.kernel_height == 3
    # Unequal sizes: refused when the graph compiles, as the kernels refuse them.
    node.kernel_width = 5
    with pytest.raises(ValueError, match=r"kernel_width \(5\) must equal kernel_height \(3\)"):
        float32_graph(device, node.result_image)
    with pytest.raises(TypeError):
        mpsx.CNNSpatialNormalizationGradientNode(mpsx.NNImageNode(), source, None, 3)
    gradient_node_refusals(mpsx.CNNSpatialNormalizationGradientNode, node, source, 3)


@pytest.mark.parametrize("cls", [mpsx.CNNSpatialNormalizationNode, mpsx.CNNSpatialNormalizationGradientNode])
def test_uninitialized_objects_raise(cls):
    obj = assert_uninitialized_raise(cls, ("result_image", "alpha", "beta", "delta", "kernel_width", "kernel_height"))
    with pytest.raises(TypeError):
        obj.alpha = 1.0
    with pytest.raises(TypeError):
        obj.kernel_width = 3
