"""python -m mpsx.bench: encode overhead and training-step time, as ratios
against PyTorch eager measured in the same run on the same machine.

  python -m mpsx.bench [--device NAME] [--quick] [--skip-steps]
"""

import argparse
import statistics
import time

import numpy as np

import mpsx


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        times.append(fn())
    return statistics.median(times)


def encode_overhead(device, repeats, per_batch):
    """Seconds per encode of relu, convolution and convolution gradient on
    1x4x4x4 images: many encodes, then one commit outside the timing."""
    rng = np.random.default_rng(0)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 4, 4)).astype(np.float32))
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 4, 4)
    weights = mpsx.ConvolutionWeights(descriptor, rng.standard_normal(descriptor.weights_shape).astype(np.float32),
                                      np.zeros(4, np.float32))
    conv = mpsx.CNNConvolution(device, weights)
    conv_gradient = mpsx.CNNConvolutionGradient(device, weights)
    queue = device.command_queue

    def timed(encode_one, before=lambda cb: None):
        def run():
            cb = queue.command_buffer()
            given = before(cb)  # not timed
            start = time.perf_counter()
            for _ in range(per_batch):
                encode_one(cb, given)
            encoded = time.perf_counter()
            cb.commit()  # cuda launches here, on this thread
            committed = time.perf_counter()
            cb.wait_until_completed()
            return (encoded - start) / per_batch, (committed - start) / per_batch
        run()  # primitives built, pools warm
        runs = [run() for _ in range(repeats)]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    return {
        "relu": timed(lambda cb, _: relu.encode(cb, image)),
        "convolution": timed(lambda cb, _: conv.encode(cb, image)),
        # A gradient state serves the gradients of its own batch: a forward encode on each command buffer.
        "convolution gradient": timed(lambda cb, forward: conv_gradient.encode(cb, forward[0], image, forward[1]),
                                      lambda cb: conv.encode(cb, image, destination_state=True)),
    }


def torch_device(device):
    import torch
    if device.backend == "cuda":
        return torch.device("cuda:" + device.name.split(":")[1]), torch.cuda.synchronize
    return torch.device("cpu"), lambda: None


def torch_overhead(device, repeats, per_batch):
    """Seconds per PyTorch eager call of the same three operations."""
    import torch
    import torch.nn.functional as F
    where, synchronize = torch_device(device)
    x = torch.randn(1, 4, 4, 4, device=where)
    w = torch.randn(4, 4, 3, 3, device=where)
    b = torch.zeros(4, device=where)
    y = F.conv2d(x, w, b, padding=1)
    dy = torch.randn_like(y)

    def timed(op):
        def run():
            synchronize()
            start = time.perf_counter()
            for _ in range(per_batch):
                op()
            synchronize()
            return (time.perf_counter() - start) / per_batch
        run()
        return median_time(run, repeats)

    def conv_backward():
        torch.ops.aten.convolution_backward(dy, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                            [True, True, True])

    with torch.no_grad():
        return {
            "relu": timed(lambda: F.relu(x)),
            "convolution": timed(lambda: F.conv2d(x, w, b, padding=1)),
            "convolution gradient": timed(conv_backward),
        }


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


def graph_encode_time(model, images, labels, repeats=200):
    """Median seconds of one NNGraph encode_batch call of a whole training
    step (the command buffers are committed outside the timing)."""
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
            result["nngraph encode"] = graph_encode_time(graph, images, labels)
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mpsx.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--skip-steps", action="store_true", help="only measure encode overhead")
    args = parser.parse_args(argv)

    device = mpsx.Device(args.device)
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch = None
        torch_version = None
    print(f"mpsx {mpsx.__version__} on {device.name} ({device.backend})"
          + (f"; PyTorch {torch_version}" if torch_version else "; PyTorch not installed"))
    if torch is not None and device.backend == "cpu":
        print(f"threads: torch {torch.get_num_threads()}")

    repeats, per_batch = (7, 300) if args.quick else (21, 1000)
    ours = encode_overhead(device, repeats, per_batch)
    theirs = torch_overhead(device, repeats, per_batch // 10) if torch else {}
    print("\nencode overhead per call, 1x4x4x4 (median; mpsx: encode, and encode plus commit, which launches on"
          " cuda; PyTorch: eager call)")
    print(f"  {'kernel':22} {'encode us':>10} {'+commit us':>11} {'torch us':>9} {'torch/mpsx':>11}")
    for name, (encode, launch) in ours.items():
        line = f"  {name:22} {encode * 1e6:10.3f} {launch * 1e6:11.3f}"
        if name in theirs:
            line += f" {theirs[name] * 1e6:9.2f} {theirs[name] / launch:10.1f}x"
        print(line)

    if args.skip_steps:
        return
    steps = 3 if args.quick else 7 if device.backend == "cpu" else 50
    print("\nreference CNN training step (forward, loss, backward, SGD momentum update), median ms")
    print("  mpsx: hand-encoded each step / one recorded command buffer replayed; nngraph: the same model as an"
          " NNGraph (training_graph), float32 images, encoded each step / replayed; torch: eager / CUDA graph replay")
    graphs = device.backend == "cuda" and torch is not None
    header = f"  {'math':>7} {'batch':>5} {'mpsx':>8} {'replay':>8} {'nngraph':>8} {'replay':>8} {'graph/hand':>10}"
    if torch is not None:
        header += f" {'torch':>8} {'torch/mpsx':>11}"
    if graphs:
        header += f" {'graph':>8} {'graph/replay':>13}"
    print(header)
    # TF32 only where there are tensor cores for it (PyTorch's default for cuDNN there).
    results = []
    for tensor_float32 in (False, True) if device.backend == "cuda" else (False,):
        for batch_size in (32, 256):
            r = training_steps(device, batch_size, steps, torch is not None, tensor_float32)
            math = "tf32" if tensor_float32 else "float32"
            results.append((math, batch_size, r))
            line = f"  {math:>7} {batch_size:5d} {r['mpsx'] * 1e3:8.3f}" \
                   f" {r['mpsx replay'] * 1e3:8.3f} {r['nngraph'] * 1e3:8.3f} {r['nngraph replay'] * 1e3:8.3f}" \
                   f" {r['nngraph replay'] / r['mpsx replay']:9.2f}x"
            if "torch" in r:
                line += f" {r['torch'] * 1e3:8.3f} {r['torch'] / r['mpsx']:10.2f}x"
            if "torch graph" in r:
                line += f" {r['torch graph'] * 1e3:8.3f} {r['torch graph'] / r['mpsx replay']:12.2f}x"
            print(line)
    print("\nNNGraph step: float16 images (the graph's format, MPS's default) encoded each step / replayed, median"
          " ms; peak device memory a step adds, MiB (hand-encoded, graph float32, graph float16); one encode_batch"
          " call of the whole step, us")
    print(f"  {'math':>7} {'batch':>5} {'f16':>8} {'replay':>8} {'hand MiB':>9} {'graph MiB':>10} {'f16 MiB':>8}"
          f" {'encode us':>10}")
    call = graph_call_time(device)
    for math, batch_size, r in results:
        print(f"  {math:>7} {batch_size:5d} {r['nngraph float16'] * 1e3:8.3f} {r['nngraph float16 replay'] * 1e3:8.3f}"
              f" {r['mpsx memory'] / 2**20:9.2f} {r['nngraph memory'] / 2**20:10.2f}"
              f" {r['nngraph float16 memory'] / 2**20:8.2f} {r['nngraph encode'] * 1e6:10.1f}")
    print(f"  a call from Python into a graph's encode (a one-neuron graph, 1x4x4x4): {call * 1e6:.2f} us")


if __name__ == "__main__":
    main()
