"""Devices, command queues and buffers, buffers, vectors, images and the
synchronization rules of host access."""

import gc
import json
import os
import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import mpsx
from helpers import read, run, run_isolated


def test_devices_and_names(device):
    assert device in mpsx.devices()
    assert mpsx.Device(device.name) == device
    assert mpsx.Device(device.backend) == mpsx.devices()[[d.backend for d in mpsx.devices()].index(device.backend)]
    assert mpsx.Device() == mpsx.devices()[0]
    assert device.command_queue.device == device
    assert pickle.loads(pickle.dumps(device)) == device
    with pytest.raises(ValueError, match="no device named 'tpu:3'; devices present: "):
        mpsx.Device("tpu:3")
    with pytest.raises(TypeError, match="must be a str"):
        mpsx.Device(3)


def test_device_environment_override(monkeypatch):
    monkeypatch.setenv("MPSX_DEVICE", "cpu")
    assert mpsx.Device().name == "cpu"
    monkeypatch.setenv("MPSX_DEVICE", "nothing")
    with pytest.raises(ValueError, match="no device named 'nothing'"):
        mpsx.Device()


def relu(device):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))


def test_command_buffer_lifecycle(device, rng):
    q = device.new_command_queue()
    assert q.device == device
    cb = q.command_buffer()
    assert cb.status == "not_enqueued" and cb.error is None and cb.command_count == 0
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    relu(device).encode(cb, image)
    assert cb.command_count == 1
    with pytest.raises(mpsx.StateError, match="not committed; call commit"):
        cb.wait_until_completed()
    cb.commit()
    assert cb.status in ("committed", "completed")
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        cb.commit()
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        relu(device).encode(cb, image)
    cb.wait_until_completed()
    assert cb.status == "completed"
    q.wait_until_idle()


def test_context_manager_commits_and_waits(device, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    with device.command_queue.command_buffer() as cb:
        y = relu(device).encode(cb, image)
        y.synchronize(cb)
    assert cb.status == "completed"
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))
    with pytest.raises(KeyError):
        with device.command_queue.command_buffer() as cb:
            relu(device).encode(cb, image)
            raise KeyError("body failed")
    assert cb.status == "not_enqueued"  # not committed when the body raised


def test_completed_handlers_run_on_completion_and_may_call_python(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    seen = []

    def handler(command_buffer):
        # Calls back into Python and into mpsx on the runtime's thread.
        seen.append((command_buffer.status, threading.get_ident(), command_buffer.device.name))
        command_buffer.wait_until_completed()  # its own buffer: returns at once

    cb.add_completed_handler(handler)
    cb.add_completed_handler(lambda c: seen.append("second"))
    relu(device).encode(cb, image)
    cb.commit()
    cb.wait_until_completed()
    assert seen[0][0] == "completed" and seen[0][2] == device.name
    assert seen[1] == "second"
    late = []
    cb.add_completed_handler(late.append)  # after completion: runs at once
    assert len(late) == 1
    with pytest.raises(TypeError, match="callable"):
        cb.add_completed_handler(42)


def test_handler_that_raises_does_not_fail_the_buffer(device, rng, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: reported.append(args.exc_type))
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    cb.add_completed_handler(lambda c: 1 / 0)
    relu(device).encode(cb, image)
    cb.commit()
    cb.wait_until_completed()
    device.command_queue.wait_until_idle()
    assert cb.status == "completed"
    assert reported == [ZeroDivisionError]


WAITS_IN_HANDLERS = """
import json, sys
import numpy as np
import mpsx

device = mpsx.Device(sys.argv[1])
queue, other_queue = device.command_queue, device.new_command_queue()
outcomes = {}

def waits_on(name, wait):
    def handler(command_buffer):
        try:
            wait()
            outcomes[name] = "returned"
        except mpsx.MPSXError as e:
            outcomes[name] = f"{type(e).__name__}: {e}"
    return handler

for name, make_wait in [
        ("same queue", lambda later: later.wait_until_completed),
        ("queue idle", lambda later: queue.wait_until_idle),
        ("other queue", lambda later: None)]:
    cb, later = queue.command_buffer(), queue.command_buffer()
    if name == "other queue":
        later = other_queue.command_buffer()
        wait = later.wait_until_completed
        later.commit()
    else:
        wait = make_wait(later)
    cb.add_completed_handler(waits_on(name, wait))
    cb.commit()
    if name != "other queue":
        later.commit()
    cb.wait_until_completed()
    later.wait_until_completed()
    outcomes[name + " status"] = (cb.status, later.status)


class Waiting(mpsx.CNNConvolutionDataSource):
    # A CPU-side update (a host step, on the queue's thread) that waits on the queue.
    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(1, 1, 1, 1)

    def weights(self):
        return np.ones((1, 1, 1, 1), np.float32)

    def update_with_gradient_state(self, gradient_state, source_state):
        queue.wait_until_idle()
        return True

convolution = mpsx.CNNConvolution(device, Waiting())
gradient = mpsx.CNNConvolutionGradient(device, convolution.data_source)
image = mpsx.Image.from_numpy(device, np.ones((1, 1, 2, 2), np.float32))
cb = queue.command_buffer()
y, state = convolution.encode(cb, image, destination_state=True)
gradient.encode(cb, y, image, state)
convolution.encode_weights_and_bias_update(cb, state)
cb.commit()
cb.wait_until_completed()
outcomes["update"] = (cb.status, f"{type(cb.error).__name__}: {cb.error}")
print(json.dumps(outcomes))
"""


def test_waits_on_the_queue_from_its_own_thread_raise(device, tmp_path):
    # Completed handlers and CPU-side updates run on the queue's thread: a wait there
    # for a later command buffer of that queue never ended.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", WAITS_IN_HANDLERS, device.name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes = json.loads(done.stdout.splitlines()[-1])
    forever = "in a completed handler or a data source update of the same command queue would wait forever"
    assert outcomes["same queue"].startswith("MPSXError: wait_until_completed() " + forever)
    assert outcomes["queue idle"].startswith("MPSXError: wait_until_idle() " + forever)
    assert outcomes["other queue"] == "returned"
    for name in ("same queue", "queue idle", "other queue"):
        assert outcomes[name + " status"] == ["completed", "completed"]
    status, error = outcomes["update"]
    assert status == "error" and error.startswith("MPSXError: wait_until_idle() " + forever)


def test_commit_order_and_encoding_while_running(device, rng):
    x = rng.standard_normal((4, 8, 16, 16)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    linear = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 1.0))
    q = device.new_command_queue()
    order, buffers, current = [], [], image
    for i in range(20):
        cb = q.command_buffer()
        current = linear.encode(cb, current)
        cb.add_completed_handler(lambda c, i=i: order.append(i))
        cb.commit()  # encoding the next step while this one runs
        buffers.append(cb)
    cb = q.command_buffer()
    current.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert order == list(range(20))
    np.testing.assert_allclose(current.to_numpy(), x + 20, rtol=1e-5)


def test_command_buffer_keeps_resources_alive(device, rng):
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    kernel = relu(device)
    y = kernel.encode(cb, mpsx.Image.from_numpy(device, x))
    y.synchronize(cb)
    del kernel  # the source image and the kernel are held only by the command buffer now
    gc.collect()
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_image_round_trip(device, rng, dtype):
    x = (rng.standard_normal((3, 5, 4, 7)) * 50).astype(dtype)
    image = mpsx.Image.from_numpy(device, x)
    assert image.shape == (3, 5, 4, 7)
    assert (image.number_of_images, image.feature_channels, image.height, image.width) == (3, 5, 4, 7)
    assert image.data_type == {np.float32: mpsx.DataType.FLOAT32, np.float16: mpsx.DataType.FLOAT16,
                               np.uint8: mpsx.DataType.UINT8}[dtype]
    np.testing.assert_array_equal(image.to_numpy(), x)
    np.testing.assert_array_equal(np.asarray(image), x)
    y = x[::-1].copy()
    image.write(y)
    np.testing.assert_array_equal(image.to_numpy(), y)
    single = mpsx.Image.from_numpy(device, x[0])  # (C, H, W)
    assert single.shape == (1, 5, 4, 7)
    assert pickle.loads(pickle.dumps(image)).to_numpy().tolist() == y.tolist()


@pytest.mark.parametrize("shape", [(2, 37, 33, 35), (3, 70, 1, 1), (4, 1, 1, 1), (2, 3, 1, 40), (5, 1, 6, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_image_round_trip_of_layout_shapes(device, rng, shape, dtype):
    # Tiles over 32, single runs (1x1 pixels, one channel) and unit extents.
    x = (rng.random(shape) * 200).astype(dtype)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    np.testing.assert_array_equal(batch.to_numpy(), x)
    y = (rng.random(shape[1:]) * 200).astype(dtype)
    batch[-1].write(y)
    np.testing.assert_array_equal(batch[-1].to_numpy()[0], y)
    np.testing.assert_array_equal(batch[:-1].to_numpy(), x[:-1])


@pytest.mark.parametrize("given, held", [(np.float32, np.float16), (np.float16, np.float32)])
def test_writes_convert_between_float32_and_float16_as_numpy_does(device, given, held):
    """Image.write converts float32 and float16 arrays into the other type in
    native code, rounding to nearest even as numpy's astype does: ties,
    subnormals, overflow to infinity and signed zero included."""
    rng = np.random.default_rng(11)
    special = np.array([0.0, -0.0, 1.0 + 2**-11, 1.0 + 3 * 2**-11, 65504.0, 65520.0, 1e6, -1e6, 2**-24, 2**-25,
                        3 * 2**-26, 6e-8, -6e-5, np.inf, -np.inf], np.float32)
    values = np.concatenate([special, (rng.standard_normal(1000 - len(special)) * 100).astype(np.float32)])
    with np.errstate(over="ignore"):  # overflow to infinity is part of the test
        x = values.reshape(4, 10, 5, 5).astype(given)
        expected = x.astype(held)
    image = mpsx.ImageBatch(device, mpsx.ImageDescriptor(
        mpsx.DataType.FLOAT16 if held == np.float16 else mpsx.DataType.FLOAT32, width=5, height=5,
        feature_channels=10, number_of_images=4))
    image.write(x)
    got = image.to_numpy()
    assert got.dtype == held
    bits = np.uint16 if held == np.float16 else np.uint32
    np.testing.assert_array_equal(got.view(bits), expected.view(bits))


def test_uint8_images_read_as_unorm(device):
    x = np.array([0, 51, 255, 128], np.uint8).reshape(1, 1, 2, 2)
    linear = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 0.0))
    y = read(device, lambda cb: linear.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x / 255.0, rtol=1e-6)


def test_image_descriptor_and_allocation(device):
    d = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, width=5, height=3, feature_channels=6, number_of_images=2)
    assert d.shape == (2, 6, 3, 5) and d.channel_format == mpsx.DataType.FLOAT16
    assert pickle.loads(pickle.dumps(d)) == d
    image = mpsx.Image(device, d)
    assert image.shape == (2, 6, 3, 5) and image.descriptor == d
    with pytest.raises(TypeError, match="width, height and feature_channels"):
        mpsx.ImageDescriptor(width=3)
    with pytest.raises(ValueError, match="image width must be positive, given 0"):
        mpsx.ImageDescriptor(width=0, height=3, feature_channels=1)


def test_image_sizes_are_checked(device):
    f32 = mpsx.DataType.FLOAT32
    with pytest.raises(ValueError, match="image width must be at most 1073741824, given 4611686018427387904"):
        mpsx.ImageDescriptor(f32, 2**62, 1, 1)
    with pytest.raises(ValueError, match="image number_of_images must be positive, given -1"):
        mpsx.ImageDescriptor(f32, 1, 1, 1, -1)
    with pytest.raises(mpsx.ShapeError, match=r"the element count of an image \(NxCxHxW\) overflows: 1073741824 \* "
                                              r"1073741824 \* 1073741824 \* 1073741824 is above 9223372036854775807"):
        mpsx.ImageDescriptor(f32, 2**30, 2**30, 2**30, 2**30)
    with pytest.raises(mpsx.ShapeError, match=r"the byte count of a float32 image of 2305843009213693952 elements "
                                              r"overflows: 2305843009213693952 \* 4 is above 9223372036854775807"):
        mpsx.ImageDescriptor(f32, 2**30, 2**30, 2)
    in_use = device.bytes_in_use
    with pytest.raises(mpsx.OutOfMemoryError) as refused:
        mpsx.Image(device, mpsx.ImageDescriptor(f32, 2**30, 2**30, 1))
    if device.backend != "metal":  # metal: MPS refuses the texture first
        assert str(refused.value) == (f"cannot allocate 4611686018427387904 bytes on device {device.name}: the "
                                      "largest allocation is 281474976710656 bytes (2^48)")
    assert device.bytes_in_use == in_use


def test_image_input_errors(device):
    with pytest.raises(ValueError, match=r"expected an \(N, C, H, W\) array or \(C, H, W\), given shape \(3, 3\)"):
        mpsx.Image.from_numpy(device, np.zeros((3, 3), np.float32))
    with pytest.raises(TypeError, match="float32, float16 or uint8 array, given int64"):
        mpsx.Image.from_numpy(device, np.zeros((1, 1, 2, 2), np.int64))
    image = mpsx.Image.from_numpy(device, np.zeros((1, 2, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"expected an array of shape \(1, 2, 2, 2\) or \(2, 2, 2\), given \(2, 2\)"):
        image.write(np.zeros((2, 2)))
    with pytest.raises(TypeError):
        mpsx.Image.from_numpy(None, np.zeros((1, 1, 1, 1), np.float32))


def test_sizes_are_ints(device):
    # Cython's own conversion to a C integer truncates floats (1.5 became 1).
    with pytest.raises(TypeError, match="Vector length must be an int, given float 1.5"):
        mpsx.Vector(device, 1.5)
    with pytest.raises(ValueError, match="Vector length must be a non-negative int, given -1"):
        mpsx.Vector(device, -1)
    with pytest.raises(ValueError, match=r"Vector length must be between -2\*\*63 and 2\*\*63 - 1, given 2\*\*64|"
                                         r"given 18446744073709551616"):
        mpsx.Vector(device, 2**64)
    for name in ("width", "height", "feature_channels", "number_of_images"):
        sizes = dict(width=2, height=2, feature_channels=2, number_of_images=1)
        sizes[name] = 2.5
        with pytest.raises(TypeError, match=f"{name} must be an int, given float 2.5"):
            mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, **sizes)
        sizes[name] = np.int64(3)  # integers of any kind are ints
        assert mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, **sizes).shape[("number_of_images", "feature_channels",
                                                                           "height", "width").index(name)] == 3


def test_batch_write_takes_one_array_of_every_image(device, rng):
    # A (C, H, W) array stands for a batch of one only: for more images it was read
    # past its end.
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    for batch in (mpsx.ImageBatch.from_numpy(device, x), mpsx.Image.from_numpy(device, x)):
        with pytest.raises(ValueError, match=r"expected an array of shape \(4, 3, 2, 2\), given \(3, 2, 2\)"):
            batch.write(x[0])
        with pytest.raises(ValueError, match=r"expected an array of shape \(4, 3, 2, 2\), given \(1, 3, 2, 2\)"):
            batch.write(x[:1])
        np.testing.assert_array_equal(batch.to_numpy(), x)  # left as it was
    one = mpsx.ImageBatch.from_numpy(device, x[:1])
    one.write(x[2])
    np.testing.assert_array_equal(one.to_numpy(), x[2:3])


def test_image_batch(device, rng):
    x = rng.standard_normal((5, 3, 4, 4)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    assert len(batch) == 5 and batch.descriptor.number_of_images == 1
    np.testing.assert_array_equal(batch[2].to_numpy(), x[2:3])
    np.testing.assert_array_equal(batch[-1].to_numpy(), x[4:5])
    np.testing.assert_array_equal(batch[1:3].to_numpy(), x[1:3])
    assert [i.shape for i in batch] == [(1, 3, 4, 4)] * 5
    batch[3].write(np.zeros((3, 4, 4), np.float32))  # a view writes into the batch
    np.testing.assert_array_equal(batch.to_numpy()[3], 0)
    np.testing.assert_array_equal(batch.to_numpy()[2], x[2])
    with pytest.raises(IndexError):
        batch[5]
    empty = mpsx.ImageBatch(device, mpsx.ImageDescriptor(width=2, height=2, feature_channels=1, number_of_images=4))
    assert len(empty) == 4


def test_batch_encode_of_views_and_mixed_lists(device, rng):
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    kernel = relu(device)
    views = read(device, lambda cb: kernel.encode_batch(cb, list(batch)))
    np.testing.assert_array_equal(views, np.maximum(x, 0))
    mixed = [batch[0], mpsx.Image.from_numpy(device, x[1]), batch[2]]
    np.testing.assert_array_equal(read(device, lambda cb: kernel.encode_batch(cb, mixed)), np.maximum(x[:3], 0))
    # Consecutive images of one allocation are encoded as a view; others are
    # gathered first, by a copy command per image.
    for images, commands in ((list(batch), 1), (list(batch)[1:3], 1), (mixed, 4), ([batch[1], batch[0]], 3)):
        cb = device.command_queue.command_buffer()
        kernel.encode_batch(cb, images)
        assert cb.command_count == commands
        cb.commit()
        cb.wait_until_completed()
    with pytest.raises(mpsx.ShapeError, match="the images of a batch must match"):
        kernel.encode_batch(device.command_queue.command_buffer(),
                            [batch[0], mpsx.Image.from_numpy(device, np.zeros((1, 3, 3), np.float32))])
    with pytest.raises(ValueError, match="at least one image"):
        kernel.encode_batch(device.command_queue.command_buffer(), [])
    with pytest.raises(TypeError, match="item 1 is int"):
        kernel.encode_batch(device.command_queue.command_buffer(), [batch[0], 3])


WITHOUT_INIT = """
import inspect, json, sys
import numpy as np
import mpsx

device = mpsx.Device(sys.argv[1])
image = mpsx.Image.from_numpy(device, np.ones((1, 1, 2, 2), np.float32))
others = {"command_buffer": device.command_queue.command_buffer(), "device": device, "source_image": image,
          "source_images": image, "source_gradient": image, "source_gradients": image}
outcomes = {}
classes = [value for name, value in vars(mpsx).items()
           if isinstance(value, type) and not name.startswith("_") and value.__module__.startswith("mpsx._")
           and not issubclass(value, (BaseException, int, tuple))]
for cls in classes:
    bare = cls.__new__(cls)
    for name in sorted(set(dir(cls)) - set(dir(object)) | {"__repr__"}):
        if name.startswith("_") and name not in ("__repr__", "__len__", "__getitem__", "__iter__", "__array__",
                                                 "__reduce__", "__dlpack__", "__dlpack_device__", "__enter__"):
            continue
        try:
            member = getattr(bare, name)
            if callable(member):
                try:
                    inspect.signature(member).bind()
                    member()
                except TypeError as e:
                    if "made without __init__" in str(e):
                        raise
                    member(*[others.get(p.name, 0) for p in inspect.signature(member).parameters.values()
                             if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
            outcome = "ok"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        outcomes[f"{cls.__name__}.{name}"] = outcome
print(json.dumps(outcomes))
"""


def test_objects_made_without_init_refuse_use(device, tmp_path):
    # cls.__new__(cls) (pickle, copy, subclasses) once left null native pointers that
    # every member dereferenced: a crash. In a subprocess, so that one would show.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", WITHOUT_INIT, device.name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.splitlines()[-1])
    refused = {k: v for k, v in outcomes.items() if "made without __init__" in v}
    assert len(refused) > 200  # every native class's members
    assert outcomes["Device.name"].startswith("TypeError: this mpsx.Device was made without __init__")
    assert outcomes["CNNConvolution.encode"].startswith("TypeError: this mpsx.CNNConvolution was made without")
    assert outcomes["Image.__repr__"] == "ok"
    for member, outcome in outcomes.items():
        # Others work (plain Python members) or refuse their arguments.
        assert outcome == "ok" or outcome.split(":")[0] in ("TypeError", "ValueError", "NotImplementedError",
                                                            "ShapeError", "StateError", "UnsavableError"), \
            (member, outcome)


def test_state_batch_counts():
    assert mpsx.StateBatch("s", 3) == ("s", "s", "s")
    with pytest.raises(ValueError, match="StateBatch count must be between 0 and 1073741824, given 9223372036854775807"):
        mpsx.StateBatch("s", 2**63 - 1)
    with pytest.raises(TypeError, match="StateBatch count must be an int, given float"):
        mpsx.StateBatch("s", 2.0)


def test_a_refused_batch_encode_leaves_nothing_on_the_command_buffer(device, rng):
    # A list of images is gathered into a batch by a copy on the command buffer; an
    # encode refused after that takes the copy back.
    images = [mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 4, 4)).astype(np.float32)) for _ in range(3)]
    four = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(1, 1, 4, 4),
                                                                np.ones((4, 1, 1, 4), np.float32)))
    labels = mpsx.CNNLossLabels(device, np.zeros((2, 3, 4, 4), np.float32))
    loss = mpsx.CNNLoss(device, mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM))
    cb = device.command_queue.command_buffer()
    relu(device).encode_batch(cb, images)  # gathered (a copy per image) and encoded: 4 commands
    assert cb.command_count == 4
    with pytest.raises(mpsx.ShapeError, match="expected a source image of 4 feature channels, given 3"):
        four.encode_batch(cb, images[::-1])
    with pytest.raises(mpsx.ShapeError):
        loss.encode_batch(cb, images[1:] + images[:1], labels)
    with pytest.raises(TypeError, match="destination_images must be an mpsx.ImageBatch, given list"):
        relu(device).encode_batch(cb, images[::-1], destination_images=images)
    assert cb.command_count == 4
    y = read(device, lambda c: relu(device).encode_batch(c, images[::-1]))
    np.testing.assert_array_equal(y, np.maximum(np.concatenate([i.to_numpy() for i in images[::-1]]), 0))
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    with pytest.raises(ValueError, match="expected source images, given an empty list"):
        relu(device).destination_image_descriptor([])
    with pytest.raises(TypeError, match="image batch indices must be ints or slices, given float"):
        mpsx.ImageBatch.from_numpy(device, np.zeros((2, 1, 1, 1), np.float32))[1.5]


def test_reading_requires_synchronize_and_completion(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    kernel = relu(device)
    cb = device.command_queue.command_buffer()
    unsynchronized = kernel.encode(cb, image)
    synchronized = kernel.encode(cb, image)
    synchronized.synchronize(cb)
    with pytest.raises(mpsx.SynchronizationError, match="not committed"):
        synchronized.to_numpy()
    cb.commit()
    cb.wait_until_completed()
    synchronized.to_numpy()
    with pytest.raises(mpsx.SynchronizationError, match="without synchronize\\(command_buffer\\)"):
        unsynchronized.to_numpy()
    with pytest.raises(mpsx.StateError):
        unsynchronized.synchronize(cb)  # after commit is too late
    image.to_numpy()  # host-written images are always readable


def test_reading_before_completion_raises(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    q = device.new_command_queue()
    gate = threading.Event()
    blocker = q.command_buffer()
    blocker.add_completed_handler(lambda c: gate.wait(10))  # holds the queue's thread
    blocker.commit()
    cb = q.command_buffer()
    y = relu(device).encode(cb, image)
    y.synchronize(cb)
    cb.commit()
    time.sleep(0.01)
    try:
        assert cb.status == "committed"
        with pytest.raises(mpsx.SynchronizationError, match="has not completed"):
            y.to_numpy()
    finally:
        gate.set()
    cb.wait_until_completed()
    y.to_numpy()


def test_vectors_buffers_and_dlpack(device, rng):
    values = rng.standard_normal(17).astype(np.float32)
    v = mpsx.Vector.from_numpy(device, values)
    assert len(v) == 17 and v.length == 17 and v.data_type == mpsx.DataType.FLOAT32
    np.testing.assert_array_equal(v.to_numpy(), values)
    assert v.buffer.length == 68 and v.buffer.shape == (17,) and v.buffer.dtype == np.float32
    zeros = mpsx.Vector(device, 5, mpsx.DataType.FLOAT16)
    np.testing.assert_array_equal(zeros.to_numpy(), np.zeros(5, np.float16))
    if device.backend in ("cpu", "cuda", "metal"):
        t = torch.from_dlpack(v.buffer)
        assert t.shape == (17,)
        np.testing.assert_array_equal(t.cpu().numpy(), values)
    with pytest.raises(ValueError, match=r"expected a 1-D array, given shape \(2, 2\)"):
        mpsx.Vector.from_numpy(device, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="non-negative"):
        mpsx.Vector(device, -1)


def test_vector_sizes_are_checked(device):
    in_use = device.bytes_in_use
    with pytest.raises(mpsx.ShapeError, match=r"the byte count of a vector of 4611686018427387904 float32 values "
                                              r"overflows: 4611686018427387904 \* 4 is above 9223372036854775807"):
        mpsx.Vector(device, 2**62)
    with pytest.raises(mpsx.OutOfMemoryError, match=f"cannot allocate 562949953421312 bytes on device {device.name}: "
                                                    r"the largest allocation is 281474976710656 bytes \(2\^48\)"):
        mpsx.Vector(device, 2**48, mpsx.DataType.FLOAT16)
    assert device.bytes_in_use == in_use


def test_allocations_beyond_the_limit_return(device):
    # Above 2^63 bytes the allocator's size classes once doubled forever.
    printed = run_isolated(device, """
        for length in (2**63 - 1, 2**63 + 8):
            try:
                mpsx.Vector(device, length, mpsx.DataType.UINT8)
            except (ValueError, MemoryError) as e:
                print(type(e).__name__, e)
    """)
    assert printed == (f"OutOfMemoryError cannot allocate 9223372036854775807 bytes on device {device.name}: the "
                       "largest allocation is 281474976710656 bytes (2^48)\n"
                       "ValueError Vector length must be between -2**63 and 2**63 - 1, given 9223372036854775816\n")


def test_host_addressable_buffer_is_a_numpy_view(device, rng):
    v = mpsx.Vector.from_numpy(device, np.arange(4, dtype=np.float32))
    # The host addresses cpu memory and metal's shared storage on unified memory.
    if device.backend not in ("cpu", "metal"):
        with pytest.raises(BufferError, match=f"{device.name} buffers are not in host memory; use to_numpy"):
            memoryview(v.buffer)
        copy = v.buffer.to_numpy()
        copy[1] = 10
        np.testing.assert_array_equal(v.to_numpy(), [0, 1, 2, 3])
        return
    view = v.buffer.to_numpy()
    view[1] = 10
    np.testing.assert_array_equal(v.to_numpy(), [0, 10, 2, 3])
    buffer = v.buffer
    del v
    gc.collect()
    assert np.asarray(buffer)[1] == 10  # the view keeps the memory alive


def test_memory_is_reused(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 4, 16, 16)).astype(np.float32))
    kernel = relu(device)
    for _ in range(3):
        run(device, lambda cb: [kernel.encode(cb, image) for _ in range(10)])
    in_use = device.bytes_in_use
    for _ in range(5):
        run(device, lambda cb: [kernel.encode(cb, image) for _ in range(10)])
    assert device.bytes_in_use == in_use  # the caching allocator hands the same blocks back
    assert device.bytes_cached > 0


SLABS = """
import os
import sys
import numpy as np
import mpsx
device, rng = mpsx.Device(sys.argv[1]), np.random.default_rng(0)
# Under tools/sanitize.sh (AddressSanitizer preloaded) every block is an allocation of its own.
slabs = "libasan" not in os.environ.get("LD_PRELOAD", "")
for shape in [(1, 1, 1, 1), (1, 3, 5, 7), (2, 16, 16, 16), (1, 64, 16, 16), (1, 64, 16, 17)]:
    values = [rng.standard_normal(shape).astype(np.float32) for _ in range(300)]
    images = [mpsx.Image.from_numpy(device, v) for v in values]
    for i, value in enumerate(values):
        assert np.array_equal(images[i].to_numpy(), value), (shape, i)
    half = images[::2]
    del images
    device.empty_cache()
    # A slab with live images keeps its cached blocks; a block of its own goes back.
    assert (device.bytes_cached > 0) == (slabs and values[0].nbytes <= 64 << 10), (shape, device.bytes_cached)
    for i, value in enumerate(values[::2]):
        assert np.array_equal(half[i].to_numpy(), value), (shape, i)
    del half
    device.empty_cache()
    assert device.bytes_in_use == 0 and device.bytes_cached == 0, (shape, device.bytes_in_use, device.bytes_cached)
print("ok")
"""


def test_small_blocks_cut_from_slabs_do_not_overlap(device, tmp_path):
    # Blocks of up to 64 KiB are cut from 2 MiB slabs: 300 live images of one size hold distinct memory, and
    # empty_cache gives the slabs back once none of their blocks is in use (a process of its own, where no other
    # test's objects hold blocks). The last shape's 68 KiB are a block of its own.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", SLABS, device.name], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_objects_of_another_device_are_refused(rng):
    if len(mpsx.devices()) < 2:
        pytest.skip("needs two devices (e.g. cpu and cuda)")
    first, second = mpsx.devices()[:2]
    image = mpsx.Image.from_numpy(second, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    cb = first.command_queue.command_buffer()
    with pytest.raises(mpsx.DeviceMismatchError, match=f"the source image is on device {second.name}"):
        relu(first).encode(cb, image)
    with pytest.raises(mpsx.DeviceMismatchError, match="the command buffer is on device"):
        relu(second).encode(cb, image)
    # Every call that encodes checks the command buffer's device (reloads and
    # exports once crashed at completion with one of another device).
    descriptor = mpsx.CNNConvolutionDescriptor(1, 1, 2, 2)
    convolution = mpsx.CNNConvolution(second, mpsx.ConvolutionWeights(descriptor, np.ones((2, 1, 1, 2), np.float32)))
    normalization = mpsx.CNNBatchNormalization(second, mpsx.BatchNormalizationWeights(*np.ones((4, 2), np.float32)))
    ones = np.ones(2, np.float32)
    on_first = f"the command buffer is on device {first.name}, the kernel on device {second.name}"
    for call in (lambda: convolution.reload_weights_and_biases(
                     cb, mpsx.CNNConvolutionWeightsAndBiasesState(second, np.ones(4, np.float32))),
                 lambda: convolution.export_weights_and_biases(cb),
                 lambda: normalization.reload_gamma_and_beta(cb, mpsx.CNNNormalizationGammaAndBetaState(second, ones,
                                                                                                        ones)),
                 lambda: normalization.reload_mean_and_variance(
                     cb, mpsx.CNNNormalizationMeanAndVarianceState(second, ones, ones))):
        with pytest.raises(mpsx.DeviceMismatchError, match=on_first):
            call()
    with pytest.raises(mpsx.DeviceMismatchError, match=f"the command buffer is on device {first.name}, the images "
                                                       f"on device {second.name}"):
        relu(second).encode_batch(cb, [image, mpsx.Image.from_numpy(second, np.zeros((1, 2, 3, 3), np.float32))])
    assert cb.command_count == 0


def test_deterministic_runs_repeat_bit_for_bit(device):
    """Device.deterministic: False by default, settable; set, two trainings of the reference CNN graph from the
    same weights on the same batches end with the same bits (on cuda: no nondeterministic cuDNN engine,
    none chosen by timing), here with the kernels made after it was set."""
    from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, random_batch
    assert device.deterministic is False
    device.deterministic = True
    try:
        assert mpsx.Device(device.name).deterministic is True  # the device's setting, not the wrapper's
        runs = []
        for _ in range(2):
            model = GraphReferenceCNN(device, 8, learning_rate=0.01, optimizer="adam")
            for step in range(3):
                model.train_step(*random_batch(8, seed=step))
            runs.append({name: source.weights() if hasattr(source, "weights") else source.gamma()
                         for name, source in model.state_dict().items()})
        assert runs[0].keys() and runs[0].keys() == runs[1].keys()
        for name in runs[0]:
            np.testing.assert_array_equal(runs[0][name], runs[1][name], err_msg=name)
    finally:
        device.deterministic = False
    assert device.deterministic is False
