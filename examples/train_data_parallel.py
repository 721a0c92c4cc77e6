"""Data-parallel training of the reference CNN, one process per device.

    torchrun --nproc_per_node=2 examples/train_data_parallel.py      # NCCL, one GPU each
    mpirun -n 2 python examples/train_data_parallel.py               # MPI, on the cpu
    python examples/train_data_parallel.py                           # a group of one

Each rank trains on its own batches of --batch-size images; the gradients are
averaged over the ranks before every update (mpsx.distributed.all_reduce,
bucketed), so the ranks keep equal weights. --model graph (the default)
trains the NNGraph with data_parallel=group; --model hand encodes the kernels
and the all-reduce by hand. --replay records one step and replays it (one
CUDA graph per step on cuda, the all-reduce inside). --peer torch runs the
same model with PyTorch's DistributedDataParallel instead, for comparison.
Rank 0 prints the loss and, at the end, the images per second of the whole
group.
"""

import argparse
import json
import os
import time

import mpsx
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, ReferenceCNN, TorchReferenceCNN, initial_parameters, \
    random_batch


def mpsx_steps(arguments, group):
    model_class = GraphReferenceCNN if arguments.model == "graph" else ReferenceCNN
    model = model_class(group.device, arguments.batch_size, learning_rate=0.01, process_group=group)
    batches = [random_batch(arguments.batch_size, seed=1000 * group.rank + i) for i in range(4)]
    if arguments.replay:
        model.record_step()
        step = model.replay_step
    else:
        step = model.train_step
    return model, batches, step, model.wait, model.loss


def torch_steps(arguments, group_rank, local_rank):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    dist.init_process_group("nccl" if device != "cpu" else "gloo")
    model = TorchReferenceCNN(initial_parameters(0), device=device, learning_rate=0.01)
    model.model = DistributedDataParallel(model.model, device_ids=[local_rank] if device != "cpu" else None)
    model.optimizer = torch.optim.SGD(model.model.parameters(), lr=0.01, momentum=0.9)
    batches = [random_batch(arguments.batch_size, seed=1000 * group_rank + i) for i in range(4)]
    wait = (lambda: torch.cuda.synchronize()) if device != "cpu" else (lambda: None)
    return model, batches, model.train_step, wait, None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["graph", "hand"], default="graph")
    parser.add_argument("--batch-size", type=int, default=64, help="images per rank and step")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--peer", choices=["torch"], default=None)
    parser.add_argument("--json", action="store_true", help="print rank 0's figures as one JSON line")
    parser.add_argument("--bucket-bytes", type=int, default=None,
                        help="the size of mpsx's all-reduce buckets (mpsx.distributed.init; by default chosen)")
    arguments = parser.parse_args()

    if arguments.peer == "torch":
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        model, batches, step, wait, loss = torch_steps(arguments, rank, int(os.environ.get("LOCAL_RANK", 0)))
        barrier = __import__("torch.distributed").distributed.barrier
        name = "pytorch ddp"
    else:
        group = mpsx.distributed.init(bucket_bytes=arguments.bucket_bytes)
        rank, world = group.rank, group.world_size
        model, batches, step, wait, loss = mpsx_steps(arguments, group)
        barrier = group.barrier
        name = f"mpsx {arguments.model}{' replay' if arguments.replay else ''} ({group.backend})"

    for i in range(arguments.warmup):
        step(*batches[i % len(batches)])
    wait()
    barrier()
    start = time.perf_counter()
    for i in range(arguments.steps):
        step(*batches[i % len(batches)])
        if loss and rank == 0 and not arguments.json and i % 10 == 0:
            print(f"step {i}: loss {loss():.4f}", flush=True)
    wait()
    barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        images = world * arguments.batch_size * arguments.steps / seconds
        figures = {"what": name, "world_size": world, "batch_per_rank": arguments.batch_size,
                   "bucket_bytes": None if arguments.peer else arguments.bucket_bytes,
                   "ms_per_step": 1e3 * seconds / arguments.steps, "images_per_second": images}
        print(json.dumps(figures) if arguments.json else
              f"{name}: {world} ranks x {arguments.batch_size} images, {figures['ms_per_step']:.3f} ms a step, "
              f"{images:.0f} images/s", flush=True)


if __name__ == "__main__":
    main()
