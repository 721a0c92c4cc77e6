"""CNNLocalContrastNormalizationNode and its gradient node in NNGraph:
forward results and input gradients against the torch formula of
tests/test_local_contrast_normalization.py and autograd (float64), a model
with a trainable convolution and fully connected layer around the node trained
by training_graph against PyTorch SGD, the properties and their defaults
(MPSNNGraphNodes.h: the node's alpha is 1, the gradient node's and the
kernel's 0), and bad input."""

import numpy as np
import pytest

import mpsx
from helpers import (assert_nodes_match_torch, assert_normalization_nodes_match_torch, assert_uninitialized_raise,
                     float32_graph, gradient_node_copied_forward, gradient_node_refusals, node_refusals,
                     train_normalization_node)
from test_graph import Handle
from test_local_contrast_normalization import GENERAL, PARAMETERS, UNIT, torch_lcn

NODE_DEFAULTS = {"alpha": 1.0, "beta": 0.5, "delta": 1.0 / 1024, "p0": 1.0, "pm": 0.0, "ps": 1.0}
GRADIENT_DEFAULTS = dict(NODE_DEFAULTS, alpha=0.0)


def values(node):
    return {name: getattr(node, name) for name in PARAMETERS}


def as_float32(p):
    return {name: np.float32(value) for name, value in p.items()}


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("p", [UNIT, GENERAL, None], ids=["unit", "general", "node-defaults"])
def test_forward_and_gradient_match_torch(device, rng, k, p):
    gradient = assert_normalization_nodes_match_torch(
        device, rng, (2, 3, 6, 5), mpsx.CNNLocalContrastNormalizationNode,
        mpsx.CNNLocalContrastNormalizationGradientNode, k, p or {}, torch_lcn, k, p or NODE_DEFAULTS, atol=1e-4)
    assert (gradient.kernel_width, gradient.kernel_height) == (k, k)
    assert values(gradient) == as_float32(p or NODE_DEFAULTS)


def test_gradient_node_made_by_hand(device, rng):
    """The header's initializer: the gradient node's header defaults (alpha 0, unlike the forward node's 1),
    which must be set as on the forward node."""
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNLocalContrastNormalizationNode(source, 3)
    gradient = mpsx.CNNLocalContrastNormalizationGradientNode(mpsx.NNImageNode(Handle("dy")), source,
                                                              node.result_state, 3, 3)
    assert values(gradient) == as_float32(GRADIENT_DEFAULTS)
    assert values(node) == as_float32(NODE_DEFAULTS)
    with pytest.raises(ValueError, match="alpha is 0 but its forward node's is 1"):
        float32_graph(device, gradient.result_image)
    for name, value in GENERAL.items():
        setattr(node, name, value)
        setattr(gradient, name, value)
    assert_nodes_match_torch(device, node, gradient, x, dy, torch_lcn, 3, GENERAL, atol=1e-4)


K, NORM = 3, dict(alpha=0.8, beta=0.75, delta=0.5, p0=0.6, pm=0.25, ps=1.5)


def test_training_graph_trains_as_pytorch(device):
    """conv 3x3 -> local contrast normalization -> fully connected -> softmax cross entropy, trained by the
    graph training_graph makes, against the same model in PyTorch with SGD."""
    made = train_normalization_node(device, mpsx.CNNLocalContrastNormalizationNode,
                                    mpsx.CNNLocalContrastNormalizationGradientNode, K, NORM,
                                    lambda h: torch_lcn(h, K, NORM))
    assert made.p0 == np.float32(NORM["p0"])


def test_defaults_and_properties(device):
    node = mpsx.CNNLocalContrastNormalizationNode(mpsx.NNImageNode(), 5)
    assert (node.kernel_width, node.kernel_height) == (5, 5)
    assert values(node) == as_float32(NODE_DEFAULTS)
    assert node.padding_policy == mpsx.NNPaddingMethod.SIZE_SAME
    assert [type(s) for s in node.result_states] == [mpsx.NNGradientStateNode]
    node.kernel_width = node.kernel_height = 3
    for i, name in enumerate(PARAMETERS):
        setattr(node, name, 0.1 * (i + 1) - 0.3)  # any float, negative ones too, as on the kernels
    expected = {name: np.float32(0.1 * (i + 1) - 0.3) for i, name in enumerate(PARAMETERS)}
    assert values(node) == expected
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode())
    assert (gradient.kernel_width, gradient.kernel_height) == (3, 3)
    assert values(gradient) == expected
    for name in ("kernel_width", "kernel_height"):  # read-only on the gradient node (header)
        with pytest.raises(AttributeError):
            setattr(gradient, name, 3)
    gradient.ps = 2.0
    assert gradient.ps == 2.0 and node.ps == np.float32(0.3)
    assert mpsx.CNNLocalContrastNormalizationNode.node_with_source(mpsx.NNImageNode(), 2).kernel_width == 2


def test_forward_changed_after_the_gradient_node_was_made(device):
    gradient_node_copied_forward(device, mpsx.CNNLocalContrastNormalizationNode, "pm", 0.5, 0.0,
                                 r"pm is 0 but its forward node's is 0.5", settable_on_gradient=True)


def test_bad_input(device):
    source, node = node_refusals(mpsx.CNNLocalContrastNormalizationNode, "kernel_size", "3")
    with pytest.raises(TypeError, match="p0 must be a float"):
        node.p0 = "1"
    with pytest.raises(ValueError, match="kernel_width must be positive"):
        node.kernel_width = 0
    assert node.kernel_width == 3
    node.kernel_height = 4
    with pytest.raises(ValueError, match=r"kernel_width \(3\) must equal kernel_height \(4\)"):
        float32_graph(device, node.result_image)
    with pytest.raises(ValueError, match="kernel_height must be positive"):
        mpsx.CNNLocalContrastNormalizationGradientNode(mpsx.NNImageNode(), source, node.result_state, 3, -1)
    gradient_node_refusals(mpsx.CNNLocalContrastNormalizationGradientNode, node, source, 3, 3)


@pytest.mark.parametrize("cls", [mpsx.CNNLocalContrastNormalizationNode,
                                 mpsx.CNNLocalContrastNormalizationGradientNode])
def test_uninitialized_objects_raise(cls):
    obj = assert_uninitialized_raise(cls, ("result_image", "kernel_width", "kernel_height") + PARAMETERS)
    with pytest.raises(TypeError):
        obj.alpha = 1.0
