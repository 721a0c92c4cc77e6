"""MPSVectorDescriptor and MPSVector's buffer forms: vectors viewing a buffer at an offset, several vectors apart,
their host reads and writes, an optimizer updating a vector at an offset, and bad input."""

import numpy as np
import pytest

import mpsx


def test_descriptors():
    d = mpsx.VectorDescriptor(5)
    assert (d.length, d.data_type, d.vectors, d.vector_bytes) == (5, mpsx.DataType.FLOAT32, 1, 20)
    many = mpsx.VectorDescriptor.vector_descriptor_with_length(3, mpsx.DataType.FLOAT16, vectors=4, vector_bytes=8)
    assert (many.length, many.vectors, many.vector_bytes) == (3, 4, 8)
    assert mpsx.VectorDescriptor.vector_bytes_for_length(3, mpsx.DataType.FLOAT16) == 6
    assert mpsx.VectorDescriptor.vector_descriptor_with_length(5) == d
    d.length = 7  # the stride grows to fit
    assert d.vector_bytes == 28
    d.data_type = mpsx.DataType.FLOAT16
    assert d.vector_bytes == 28 and d.data_type == mpsx.DataType.FLOAT16
    for args, kwargs in [((-1,), {}), ((2,), {"vectors": 0}), ((2,), {"vector_bytes": 4}),
                         ((2,), {"vector_bytes": 10}), ((2,), {"data_type": 99})]:
        with pytest.raises(ValueError):
            mpsx.VectorDescriptor(*args, **kwargs)


def test_vectors_on_a_buffer_share_its_memory(device, rng):
    backing = mpsx.Vector.from_numpy(device, np.arange(12, dtype=np.float32))
    d = mpsx.VectorDescriptor(3, vectors=2, vector_bytes=16)
    buffer = backing.buffer
    v = mpsx.Vector(buffer=buffer, offset=8, descriptor=d)
    assert (v.offset, v.vectors, v.vector_bytes, v.length) == (8, 2, 16, 3)
    assert v.buffer is buffer and v.resource_size() == 0 and backing.resource_size() == 48
    # values 2..4 and 6..8: from byte 8, two vectors 16 bytes apart
    np.testing.assert_array_equal(v.to_numpy(), [[2, 3, 4], [6, 7, 8]])
    v.write(np.array([[-1, -2, -3], [-4, -5, -6]], np.float32))
    np.testing.assert_array_equal(backing.to_numpy(), [0, 1, -1, -2, -3, 5, -4, -5, -6, 9, 10, 11])
    one = mpsx.Vector(device, descriptor=mpsx.VectorDescriptor(4, mpsx.DataType.FLOAT16))
    assert one.length == 4 and one.data_type == mpsx.DataType.FLOAT16 and one.offset == 0 and one.vectors == 1
    np.testing.assert_array_equal(one.to_numpy(), np.zeros(4, np.float16))


def test_an_optimizer_updates_a_vector_at_its_offset(device, rng):
    values = rng.standard_normal(10).astype(np.float32)
    gradient = rng.standard_normal(4).astype(np.float32)
    backing = mpsx.Vector.from_numpy(device, values)
    window = mpsx.Vector(buffer=backing.buffer, offset=12, descriptor=mpsx.VectorDescriptor(4))
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    cb = device.command_queue.command_buffer()
    sgd.encode(cb, mpsx.Vector.from_numpy(device, gradient), window, result_values_vector=window)
    backing.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    expected = values.copy()
    expected[3:7] -= 0.5 * gradient
    np.testing.assert_allclose(backing.to_numpy(), expected, rtol=1e-6)
    several = mpsx.Vector(buffer=backing.buffer, descriptor=mpsx.VectorDescriptor(4, vectors=2))
    with pytest.raises(mpsx.ShapeError, match="one vector"):
        sgd.encode(device.command_queue.command_buffer(), mpsx.Vector.from_numpy(device, gradient), several,
                   result_values_vector=several)


def test_bad_vector_forms(device):
    buffer = mpsx.Vector(device, 4).buffer  # 16 bytes
    d = mpsx.VectorDescriptor(2)
    for kwargs, error in [({"buffer": buffer, "descriptor": d, "offset": 2}, ValueError),  # not a multiple of 4
                          ({"buffer": buffer, "descriptor": d, "offset": 12}, mpsx.ShapeError),  # past the end
                          ({"buffer": buffer, "descriptor": mpsx.VectorDescriptor(2, vectors=3, vector_bytes=8)},
                           mpsx.ShapeError),
                          ({"buffer": buffer, "descriptor": d, "offset": -4}, ValueError),
                          ({"buffer": buffer}, TypeError), ({"device": device, "buffer": buffer, "descriptor": d},
                                                            TypeError),
                          ({"device": device, "descriptor": mpsx.VectorDescriptor(2, vectors=2)}, ValueError),
                          ({"device": device, "length": 2, "descriptor": d}, TypeError), ({}, TypeError)]:
        with pytest.raises(error):
            mpsx.Vector(**kwargs)
    with pytest.raises(ValueError):
        mpsx.Vector(buffer=buffer, descriptor=d).write(np.zeros(3, np.float32))
