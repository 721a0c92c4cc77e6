"""CNNInstanceNormalizationNode and its gradient node. They share their native nodes with the group
normalization nodes, and tests/test_graph_group_normalization.py runs its gradient, training and bad-input
tests over both kinds; here, what is the instance normalization's own: a Python data source with the protocol's
defaults (beta None: zeros; epsilon an attribute), and a chain of two instance normalizations after a neuron,
made with training_graph from a given source gradient, against autograd."""

import numpy as np
import torch

import mpsx
from helpers import Handle, run_gradient_graph

C, LR, EPSILON = 3, 0.05, 1e-3


class Source(mpsx.CNNInstanceNormalizationDataSource):
    epsilon = EPSILON

    def __init__(self, gamma):
        self.g = gamma.copy()
        self.updates = []

    def number_of_feature_channels(self):
        return C

    def gamma(self):
        return self.g

    def update_gamma_and_beta_with_instance_normalization_state_batch(self, states):
        self.updates.append((sum(s.gradient_for_gamma.to_numpy() for s in states),
                             sum(s.gradient_for_beta.to_numpy() for s in states)))
        self.g = states[0].gamma.to_numpy() - LR * self.updates[-1][0]
        return True


def test_two_instance_normalizations_in_a_chain_against_autograd(device, rng):
    x = (rng.standard_normal((2, C, 3, 4)) * 2 + 1).astype(np.float32)
    dy = rng.standard_normal((2, C, 3, 4)).astype(np.float32)
    g1 = (1 + rng.standard_normal(C) * 0.3).astype(np.float32)
    g2 = (1 + rng.standard_normal(C) * 0.3).astype(np.float32)
    s1, s2 = Source(g1), Source(g2)
    source = mpsx.NNImageNode(Handle("x"))
    relu = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.ABSOLUTE))
    a = mpsx.CNNInstanceNormalizationNode(relu.result_image, s1)
    b = mpsx.CNNInstanceNormalizationNode(a.result_image, s2)
    for node in (a, b):
        node.training_style = "cpu"
    termini = b.training_graph(mpsx.NNImageNode(Handle("dy")))
    assert [type(t).__name__ for t in termini] == ["CNNNeuronGradientNode"]
    dx = run_gradient_graph(device, termini[0].result_image, x, dy)
    xt = torch.tensor(x, requires_grad=True)
    t1 = torch.tensor(g1, requires_grad=True)
    t2 = torch.tensor(g2, requires_grad=True)
    beta = torch.zeros(C, requires_grad=True)
    h = xt.abs()
    y = torch.nn.functional.instance_norm(torch.nn.functional.instance_norm(h, weight=t1, bias=beta, eps=EPSILON),
                                          weight=t2, eps=EPSILON)
    (y * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert len(s1.updates) == len(s2.updates) == 1
    np.testing.assert_allclose(s1.updates[0][0], t1.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s1.updates[0][1], beta.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s2.g, g2 - LR * t2.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_gradient_node_made_by_hand_is_a_trainable_instance_gradient(device):
    node = mpsx.CNNInstanceNormalizationNode(mpsx.NNImageNode(), Source(np.ones(C, np.float32)))
    node.training_style = mpsx.NNTrainingStyle.CPU
    made = node.gradient_filter_with_source(mpsx.NNImageNode())
    assert isinstance(made, mpsx.CNNInstanceNormalizationGradientNode)
    assert made.training_style == mpsx.NNTrainingStyle.CPU  # taken from the forward node
    by_hand = mpsx.CNNInstanceNormalizationGradientNode(mpsx.NNImageNode(), node.source_images[0], node.result_state)
    assert by_hand.training_style == mpsx.NNTrainingStyle.GPU  # MPS's default
    assert by_hand.source_states == made.source_states == [node.result_state]
