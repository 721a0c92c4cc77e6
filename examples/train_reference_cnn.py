"""Trains the reference CNN (benchmarks/reference_cnn.py) by hand-encoded
kernels, MPS style, on random data with the default device; prints the loss
of every step.

    python examples/train_reference_cnn.py [--device NAME] [--batch-size N] [--steps N]
"""

import argparse
import time

import mpsx
from mpsx.benchmarks.reference_cnn import ReferenceCNN, random_batch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    device = mpsx.Device(args.device)
    model = ReferenceCNN(device, args.batch_size)
    images, labels = random_batch(args.batch_size)
    print(f"training the reference CNN on {device.name}, batch {args.batch_size}")
    for step in range(args.steps):
        start = time.perf_counter()
        model.train_step(images, labels)
        loss = model.loss()
        print(f"step {step:3d}  loss {loss:.5f}  {1e3 * (time.perf_counter() - start):7.1f} ms")


if __name__ == "__main__":
    main()
