"""Kernels that compute in float32 on float16 images (the cpu backend's float32 views of them) convert exactly:
every float16 value widens to its float32 value, and float32 results narrow to float16 by IEEE round to nearest
even, subnormals, overflow to infinity and NaN included. The references are numpy's conversions."""

import numpy as np
import pytest

import mpsx


def identity(device):
    # a * x + b with a = 1, b = 0: x itself, but -0 + 0 = +0, as numpy computes it below.
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 0.0))


def through(device, source, destination_format):
    cb = device.command_queue.command_buffer()
    n, c, h, w = source.shape
    destination = mpsx.Image(device, mpsx.ImageDescriptor(destination_format, w, h, c, n))
    identity(device).encode(cb, mpsx.Image.from_numpy(device, source), destination)
    destination.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return destination.to_numpy()


def assert_same_halves(actual, expected):
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    np.testing.assert_array_equal(actual[~nan].view(np.uint16), expected[~nan].view(np.uint16))


def test_every_float16_value_round_trips(device):
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, 16, 64, 64)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        expected = (halves.astype(np.float32) * np.float32(1) + np.float32(0)).astype(np.float16)
    assert_same_halves(through(device, halves, mpsx.DataType.FLOAT16), expected)
    widened = through(device, halves, mpsx.DataType.FLOAT32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(widened[~nan], halves[~nan].astype(np.float32) + np.float32(0))
    assert np.isnan(widened[nan]).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_float32_values_narrow_to_nearest_even(device, seed):
    bits = np.random.default_rng(seed).integers(0, 1 << 32, size=1 << 16, dtype=np.uint64).astype(np.uint32)
    # Edges: below half of the smallest subnormal, halfway cases, the subnormal-normal border, the largest
    # finite float16 and what rounds past it, infinity and NaNs, and their negatives.
    edges = np.array([0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x33C00000, 0x387FE000, 0x387FF000,
                      0x38800000, 0x38801000, 0x38803000, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x7F7FFFFF,
                      0x7F800000, 0x7F800001, 0x7FC00000, 0x00000001, 0x00800000], np.uint32)
    bits[:2 * len(edges)] = np.concatenate([edges, edges | 0x80000000])
    floats = bits.view(np.float32).reshape(1, 16, 64, 64)
    with np.errstate(all="ignore"):
        expected = (floats * np.float32(1) + np.float32(0)).astype(np.float16)
    assert_same_halves(through(device, floats, mpsx.DataType.FLOAT16), expected)
