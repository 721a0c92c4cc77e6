"""Signals and processes: Ctrl-C ends every blocking wait within 0.1 s while the work goes on, the exit waits a
bounded time for work in flight, and a child of fork() refuses its parent's device objects."""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest

import mpsx
from helpers import run_isolated
from test_convolution import reference_forward

# The slice a wait sleeps between signal checks is 10 ms; the GIL switch interval is 5 ms.
LATENCY = 0.1
SLEEP = 2.0  # how long the work waited for takes: far longer than any test waits for the signal


@contextlib.contextmanager
def sigint_after(delay):
    """SIGINT to the process `delay` seconds from now, as Ctrl-C sends it (any thread may take it; Python runs
    its handler, the default one raising KeyboardInterrupt, on the main thread); yields the list the send time
    goes into."""
    sent = []

    def fire():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        yield sent
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)


def interrupted_within(wait):
    """Runs `wait` under a SIGINT sent 0.2 s later; asserts it raised KeyboardInterrupt within LATENCY of the
    signal and returns that latency."""
    with sigint_after(0.2) as sent:
        with pytest.raises(KeyboardInterrupt):
            wait()
        latency = time.perf_counter() - sent[0]
    assert latency < LATENCY, f"KeyboardInterrupt {latency * 1e3:.1f} ms after SIGINT"
    return latency


def slow_relu(device, rng, sleep=SLEEP):
    """A command buffer that computes a ReLU and then runs a completed handler for `sleep` seconds (its waits
    wait for the handlers), the source and the result image."""
    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    source = mpsx.Image.from_numpy(device, x)
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    result = relu.encode(cb, source)
    result.synchronize(cb)
    cb.add_completed_handler(lambda c: time.sleep(sleep))
    return cb, x, result


def test_ctrl_c_ends_wait_until_completed_and_a_later_wait_completes(device, rng):
    cb, x, result = slow_relu(device, rng)
    cb.commit()
    started = time.perf_counter()
    interrupted_within(cb.wait_until_completed)
    cb.wait_until_completed()  # the work went on; waiting again works
    assert time.perf_counter() - started >= SLEEP - 0.05
    assert cb.status == "completed"
    np.testing.assert_array_equal(result.to_numpy(), np.maximum(x, 0))


def test_ctrl_c_ends_wait_until_idle(device, rng):
    cb, x, result = slow_relu(device, rng)
    cb.commit()
    interrupted_within(device.command_queue.wait_until_idle)
    device.command_queue.wait_until_idle()
    assert cb.status == "completed"
    np.testing.assert_array_equal(result.to_numpy(), np.maximum(x, 0))


def test_ctrl_c_ends_the_wait_of_a_command_buffer_block(device, rng):
    cb, x, result = slow_relu(device, rng)

    def block():
        with cb:
            pass  # the block's exit commits and waits

    interrupted_within(block)
    assert cb.status in ("committed", "completed")
    cb.wait_until_completed()
    np.testing.assert_array_equal(result.to_numpy(), np.maximum(x, 0))


def long_convolutions(device, rng, seconds):
    """A committed command buffer of convolutions of a large batch, into one destination, whose work goes on about
    `seconds` after its commit on `device` (sized by timing shorter ones): (command buffer, weights, source array,
    destination). On a GPU each convolution is large: an encode there launches its kernel at once, and only what
    the launch queue holds is left to run after the commit."""
    channels, size, images = (32, 64, 16) if device.backend == "cpu" else (64, 128, 64)
    d = mpsx.CNNConvolutionDescriptor(3, 3, channels, channels)
    weights = (rng.standard_normal(d.weights_shape) * 0.1).astype(np.float32)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, weights, None))
    x = rng.standard_normal((images, channels, size, size)).astype(np.float32)
    source = mpsx.Image.from_numpy(device, x)
    destination = mpsx.Image(device, mpsx.ImageDescriptor(width=size, height=size, feature_channels=channels,
                                                          number_of_images=images))

    def commit(count):
        cb = device.command_queue.command_buffer()
        for _ in range(count):
            conv.encode(cb, source, destination)
        destination.synchronize(cb)
        cb.commit()
        return cb

    count, took = 1, 0.0
    while took < 0.2:
        if count >= 4 ** 6:
            pytest.skip(f"{device.name} runs encoded work before its commit: too little is left to wait for")
        count *= 4
        cb = commit(count)
        started = time.perf_counter()
        cb.wait_until_completed()
        took = time.perf_counter() - started
    # On a GPU more than the launch queue holds would only make the encode wait.
    scale = seconds / took if device.backend == "cpu" else min(seconds / took, 16)
    return commit(max(1, int(count * scale))), weights, x, source, destination


def test_ctrl_c_ends_a_wait_on_device_work(device, rng):
    cb, weights, x, _, destination = long_convolutions(device, rng, seconds=2.0)
    interrupted_within(cb.wait_until_completed)
    cb.wait_until_completed()
    assert cb.status == "completed"
    expected = reference_forward(x, weights, None).numpy()
    np.testing.assert_allclose(destination.to_numpy(), expected, rtol=1e-3, atol=1e-3)


def test_ctrl_c_ends_the_wait_of_a_dlpack_export(device, rng):
    # A consumer on the host: the export waits until the command buffer writing the image has run.
    if mpsx.Image.from_numpy(device, np.ones((1, 1, 1, 1), np.float32)).__dlpack_device__()[0] != 1 or \
            device.backend == "metal":
        pytest.skip("images of this device are not exported to the host")
    cb, weights, x, _, destination = long_convolutions(device, rng, seconds=2.0)
    interrupted_within(destination.__dlpack__)
    assert cb.status == "committed"
    tensor = np.from_dlpack(destination)
    assert cb.status == "completed"
    np.testing.assert_allclose(tensor, reference_forward(x, weights, None).numpy(), rtol=1e-3, atol=1e-3)


def test_waits_on_other_threads_are_not_interrupted(device, rng):
    # Python runs signal handlers on the main thread only: a wait elsewhere goes on to the end.
    cb, x, result = slow_relu(device, rng, sleep=1.0)
    cb.commit()
    outcome = []
    waiter = threading.Thread(target=lambda: (cb.wait_until_completed(), outcome.append(cb.status)))
    with sigint_after(0.2):
        waiter.start()
        with pytest.raises(KeyboardInterrupt):
            time.sleep(SLEEP)  # the main thread takes the signal
    waiter.join()
    assert outcome == ["completed"]


def python(code, env=None, timeout=60, **kwargs):
    """Runs `code` in a new Python process, outside the checkout; returns the Popen."""
    full_env = dict(os.environ, **(env or {}))
    if full_env.get("PYTHONPATH"):
        full_env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in full_env["PYTHONPATH"].split(os.pathsep))
    directory = tempfile.mkdtemp()
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=directory, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


EXIT_WITH_WORK = """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever disposition the test process passed on
    import numpy as np
    import mpsx
    import atexit
    atexit.register(print, "at exit", flush=True)  # runs just before mpsx's wait at exit (registered after it)
    device = mpsx.Device({name!r})
    x = mpsx.Image.from_numpy(device, np.ones((1, 4, 2, 2), np.float32))
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    relu.encode(cb, x)
    def handler(c):
        {handler}
    cb.add_completed_handler(handler)
    cb.commit()
    print("exiting", flush=True)
    sys.exit({status})
"""


def exit_with_work(device, handler, status=0, env=None, interrupt_after=None):
    """A process that commits a command buffer whose completed handler runs `handler` and exits with `status`:
    (seconds from its "exiting" line to its end, return code, stderr). With `interrupt_after`, SIGINT comes that
    long after the exit reached mpsx's wait, and the seconds count from the SIGINT."""
    process = python(EXIT_WITH_WORK.format(name=device.name, handler=handler, status=status), env=env)
    try:
        assert process.stdout.readline() == "exiting\n", process.stderr.read()
        exiting = time.perf_counter()
        if interrupt_after is not None:
            # A SIGINT before the exit's wait would interrupt the program itself, a busy machine being slow to exit.
            assert process.stdout.readline() == "at exit\n", process.stderr.read()
            time.sleep(interrupt_after)
            process.send_signal(signal.SIGINT)
            exiting = time.perf_counter()
        process.wait(timeout=60)
        return time.perf_counter() - exiting, process.returncode, process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_exit_waits_for_work_in_flight(device, tmp_path):
    done = tmp_path / "done"
    took, code, stderr = exit_with_work(device, f"time.sleep(1); open({str(done)!r}, 'w').close()", status=3)
    assert code == 3, stderr
    assert done.exists()
    assert took >= 0.9
    assert "abandoned" not in stderr


def test_exit_abandons_work_still_running_after_the_timeout(device):
    # The handler runs Python code, which the interpreter can not end under it: the process ends at once.
    took, code, stderr = exit_with_work(device, "time.sleep(60)", status=0, env={"MPSX_EXIT_TIMEOUT": "1"})
    assert took < 1 + 3, f"exit took {took:.1f} s"
    assert code == 1
    assert "command buffers still running at exit are abandoned (waited 1 s, MPSX_EXIT_TIMEOUT)" in stderr


def test_ctrl_c_at_exit_abandons_work_in_flight(device):
    took, code, stderr = exit_with_work(device, "time.sleep(60)", interrupt_after=0.5)
    assert took < 3, f"exit took {took:.1f} s after the Ctrl-C; the process printed: {stderr[-2000:]}"
    assert code == 1
    assert "abandoned" in stderr


def test_exit_abandons_device_work_with_the_exit_status(device):
    # Kernels still running, no Python code: the interpreter ends normally and the process with its status.
    code = f"""
        import sys, time
        import numpy as np
        import mpsx
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_signals import long_convolutions
        device = mpsx.Device({device.name!r})
        cb = long_convolutions(device, np.random.default_rng(0), seconds=30)[0]
        print("exiting", flush=True)
        sys.exit(3)
    """
    process = python(code, env={"MPSX_EXIT_TIMEOUT": "0.5"})
    try:
        assert process.stdout.readline() == "exiting\n", process.stderr.read()
        exiting = time.perf_counter()
        process.wait(timeout=60)
        took = time.perf_counter() - exiting
        stderr = process.stderr.read()
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 3, stderr
    assert took < 0.5 + 3, f"exit took {took:.1f} s"
    assert "abandoned (waited 0.5 s" in stderr


def test_a_bad_exit_timeout_is_reported(device):
    took, code, stderr = exit_with_work(device, "pass", env={"MPSX_EXIT_TIMEOUT": "soon"})
    assert code == 0
    assert "MPSX_EXIT_TIMEOUT must be a number of seconds, given 'soon'; waiting 10 s" in stderr


FORK = """
    import os, sys, time
    import numpy as np
    x = np.array([-1, 2, -3, 4], np.float32).reshape(1, 4, 1, 1)
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    image = mpsx.Image.from_numpy(device, x)
    vector = mpsx.Vector(device, 4)
    queue = device.command_queue
    cb = queue.command_buffer()
    result = relu.encode(cb, image)
    result.synchronize(cb)
    cb.add_completed_handler(lambda c: time.sleep(1))
    cb.commit()  # still running at the fork
    unused = queue.command_buffer()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        lines = []
        uses = {
            "Device.command_queue": lambda: device.command_queue,
            "Device.new_command_queue": lambda: device.new_command_queue(),
            "CommandQueue.command_buffer": lambda: queue.command_buffer(),
            "CommandQueue.wait_until_idle": lambda: queue.wait_until_idle(),
            "CommandBuffer.wait_until_completed": lambda: cb.wait_until_completed(),
            "CommandBuffer.commit": lambda: unused.commit(),
            "encode": lambda: relu.encode(unused, image),
            "Image.to_numpy": lambda: result.to_numpy(),
            "Image.write": lambda: image.write(x[0]),
            "Vector.write": lambda: vector.write(np.ones(4, np.float32)),
            "Buffer.to_numpy": lambda: vector.buffer.to_numpy(),
            "Image.from_numpy": lambda: mpsx.Image.from_numpy(device, x),
            "Image.from_dlpack": lambda: mpsx.Image.from_dlpack(device, x),
            "Image.__dlpack__": lambda: result.__dlpack__(),
            "CNNConvolution": lambda: mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(
                mpsx.CNNConvolutionDescriptor(1, 1, 4, 4), np.ones((4, 1, 1, 4), np.float32))),
        }
        for name, use in uses.items():
            started = time.perf_counter()
            try:
                use()
                lines.append(f"{name}: accepted")
            except mpsx.StateError as e:
                assert "was made before fork(), in the parent process" in str(e), str(e)
                assert "make a new mpsx.Device() in the child" in str(e), str(e)
                lines.append(f"{name}: refused in {time.perf_counter() - started:.3f} s")
        fresh = mpsx.Device("cpu")
        assert fresh in mpsx.devices() and fresh != device
        relu = mpsx.CNNNeuron(fresh, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
        with fresh.command_queue.command_buffer() as c:
            y = relu.encode(c, mpsx.Image.from_numpy(fresh, x))
            y.synchronize(c)
        lines.append("fresh: " + " ".join(str(v) for v in y.to_numpy().ravel()))
        os.write(write, "\\n".join(lines).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        print(f.read())
    _, status = os.waitpid(pid, 0)
    print("child status", status)
    cb.wait_until_completed()
    print(f"parent {cb.status}: " + " ".join(str(v) for v in result.to_numpy().ravel()))
"""


def test_a_child_of_fork_refuses_its_parents_device_objects_and_makes_its_own(device):
    out = run_isolated(device, FORK, timeout=60).splitlines()
    lines = dict(line.split(": ", 1) for line in out if ": " in line)
    refused = [name for name, outcome in lines.items() if outcome.startswith("refused in")]
    assert len(refused) == 15, out
    assert all(float(lines[name].split()[-2]) < 1.0 for name in refused), out
    assert [float(v) for v in lines["fresh"].split()] == [0, 2, 0, 4], out
    assert "child status 0" in out
    assert [float(v) for v in lines["parent completed"].split()] == [0, 2, 0, 4], out


def test_a_fork_waits_for_the_command_buffer_a_cpu_queue_runs(device):
    # The child's copy of the parent's memory holds the whole result: the queue's thread was not halfway
    # through the command buffer, or through an allocation, at the fork.
    if device.backend != "cpu":
        pytest.skip("the child reads the parent's image through a host view, which cpu memory has")
    code = """
        import os, time
        import numpy as np
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, 64, 96, 96)).astype(np.float32)
        w = (rng.standard_normal((64, 3, 3, 64)) * 0.04).astype(np.float32)
        conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 64, 64), w))
        a, b = mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, x)
        view = np.from_dlpack(b)

        def run(fork):
            a.write(x[0])
            cb = device.command_queue.command_buffer()
            for _ in range(40):
                conv.encode(cb, a, b)
                conv.encode(cb, b, a)
            conv.encode(cb, a, b)
            cb.commit()
            if fork:
                time.sleep(0.2)  # the queue's thread has taken the command buffer, which runs for longer (0.5 s)
            pid = os.fork() if fork else None
            if pid == 0:
                os._exit(0 if np.array_equal(view, expected) else 3)
            cb.wait_until_completed()
            return pid

        run(False)
        expected = view.copy()
        b.write(np.zeros_like(x[0]))
        _, status = os.waitpid(run(True), 0)
        print("child exit", os.waitstatus_to_exitcode(status), "parent", np.array_equal(view, expected))
    """
    assert "child exit 0 parent True" in run_isolated(device, code, timeout=120)


def test_forks_right_after_queues_are_made(device):
    # Each queue's thread starts beside the fork: the queue is made only once its thread has started, so the
    # child gets no allocator or lock of the thread's start half-taken.
    code = """
        import os
        for _ in range(20):
            queue = device.new_command_queue()
            pid = os.fork()
            if pid == 0:
                fresh = mpsx.Device("cpu")
                with fresh.new_command_queue().command_buffer():
                    pass
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
        print("forked 20 times")
    """
    assert "forked 20 times" in run_isolated(device, code, timeout=120)


def test_a_child_of_fork_exits_cleanly_with_its_parents_objects_alive(device):
    # The parent's queues, command buffers and images are released in the child at its exit: no join of a
    # thread that is not there, no wait for work that is not there.
    code = """
        import os, time
        import numpy as np
        x = mpsx.Image.from_numpy(device, np.ones((1, 4, 2, 2), np.float32))
        relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
        queue = device.new_command_queue()
        cb = queue.command_buffer()
        relu.encode(cb, x)
        cb.add_completed_handler(lambda c: time.sleep(1))
        cb.commit()
        pid = os.fork()
        if pid == 0:
            del queue, cb, x, relu
            raise SystemExit(7)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
    """
    assert "child exit 7" in run_isolated(device, code, timeout=60)
