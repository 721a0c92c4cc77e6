"""Trains a tiny U-Net (benchmarks/unet.py) built from NNGraph nodes through
an NNGraph made by training_graph, on a synthetic per-pixel task (is a pixel
above the mean of its 3x3 neighbourhood?), with the default device; prints
the loss of every step.

    python examples/train_unet_graph.py [--device NAME] [--batch-size N] [--steps N] [--size S]
                                        [--upsampling bilinear|nearest]
"""

import argparse
import time

import mpsx
from mpsx.benchmarks.unet import GraphUNet, synthetic_batch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--size", type=int, default=16, help="image width and height (even)")
    parser.add_argument("--upsampling", choices=["bilinear", "nearest"], default="bilinear")
    args = parser.parse_args()

    device = mpsx.Device(args.device)
    model = GraphUNet(device, args.batch_size, size=args.size, upsampling=args.upsampling)
    print(f"training the U-Net through an NNGraph of {model.graph.number_of_filters} filters on {device.name}, "
          f"batch {args.batch_size}, {args.size}x{args.size}")
    for step in range(args.steps):
        images, labels = synthetic_batch(args.batch_size, args.size, seed=step)
        start = time.perf_counter()
        loss = model.train_step(images, labels)
        print(f"step {step:3d}  loss {loss:.5f}  {1e3 * (time.perf_counter() - start):7.1f} ms")


if __name__ == "__main__":
    main()
