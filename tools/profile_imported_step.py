"""Where the device time of the imported ResNet-18 training step goes (the bench's imported part, on cuda):
for each math, CUPTI's busy time and operation count of one replayed NNGraph step and of PyTorch's CUDA graph
of the same step (mpsx.bench.kernel_time, over 20 steps), by kind and by kernel, largest first; with --trace
DIR, the device operations of one replayed step in the order they started, with their start (us from the
first) and duration, one file per math.

    PYTHONPATH=build/cuda/stage python tools/profile_imported_step.py [--top N] [--trace DIR] [MATH ...]
"""

import argparse
import copy
import os

import torch
from torch.profiler import ProfilerActivity, profile

import mpsx
from mpsx import bench
from mpsx.benchmarks import imported_model, reference_cnn


def print_breakdown(who, busy, count, names, top):
    print(f"  {who}: busy {busy * 1e3:.3f} ms per step, {count} operations")
    kinds = sorted(bench.kernel_kinds(names).items(), key=lambda item: -item[1])
    print("    " + ", ".join(f"{kind} {seconds * 1e3:.3f}" for kind, seconds in kinds))
    for name, (seconds, per_step) in sorted(names.items(), key=lambda item: -item[1][0])[:top]:
        print(f"    {seconds * 1e6:8.1f} us {per_step:5.1f}x  {name[:150]}")


def write_trace(path, step, wait):
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        step()
        wait()
    events = sorted((e.time_range.start, e.time_range.end, e.name) for e in profiled.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA)
    with open(path, "w") as f:
        for start, end, name in events:
            f.write(f"{start - events[0][0]:9.1f} {end - start:7.1f}  {name}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("maths", nargs="*", metavar="MATH", help="float32, tf32, float16 (default: all three)")
    parser.add_argument("--top", type=int, default=25, help="kernels listed per step")
    parser.add_argument("--trace", metavar="DIR", help="write one step's operations in order to DIR/trace_MATH.txt")
    args = parser.parse_args()
    if imported_model.resnet18() is None:
        parser.error("the imported model is torchvision's ResNet-18: install torchvision")
    device = mpsx.Device("cuda")
    images, labels = reference_cnn.random_batch(bench.IMPORTED_BATCH_SIZE)
    for math in args.maths or bench.maths_of(device):
        module = imported_model.resnet18()
        model = bench.imported_training(device, module, bench.IMPORTED_BATCH_SIZE, math)
        for _ in range(3):
            model.train_step(images, labels)
            model.wait()
        model.record_step()
        step = lambda: model.replay_step(images, labels)  # noqa: E731
        for _ in range(3):
            step()
            model.wait()
        print(f"{math}, batch {bench.IMPORTED_BATCH_SIZE}:")
        print_breakdown("NNGraph replayed", *bench.kernel_time(step, model.wait, 20, torch), args.top)
        if args.trace:
            write_trace(os.path.join(args.trace, f"trace_{math}.txt"), step, model.wait)
        with bench.torch_math(device, torch, math) as (where, autocast):
            eager = reference_cnn.TorchTraining(copy.deepcopy(module), where, autocast=autocast)
            replay = eager.graph_step(images, labels)
            for _ in range(3):
                replay(images, labels)
            eager.synchronize()
            print_breakdown("PyTorch CUDA graph",
                            *bench.kernel_time(lambda: replay(images, labels), eager.synchronize, 20, torch),
                            args.top)


if __name__ == "__main__":
    main()
