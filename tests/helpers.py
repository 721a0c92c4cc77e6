"""Helpers the tests share (imported as `helpers`)."""

import numpy as np
import pytest

import mpsx


def run(device, encode):
    """Encodes `encode(command_buffer)` on a new command buffer, commits and
    waits; returns what encode returned."""
    cb = device.command_queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return result


def read(device, encode):
    """Like run, but synchronizes every Image, ImageBatch, Buffer or state
    encode returns (a single one or a tuple) and returns them as numpy."""
    cb = device.command_queue.command_buffer()
    result = encode(cb)
    items = result if isinstance(result, tuple) else (result,)
    for item in items:
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    out = tuple(np.asarray(item) for item in items)
    return out if isinstance(result, tuple) else out[0]


def tolerance(data_type):
    """(rtol, atol) fitting the storage precision of the result."""
    if data_type in (np.float16, mpsx.DataType.FLOAT16):
        return 2e-2, 2e-2
    return 1e-4, 1e-5


def gpu_only(device):
    if device.backend == "cpu":
        pytest.skip("needs a GPU device")
