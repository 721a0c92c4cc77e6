"""MPSCommandBuffer on CommandBuffer: commit_and_continue keeps the work in order and temporary objects usable,
root_command_buffer and command_buffer, the factories, Predicate and the predicate property, bad input."""

import threading

import numpy as np
import pytest

import mpsx
from helpers import assert_uninitialized_raise


def relu(device):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))


def linear(device, a, b):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a, b))


def test_work_on_both_sides_runs_in_order(device, rng):
    """y = 2x + 1 before the call, z = relu(y) - 3 after it, reading y: the continued command buffer runs after
    the committed one, and the completed handlers fire in that order."""
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    order, lock = [], threading.Lock()

    def note(name):
        def handler(command_buffer):
            with lock:
                order.append((name, command_buffer.status))
        return handler

    y = linear(device, 2, 1).encode(cb, mpsx.Image.from_numpy(device, x))
    cb.add_completed_handler(note("first"))
    first = cb.root_command_buffer
    cb.commit_and_continue()
    assert first.status in ("committed", "completed")
    assert cb.status == "not_enqueued" and cb.root_command_buffer.status == "not_enqueued"
    z = linear(device, 1, -3).encode(cb, relu(device).encode(cb, y))
    z.synchronize(cb)
    cb.add_completed_handler(note("second"))
    with pytest.raises(mpsx.StateError, match="not committed"):
        cb.wait_until_completed()  # the new one, not committed yet: refused, not a deadlock
    cb.commit()
    cb.wait_until_completed()
    first.wait_until_completed()
    assert cb.status == first.status == "completed"
    np.testing.assert_allclose(z.to_numpy(), np.maximum(2 * x + 1, 0) - 3, rtol=1e-6, atol=1e-6)
    assert [name for name, _ in order] == ["first", "second"]


def test_temporary_images_stay_usable_on_the_continued_command_buffer(device, rng):
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    t = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 3, 3, 4, 1))
    linear(device, 3, 0).encode(cb, mpsx.Image.from_numpy(device, x), t)
    cb.commit_and_continue()
    cb.commit_and_continue()  # twice: still the same heap
    out = relu(device).encode(cb, t)
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(out.to_numpy(), np.maximum(3 * x, 0), rtol=1e-6)
    assert t.read_count == 0
    # Another command buffer is still another heap.
    other = device.command_queue.command_buffer()
    t2 = mpsx.TemporaryImage(other, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 3, 3, 4, 1))
    cb2 = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="another command buffer"):
        relu(device).encode(cb2, t2)


def test_a_wrapper_continues_apart_from_the_command_buffer_it_was_made_from(device, rng):
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    plain = device.command_queue.command_buffer()
    wrapper = mpsx.CommandBuffer.command_buffer_with_command_buffer(plain)
    assert isinstance(wrapper, mpsx.CommandBuffer) and wrapper is not plain
    y = linear(device, 1, 1).encode(wrapper, mpsx.Image.from_numpy(device, x))
    assert plain.command_count == wrapper.command_count == 1  # one command buffer so far
    wrapper.commit_and_continue()
    assert plain.status in ("committed", "completed")  # "the users original commandBuffer may have been committed"
    with pytest.raises(mpsx.StateError):
        relu(device).encode(plain, y)
    assert wrapper.command_buffer.command_count == 1 and wrapper.root_command_buffer.command_count == 0
    z = relu(device).encode(wrapper, y)
    z.synchronize(wrapper)
    wrapper.commit()
    wrapper.wait_until_completed()
    np.testing.assert_allclose(z.to_numpy(), np.maximum(x + 1, 0), rtol=1e-6)
    made = mpsx.CommandBuffer(device.command_queue.command_buffer())
    assert made.status == "not_enqueued"
    from_queue = mpsx.CommandBuffer.command_buffer_from_command_queue(device.command_queue)
    assert isinstance(from_queue, mpsx.CommandBuffer) and from_queue.device.name == device.name


def test_a_replayable_command_buffer_continues_replayable(device):
    cb = device.command_queue.command_buffer(replayable=True)
    cb.commit_and_continue()
    assert cb.replayable
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(mpsx.StateError):
        cb.commit_and_continue()  # committed already: nothing to continue


def test_predicates(device, rng):
    p = mpsx.Predicate(device=device)
    assert p.predicate_offset == 0 and p.predicate_buffer.length == 4
    vector = mpsx.Vector(device, 4)
    q = mpsx.Predicate.predicate_with_buffer(vector.buffer, 8)
    assert q.predicate_offset == 8 and q.predicate_buffer.length == 16
    for args, kwargs, error in [((vector.buffer, 2), {}, ValueError), ((vector.buffer, 16), {}, ValueError),
                                ((vector.buffer, -4), {}, ValueError), ((), {}, TypeError),
                                ((vector.buffer,), {"device": device}, TypeError),
                                ((), {"device": device, "offset": 4}, ValueError), (("buffer",), {}, TypeError)]:
        with pytest.raises(error):
            mpsx.Predicate(*args, **kwargs)
    cb = device.command_queue.command_buffer()
    assert cb.predicate is None
    cb.predicate = p
    assert cb.predicate is p
    with pytest.raises(TypeError, match="Predicate or None"):
        cb.predicate = 1
    # No encode of the CNN API takes MPSKernelEncodeOptions, which predicates apply to: the kernel runs although
    # the predicate's value is 0.
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    y = relu(device).encode(cb, mpsx.Image.from_numpy(device, x))
    y.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))
    cb.predicate = None
    cb2 = device.command_queue.command_buffer()
    cb2.prefetch_heap_for_workload_size(1 << 20)
    with pytest.raises(ValueError, match="0 or more"):
        cb2.prefetch_heap_for_workload_size(-1)
    with pytest.raises(TypeError):
        cb2.prefetch_heap_for_workload_size("1 MB")


def test_uninitialized_and_bad_arguments():
    cb = assert_uninitialized_raise(mpsx.CommandBuffer, ["root_command_buffer", "command_buffer", "predicate"])
    with pytest.raises(TypeError):
        cb.commit_and_continue()
    assert_uninitialized_raise(mpsx.Predicate, ["predicate_buffer", "predicate_offset"])
    with pytest.raises(TypeError):
        mpsx.CommandBuffer(None)
    with pytest.raises(TypeError):
        mpsx.CommandBuffer.command_buffer_from_command_queue("queue")
