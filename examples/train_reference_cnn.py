"""Trains the reference CNN (benchmarks/reference_cnn.py) by hand-encoded
kernels, MPS style, on random data with the default device; prints the loss
of every step.

    python examples/train_reference_cnn.py [--device NAME] [--batch-size N] [--steps N]
"""

import argparse
import time

import mpsx
from mpsx.benchmarks.reference_cnn import ReferenceCNN, random_batch


def parser(description):
    """The options of both reference CNN examples (train_reference_cnn_graph.py adds --style)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    return parser


def train(model, images, labels, steps):
    """`steps` training steps of the model on one batch, printing the loss and the time of each."""
    for step in range(steps):
        start = time.perf_counter()
        model.train_step(images, labels)
        loss = model.loss()
        print(f"step {step:3d}  loss {loss:.5f}  {1e3 * (time.perf_counter() - start):7.1f} ms")


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    device = mpsx.Device(args.device)
    model = ReferenceCNN(device, args.batch_size)
    images, labels = random_batch(args.batch_size)
    print(f"training the reference CNN on {device.name}, batch {args.batch_size}")
    train(model, images, labels, args.steps)


if __name__ == "__main__":
    main()
