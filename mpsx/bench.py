"""python -m mpsx.bench: what a kernel and a training step cost in mpsx and
in PyTorch eager, measured in the same run on the same machine, each until
its work has completed.

  python -m mpsx.bench [--device NAME] [--quick] [--batch-sizes N ...] [--skip-steps] [--json PATH] [--plot PATH]

An mpsx encode only records a kernel: the device (cpu: the queue's worker
thread) runs it after commit. So each kernel has two figures: its encode time
(the host's cost of the call) and its executed time (encode, commit and
wait_until_completed of a command buffer of many such kernels, divided by
their number: what the kernel costs). PyTorch eager runs the kernel inside
the call (on a GPU, launches it); its figure is the time of as many calls in
a row, followed on a GPU by PyTorch's synchronize, divided the same way.
Ratios are only taken between executed times. A training step is timed until
it completed on both sides.
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import mpsx

KERNELS = ("relu", "convolution", "convolution gradient")


def kernel_shapes(batch_size):
    """The images the kernels run on, N x C x H x W: a tiny one, where the
    per-kernel overhead dominates, and a layer of the reference CNN (32
    channels, 32 x 32) at the benchmark's batch size, where the compute does."""
    return [(1, 4, 4, 4), (batch_size, 32, 32, 32)]


def amortized(run_batch, count_for, repeats, budget):
    """Median per-kernel figures of run_batch(count), which runs count kernels
    in one batch and returns its figures as seconds per kernel (the last one
    the executed time). The count fills a batch for about budget / 10
    seconds (10 to 1000 kernels), found from the fastest of three timed
    batches of 10 after a warm-up one (a batch that another process
    interrupted is slower, never faster); there are at most `repeats` batches
    and fewer where they would take more than `budget` seconds. Returns
    (figures, count, batches)."""
    run_batch(2)  # primitives built, pools warm
    executed = min(run_batch(10)[-1] for _ in range(3))
    count = count_for(executed, budget / 10)
    batches = max(3, min(repeats, int(budget / (count * executed))))
    runs = [run_batch(count) for _ in range(batches)]
    return tuple(statistics.median(r[i] for r in runs) for i in range(len(runs[0]))), count, batches


def kernels_per_batch(executed, seconds):
    return max(10, min(1000, round(seconds / executed)))


def mpsx_kernels(device, shape, repeats, budget):
    """{kernel: ((encode s, executed s), kernels per command buffer, command
    buffers)} of relu, a 3x3 convolution (C -> C, "same" padding, bias) and its
    gradient (source gradient, weights and bias) on images of `shape`."""
    n, c, h, w = shape
    rng = np.random.default_rng(0)
    images = mpsx.ImageBatch.from_numpy(device, rng.standard_normal(shape).astype(np.float32))
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, c, c)
    weights = mpsx.ConvolutionWeights(descriptor, rng.standard_normal(descriptor.weights_shape).astype(np.float32),
                                      np.zeros(c, np.float32))
    conv = mpsx.CNNConvolution(device, weights)
    conv_gradient = mpsx.CNNConvolutionGradient(device, weights)
    # Every kernel of a command buffer writes one destination, as a step's pooled images are reused step
    # after step (and PyTorch's allocator hands a dropped result's memory to the next call): a batch of
    # fresh results would measure memory traffic that neither a training step nor the peer has.
    result = mpsx.ImageBatch(device, mpsx.ImageDescriptor(width=w, height=h, feature_channels=c, number_of_images=n))
    queue = device.command_queue

    def timed(encode_one, before=lambda cb: None):
        def run_batch(count):
            cb = queue.command_buffer()
            given = before(cb)  # encoded outside the encode time; it runs within the executed time
            start = time.perf_counter()
            for _ in range(count):
                encode_one(cb, given)
            encoded = time.perf_counter()
            cb.commit()
            cb.wait_until_completed()
            completed = time.perf_counter()
            if cb.status != "completed":
                raise cb.error
            return (encoded - start) / count, (completed - start) / count
        return amortized(run_batch, kernels_per_batch, repeats, budget)

    return {
        "relu": timed(lambda cb, _: relu.encode_batch(cb, images, result)),
        "convolution": timed(lambda cb, _: conv.encode_batch(cb, images, result)),
        # A gradient state serves the gradients of its own batch: one forward encode on each command buffer
        # (PyTorch's figure runs one forward convolution per batch of calls too).
        "convolution gradient": timed(
            lambda cb, forward: conv_gradient.encode_batch(cb, images, images, forward[1], result),
            lambda cb: conv.encode_batch(cb, images, destination_states=True)),
    }


def torch_device(device):
    """PyTorch's device for the same hardware, and what waits for its work."""
    import torch
    if device.backend == "cuda":
        return torch.device("cuda:" + device.name.split(":")[1]), torch.cuda.synchronize
    if device.backend == "metal" and torch.backends.mps.is_available():
        return torch.device("mps"), torch.mps.synchronize
    return torch.device("cpu"), lambda: None


def torch_kernels(device, shape, counts, repeats, budget):
    """{kernel: seconds per PyTorch eager call} of the same kernels on the same
    images, `counts[kernel]` calls in a row per timed batch (mpsx's count)."""
    import torch
    import torch.nn.functional as F
    where, synchronize = torch_device(device)
    n, c, h, w = shape
    x = torch.randn(shape, device=where)
    weight = torch.randn(c, c, 3, 3, device=where)
    bias = torch.zeros(c, device=where)
    dy = torch.randn_like(F.conv2d(x, weight, bias, padding=1))

    def timed(name, op, before=lambda: None):
        def run_batch(count):
            synchronize()
            start = time.perf_counter()
            before()
            for _ in range(count):
                op()
            synchronize()
            return ((time.perf_counter() - start) / count,)
        return amortized(run_batch, lambda executed, seconds: counts[name], repeats, budget)[0][0]

    def conv_backward():
        torch.ops.aten.convolution_backward(dy, x, weight, [c], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                            [True, True, True])

    # float32 math as mpsx's kernels (accumulator_precision "float"); PyTorch allows TF32 in cuDNN by default.
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            return {
                "relu": timed("relu", lambda: F.relu(x)),
                "convolution": timed("convolution", lambda: F.conv2d(x, weight, bias, padding=1)),
                "convolution gradient": timed("convolution gradient", conv_backward,
                                              lambda: F.conv2d(x, weight, bias, padding=1)),
            }
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def kernel_figures(device, batch_size, quick, torch):
    """One record per shape and kernel: mpsx's encode and executed times and
    PyTorch's executed time, in seconds per kernel."""
    repeats, budget = (5, 0.1) if quick else (21, 2.0)
    records = []
    for shape in kernel_shapes(batch_size):
        ours = mpsx_kernels(device, shape, repeats, budget)
        theirs = torch_kernels(device, shape, {k: v[1] for k, v in ours.items()}, repeats, budget) if torch else {}
        for name in KERNELS:
            (encode, executed), count, batches = ours[name]
            record = {"kernel": name, "shape": list(shape), "kernels_per_command_buffer": count,
                      "command_buffers": batches, "mpsx_encode_s": encode, "mpsx_executed_s": executed}
            if name in theirs:
                record["torch_executed_s"] = theirs[name]
                record["torch_executed_over_mpsx_executed"] = theirs[name] / executed
            records.append(record)
    return records


def time_steps(step, wait, steps):
    for _ in range(2):  # primitives built, pools warm, a replayed step captured
        step()
        wait()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_memory(device, step, wait):
    """Peak device bytes a warm step adds to what is in use before it."""
    wait()
    device.reset_peak_bytes_in_use()
    before = device.bytes_in_use
    step()
    wait()
    return device.peak_bytes_in_use - before


def graph_encode_time(model, images, labels, repeats):
    """Median seconds of one NNGraph encode_batch call of a whole training
    step: host time only (each command buffer is committed and completed
    outside the timing)."""
    model.train_step(images, labels)
    model.wait()
    times = []
    inputs = model.inputs[0]
    loss_labels = mpsx.CNNLossLabels(model.device, labels)
    for _ in range(repeats):
        cb = model.device.command_queue.command_buffer()
        start = time.perf_counter()
        model.graph.encode_batch(cb, [inputs], [loss_labels])
        times.append(time.perf_counter() - start)
        cb.commit()
        cb.wait_until_completed()
    return statistics.median(times)


def graph_call_time(device, repeats=2000):
    """Median seconds of encode_batch of a one-neuron graph on a 1x4x4x4
    image: the fixed cost of a call from Python into a graph's native encode."""
    relu = mpsx.CNNNeuronNode(mpsx.NNImageNode(mpsx.NNHandle("x")), mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    graph = mpsx.NNGraph(device, relu.result_image, format=mpsx.DataType.FLOAT32)
    image = mpsx.ImageBatch(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=4))
    cb = device.command_queue.command_buffer()
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        graph.encode_batch(cb, [image])
        times.append(time.perf_counter() - start)
    cb.commit()
    cb.wait_until_completed()
    return statistics.median(times)


def training_steps(device, batch_size, steps, with_torch, tensor_float32):
    """Seconds per training step of the reference CNN (benchmarks/): encoded
    each step and replayed from one recording, by hand and as an NNGraph in
    float32 and float16 (MPS's default graph format), and the same model in
    PyTorch eager and, on cuda, replayed as a CUDA graph; the peak device
    memory of a hand-encoded and a graph step. Every step copies its batch
    from host memory. With tensor_float32, forward convolutions and the fully
    connected layer may use TF32 tensor cores on both sides (mpsx's
    accumulator_precision "half", PyTorch's allow_tf32)."""
    from mpsx.benchmarks import reference_cnn
    result = {}
    precision = "half" if tensor_float32 else "float"
    images, labels = reference_cnn.random_batch(batch_size)
    model = reference_cnn.ReferenceCNN(device, batch_size, accumulator_precision=precision)
    result["mpsx"] = time_steps(lambda: model.train_step(images, labels), model.wait, steps)
    result["mpsx memory"] = step_memory(device, lambda: model.train_step(images, labels), model.wait)
    model = reference_cnn.ReferenceCNN(device, batch_size, accumulator_precision=precision)
    model.record_step()
    result["mpsx replay"] = time_steps(lambda: model.replay_step(images, labels), model.wait, steps)
    for name, data_type in (("nngraph", mpsx.DataType.FLOAT32), ("nngraph float16", mpsx.DataType.FLOAT16)):
        graph = reference_cnn.GraphReferenceCNN(device, batch_size, accumulator_precision=precision, format=data_type)
        result[name] = time_steps(lambda: graph.train_step(images, labels), graph.wait, steps)
        result[name + " memory"] = step_memory(device, lambda: graph.train_step(images, labels), graph.wait)
        if data_type == mpsx.DataType.FLOAT32:
            result["nngraph encode"] = graph_encode_time(graph, images, labels, 3 * steps)
        graph = reference_cnn.GraphReferenceCNN(device, batch_size, accumulator_precision=precision, format=data_type)
        graph.record_step()
        result[name + " replay"] = time_steps(lambda: graph.replay_step(images, labels), graph.wait, steps)
    if with_torch:
        import torch
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tensor_float32
        try:
            torch_model = reference_cnn.TorchReferenceCNN(model.initial_parameters, torch_device(device)[0])
            result["torch"] = torch_model.time_steps(images, labels, steps)
            if device.backend == "cuda":
                result["torch graph"] = torch_model.time_graph_replay(images, labels, steps)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    return result


STEP_COLUMNS = (  # (key in training_steps' result, label)
    ("mpsx", "mpsx"), ("mpsx replay", "mpsx replay"), ("nngraph", "nngraph"), ("nngraph replay", "nngraph replay"),
    ("torch", "torch eager"), ("torch graph", "torch CUDA graph"))


def step_records(device, batch_sizes, quick, torch):
    """One record per math mode and batch size: training_steps' figures, in
    seconds and bytes, with the ratios of the step table."""
    steps = 2 if quick else 7 if device.backend == "cpu" else 50
    records = []
    # TF32 only where there are tensor cores for it (PyTorch's default for cuDNN there).
    for tensor_float32 in (False, True) if device.backend == "cuda" else (False,):
        for batch_size in batch_sizes:
            r = training_steps(device, batch_size, steps, torch is not None, tensor_float32)
            record = {"math": "tf32" if tensor_float32 else "float32", "batch": batch_size, "steps": steps}
            for key, value in r.items():
                record[key.replace(" ", "_") + ("_bytes" if key.endswith("memory") else "_s")] = value
            record["nngraph_replay_over_mpsx_replay"] = r["nngraph replay"] / r["mpsx replay"]
            if "torch" in r:
                record["torch_over_mpsx"] = r["torch"] / r["mpsx"]
            if "torch graph" in r:
                record["torch_graph_over_mpsx_replay"] = r["torch graph"] / r["mpsx replay"]
            records.append(record)
    return records


def print_kernels(records):
    print("\nkernels: us per kernel, median over command buffers of many kernels (kernels/cb); NxCxHxW images")
    print("  encode:   mpsx host time of one encode call (the work is not done yet)")
    print("  executed: mpsx encode + commit + wait_until_completed of the command buffer, per kernel")
    print("  torch:    PyTorch eager calls in a row (on a GPU, then its synchronize), per call")
    print("  (convolution gradient: one forward convolution per command buffer on both sides, within executed)")
    header = f"  {'images':>13} {'kernel':22} {'kernels/cb':>10} {'encode us':>10} {'executed us':>12}"
    if any("torch_executed_s" in r for r in records):
        header += f" {'torch us':>10} {'torch/mpsx executed':>20}"
    print(header)
    for r in records:
        shape = "x".join(map(str, r["shape"]))
        line = f"  {shape:>13} {r['kernel']:22} {r['kernels_per_command_buffer']:10d}" \
               f" {r['mpsx_encode_s'] * 1e6:10.2f} {r['mpsx_executed_s'] * 1e6:12.2f}"
        if "torch_executed_s" in r:
            line += f" {r['torch_executed_s'] * 1e6:10.2f} {r['torch_executed_over_mpsx_executed']:19.2f}x"
        print(line)


def print_steps(records, call):
    print("\nreference CNN training step (forward, loss, backward, SGD momentum update), median ms per step,"
          " each until it completed")
    print("  mpsx: hand-encoded each step / one recorded command buffer replayed; nngraph: the same model as an"
          " NNGraph (training_graph), float32 images, encoded each step / replayed; torch: eager / CUDA graph"
          " replay (on a GPU, then its synchronize)")
    torch, graphs = "torch_s" in records[0], "torch_graph_s" in records[0]
    header = f"  {'math':>7} {'batch':>5} {'mpsx':>8} {'replay':>8} {'nngraph':>8} {'replay':>8} {'graph/hand':>10}"
    if torch:
        header += f" {'torch':>8} {'torch/mpsx':>11}"
    if graphs:
        header += f" {'graph':>8} {'graph/replay':>13}"
    print(header)
    for r in records:
        line = f"  {r['math']:>7} {r['batch']:5d} {r['mpsx_s'] * 1e3:8.3f} {r['mpsx_replay_s'] * 1e3:8.3f}" \
               f" {r['nngraph_s'] * 1e3:8.3f} {r['nngraph_replay_s'] * 1e3:8.3f}" \
               f" {r['nngraph_replay_over_mpsx_replay']:9.2f}x"
        if torch:
            line += f" {r['torch_s'] * 1e3:8.3f} {r['torch_over_mpsx']:10.2f}x"
        if graphs:
            line += f" {r['torch_graph_s'] * 1e3:8.3f} {r['torch_graph_over_mpsx_replay']:12.2f}x"
        print(line)
    print("\nNNGraph step: float16 images (the graph's format, MPS's default) encoded each step / replayed, median"
          " ms; peak device memory a step adds, MiB (hand-encoded, graph float32, graph float16); one encode_batch"
          " call of the whole step (host time only), us")
    print(f"  {'math':>7} {'batch':>5} {'f16':>8} {'replay':>8} {'hand MiB':>9} {'graph MiB':>10} {'f16 MiB':>8}"
          f" {'encode us':>10}")
    for r in records:
        print(f"  {r['math']:>7} {r['batch']:5d} {r['nngraph_float16_s'] * 1e3:8.3f}"
              f" {r['nngraph_float16_replay_s'] * 1e3:8.3f} {r['mpsx_memory_bytes'] / 2**20:9.2f}"
              f" {r['nngraph_memory_bytes'] / 2**20:10.2f} {r['nngraph_float16_memory_bytes'] / 2**20:8.2f}"
              f" {r['nngraph_encode_s'] * 1e6:10.1f}")
    print(f"  a call from Python into a graph's encode (a one-neuron graph, 1x4x4x4, host time): {call * 1e6:.2f} us")


def plot_steps(path, machine, records):
    """A bar chart of the step table: one panel per math mode and batch size,
    a bar per way of running the step, in ms."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    columns = [(key, label) for key, label in STEP_COLUMNS if key.replace(" ", "_") + "_s" in records[0]]
    maths, batches = sorted({r["math"] for r in records}), sorted({r["batch"] for r in records})
    figure, axes = plt.subplots(len(maths), len(batches), figsize=(1.1 * len(columns) * len(batches) + 1.5,
                                                                   4.5 * len(maths)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for r in records:
        ax = axes[maths.index(r["math"])][batches.index(r["batch"])]
        values = [r[key.replace(" ", "_") + "_s"] * 1e3 for key, _ in columns]
        bars = ax.bar(range(len(columns)), values, color=colors[:len(columns)])
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_xticks(range(len(columns)), [label for _, label in columns], rotation=45, ha="right")
        ax.set_title(f"{r['math']}, batch {r['batch']}")
        ax.set_ylabel("ms per step (median, until completed)")
        ax.margins(y=0.15)
    where = machine["gpu"] or machine["processor"]
    figure.suptitle(f"reference CNN training step on {machine['device']} ({where})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def processor():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device, torch):
    info = {"mpsx": mpsx.__version__, "device": device.name, "backend": device.backend,
            "processor": processor(), "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            # Other processes on the cpus slow the cpu backend's OpenMP threads most: read cpu figures with it.
            "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__ if torch else None, "torch_threads": torch.get_num_threads() if torch else None,
            "torch_device": str(torch_device(device)[0]) if torch else None, "gpu": None}
    if torch is not None and device.backend == "cuda":
        info["gpu"] = torch.cuda.get_device_name(torch_device(device)[0])
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mpsx.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256], metavar="N",
                        help="the training steps' batch sizes; the kernels' layer images take the smallest"
                             " (default 32 256)")
    parser.add_argument("--skip-steps", action="store_true", help="only measure the kernels")
    parser.add_argument("--json", metavar="PATH", help="write every figure (seconds, bytes) and the machine as JSON")
    parser.add_argument("--plot", metavar="PATH", help="draw the training-step table as a bar chart (PNG)")
    args = parser.parse_args(argv)
    if min(args.batch_sizes) < 1:
        parser.error(f"--batch-sizes must be at least 1, given {args.batch_sizes}")
    if args.plot:
        if args.skip_steps:
            parser.error("--plot draws the training steps, which --skip-steps leaves out")
        try:
            import matplotlib  # noqa: F401 (checked before the run, not after it)
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib (or mpsx's examples extra)")

    device = mpsx.Device(args.device)
    try:
        import torch
    except ImportError:
        torch = None
    machine = machine_info(device, torch)
    print(f"mpsx {mpsx.__version__} on {device.name} ({device.backend})"
          + (f"; PyTorch {torch.__version__}" if torch else "; PyTorch not installed"))
    if device.backend == "cpu":
        print(f"{machine['processor']}, {machine['usable_cpus']} cpus"
              + (f"; torch threads {machine['torch_threads']}" if torch else "")
              + (f"; load average {machine['load_average_1min']:.2f}" if machine["load_average_1min"] is not None
                 else ""))
    elif machine["gpu"]:
        print(machine["gpu"])

    kernels = kernel_figures(device, min(args.batch_sizes), args.quick, torch)
    print_kernels(kernels)
    result = {"units": {"time": "s", "memory": "bytes", "ratios": "dimensionless, the same quantity over each other"},
              "machine": machine,
              "settings": {"quick": args.quick, "batch_sizes": args.batch_sizes, "skip_steps": args.skip_steps},
              "kernels": kernels}
    if not args.skip_steps:
        steps = step_records(device, args.batch_sizes, args.quick, torch)
        result["steps"] = steps
        result["graph_call_s"] = graph_call_time(device)
        print_steps(steps, result["graph_call_s"])
        if args.plot:
            plot_steps(args.plot, machine, steps)
            print(f"\nplot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"figures: {args.json}")


if __name__ == "__main__":
    main()
