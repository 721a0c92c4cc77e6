"""CNNCrossChannelNormalizationNode and its gradient node in NNGraph: forward
results and input gradients against torch.nn.functional.local_response_norm
and autograd (float64), a model with a trainable convolution and fully
connected layer around the node trained by training_graph against PyTorch SGD,
the properties and their defaults (MPSNNGraphNodes.h), and bad input."""

import numpy as np
import pytest
import torch.nn.functional as F

import mpsx
from helpers import (assert_finite_parameters, assert_nodes_match_torch, assert_normalization_nodes_match_torch,
                     assert_uninitialized_raise, float32_graph, gradient_node_copied_forward, gradient_node_refusals,
                     node_refusals, train_normalization_node)
from test_graph import Handle

CASES = [(5, 1.0, 5.0, 1.0), (3, 0.5, 0.75, 1.5), (4, 2.0, 0.5, 0.5), (1, 1.0, 0.75, 2.0)]


def torch_norm(x, k, alpha, beta, delta):
    return F.local_response_norm(x, k, alpha, beta, delta)


@pytest.mark.parametrize("k, alpha, beta, delta", CASES)
def test_forward_and_gradient_match_torch(device, rng, k, alpha, beta, delta):
    gradient = assert_normalization_nodes_match_torch(
        device, rng, (2, 6, 4, 3), mpsx.CNNCrossChannelNormalizationNode, mpsx.CNNCrossChannelNormalizationGradientNode,
        k, dict(alpha=alpha, beta=beta, delta=delta), torch_norm, k, alpha, beta, delta)
    assert (gradient.kernel_size, gradient.alpha, gradient.beta, gradient.delta) == (k, alpha, beta, delta)


def test_gradient_node_made_by_hand(device, rng):
    """The header's initializer: it takes its forward node's parameters from the gradient state."""
    x = rng.standard_normal((1, 5, 3, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNCrossChannelNormalizationNode(source, 3)
    node.alpha, node.beta, node.delta = 0.25, 0.5, 2.0
    gradient = mpsx.CNNCrossChannelNormalizationGradientNode(mpsx.NNImageNode(Handle("dy")), source,
                                                             node.result_state, 3)
    assert (gradient.alpha, gradient.beta, gradient.delta) == (0.25, 0.5, 2.0)
    assert gradient.source_states == [node.result_state]
    assert_nodes_match_torch(device, node, gradient, x, dy, torch_norm, 3, 0.25, 0.5, 2.0)


K, NORM = 3, dict(alpha=2.0, beta=0.75, delta=1.0)


def test_training_graph_trains_as_pytorch(device):
    """conv 3x3 -> cross-channel normalization -> fully connected -> softmax cross entropy, trained by the
    graph training_graph makes, against the same model in PyTorch with SGD."""
    made = train_normalization_node(device, mpsx.CNNCrossChannelNormalizationNode,
                                    mpsx.CNNCrossChannelNormalizationGradientNode, K, NORM,
                                    lambda h: torch_norm(h, K, **NORM), c=8)
    assert made.alpha == NORM["alpha"]


def test_defaults_and_properties(device):
    node = mpsx.CNNCrossChannelNormalizationNode(mpsx.NNImageNode(), 5)
    # MPSCNNNormalizationNode's defaults: alpha 1, beta 5, delta 1.
    assert (node.kernel_size_in_feature_channels, node.alpha, node.beta, node.delta) == (5, 1.0, 5.0, 1.0)
    assert node.padding_policy == mpsx.NNPaddingMethod.SIZE_SAME
    assert [type(s) for s in node.result_states] == [mpsx.NNGradientStateNode]
    node.kernel_size_in_feature_channels = 3
    node.alpha, node.beta, node.delta = 0.1, -0.5, 0.25
    assert (node.kernel_size_in_feature_channels, node.alpha, node.beta, node.delta) == \
        (3, np.float32(0.1), -0.5, 0.25)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode())
    assert (gradient.kernel_size, gradient.alpha, gradient.beta, gradient.delta) == (3, np.float32(0.1), -0.5, 0.25)
    for name in ("kernel_size", "alpha", "beta", "delta"):  # MPS's gradient node has none of its own
        with pytest.raises(AttributeError):
            setattr(gradient, name, 1)
    assert mpsx.CNNCrossChannelNormalizationNode.node_with_source(mpsx.NNImageNode(), 2).kernel_size_in_feature_channels == 2


def test_forward_changed_after_the_gradient_node_was_made(device):
    node, gradient = gradient_node_copied_forward(device, mpsx.CNNCrossChannelNormalizationNode, "beta", 0.5, 5.0,
                                                  r"beta is 5 but its forward node's is 0.5")
    float32_graph(device, node.result_image)  # the forward node alone compiles
    node.beta = 5.0
    node.kernel_size_in_feature_channels = 4
    with pytest.raises(ValueError, match=r"kernel_size is 3 but its forward node's is 4"):
        float32_graph(device, gradient.result_image)
    # Made again, it takes the new values.
    again = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert again.kernel_size == 4
    float32_graph(device, again.result_image)


def test_bad_input(device):
    source, node = node_refusals(mpsx.CNNCrossChannelNormalizationNode, "kernel_size", 2.5)
    assert_finite_parameters(node)
    with pytest.raises(TypeError, match="alpha must be a float"):
        node.alpha = "1"
    with pytest.raises(ValueError, match="kernel_size_in_feature_channels must be positive"):
        node.kernel_size_in_feature_channels = -3
    assert node.kernel_size_in_feature_channels == 3
    with pytest.raises(TypeError):
        mpsx.CNNCrossChannelNormalizationGradientNode(mpsx.NNImageNode(), source, None, 3)
    gradient_node_refusals(mpsx.CNNCrossChannelNormalizationGradientNode, node, source, 3)


@pytest.mark.parametrize("cls", [mpsx.CNNCrossChannelNormalizationNode, mpsx.CNNCrossChannelNormalizationGradientNode])
def test_uninitialized_objects_raise(cls):
    names = ("result_image", "alpha", "beta", "delta", "kernel_size", "kernel_size_in_feature_channels")
    obj = assert_uninitialized_raise(cls, names, only_those_it_has=True)
    if hasattr(cls, "alpha") and cls is mpsx.CNNCrossChannelNormalizationNode:
        with pytest.raises(TypeError):
            obj.alpha = 1.0
