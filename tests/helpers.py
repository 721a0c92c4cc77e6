"""Helpers the tests share (imported as `helpers`)."""

import os
import subprocess
import sys
import tempfile
import textwrap

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


def run_isolated(device, code, timeout=60):
    """Runs `code` in a new Python process, with `mpsx` imported and `device`
    the device of that name, for calls that could hang or kill the process;
    returns what it printed. Fails on a timeout or a non-zero exit."""
    program = f"import mpsx\ndevice = mpsx.Device({device.name!r})\n" + textwrap.dedent(code)
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep))
    # Outside the checkout, whose mpsx/ folder would shadow the built package.
    with tempfile.TemporaryDirectory() as directory:
        done = subprocess.run([sys.executable, "-c", program], cwd=directory, env=env, capture_output=True, text=True,
                              timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


class Handle:
    """An MPSHandle for graph nodes: a label."""

    def __init__(self, label):
        self.label = label

    def __repr__(self):
        return f"Handle({self.label!r})"


def float32_graph(*args, **kwargs):
    """mpsx.NNGraph with float32 images (format FLOAT32, where MPS's default is FLOAT16): the graph tests
    compare against float64 references."""
    kwargs.setdefault("format", mpsx.DataType.FLOAT32)
    return mpsx.NNGraph(*args, **kwargs)


def run_graph(device, graph, inputs):
    """Encodes `graph` over the numpy batches `inputs` (by handle label); returns the result and the
    intermediate images as numpy."""
    images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
    cb = device.command_queue.command_buffer()
    result, intermediates = graph.encode_batch(cb, images, intermediate_images=True)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return result.to_numpy(), [i.to_numpy() for i in intermediates]


def forward_and_gradient(device, node, gradient, x, dy):
    """y and dx of a forward node and a gradient node reading the gradient image 'dy'."""
    for image in (node.result_image, gradient.result_image):
        image.synchronize_resource = True
    graph = float32_graph(device, result_images=[node.result_image, gradient.result_image])
    assert sorted(h.label for h in graph.source_image_handles) == ["dy", "x"]
    y, (dx,) = run_graph(device, graph, {"x": x, "dy": dy})
    return y, dx
