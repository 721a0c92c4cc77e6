"""The node bases of MPS's class tree: CNNNormalizationNode (alpha, beta, delta of the cross-channel, spatial and
local contrast normalization nodes) and NNTrainableNode (training_style of the nodes whose gradient updates
weights), each property declared once on the base."""

import numpy as np
import pytest

import mpsx
from helpers import Handle, run_results


def batch_weights(channels):
    ones, zeros = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    return mpsx.BatchNormalizationWeights(ones, zeros, zeros, ones)


def normalization_nodes(source):
    return [mpsx.CNNCrossChannelNormalizationNode(source, 3), mpsx.CNNSpatialNormalizationNode(source, 3),
            mpsx.CNNLocalContrastNormalizationNode(source, 3)]


def trainable_nodes(source, g):
    conv = mpsx.CNNConvolutionNode(source, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 2),
                                                                  np.zeros((2, 3, 3, 2), np.float32)))
    fc = mpsx.CNNFullyConnectedNode(source, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(4, 4, 2, 3),
                                                                   np.zeros((3, 4, 4, 2), np.float32)))
    transpose = mpsx.CNNConvolutionTransposeNode(
        source, None, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 2),
                                              np.zeros((2, 3, 3, 2), np.float32)))
    gamma, beta = np.ones(2, np.float32), np.zeros(2, np.float32)
    batch = mpsx.CNNBatchNormalizationNode(source, batch_weights(2))
    instance = mpsx.CNNInstanceNormalizationNode(source, mpsx.InstanceNormalizationWeights(gamma, beta))
    group = mpsx.CNNGroupNormalizationNode(source, mpsx.GroupNormalizationWeights(gamma, beta, 2))
    forward = [conv, fc, transpose, batch, instance, group]
    return forward + [node.gradient_filter_with_source(g) for node in forward]


def test_the_normalization_nodes_share_their_base(device):
    source = mpsx.NNImageNode()
    for node in normalization_nodes(source):
        assert isinstance(node, mpsx.CNNNormalizationNode)
        for name in ("alpha", "beta", "delta"):
            assert name not in vars(type(node))  # declared once, on the base
    assert not isinstance(mpsx.CNNBatchNormalizationNode(source, batch_weights(1)), mpsx.CNNNormalizationNode)
    assert not issubclass(mpsx.CNNSpatialNormalizationGradientNode, mpsx.CNNNormalizationNode)  # not in MPS either


def test_normalization_parameters_through_the_base(device):
    source = mpsx.NNImageNode()
    cross, spatial, local = normalization_nodes(source)
    # Each MPS class's defaults.
    assert (cross.alpha, cross.beta, cross.delta) == (1.0, 5.0, 1.0)
    assert (spatial.alpha, spatial.beta, spatial.delta) == (1.0, 5.0, 1.0)
    assert (local.alpha, local.beta, local.delta) == (1.0, 0.5, np.float32(1 / 1024))
    for node in (cross, spatial, local):
        node.alpha, node.beta, node.delta = 0.25, 0.75, 2
        assert (node.alpha, node.beta, node.delta) == (0.25, 0.75, 2.0)
        with pytest.raises(ValueError, match="beta must be finite, given inf"):
            node.beta = float("inf")
        with pytest.raises(TypeError, match="delta must be a float"):
            node.delta = "1"
        assert (node.alpha, node.beta, node.delta) == (0.25, 0.75, 2.0)  # nothing refused was kept
    for node in (cross, spatial):
        with pytest.raises(ValueError, match="alpha must be finite and non-negative, given -1"):
            node.alpha = -1
    local.alpha = -1  # the local contrast normalization takes any finite alpha
    assert local.alpha == -1.0


def test_the_parameters_set_through_the_base_compute(device, rng):
    """A cross-channel normalization node with parameters set through the base gives the formula's result."""
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    node = mpsx.CNNCrossChannelNormalizationNode(mpsx.NNImageNode(Handle("x")), 1)
    node.alpha, node.beta, node.delta = 0.5, 0.75, 2.0
    (y,) = run_results(device, [node.result_image], dict(x=x))
    np.testing.assert_allclose(y, x / (2.0 + 0.5 * x.astype(np.float64) ** 2) ** 0.75, rtol=1e-5)


def test_the_trainable_nodes_share_their_base(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    for node in trainable_nodes(source, g):
        assert isinstance(node, mpsx.NNTrainableNode), type(node)
        assert isinstance(node, mpsx.NNFilterNode)
        assert "training_style" not in vars(type(node))  # declared once, on the base
        assert node.training_style == mpsx.NNTrainingStyle.GPU
        node.training_style = "cpu"
        assert node.training_style == mpsx.NNTrainingStyle.CPU
        node.training_style = mpsx.NNTrainingStyle.NONE
        assert node.training_style == mpsx.NNTrainingStyle.NONE
        with pytest.raises(ValueError, match="training_style must be 'none', 'cpu' or 'gpu', given 'sometimes'"):
            node.training_style = "sometimes"
        assert node.training_style == mpsx.NNTrainingStyle.NONE
    for node in normalization_nodes(source) + [mpsx.NNReductionSpatialMeanNode(source)]:
        assert not isinstance(node, mpsx.NNTrainableNode)
        assert not hasattr(node, "training_style")


def test_a_gradient_node_takes_the_forward_nodes_style(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    conv = trainable_nodes(source, g)[0]
    conv.training_style = "cpu"
    assert conv.gradient_filter_with_source(g).training_style == mpsx.NNTrainingStyle.CPU


def test_the_bases_are_abstract_and_safe_without_init(device):
    source = mpsx.NNImageNode()
    with pytest.raises(TypeError, match="CNNNormalizationNode is abstract"):
        mpsx.CNNNormalizationNode(source)
    with pytest.raises(TypeError, match="CNNNormalizationNode is abstract"):
        mpsx.CNNNormalizationNode.node_with_source(source)
    for cls, name in ((mpsx.CNNCrossChannelNormalizationNode, "alpha"), (mpsx.CNNLocalContrastNormalizationNode,
                                                                         "delta"),
                      (mpsx.CNNConvolutionNode, "training_style"), (mpsx.CNNBatchNormalizationGradientNode,
                                                                    "training_style")):
        node = cls.__new__(cls)
        repr(node)
        with pytest.raises(TypeError):
            getattr(node, name)
        with pytest.raises(TypeError):
            setattr(node, name, 1)
