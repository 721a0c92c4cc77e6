"""MPSTemporaryVector as MPSMatrix.h states it: a vector for one command buffer's kernels, read as many times as its
readCount allows (1 at first; each encode that reads it lowers it; writing leaves it), in GPU private memory that
the host never reads or writes; refusals raise before anything is enqueued."""

import numpy as np
import pytest

import mpsx

N = 7


def sgd(device, learning_rate, momentum=0.0):
    return mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=learning_rate, momentum_scale=momentum)


def temporary(cb, read_count=1):
    t = mpsx.TemporaryVector(cb, mpsx.VectorDescriptor(N))
    t.read_count = read_count
    return t


def values(device, array):
    return mpsx.Vector.from_numpy(device, np.asarray(array, np.float32))


def run(cb, vector):
    vector.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return vector.to_numpy()


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(N).astype(np.float32) for _ in range(4)]


def test_a_temporary_vector_carries_one_update_to_the_next(device, data):
    v, g1, g2, _ = data
    cb = device.command_queue.command_buffer()
    t = mpsx.TemporaryVector.temporary_vector_with_command_buffer(cb, mpsx.VectorDescriptor(N))
    assert t.read_count == 1 and t.length == N and t.data_type == mpsx.DataType.FLOAT32
    sgd(device, 0.5).encode(cb, values(device, g1), values(device, v), None, t)
    assert t.read_count == 1  # a write leaves the count
    out = mpsx.Vector(device, N)
    sgd(device, 0.25).encode(cb, values(device, g2), t, None, out)
    assert t.read_count == 0
    np.testing.assert_allclose(run(cb, out), (v - 0.5 * g1) - 0.25 * g2, rtol=1e-6, atol=1e-6)


def test_the_read_count_allows_that_many_reads_and_then_refuses(device, data):
    v, g1, g2, g3 = data
    cb = device.command_queue.command_buffer()
    t = temporary(cb, read_count=2)
    sgd(device, 1.0).encode(cb, values(device, g1), values(device, v), None, t)
    first, second = mpsx.Vector(device, N), mpsx.Vector(device, N)
    sgd(device, 1.0).encode(cb, values(device, g2), t, None, first)  # t as the values
    assert t.read_count == 1
    sgd(device, 1.0).encode(cb, t, values(device, g3), None, second)  # t as the gradient
    assert t.read_count == 0
    count = cb.command_count
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        sgd(device, 1.0).encode(cb, t, values(device, g3), None, mpsx.Vector(device, N))
    with pytest.raises(mpsx.StateError, match="read_count of 0"):  # writing at 0 too
        sgd(device, 1.0).encode(cb, values(device, g3), values(device, v), None, t)
    assert cb.command_count == count  # refused before anything was enqueued
    first.synchronize(cb)
    np.testing.assert_allclose(run(cb, second), g3 - (v - g1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(first.to_numpy(), (v - g1) - g2, rtol=1e-6, atol=1e-6)


def test_an_update_in_place_reads_it_once(device, data):
    v, g1, g2, _ = data
    cb = device.command_queue.command_buffer()
    t = temporary(cb, read_count=2)
    sgd(device, 1.0).encode(cb, values(device, g1), values(device, v), None, t)
    sgd(device, 0.5).encode(cb, values(device, g2), t, None, t)  # values and result: one read
    assert t.read_count == 1
    out = mpsx.Vector(device, N)
    sgd(device, 0.0).encode(cb, values(device, g2), t, None, out)  # a copy (lr 0)
    np.testing.assert_allclose(run(cb, out), v - g1 - 0.5 * g2, rtol=1e-6, atol=1e-6)


def test_a_temporary_momentum_vector_counts_its_read(device, data):
    # MPS SGD: m = mu m + lr g; v = v - m. The momentum is read and written.
    v, g, m0, _ = data
    cb = device.command_queue.command_buffer()
    m = temporary(cb, read_count=1)
    sgd(device, 1.0).encode(cb, values(device, np.zeros(N)), values(device, m0), None, m)  # m = m0
    result = mpsx.Vector(device, N)
    sgd(device, 0.1, momentum=0.9).encode(cb, values(device, g), values(device, v), m, result)
    assert m.read_count == 0
    np.testing.assert_allclose(run(cb, result), v - (0.9 * m0 + 0.1 * g), rtol=1e-5, atol=1e-6)


def test_only_its_command_buffer_may_use_it(device, data):
    v, g, _, _ = data
    cb, other = device.command_queue.command_buffer(), device.command_queue.command_buffer()
    t = temporary(cb)
    count = other.command_count
    with pytest.raises(mpsx.StateError, match="another command buffer"):
        sgd(device, 1.0).encode(other, values(device, g), values(device, v), None, t)
    assert other.command_count == count and t.read_count == 1
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(mpsx.StateError):
        mpsx.TemporaryVector(cb, mpsx.VectorDescriptor(N))  # a committed command buffer makes none


def test_commit_and_continue_keeps_it_usable(device, data):
    v, g, _, _ = data
    cb = device.command_queue.command_buffer()
    t = temporary(cb)
    sgd(device, 1.0).encode(cb, values(device, g), values(device, v), None, t)
    cb.commit_and_continue()
    out = mpsx.Vector(device, N)
    sgd(device, 0.0).encode(cb, values(device, g), t, None, out)
    np.testing.assert_allclose(run(cb, out), v - g, rtol=1e-6, atol=1e-6)


def test_the_host_never_reads_or_writes_it(device):
    cb = device.command_queue.command_buffer()
    t = temporary(cb)
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryVector"):
        t.to_numpy()
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryVector"):
        t.write(np.zeros(N, np.float32))
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryVector"):
        t.buffer
    with pytest.raises(TypeError, match="never written by the host"):
        mpsx.TemporaryVector.from_numpy(device, np.zeros(N, np.float32))
    assert t.resource_size() == N * 4


def test_read_count_rules(device):
    cb = device.command_queue.command_buffer()
    t = temporary(cb)
    with pytest.raises(ValueError, match="0 or more"):
        t.read_count = -1
    assert t.read_count == 1
    t.read_count = 0  # returns the storage
    with pytest.raises(mpsx.StateError, match="reached 0"):
        t.read_count = 1


def test_bad_arguments(device):
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="one vector"):
        mpsx.TemporaryVector(cb, mpsx.VectorDescriptor(N, vectors=2))
    with pytest.raises(TypeError):
        mpsx.TemporaryVector(None, mpsx.VectorDescriptor(N))
    with pytest.raises(TypeError):
        mpsx.TemporaryVector(cb, N)
    with pytest.raises(TypeError):
        mpsx.TemporaryVector.prefetch_storage_with_command_buffer(cb, [mpsx.VectorDescriptor(N), N])
    mpsx.TemporaryVector.prefetch_storage_with_command_buffer(cb, [mpsx.VectorDescriptor(N)])
    bare = mpsx.TemporaryVector.__new__(mpsx.TemporaryVector)
    with pytest.raises(TypeError, match="without __init__"):
        bare.read_count
