"""Trains the reference CNN (benchmarks/reference_cnn.py) through an NNGraph
made by training_graph (GraphReferenceCNN), on random data with the default
device; prints the loss of every step.

    python examples/train_reference_cnn_graph.py [--device NAME] [--batch-size N] [--steps N] [--style gpu|cpu|none]

--style says who updates the weights: gpu, the graph on the command buffer
(ConvolutionWeights with an optimizer); cpu, the graph calling each data
source's host update once the step's command buffer completed; none, nobody
in the graph: it exports the gradient states and the model encodes the SGD
updates by hand after it.
"""

import argparse
import time

import numpy as np

import mpsx
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, random_batch

LEARNING_RATE, MOMENTUM = 0.001, 0.9


class HostSGD(mpsx.CNNConvolutionDataSource):
    """Weights in numpy, trained by SGD momentum in the data source's host update (training style CPU)."""

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
        # MPS's momentum: m = momentum * m + learning_rate * g; value -= m
        self.mw = MOMENTUM * self.mw + LEARNING_RATE * gradient_state.gradient_for_weights.to_numpy().reshape(
            self.w.shape)
        self.mb = MOMENTUM * self.mb + LEARNING_RATE * gradient_state.gradient_for_biases.to_numpy()
        self.w = source_state.weights.to_numpy().reshape(self.w.shape) - self.mw
        self.b = source_state.biases.to_numpy() - self.mb
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--style", choices=["gpu", "cpu", "none"], default="gpu",
                        help="the training style: who updates the weights (default gpu)")
    args = parser.parse_args()

    device = mpsx.Device(args.device)
    model = GraphReferenceCNN(device, args.batch_size, learning_rate=LEARNING_RATE, momentum=MOMENTUM,
                              data_source=HostSGD if args.style == "cpu" else None, style=args.style)
    images, labels = random_batch(args.batch_size)
    print(f"training the reference CNN through an NNGraph of {model.graph.number_of_filters} filters on "
          f"{device.name}, batch {args.batch_size}, training style {args.style}")
    for step in range(args.steps):
        start = time.perf_counter()
        model.train_step(images, labels)
        loss = model.loss()
        print(f"step {step:3d}  loss {loss:.5f}  {1e3 * (time.perf_counter() - start):7.1f} ms")


if __name__ == "__main__":
    main()
