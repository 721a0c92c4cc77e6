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
import functools
import time


import mpsx
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, HostSGD, random_batch

LEARNING_RATE, MOMENTUM = 0.001, 0.9


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
                              data_source=functools.partial(HostSGD, learning_rate=LEARNING_RATE, momentum=MOMENTUM) if args.style == "cpu" else None, style=args.style)
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
