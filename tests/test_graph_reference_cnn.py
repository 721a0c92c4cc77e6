"""The reference CNN of DESIGN.md trained through an NNGraph made with
training_graph: its losses over 5 steps equal those of the hand-encoded
model (benchmarks/reference_cnn.py) and of PyTorch, from the same weights."""

import numpy as np
import pytest

import mpsx
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, ReferenceCNN, TorchReferenceCNN, random_batch

BATCH, STEPS, LR, MOMENTUM = 8, 5, 0.001, 0.9


class HostSGD(mpsx.CNNConvolutionDataSource):
    """Weights in numpy with SGD momentum in their host update (training style CPU)."""

    def __init__(self, descriptor, weights, biases):
        self._descriptor, self.w, self.b = descriptor, weights.copy(), biases.copy()
        self.mw, self.mb = np.zeros_like(self.w), np.zeros_like(self.b)

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def update(self, gradient_state, source_state):
        # MPS's momentum: m = momentum * m + lr * g; value -= m
        self.mw = MOMENTUM * self.mw + LR * gradient_state.gradient_for_weights.to_numpy().reshape(self.w.shape)
        self.mb = MOMENTUM * self.mb + LR * gradient_state.gradient_for_biases.to_numpy()
        self.w = source_state.weights.to_numpy().reshape(self.w.shape) - self.mw
        self.b = source_state.biases.to_numpy() - self.mb
        return True


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_reference_cnn_through_the_graph_matches_hand_encoded_and_pytorch(device, style):
    hand = ReferenceCNN(device, BATCH, learning_rate=LR, momentum=MOMENTUM)
    torch_model = TorchReferenceCNN(hand.initial_parameters, learning_rate=LR, momentum=MOMENTUM)
    model = GraphReferenceCNN(device, BATCH, learning_rate=LR, momentum=MOMENTUM,
                              data_source=HostSGD if style == "cpu" else None, style=style)
    assert [h.label for h in model.graph.source_image_handles] == ["images"]
    assert [h.label for h in model.graph.source_state_handles] == ["labels"]
    images, labels = random_batch(BATCH)
    graph_losses, hand_losses, torch_losses = [], [], []
    for _ in range(STEPS):
        model.train_step(images, labels)
        graph_losses.append(model.loss())
        hand.train_step(images, labels)
        hand_losses.append(hand.loss())
        torch_losses.append(torch_model.train_step(images, labels).item())
    np.testing.assert_allclose(graph_losses, hand_losses, rtol=1e-4)
    np.testing.assert_allclose(graph_losses, torch_losses, rtol=1e-4)
    assert graph_losses[-1] < graph_losses[0]


def test_a_recorded_graph_step_replays_as_the_hand_encoded_one(device):
    images, labels = random_batch(4)
    hand, model = ReferenceCNN(device, 4), GraphReferenceCNN(device, 4)
    hand.record_step()
    model.record_step()
    hand_losses, graph_losses = [], []
    for _ in range(3):
        hand.replay_step(images, labels)
        model.replay_step(images, labels)
        hand_losses.append(hand.loss())
        graph_losses.append(model.loss())
    np.testing.assert_allclose(graph_losses, hand_losses, rtol=1e-4)
