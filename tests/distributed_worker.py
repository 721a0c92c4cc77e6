"""One rank of a data-parallel training run, for tests/test_distributed.py (launched by mpiexec, torchrun,
or alone as a group of one): a small CNN without batch normalization (conv 3x3 -> ReLU -> max pool 2 ->
conv 3x3 -> ReLU -> fully connected -> softmax cross entropy, mean over the batch), trained STEPS SGD
momentum steps on this rank's share of a fixed batch, hand-encoded (all_reduce of the gradient states before
the updates) or as an NNGraph with data_parallel. Rank 0 writes the weights to OUT (.npz).

    python distributed_worker.py hand|graph OUT [--backend mpi|nccl] [--steps K] [--batch N] [--fail R]
                                 [--hang R] [--timeout S] [--bucket-bytes B[,B1,...]] [--drop R]

--fail R: rank R raises before its first step; --hang R: rank R sleeps instead of taking part (after printing
its process id); --bucket-bytes B0,B1,...: rank r's bucket_bytes is Br; --drop R: rank R all-reduces the
gradients of all but the last layer (hand). Each rank ends with "rank R of N done (layout checks K)"."""

import argparse
import os
import sys
import time

import numpy as np

import mpsx

C_IN, C, SIZE, CLASSES = 3, 8, 8, 10


def parameters():
    rng = np.random.default_rng(7)
    f = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    return {"conv0": (f(C, 3, 3, C_IN), f(C)), "conv1": (f(C, 3, 3, C), f(C)),
            "fc": (f(CLASSES, SIZE // 2, SIZE // 2, C), f(CLASSES))}


def batch(n):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, n)].reshape(n, CLASSES, 1, 1)
    return x, labels


DESCRIPTORS = {"conv0": (3, 3, C_IN, C), "conv1": (3, 3, C, C), "fc": (SIZE // 2, SIZE // 2, C, CLASSES)}


def weights(device):
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1, momentum_scale=0.9)
    return {name: mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(*DESCRIPTORS[name]), w, b, optimizer=sgd)
            for name, (w, b) in parameters().items()}


def loss_descriptor():
    return mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN,
                                  reduce_across_batch=True)


class Graph:
    def __init__(self, device, group, sources):
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        x = mpsx.NNImageNode(mpsx.NNHandle("images"))
        x = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(x, sources["conv0"]).result_image, relu).result_image
        x = mpsx.CNNPoolingMaxNode(x, 2).result_image
        x = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(x, sources["conv1"]).result_image, relu).result_image
        loss = mpsx.CNNLossNode(mpsx.CNNFullyConnectedNode(x, sources["fc"]).result_image, loss_descriptor())
        loss.input_labels.handle = mpsx.NNHandle("labels")
        self.graph = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=mpsx.DataType.FLOAT32,
                                  data_parallel=group)

    def encode(self, cb, x, labels):
        self.graph.encode_batch(cb, [x], [labels])


class Hand:
    def __init__(self, device, group, sources, drop=False):
        self.group, self.sources, self.drop = group, sources, drop
        self.conv0 = mpsx.CNNConvolution(device, sources["conv0"])
        self.conv1 = mpsx.CNNConvolution(device, sources["conv1"])
        self.fc = mpsx.CNNFullyConnected(device, sources["fc"])
        self.gradients = {"conv0": mpsx.CNNConvolutionGradient(device, sources["conv0"]),
                          "conv1": mpsx.CNNConvolutionGradient(device, sources["conv1"]),
                          "fc": mpsx.CNNFullyConnectedGradient(device, sources["fc"])}
        self.relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
        self.relu_gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
        self.pool = mpsx.CNNPoolingMax(device, 2, 2, 2, 2)
        self.pool_gradient = mpsx.CNNPoolingMaxGradient(device, 2, 2, 2, 2)
        self.loss = mpsx.CNNLoss(device, loss_descriptor())

    def encode(self, cb, x, labels):
        h0, s0 = self.conv0.encode_batch(cb, x, destination_states=True)
        r0, rs0 = self.relu.encode_batch(cb, h0, destination_states=True)
        p0, ps0 = self.pool.encode_batch(cb, r0, destination_states=True)
        h1, s1 = self.conv1.encode_batch(cb, p0, destination_states=True)
        r1, rs1 = self.relu.encode_batch(cb, h1, destination_states=True)
        logits, sf = self.fc.encode_batch(cb, r1, destination_states=True)
        g = self.loss.encode_batch(cb, logits, labels)
        g = self.gradients["fc"].encode_batch(cb, g, r1, sf)
        g = self.relu_gradient.encode_batch(cb, g, h1, rs1)
        g = self.gradients["conv1"].encode_batch(cb, g, p0, s1)
        g = self.pool_gradient.encode_batch(cb, g, r0, ps0)
        g = self.relu_gradient.encode_batch(cb, g, h0, rs0)
        self.gradients["conv0"].encode_batch(cb, g, x, s0)
        states = {"conv0": s0[0], "conv1": s1[0], "fc": sf[0]}
        self.group.all_reduce(cb, list(states.values())[:-1] if self.drop else list(states.values()), op="mean")
        for name, kernel in (("conv0", self.conv0), ("conv1", self.conv1), ("fc", self.fc)):
            kernel.encode_weights_and_bias_update(cb, states[name])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["hand", "graph"])
    parser.add_argument("out")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--fail", type=int, default=-1)
    parser.add_argument("--hang", type=int, default=-1)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--bucket-bytes", default=str(25 << 20))
    parser.add_argument("--drop", type=int, default=-1)
    parser.add_argument("--stderr-dir", default=None)
    a = parser.parse_args()
    bucket_bytes = [int(b) for b in a.bucket_bytes.split(",")]
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0))))
    if a.stderr_dir:
        # The ranks share mpiexec's stderr, where their tracebacks interleave: each writes its own file instead.
        os.dup2(os.open(os.path.join(a.stderr_dir, f"rank{rank}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    group = mpsx.distributed.init(backend=a.backend, timeout=a.timeout,
                                  bucket_bytes=bucket_bytes[min(rank, len(bucket_bytes) - 1)])
    assert (mpsx.distributed.rank(), mpsx.distributed.world_size()) == (group.rank, group.world_size)
    device = group.device
    if group.rank == a.fail:
        raise RuntimeError(f"rank {group.rank} fails on purpose")
    if group.rank == a.hang:
        print(f"rank {group.rank} pid {os.getpid()} hangs", flush=True)
        time.sleep(3600)
    sources = weights(device)
    model = Hand(device, group, sources, group.rank == a.drop) if a.mode == "hand" else Graph(device, group, sources)
    x, labels = batch(a.batch)
    share = a.batch // group.world_size
    x, labels = (v[group.rank * share:(group.rank + 1) * share] for v in (x, labels))
    images = mpsx.ImageBatch.from_numpy(device, x)
    for _ in range(a.steps):
        cb = device.command_queue.command_buffer()
        model.encode(cb, images, mpsx.CNNLossLabels(device, labels))
        cb.commit()
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error
    if group.rank == 0:
        np.savez(a.out, **{f"{n}.{k}": v for n, s in sources.items()
                           for k, v in (("weights", s.weights()), ("biases", s.bias_terms()))})
    print(f"rank {group.rank} of {group.world_size} done (layout checks {group.communicator.layout_checks})",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
