"""python -m mpsx.bench: what a kernel and a training step cost in mpsx and
in PyTorch eager, measured in the same run on the same machine, each until
its work has completed.

  python -m mpsx.bench [--device NAME] [--quick] [--batch-sizes N ...] [--skip-kernels] [--skip-steps]
                       [--skip-imported] [--json PATH] [--plot PATH]

An mpsx encode only records a kernel: the device (cpu: the queue's worker
thread) runs it after commit. So each kernel has two figures: its encode time
(the host's cost of the call) and its executed time (encode, commit and
wait_until_completed of a command buffer of many such kernels, divided by
their number: what the kernel costs). PyTorch eager runs the kernel inside
the call (on a GPU, launches it); its figure is the time of as many calls in
a row, followed on a GPU by PyTorch's synchronize, divided the same way.
Ratios are only taken between executed times. Training steps of the
reference CNN run back to back, timed until the last one completed, in mpsx,
PyTorch (eager and, on cuda, a CUDA graph) and JAX (jit) where they are
installed, in float32, TF32 (cuda) and float16; on cuda the device time per
replayed step is read with CUPTI (through torch.profiler), kernel by kernel.
Last, torchvision's ResNet-18, brought with mpsx.from_torch, trains at
batch 64 on 32x32 images as its training NNGraph, encoded each step and
replayed, beside PyTorch's training of the same module: eager and, on cuda,
a CUDA graph and torch.compile (modes "max-autotune-no-cudagraphs" and
"reduce-overhead"), in each math mode.
"""

import argparse
import contextlib
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


MATHS = {  # math mode: (mpsx accumulator precision, mpsx image format, TF32 allowed, JAX's precision)
    "float32": ("float", mpsx.DataType.FLOAT32, False, "float32"),
    "tf32": ("half", mpsx.DataType.FLOAT32, True, "tf32"),
    "float16": ("float", mpsx.DataType.FLOAT16, True, "bfloat16")}


@contextlib.contextmanager
def torch_math(device, torch, math):
    """PyTorch as math (MATHS) runs it, within the block: TF32 allowed or not in cuDNN and cuBLAS (restored after);
    yields (the torch device, the autocast dtype: None, or float16, bfloat16 on the cpu, in "float16")."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = MATHS[math][2]
    try:
        where = torch_device(device)[0]
        yield where, None if math != "float16" else torch.float16 if where.type == "cuda" else torch.bfloat16
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def maths_of(device):
    """The math modes a device's steps run in: TF32 only where there are tensor cores for it."""
    return ["float32", "tf32", "float16"] if device.backend == "cuda" else ["float32", "float16"]


def time_steps(step, wait, steps):
    """Median seconds per step of rounds of steps encoded back to back, each
    round until its last step completed: a training loop's throughput, where
    the host prepares a step while the device runs the one before."""
    # Primitives built, pools warm, and each of a model's two input slots committed and then replayed once, which
    # captures its CUDA graph; then rounds as the timed ones, in which command buffers encoded each step see their
    # keys again and capture themselves: the timed rounds run only what a long training loop runs.
    for _ in range(4):
        step()
        wait()
    per_round = max(1, min(10, steps // 3))
    for _ in range(3):
        for _ in range(per_round):
            step()
        wait()
    times = []
    for _ in range(max(1, steps // per_round)):
        start = time.perf_counter()
        for _ in range(per_round):
            step()
        wait()
        times.append((time.perf_counter() - start) / per_round)
    return statistics.median(times)


def step_memory(device, step, wait):
    """Peak device bytes a warm step adds to what is in use before it."""
    wait()
    device.reset_peak_bytes_in_use()
    before = device.bytes_in_use
    step()
    wait()
    return device.peak_bytes_in_use - before


def busy_time(intervals):
    """The time within at least one of the (start, end) intervals: operations
    that overlap (on two streams, a copy beside kernels) count once."""
    total, reached = 0.0, None
    for start, end in sorted(intervals):
        if reached is None or start >= reached:
            total += end - start
            reached = end
        elif end > reached:
            total += end - reached
            reached = end
    return total


def kernel_time(step, wait, steps, torch):
    """The GPU's work per step, read with CUPTI through torch.profiler: every
    kernel, copy and fill the process ran on the device, whichever library
    launched it. Returns (seconds per step the device was busy with them,
    device operations per step, {name: (seconds per step, count per step)}),
    where the seconds of names add up operations that ran side by side."""
    from torch.profiler import ProfilerActivity, profile
    step()
    wait()
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        for _ in range(steps):
            step()
        wait()
    names, intervals = {}, []
    for event in profiled.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        seconds, count = names.get(event.name, (0.0, 0))
        names[event.name] = (seconds + (event.time_range.end - event.time_range.start) * 1e-6 / steps,
                             count + 1 / steps)
        intervals.append((event.time_range.start, event.time_range.end))
    return busy_time(intervals) * 1e-6 / steps, round(sum(c for _, c in names.values())), names


KERNEL_KINDS = (  # (kind, words of a device operation's name), the first match wins
    ("host-to-device copies", ("memcpy htod",)),
    ("other copies and fills", ("memcpy", "memset")),
    ("layout transposes", ("nchwtonhwc", "nhwctonchw", "transpose")),
    ("convolution backward data", ("dgrad", "bwddata")),
    ("convolution backward filter", ("wgrad", "bwdfilter")),
    ("convolution forward", ("fprop", "conv", "xmma", "implicit")),
    ("matrix products", ("gemm",)),
    ("batch normalization", ("batch_normalization", "moments", "products", "normalize_kernel", "gradient_kernel")))


def kernel_kinds(names):
    """{kind: seconds per step} of kernel_time's names."""
    kinds = {}
    for name, (seconds, _) in names.items():
        lowered = name.lower()
        kind = next((k for k, words in KERNEL_KINDS if any(w in lowered for w in words)), "other")
        kinds[kind] = kinds.get(kind, 0.0) + seconds
    return kinds


def jax_device(device, jax):
    """JAX's device for the same hardware, or None."""
    try:
        if device.backend == "cuda":
            return jax.devices("gpu")[int(device.name.split(":")[1])]
        if device.backend == "cpu":
            return jax.devices("cpu")[0]
    except RuntimeError:  # JAX has no backend for it
        pass
    return None


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


def training_steps(device, batch_size, steps, torch, jax, math):
    """Seconds per training step of the reference CNN (benchmarks/): encoded
    each step and replayed from recordings, by hand and as an NNGraph, and
    the same model in PyTorch eager and, on cuda, replayed as a CUDA graph,
    and in JAX (one jit-compiled step); the peak device memory of a
    hand-encoded and a graph step; on cuda the device time per step of the
    replayed ones (CUPTI), with what it is spent on. Every step copies its
    batch from host memory. math (MATHS): "float32"; "tf32", where
    convolutions and the fully connected layer may use TF32 tensor cores
    (mpsx's accumulator_precision "half" on the forward kernels, PyTorch's
    allow_tf32, JAX's default precision); "float16", float16 images on mpsx
    (MPS's fast path; an NNGraph of format float16), PyTorch's autocast to
    float16 (bfloat16 on cpu) and JAX in bfloat16."""
    from mpsx.benchmarks import reference_cnn
    result, breakdowns = {}, {}
    precision, image_format, _, jax_precision = MATHS[math]
    profile = torch is not None and device.backend == "cuda"
    images, labels = reference_cnn.random_batch(batch_size)

    def measure(name, step, wait):
        result[name] = time_steps(step, wait, steps)
        if profile:
            seconds, count, names = kernel_time(step, wait, min(steps, 20), torch)
            result[name + " kernel"] = seconds
            result[name + " kernels"] = count
            breakdowns[name] = names

    model = reference_cnn.ReferenceCNN(device, batch_size, accumulator_precision=precision, image_format=image_format)
    result["mpsx"] = time_steps(lambda: model.train_step(images, labels), model.wait, steps)
    result["mpsx memory"] = step_memory(device, lambda: model.train_step(images, labels), model.wait)
    model.record_step()
    measure("mpsx replay", lambda: model.replay_step(images, labels), model.wait)
    graph = reference_cnn.GraphReferenceCNN(device, batch_size, accumulator_precision=precision, format=image_format)
    result["nngraph"] = time_steps(lambda: graph.train_step(images, labels), graph.wait, steps)
    result["nngraph memory"] = step_memory(device, lambda: graph.train_step(images, labels), graph.wait)
    if math == "float32":
        # Encodes that run the graph's recording (NNGraph.capture_encodes), and encodes of every step.
        result["nngraph encode"] = graph_encode_time(graph, images, labels, 3 * steps)
        graph.graph.capture_encodes = False
        result["nngraph encode uncaptured"] = graph_encode_time(graph, images, labels, 3 * steps)
        graph.graph.capture_encodes = True
    graph.record_step()
    measure("nngraph replay", lambda: graph.replay_step(images, labels), graph.wait)
    if torch is not None:
        with torch_math(device, torch, math) as (where, autocast):
            torch_model = reference_cnn.TorchReferenceCNN(model.initial_parameters, where, autocast=autocast)
            result["torch"] = time_steps(lambda: torch_model.train_step(images, labels), torch_model.synchronize,
                                         steps)
            if device.backend == "cuda":
                replay = torch_model.graph_step(images, labels)
                measure("torch graph", lambda: replay(images, labels), torch_model.synchronize)
    where = jax_device(device, jax) if jax is not None else None
    if where is not None:
        jax_model = reference_cnn.JaxReferenceCNN(model.initial_parameters, where, jax_precision)
        measure("jax", lambda: jax_model.train_step(images, labels), jax_model.synchronize)
    return result, breakdowns


IMPORTED_BATCH_SIZE = 64
COMPILE_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")


def imported_training(device, module, batch_size, math):
    """The training of a PyTorch module brought with mpsx.from_torch, in math (MATHS)."""
    from mpsx.benchmarks import imported_model
    precision, image_format, _, _ = MATHS[math]
    return imported_model.ImportedTraining(
        device, module, batch_size, image_format=image_format,
        accumulator_precision=mpsx.NNConvolutionAccumulatorPrecisionOption[precision.upper()])


def imported_steps(device, batch_size, steps, torch, math, make_module):
    """Seconds per training step of a PyTorch module (make_module(), fresh;
    torchvision's ResNet-18 in main) brought with mpsx.from_torch: its
    training NNGraph encoded each step and replayed, beside the same module's
    training in PyTorch eager and, on cuda, replayed as a CUDA graph and
    torch.compile'd in each of COMPILE_MODES (the forward and backward
    passes; the optimizer's step eager), in math (MATHS) as training_steps
    runs it. Cross-entropy, mean over the batch, SGD with momentum 0.9, each
    step's batch copied from host memory."""
    import copy

    from mpsx.benchmarks import reference_cnn
    images, labels = reference_cnn.random_batch(batch_size)
    module = make_module()
    model = imported_training(device, module, batch_size, math)
    result = {"nngraph": time_steps(lambda: model.train_step(images, labels), model.wait, steps)}
    model.record_step()
    result["nngraph replay"] = time_steps(lambda: model.replay_step(images, labels), model.wait, steps)
    with torch_math(device, torch, math) as (where, autocast):
        eager = reference_cnn.TorchTraining(copy.deepcopy(module), where, autocast=autocast)
        result["torch"] = time_steps(lambda: eager.train_step(images, labels), eager.synchronize, steps)
        if device.backend == "cuda":
            replay = eager.graph_step(images, labels)
            result["torch graph"] = time_steps(lambda: replay(images, labels), eager.synchronize, steps)
            for mode in COMPILE_MODES:
                compiled = reference_cnn.TorchTraining(copy.deepcopy(module), where, autocast=autocast,
                                                       compile_mode=mode)
                result[f"torch compile {mode}"] = time_steps(lambda: compiled.train_step(images, labels),
                                                             compiled.synchronize, steps)
    return result


def imported_records(device, batch_size, quick, torch, make_module):
    """One record per math mode of imported_steps' figures, in seconds, with
    the best peer's time over the replayed step's."""
    steps = 2 if quick else 5 if device.backend == "cpu" else 50
    records = []
    for math in maths_of(device):
        r = imported_steps(device, batch_size, steps, torch, math, make_module)
        record = {"math": math, "batch": batch_size, "steps": steps}
        field = lambda name: name.replace(" ", "_").replace("-", "_")  # noqa: E731
        record.update((field(key) + "_s", value) for key, value in r.items())
        best = min((key for key in r if key.startswith("torch")), key=r.get)
        record["best_peer"] = best
        record[f"{field(best)}_over_nngraph_replay"] = r[best] / r["nngraph replay"]
        records.append(record)
    return records


STEP_COLUMNS = (  # (key in training_steps' result, label)
    ("mpsx", "mpsx"), ("mpsx replay", "mpsx replay"), ("nngraph", "nngraph"), ("nngraph replay", "nngraph replay"),
    ("torch", "torch eager"), ("torch graph", "torch CUDA graph"), ("jax", "jax jit"))


RATIO_COLUMNS = (  # (key in a step record, label)
    ("mpsx_over_mpsx_replay", "encoded/replay"), ("nngraph_over_nngraph_replay", "graph encoded/replay"),
    ("nngraph_replay_over_mpsx_replay", "graph replay/replay"), ("torch_over_mpsx", "torch/mpsx"),
    ("torch_graph_over_mpsx_replay", "CUDA graph/replay"), ("jax_over_mpsx_replay", "jax/replay"))


def step_records(device, batch_sizes, quick, torch, jax):
    """One record per math mode and batch size: training_steps' figures, in
    seconds and bytes, with the ratios of the step table; and the device
    time per step of each replayed step by kernel, largest first."""
    steps = 2 if quick else 7 if device.backend == "cpu" else 50
    records = []
    for math in maths_of(device):
        for batch_size in batch_sizes:
            r, breakdowns = training_steps(device, batch_size, steps, torch, jax, math)
            record = {"math": math, "batch": batch_size, "steps": steps}
            for key, value in r.items():
                suffix = "_bytes" if key.endswith("memory") else "" if key.endswith("kernels") else "_s"
                record[key.replace(" ", "_") + suffix] = value
            # What encoding each step costs over replaying the recording, by hand and as an NNGraph.
            record["mpsx_over_mpsx_replay"] = r["mpsx"] / r["mpsx replay"]
            record["nngraph_over_nngraph_replay"] = r["nngraph"] / r["nngraph replay"]
            record["nngraph_replay_over_mpsx_replay"] = r["nngraph replay"] / r["mpsx replay"]
            for peer, ours in (("torch", "mpsx"), ("torch graph", "mpsx replay"), ("jax", "mpsx replay")):
                if peer in r:
                    record[f"{peer.replace(' ', '_')}_over_{ours.replace(' ', '_')}"] = r[peer] / r[ours]
            if breakdowns:
                record["device_time_per_step"] = {
                    name: {"kinds_s": kernel_kinds(names),
                           "kernels": [{"name": n, "s": s, "per_step": c} for n, (s, c) in
                                       sorted(names.items(), key=lambda item: -item[1][0])]}
                    for name, names in breakdowns.items()}
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
    print("\nreference CNN training step (forward, loss, backward, SGD momentum update), median ms per step of"
          " steps run back to back, until the last completed; each copies its batch from host memory")
    print("  mpsx: hand-encoded each step / recorded command buffers replayed; nngraph: the same model as an"
          " NNGraph (training_graph), encoded each step (which runs its recording, capture_encodes) / replayed;"
          " torch: eager / CUDA graph replay; jax: one"
          " jit-compiled step")
    print("  math: float32; tf32 (TF32 tensor cores allowed: mpsx accumulator_precision \"half\", torch allow_tf32,"
          " jax default precision); float16 (mpsx float16 images and graph format, torch autocast float16"
          " (bfloat16 on cpu), jax bfloat16)")
    columns = [(key, label) for key, label in STEP_COLUMNS if key.replace(" ", "_") + "_s" in records[0]]
    header = f"  {'math':>7} {'batch':>5}" + "".join(f" {label:>{max(8, len(label))}}" for _, label in columns)
    ratios = [(key, label) for key, label in RATIO_COLUMNS if key in records[0]]
    header += "".join(f" {label:>{max(8, len(label))}}" for _, label in ratios)
    print(header)
    for r in records:
        line = f"  {r['math']:>7} {r['batch']:5d}"
        line += "".join(f" {r[key.replace(' ', '_') + '_s'] * 1e3:{max(8, len(label))}.3f}" for key, label in columns)
        line += "".join(f" {r[key]:{max(8, len(label)) - 1}.2f}x" for key, label in ratios)
        print(line)
    if "mpsx_replay_kernel_s" in records[0]:
        print("\ndevice time per step (CUPTI: the time the device was busy with the process's kernels, copies and"
              " fills, those that ran side by side counted once), ms, and operations per step; the kinds below add"
              " up each operation's own time")
        kinds = [key for key in ("mpsx replay", "nngraph replay", "torch graph", "jax")
                 if key.replace(" ", "_") + "_kernel_s" in records[0]]
        print(f"  {'math':>7} {'batch':>5}" + "".join(f" {k:>16} {'ops':>5}" for k in kinds))
        for r in records:
            line = f"  {r['math']:>7} {r['batch']:5d}"
            for k in kinds:
                k = k.replace(" ", "_")
                line += f" {r[k + '_kernel_s'] * 1e3:16.3f} {r[k + '_kernels']:5d}"
            print(line)
        for r in records:
            for name in ("mpsx replay", "jax"):
                if name not in r["device_time_per_step"]:
                    continue
                kinds = r["device_time_per_step"][name]["kinds_s"]
                print(f"  {name}, {r['math']}, batch {r['batch']}: "
                      + ", ".join(f"{kind} {seconds * 1e6:.0f} us" for kind, seconds in
                                  sorted(kinds.items(), key=lambda item: -item[1])))
    print("\npeak device memory a step adds, MiB (hand-encoded, graph; a graph's recording keeps its images from"
          " the encode that made it on, outside these)")
    for r in records:
        print(f"  {r['math']:>7} {r['batch']:5d} {r['mpsx_memory_bytes'] / 2**20:9.2f}"
              f" {r['nngraph_memory_bytes'] / 2**20:9.2f}")
    print("\ngraph encode host time: one encode_batch call of the whole graph step (float32; the work is not done"
          " yet), us: running the graph's recording (capture_encodes, the default), and encoding every step")
    for r in records:
        if "nngraph_encode_s" in r:
            print(f"  {r['math']:>7} {r['batch']:5d} {r['nngraph_encode_s'] * 1e6:10.1f}"
                  f" {r['nngraph_encode_uncaptured_s'] * 1e6:10.1f}")
    print(f"  a call from Python into a graph's encode (a one-neuron graph, 1x4x4x4, host time): {call * 1e6:.2f} us")


IMPORTED_COLUMNS = (  # (key in an imported record, label)
    ("nngraph_s", "nngraph"), ("nngraph_replay_s", "nngraph replay"), ("torch_s", "torch eager"),
    ("torch_graph_s", "torch CUDA graph"), ("torch_compile_max_autotune_no_cudagraphs_s", "compile max-autotune-no-cg"),
    ("torch_compile_reduce_overhead_s", "compile reduce-overhead"))


def print_imported(records):
    print(f"\nimported model training step (torchvision's ResNet-18, 10 classes, batch {records[0]['batch']},"
          " 32x32 images; cross-entropy, SGD momentum), median ms per step of steps run back to back, until the last"
          " completed; each copies its batch from host memory")
    print("  nngraph: mpsx.from_torch's training_graph, encoded each step / replayed; torch: eager, CUDA graph"
          " replay, and the module torch.compile'd (the optimizer step eager); math as in the table above")
    columns = [(key, label) for key, label in IMPORTED_COLUMNS if key in records[0]]
    print(f"  {'math':>7}" + "".join(f" {label:>{max(8, len(label))}}" for _, label in columns)
          + "  best peer / nngraph replay")
    for r in records:
        ratio = next(value for key, value in r.items() if key.endswith("_over_nngraph_replay"))
        print(f"  {r['math']:>7}" + "".join(f" {r[key] * 1e3:{max(8, len(label))}.3f}" for key, label in columns)
              + f"  {ratio:.2f}x ({r['best_peer']})")


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
    if device.backend == "cpu":
        # The kernels oneDNN picked on this processor (ONEDNN_MAX_CPU_ISA lowers them).
        info["onednn_isa"] = mpsx._runtime._cpu_onednn_isa()
        info["onednn_max_cpu_isa"] = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mpsx.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256], metavar="N",
                        help="the training steps' batch sizes; the kernels' layer images take the smallest"
                             " (default 32 256)")
    parser.add_argument("--skip-kernels", action="store_true", help="leave out the kernels")
    parser.add_argument("--skip-steps", action="store_true", help="leave out the reference CNN's training steps")
    parser.add_argument("--skip-imported", action="store_true",
                        help="leave out the training step of torchvision's ResNet-18 brought with mpsx.from_torch")
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
    # torch.compile's max-autotune tries Triton convolution templates too: for ResNet-18 in float32 on an H200 it
    # was still autotuning after 7 minutes, ATen's convolution having won each one it finished. Set it to
    # "ATEN,TRITON" for the whole autotune.
    os.environ.setdefault("TORCHINDUCTOR_MAX_AUTOTUNE_CONV_BACKENDS", "ATEN")
    try:
        import torch
    except ImportError:
        torch = None
    # JAX takes most of a GPU's memory on import unless told not to.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax  # type: ignore[import-not-found]  # optional: the bench runs without it
    except ImportError:
        jax = None
    machine = machine_info(device, torch)
    machine["jax"] = jax.__version__ if jax else None
    machine["torchinductor_max_autotune_conv_backends"] = os.environ["TORCHINDUCTOR_MAX_AUTOTUNE_CONV_BACKENDS"]
    print(f"mpsx {mpsx.__version__} on {device.name} ({device.backend})"
          + (f"; PyTorch {torch.__version__}" if torch else "; PyTorch not installed")
          + (f"; JAX {jax.__version__}" if jax else "; JAX not installed"))
    if device.backend == "cpu":
        print(f"{machine['processor']}, {machine['usable_cpus']} cpus; oneDNN runs {machine['onednn_isa']} kernels"
              + (f" (ONEDNN_MAX_CPU_ISA={machine['onednn_max_cpu_isa']})" if machine["onednn_max_cpu_isa"] else "")
              + (f"; torch threads {machine['torch_threads']}" if torch else "")
              + (f"; load average {machine['load_average_1min']:.2f}" if machine["load_average_1min"] is not None
                 else ""))
    elif machine["gpu"]:
        print(machine["gpu"])

    kernels = [] if args.skip_kernels else kernel_figures(device, min(args.batch_sizes), args.quick, torch)
    if kernels:
        print_kernels(kernels)
    result = {"units": {"time": "s", "memory": "bytes", "ratios": "dimensionless, the same quantity over each other"},
              "machine": machine,
              "settings": {"quick": args.quick, "batch_sizes": args.batch_sizes, "skip_kernels": args.skip_kernels,
                           "skip_steps": args.skip_steps, "skip_imported": args.skip_imported},
              "kernels": kernels}
    if not args.skip_steps:
        steps = step_records(device, args.batch_sizes, args.quick, torch, jax)
        result["steps"] = steps
        result["graph_call_s"] = graph_call_time(device)
        print_steps(steps, result["graph_call_s"])
        if args.plot:
            plot_steps(args.plot, machine, steps)
            print(f"\nplot: {args.plot}")
    if not args.skip_imported:
        from mpsx.benchmarks import imported_model
        if torch is None or imported_model.resnet18() is None:
            print("\nimported model training step: left out, it needs torch and torchvision")
        else:
            result["imported"] = imported_records(device, IMPORTED_BATCH_SIZE, args.quick, torch,
                                                  imported_model.resnet18)
            print_imported(result["imported"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"figures: {args.json}")


if __name__ == "__main__":
    main()
