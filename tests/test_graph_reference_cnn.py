"""The reference CNN of DESIGN.md trained through an NNGraph made with
training_graph: its losses over 5 steps equal those of the hand-encoded
model (benchmarks/reference_cnn.py) and of PyTorch, from the same weights."""

import numpy as np
import pytest

import mpsx
from mpsx.benchmarks.reference_cnn import (
    CHANNELS, CLASSES, EPSILON, ReferenceCNN, TorchReferenceCNN, random_batch)

BATCH, STEPS, LR, MOMENTUM = 8, 5, 0.001, 0.9


class Handle:
    def __init__(self, label):
        self.label = label


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


def reference_graph(device, p, style):
    """The reference CNN as nodes; its weights train on the device (gpu) or, for the convolutions, in a
    host update (cpu)."""
    sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR, momentum_scale=MOMENTUM)

    def weights(descriptor, w, b):
        if style == "cpu":
            return HostSGD(descriptor, w, b)
        return mpsx.ConvolutionWeights(descriptor, w, b, optimizer=sgd())
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    x = mpsx.NNImageNode(Handle("images"))
    for i, (cin, cout) in enumerate(CHANNELS):
        conv = mpsx.CNNConvolutionNode(x, weights(mpsx.CNNConvolutionDescriptor(3, 3, cin, cout),
                                                  p[f"conv{i}.weight"], p[f"conv{i}.bias"]))
        bn = mpsx.CNNBatchNormalizationNode(conv.result_image, mpsx.BatchNormalizationWeights(
            p[f"bn{i}.gamma"], p[f"bn{i}.beta"], np.zeros(cout, np.float32), np.ones(cout, np.float32), EPSILON,
            optimizer=sgd()))
        x = mpsx.CNNNeuronNode(bn.result_image, relu).result_image
        if i % 2 == 1:
            x = mpsx.CNNPoolingMaxNode(x, 2).result_image
        conv.training_style = style
    fc = mpsx.CNNFullyConnectedNode(x, weights(mpsx.CNNConvolutionDescriptor(8, 8, 64, CLASSES), p["fc.weight"],
                                               p["fc.bias"]))
    fc.training_style = style
    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, descriptor)
    loss.input_labels.handle = Handle("labels")
    return mpsx.NNGraph(device, loss.training_graph()[0].result_image, False)


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_reference_cnn_through_the_graph_matches_hand_encoded_and_pytorch(device, style):
    hand = ReferenceCNN(device, BATCH, learning_rate=LR, momentum=MOMENTUM)
    torch_model = TorchReferenceCNN(hand.initial_parameters, learning_rate=LR, momentum=MOMENTUM)
    graph = reference_graph(device, hand.initial_parameters, style)
    assert [h.label for h in graph.source_image_handles] == ["images"]
    assert [h.label for h in graph.source_state_handles] == ["labels"]
    images, labels = random_batch(BATCH)
    batch = mpsx.ImageBatch.from_numpy(device, images)
    graph_losses, hand_losses, torch_losses = [], [], []
    for _ in range(STEPS):
        loss_labels = mpsx.CNNLossLabels(device, labels)
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [batch], [loss_labels])
        loss_labels.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        graph_losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
        hand.train_step(images, labels)
        hand_losses.append(hand.loss())
        torch_losses.append(torch_model.train_step(images, labels).item())
    np.testing.assert_allclose(graph_losses, hand_losses, rtol=1e-4)
    np.testing.assert_allclose(graph_losses, torch_losses, rtol=1e-4)
    assert graph_losses[-1] < graph_losses[0]
