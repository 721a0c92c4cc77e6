"""mpsx.distributed: all-reduce as commands of a command buffer (NCCL on cuda, MPI on cpu), bucketed and
replayable; data-parallel training, hand-encoded and as an NNGraph, equal to one process on the whole
batch; a rank that dies or hangs ends the run with a clear error. Runs with a group of one on every
device, and with two MPI processes on cpu (tests/distributed_worker.py); the two-GPU runs are in
tools/multi_gpu_check.sh."""

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import mpsx
from mpsx._runtime import _new_group_id
from mpsx.distributed import Communicator, _exchange, _nccl_library
from helpers import run, run_isolated

HERE = os.path.dirname(os.path.abspath(__file__))


def group_of_one(device, **keywords):
    """A Communicator of a group of one on device: NCCL's on cuda, the cpu backend's on cpu."""
    library = _nccl_library() if device.backend == "cuda" else ""
    if device.backend == "metal":
        pytest.skip("MPS has no collectives: metal runs no data-parallel group")
    return Communicator(device, 0, 1, _new_group_id(device, library), library, **keywords)


def vectors(device, *lengths):
    out = []
    for i, n in enumerate(lengths):
        v = mpsx.Vector(device, n)
        v.write(np.arange(n, dtype=np.float32) + i)
        out.append(v)
    return out


def read(device, items):
    cb = device.command_queue.command_buffer()
    for v in items:
        v.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    return [v.to_numpy().copy() for v in items]


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_group_of_one_keeps_the_values(device, op):
    communicator = group_of_one(device)
    assert (communicator.rank, communicator.world_size, communicator.device) == (0, 1, device)
    items = vectors(device, 3, 1000, 0, 5)
    expected = read(device, items)
    run(device, lambda cb: communicator.encode_all_reduce(cb, items, op))
    for got, e in zip(read(device, items), expected):
        np.testing.assert_array_equal(got, e)


@pytest.mark.parametrize("bucket_bytes, calls", [(16, 4), (32, 2), (1 << 20, 1), (4, 4)])
def test_small_buffers_share_buckets(device, bucket_bytes, calls):
    """Four vectors of 3 values (12 bytes) and an empty one: packed in order into buckets of bucket_bytes, one
    collective call each; a vector larger than a bucket goes alone, where it is."""
    communicator = group_of_one(device, bucket_bytes=bucket_bytes)
    items = vectors(device, 3, 3, 0, 3, 3)
    expected = read(device, items)
    run(device, lambda cb: communicator.encode_all_reduce(cb, items, "sum"))
    assert communicator.collective_calls == calls
    for got, e in zip(read(device, items), expected):
        np.testing.assert_array_equal(got, e)


def test_an_all_reduce_replays(device):
    communicator = group_of_one(device, bucket_bytes=32)
    items = vectors(device, 3, 3, 3)
    cb = device.command_queue.command_buffer(replayable=True)
    communicator.encode_all_reduce(cb, items, "mean")
    cb.commit()
    cb.wait_until_completed()
    for _ in range(3):
        cb.replay()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
    assert communicator.collective_calls == 2  # encoded once, replayed without encoding


def test_bad_input(device):
    communicator = group_of_one(device)
    cb = device.command_queue.command_buffer()
    (v,) = vectors(device, 4)
    with pytest.raises(ValueError, match="'sum' or 'mean'"):
        communicator.encode_all_reduce(cb, [v], "max")
    with pytest.raises(TypeError, match="Buffers, Vectors or gradient states, given int"):
        communicator.encode_all_reduce(cb, [v, 3], "sum")
    with pytest.raises(TypeError, match="float32 vectors"):
        communicator.encode_all_reduce(cb, [mpsx.Vector(device, 4, mpsx.DataType.FLOAT16)], "sum")
    with pytest.raises(TypeError, match="no trainable gradients"):
        communicator.encode_all_reduce(cb, [mpsx.CNNNormalizationGammaAndBetaState(device, np.ones(2, np.float32),
                                                                                  np.ones(2, np.float32))], "sum")
    assert cb.command_count == 0
    for other in mpsx.devices():
        if other != device:
            with pytest.raises(mpsx.DeviceMismatchError, match="the group's device is"):
                communicator.encode_all_reduce(cb, vectors(other, 2), "sum")
            with pytest.raises(mpsx.DeviceMismatchError, match="the group's device is"):
                communicator.encode_all_reduce(other.command_queue.command_buffer(), [v], "sum")
    cb.commit()
    with pytest.raises(mpsx.StateError):
        communicator.encode_all_reduce(cb, [v], "sum")
    library = _nccl_library() if device.backend == "cuda" else ""
    for rank, world in ((1, 1), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="rank|world size"):
            Communicator(device, rank, world, _new_group_id(device, library), library)
    with pytest.raises(ValueError, match="bucket_bytes"):
        Communicator(device, 0, 1, _new_group_id(device, library), library, bucket_bytes=0)
    with pytest.raises(ValueError, match="timeout"):
        Communicator(device, 0, 1, _new_group_id(device, library), library, timeout=0)
    with pytest.raises(TypeError, match="library"):
        Communicator(device, 0, 1, _new_group_id(device, library), None)
    with pytest.raises(TypeError, match="group_id"):
        Communicator(device, 0, 1, None, library)
    with pytest.raises(ValueError, match="backend"):
        mpsx.distributed.init(backend="gloo")
    for before_init in (mpsx.distributed.group, mpsx.distributed.rank, mpsx.distributed.world_size):
        with pytest.raises(mpsx.DistributedError, match="init"):
            before_init()
    graph = mpsx.NNGraph(device, mpsx.CNNNeuronNode(mpsx.NNImageNode(),
                                                    mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).result_image)
    with pytest.raises(TypeError, match="data_parallel"):
        graph.data_parallel = 3
    assert graph.data_parallel is None
    graph.data_parallel = communicator
    assert graph.data_parallel.rank == 0


def test_a_cpu_group_of_more_than_one_needs_mpi():
    with pytest.raises(ValueError, match="MPI all-reduce"):
        Communicator(mpsx.Device("cpu"), 0, 2)


def test_a_layout_is_checked_once():
    """Before the first all-reduce of a layout, one exchange over the group checks that every rank reduces the same
    (here rank 1 is a stand-in that does: it sums the same values and fills its place of the exchange as rank 0
    fills its own). All-reduces of a layout checked already, replays, and a command buffer encoded before the check
    of its layout ran exchange nothing more. cpu: the stand-in is the host all-reduce MPI would run."""
    device = mpsx.Device("cpu")
    buckets = {8, 12, 7}  # the layouts' one bucket each, in float32 values; any other call is the exchange
    exchanges = []

    def rank_1_alike(values, op):
        assert op == "sum"
        if values.size in buckets:
            values *= 2
        else:
            exchanges.append(values.size)
            values[values.size // 2:] = values[:values.size // 2]

    communicator = Communicator(device, 0, 2, host_all_reduce=rank_1_alike)
    a, b, c = vectors(device, 3, 5), vectors(device, 4, 4, 4), vectors(device, 7)
    expected = {id(v): e for items in (a, b, c) for v, e in zip(items, read(device, items))}
    for items in (a, a, b, a, b):
        run(device, lambda cb: communicator.encode_all_reduce(cb, items, "sum"))
    assert communicator.layout_checks == len(exchanges) == 2
    cb = device.command_queue.command_buffer(replayable=True)
    communicator.encode_all_reduce(cb, a, "sum")
    cb.commit()
    cb.wait_until_completed()
    cb.replay()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    first, second = device.command_queue.command_buffer(), device.command_queue.command_buffer()
    communicator.encode_all_reduce(first, c, "sum")
    communicator.encode_all_reduce(second, c, "sum")
    for cb in (first, second):
        cb.commit()
    second.wait_until_completed()
    assert (first.status, second.status) == ("completed", "completed"), (first.error, second.error)
    assert communicator.layout_checks == len(exchanges) == 3
    assert communicator.collective_calls == 8
    for items, times in ((a, 5), (b, 2), (c, 2)):
        for v, got in zip(items, read(device, items)):
            np.testing.assert_array_equal(got, expected[id(v)] * 2 ** times)


def test_another_collective_in_place_of_the_check_fails():
    """A rank whose all-reduce of a checked layout meets another rank's check of a new one (it changed what it
    reduces alone): the checking rank finds no layout in the exchange and fails with a DistributedError."""
    device = mpsx.Device("cpu")

    def gradients_of_rank_1(values, op):
        values += np.linspace(0.1, 0.9, values.size, dtype=np.float32)

    communicator = Communicator(device, 0, 2, host_all_reduce=gradients_of_rank_1)
    items = vectors(device, 3)
    cb = device.command_queue.command_buffer()
    communicator.encode_all_reduce(cb, items, "mean")
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "error"
    assert isinstance(cb.error, mpsx.DistributedError)
    assert re.search("rank 0 of 2: .*another rank ran a collective of its own", str(cb.error)), cb.error
    assert communicator.layout_checks == 1


def test_rank_0_waits_no_longer_than_the_timeout():
    """NCCL's rendezvous (torchrun's MASTER_ADDR and MASTER_PORT): a rank that cannot reach rank 0, and a
    rank 0 that no other rank reaches, give up after the timeout with a DistributedError."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(mpsx.DistributedError, match="could not reach rank 0"):
        _exchange(b"", 1, 2, "127.0.0.1", port, 1.0)
    with pytest.raises(mpsx.DistributedError, match="did they start"):
        _exchange(b"id", 0, 2, "127.0.0.1", port, 1.0)
    assert time.monotonic() - start < 10


def test_an_exit_after_a_join_given_up_on_ends_with_its_status(device):
    """A rank that gives up joining its NCCL group (the timeout) leaves NCCL's join running on a thread of its
    own. The exit that follows ends the process with its status, not in NCCL's teardown under that thread
    (SIGSEGV at exit in about 1 of 12 fuzz children on an H200)."""
    if device.backend != "cuda":
        pytest.skip("only NCCL joins a group on a thread of its own (cuda)")
    code = """
    from mpsx._runtime import _new_group_id
    from mpsx.distributed import Communicator, _nccl_library
    library = _nccl_library()
    try:
        Communicator(device, 0, 1, _new_group_id(device, library), library, timeout=1e-6)
    except mpsx.DistributedError as error:
        print(error)
    """
    for _ in range(5):
        assert "could not join the group within 1e-06 s" in run_isolated(device, code)


@pytest.mark.parametrize("model, bucket_bytes, calls", [("hand", 25 << 20, 2), ("graph", 25 << 20, 2),
                                                         ("graph", 4096, 24)])
def test_a_group_of_one_trains_as_no_group(device, model, bucket_bytes, calls):
    """The reference CNN (with batch normalization) with a group of one: the same weights as without a
    group (the updates wait for the all-reduce; nothing between reads what they change). The graph launches
    each bucket's all-reduce during the backward pass, beside it (cuda: on the queue's overlapped stream),
    and the updates from its gradients after it, while the backward pass goes on."""
    from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, ReferenceCNN, random_batch
    communicator = group_of_one(device, bucket_bytes=bucket_bytes)
    device.deterministic = True
    try:
        runs = []
        for process_group in (None, mpsx.distributed.ProcessGroup(communicator, "test", 0)):
            m = (ReferenceCNN if model == "hand" else GraphReferenceCNN)(device, 4, learning_rate=0.01,
                                                                          process_group=process_group)
            for step in range(2):
                m.train_step(*random_batch(4, seed=step))
            m.wait()
            runs.append(weights_of(m))
    finally:
        device.deterministic = False
    assert communicator.collective_calls == calls
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name], err_msg=name)


def calls_per_step(device, communicator, steps, encode):
    """The collective calls each step made."""
    calls = []
    for _ in range(steps):
        before = communicator.collective_calls
        run(device, encode)
        calls.append(communicator.collective_calls - before)
    return calls


def conv_graph(device, group, channels):
    """conv 3x3 (3 -> channels), conv 3x3 and conv 1x1 (channels -> channels), each with ReLU, fully connected,
    loss, on 4 x 4 images, as a data-parallel NNGraph, with its encode of a fixed batch and its gradients'
    bytes."""
    rng = np.random.default_rng(3)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.01)
    shapes = [(3, 3, 3, channels), (3, 3, channels, channels), (1, 1, channels, channels), (4, 4, channels, 10)]
    sources = [mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(kh, kw, cin, cout),
                                       (rng.standard_normal((cout, kh, kw, cin)) * 0.05).astype(np.float32),
                                       np.zeros(cout, np.float32), optimizer=sgd) for kh, kw, cin, cout in shapes]
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    x = mpsx.NNImageNode(mpsx.NNHandle("images"))
    for source in sources[:3]:
        x = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(x, source).result_image, relu).result_image
    loss = mpsx.CNNLossNode(mpsx.CNNFullyConnectedNode(x, sources[3]).result_image,
                            mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN))
    graph = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=mpsx.DataType.FLOAT32,
                         data_parallel=group)
    images = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((4, 3, 4, 4)).astype(np.float32))
    labels = np.eye(10, dtype=np.float32)[[1, 2, 3, 4]].reshape(4, 10, 1, 1)
    encode = lambda cb: graph.encode_batch(cb, [images], [mpsx.CNNLossLabels(device, labels)])
    return encode, sum(4 * (kh * kw * cin * cout + cout) for kh, kw, cin, cout in shapes)


@pytest.mark.parametrize("channels", [16, 256])
def test_chosen_buckets_are_a_quarter_of_the_gradients_within_256_kib_to_25_mib(device, channels):
    """bucket_bytes None (the default): a hand-encoded all-reduce packs into 25 MiB buckets, a data-parallel
    graph into buckets of a quarter of its gradients' bytes, at least 256 KiB (16 channels: 0.02 MB of
    gradients; 256 channels: 2.8 MB), from its first encode. The same calls as those sizes given."""
    chosen = group_of_one(device)
    assert chosen.bucket_bytes is None and mpsx.distributed.init.__defaults__[-1] is None
    items = vectors(device, 3, 1000, 0, 5)
    assert calls_per_step(device, chosen, 1, lambda cb: chosen.encode_all_reduce(cb, items, "sum")) == [1]
    encode, gradient_bytes = conv_graph(device, chosen, channels)
    calls = calls_per_step(device, chosen, 2, encode)
    assert calls[0] == calls[1] and (calls[0] == 1) == (channels == 16)  # 16: one 256 KiB bucket holds them all
    quarter = max(gradient_bytes // 4 // 4 * 4, 256 << 10)
    assert quarter == (256 << 10 if channels == 16 else gradient_bytes // 16 * 4)
    given = group_of_one(device, bucket_bytes=quarter)
    encode, _ = conv_graph(device, given, channels)
    assert calls == calls_per_step(device, given, 2, encode)
    if channels == 256:  # the sizes make a difference here: 256 KiB buckets take more calls
        other = group_of_one(device, bucket_bytes=256 << 10)
        encode, _ = conv_graph(device, other, channels)
        assert calls_per_step(device, other, 1, encode)[0] > calls[0]


def weights_of(model):
    out = {}
    for name, value in model.state_dict().items():
        if hasattr(value, "weights") and callable(value.weights):
            out[name] = value.weights()
        elif isinstance(value, mpsx.CNNConvolutionWeightsAndBiasesState):
            out[name] = value.weights.to_numpy().copy()
    assert out
    return out


# ---------------------------------------------------------------- two MPI processes on cpu

def mpi_command(n):
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("needs mpi4py and an MPI library (pip install mpi4py mpich)")
    mpiexec = shutil.which("mpiexec")
    if not mpiexec:
        pytest.skip("needs mpiexec (pip install mpich)")
    return [mpiexec, "-n", str(n), sys.executable, os.path.join(HERE, "distributed_worker.py")]


def mpi_environment():
    # Open MPI's mpiexec refuses root without these (containers run as root); MPICH ignores them.
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep))
    return env


def launch(command, timeout=120):
    start = time.monotonic()
    done = subprocess.run(command, cwd="/", env=mpi_environment(), capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


@pytest.mark.parametrize("mode, bucket_bytes", [("hand", 25 << 20), ("graph", 25 << 20), ("graph", 256)])
def test_two_mpi_processes_train_as_one_on_the_whole_batch(tmp_path, mode, bucket_bytes):
    """Each of two ranks trains on half the batch and all-reduces the mean of the gradients: after 3 SGD
    momentum steps the weights are those of one process on the whole batch, within float32 rounding (with
    small buckets, the graph's all-reduces during its backward pass)."""
    base = mpi_command(1)
    one, _ = launch(base + [mode, str(tmp_path / "one.npz"), "--backend", "mpi"])
    assert one.returncode == 0, one.stderr
    two, _ = launch(mpi_command(2) + [mode, str(tmp_path / "two.npz"), "--backend", "mpi", "--bucket-bytes",
                                      str(bucket_bytes)])
    assert two.returncode == 0, two.stderr
    # The group checked its bucket layout once, before the first all-reduce, and never again.
    assert "rank 0 of 1 done (layout checks 0)" in one.stdout
    for rank in (0, 1):
        assert f"rank {rank} of 2 done (layout checks 1)" in two.stdout, two.stdout
    expected, got = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    from distributed_worker import parameters
    assert not np.allclose(expected["conv0.weights"], parameters()["conv0"][0])  # it trained
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("how", ["fail", "hang"])
def test_a_rank_that_dies_or_hangs_ends_the_run(tmp_path, how):
    """A rank that raises ends every rank (MPI_Abort) with its message; one that stops taking part makes the
    others' all-reduce give up after the timeout (3 s) with a DistributedError: never a hang."""
    done, seconds = launch(mpi_command(2) + ["graph", str(tmp_path / "out.npz"), "--backend", "mpi", f"--{how}",
                                             "1", "--timeout", "3"], timeout=90)
    assert done.returncode != 0
    assert seconds < 60
    if how == "fail":
        assert "rank 1 fails on purpose" in done.stderr
    else:
        assert "DistributedError" in done.stderr and "did not finish within 3" in done.stderr


@pytest.mark.parametrize("mode, difference, names", [
    ("hand", ["--bucket-bytes", "256,26214400"], ["bucket_bytes 256)", "bucket_bytes 26214400)"]),
    ("graph", ["--bucket-bytes", "256,26214400"], ["bucket_bytes 256)", "bucket_bytes 26214400)"]),
    ("hand", ["--drop", "1"], ["rank 0 reduces 6 buffers", "rank 1 reduces 4 buffers"])])
def test_ranks_that_reduce_different_buckets_all_fail(tmp_path, mode, difference, names):
    """Ranks whose all-reduces differ (other bucket_bytes, or other gradients) would pair collectives of different
    buffers: before the first, every rank fails with a DistributedError naming the difference, within seconds
    (the timeout, 60 s, is not what ends them), and none completes with values unreduced."""
    done, seconds = launch(mpi_command(2) + [mode, str(tmp_path / "out.npz"), "--backend", "mpi", "--timeout", "60",
                                             "--stderr-dir", str(tmp_path)] + difference, timeout=90)
    assert done.returncode != 0
    assert seconds < 30
    assert "done" not in done.stdout
    for rank in (0, 1):
        err = (tmp_path / f"rank{rank}.err").read_text()
        assert f"DistributedError: all_reduce on rank {rank} of 2: the ranks reduce different" in err, err
        for name in names:
            assert name in err, err


def test_a_second_ctrl_c_still_ends_the_job(tmp_path):
    """Ctrl-C (SIGINT) twice on a rank while the other waits in a collective: the first raises KeyboardInterrupt,
    whose exception hook ends the whole job with MPI_Abort half a second later; the second comes in that half second
    and does not stop it (the job ends in seconds, not after the 60 s timeout)."""
    command = mpi_command(2) + ["hand", str(tmp_path / "out.npz"), "--backend", "mpi", "--hang", "1", "--timeout",
                                "60"]
    process = subprocess.Popen(command, cwd="/", env=mpi_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    output = []
    try:
        deadline = time.monotonic() + 60
        while not (match := re.match(r"rank 1 pid (\d+) hangs", output[-1] if output else "")):
            output.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        os.kill(int(match.group(1)), signal.SIGINT)
        time.sleep(0.2)  # into the hook's half second
        os.kill(int(match.group(1)), signal.SIGINT)
        start = time.monotonic()
        process.wait(timeout=10)
        seconds = time.monotonic() - start
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    while not lines.empty():
        output.append(lines.get())
    assert process.returncode != 0
    assert seconds < 5, "".join(output)
    assert "KeyboardInterrupt" in "".join(output)
