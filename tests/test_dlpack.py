"""DLPack both ways (docs/semantics.md, "DLPack"): Image, ImageBatch and Buffer
export __dlpack__ / __dlpack_device__, and from_dlpack takes torch, numpy,
cupy and jax tensors. Sharing is checked by writing through one side and
reading through the other; copies by checking that they do not follow.

The cuda parts run where mpsx has a cuda device and torch sees a GPU; cupy
and jax where they import."""

import ctypes
import gc
import threading
import weakref

import numpy as np
import pytest
import torch

import mpsx
from helpers import committed_training_step
from test_convolution import failing_update

KCPU, KCUDA = 1, 2
SHARED = ("cpu", "cuda")  # backends whose images DLPack describes (metal keeps them in textures)
TORCH_OF = {np.float32: torch.float32, np.float16: torch.float16, np.uint8: torch.uint8}


def torch_device(device):
    """Where torch keeps tensors that `device` takes: its GPU on cuda, the host otherwise."""
    return torch.device(device.name) if device.backend == "cuda" else torch.device("cpu")


def tensor(device, array, channels_last=False):
    """A torch tensor on `device`'s torch device holding `array` (N, C, H, W)."""
    t = torch.from_numpy(np.array(array)).to(torch_device(device))  # never over `array` itself
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def settle(device):
    """Waits for torch's work on `device` (its default stream) before mpsx reads on the host."""
    if device.backend == "cuda":
        torch.cuda.synchronize(torch_device(device))


def host(t):
    return t.detach().cpu().numpy()


def capsule_name(capsule):
    return ctypes.pythonapi.PyCapsule_GetName(ctypes.py_object(capsule)).decode()


ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


# ---------------------------------------------------------------- dlpack.h's ABI, written out independently

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


READ_ONLY, IS_COPIED = 1, 2


def managed_of(capsule):
    """The DLManagedTensor(Versioned) a capsule holds, read without consuming it."""
    name = capsule_name(capsule)
    kind = DLManagedTensorVersioned if name == "dltensor_versioned" else DLManagedTensor
    return kind.from_address(ctypes.pythonapi.PyCapsule_GetPointer(ctypes.py_object(capsule), name.encode()))


def dims(pointer, n):
    return tuple(pointer[i] for i in range(n))


class Crafted:
    """A DLPack producer of hand-made tensors over `memory` (a torch tensor, kept alive here): any
    shape, strides, data type, flags, version or device, so that mpsx's checks meet what torch and
    numpy never make. Counts the calls of its deleter. Every producer that made a capsule lives to
    the end of the session, as its capsule's deleter, its memory and the managed tensor it points
    at must: a consumer may call the deleter at any later time, after the producer object is gone."""

    produced = []

    def __init__(self, memory, shape, strides=None, dtype=(2, 32, 1), device=None, versioned=True, flags=0,
                 version=(1, 0), offset=0, data=None):
        self.memory = memory
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        self.dtype, self.versioned, self.flags, self.version, self.offset = dtype, versioned, flags, version, offset
        self.data = memory.data_ptr() if data is None else data
        self.ndim = len(shape)
        self.device = device or ((KCUDA, memory.device.index) if memory.is_cuda else (KCPU, 0))
        self.deleted = 0
        self.deleter = DELETER(self._deleted)  # kept alive: mpsx may call it after __dlpack__ returns
        self.managed = []

    def _deleted(self, _):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        t = DLTensor(self.data, DLDevice(*self.device), self.ndim, DLDataType(*self.dtype), self.shape,
                     self.strides, self.offset)
        if self.versioned:
            m = DLManagedTensorVersioned(DLPackVersion(*self.version), None, self.deleter, self.flags, t)
        else:
            m = DLManagedTensor(t, None, self.deleter)
        self.managed.append(m)
        Crafted.produced.append(self)
        return ctypes.pythonapi.PyCapsule_New(ctypes.addressof(m),
                                              b"dltensor_versioned" if self.versioned else b"dltensor", None)


def dl_device(device):
    """The DLPack device of `device`'s memory, as the DLPack constants say it should be."""
    return (KCUDA, int(device.name.split(":")[1])) if device.backend == "cuda" else (KCPU, 0)


def shares(device):
    if device.backend not in SHARED:
        pytest.skip(f"{device.backend} images are not shared through DLPack (see test_metal_images_are_copied)")


def neuron(device, a, b=0.0):
    """A kernel writing a * x + b: mpsx's own writes into images others may alias."""
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a, b))


def write_with_kernel(device, source, destination, a, b=0.0):
    cb = device.command_queue.command_buffer()
    neuron(device, a, b).encode(cb, source, destination_image=destination)
    destination.synchronize(cb)  # some tests read it with to_numpy()
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


# ---------------------------------------------------------------- export

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_images_export_as_nchw_over_their_own_memory(device, rng, dtype):
    shares(device)
    x = (rng.random((2, 3, 4, 5)) * 200).astype(dtype)
    image = mpsx.Image.from_numpy(device, x)
    assert image.__dlpack_device__() == dl_device(device)
    t = torch.from_dlpack(image)
    assert t.shape == x.shape and t.dtype == TORCH_OF[dtype] and t.device == torch_device(device)
    # NHWC in memory: the strides of PyTorch's channels_last layout of that shape.
    assert t.stride() == torch.empty(x.shape).contiguous(memory_format=torch.channels_last).stride()
    np.testing.assert_array_equal(host(t), x)
    # One memory: what torch writes mpsx reads, and the other way round.
    t[1, 2, 3, 4] = 7
    t[0, 0] = 9
    settle(device)
    expected = x.copy()
    expected[1, 2, 3, 4] = 7
    expected[0, 0] = 9
    np.testing.assert_array_equal(image.to_numpy(), expected)
    image.write(x)
    settle(device)
    np.testing.assert_array_equal(host(t), x)
    assert torch.from_dlpack(image).data_ptr() == t.data_ptr()


def test_kernel_writes_are_seen_through_an_exported_tensor(device, rng):
    shares(device)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    source = mpsx.Image.from_numpy(device, x)
    destination = mpsx.Image.from_numpy(device, np.zeros_like(x))
    t = torch.from_dlpack(destination)
    write_with_kernel(device, source, destination, 3.0, 1.0)
    np.testing.assert_allclose(host(t), 3 * x + 1, rtol=1e-6)


def test_batches_and_their_views_export_their_own_images(device, rng):
    shares(device)
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    whole = torch.from_dlpack(batch)
    np.testing.assert_array_equal(host(whole), x)
    second = torch.from_dlpack(batch[1])
    assert second.shape == (1, 2, 3, 3)
    assert second.data_ptr() == whole.data_ptr() + 1 * 2 * 3 * 3 * 4
    np.testing.assert_array_equal(host(second), x[1:2])
    middle = torch.from_dlpack(batch[1:3])
    np.testing.assert_array_equal(host(middle), x[1:3])
    np.testing.assert_array_equal(np.from_dlpack(batch) if device.backend == "cpu" else host(whole), x)


def test_copy_true_exports_a_dense_nchw_copy(device, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    t = torch.from_dlpack(image.__dlpack__(copy=True))
    assert t.is_contiguous() and t.shape == x.shape
    np.testing.assert_array_equal(host(t), x)
    image.write(np.zeros_like(x))
    settle(device)
    np.testing.assert_array_equal(host(t), x)  # a copy does not follow the image
    buffer = mpsx.Vector.from_numpy(device, x.reshape(-1)).buffer
    copied = torch.from_dlpack(buffer.__dlpack__(copy=True))
    if device.backend in SHARED:
        assert copied.data_ptr() != torch.from_dlpack(buffer).data_ptr()
    np.testing.assert_array_equal(host(copied), x.reshape(-1))


def test_capsules_are_versioned_as_the_consumer_asks(device, rng):
    shares(device)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    legacy = image.__dlpack__()
    assert capsule_name(legacy) == "dltensor"
    assert capsule_name(image.__dlpack__(max_version=(0, 8))) == "dltensor"
    versioned = image.__dlpack__(max_version=(1, 3))
    assert capsule_name(versioned) == "dltensor_versioned"
    m = managed_of(versioned)
    assert (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
    t = m.dl_tensor
    assert (t.device.device_type, t.device.device_id) == dl_device(device)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1) and t.ndim == 4
    assert dims(t.shape, 4) == (1, 2, 3, 4) and dims(t.strides, 4) == (24, 1, 8, 2)  # (N, C, H, W) over NHWC
    assert managed_of(image.__dlpack__(max_version=(1, 0), copy=True)).flags == IS_COPIED
    buffer = mpsx.Vector.from_numpy(device, x.reshape(-1)).buffer
    b = managed_of(buffer.__dlpack__(max_version=(1, 0))).dl_tensor
    assert b.ndim == 1 and dims(b.shape, 1) == (24,) and dims(b.strides, 1) == (1,)
    # Both kinds of capsule come back in.
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, image.__dlpack__()).to_numpy(), x)
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, image.__dlpack__(max_version=(1, 0))).to_numpy(), x)


def test_exports_to_other_dlpack_devices(device, rng):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    buffer = mpsx.Vector.from_numpy(device, x.reshape(-1)).buffer
    with pytest.raises(BufferError, match=r"cannot be exported to DLPack device Metal:0; only to its own or, by a "
                                          r"copy, to the CPU"):
        image.__dlpack__(dl_device=(8, 0))
    if device.backend != "cuda":
        own = image.__dlpack__(dl_device=(KCPU, 0)) if device.backend in SHARED else None
        if own is not None:
            assert torch.from_dlpack(own).data_ptr() == torch.from_dlpack(image).data_ptr()
        return
    # A host copy from cuda, read as to_numpy() reads.
    t = torch.from_dlpack(image.__dlpack__(dl_device=(KCPU, 0)))
    assert t.device.type == "cpu"
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(torch.from_dlpack(buffer.__dlpack__(dl_device=(KCPU, 0))).numpy(), x.reshape(-1))
    with pytest.raises(BufferError, match="reaches the CPU only by a copy, and copy=False refuses one"):
        image.__dlpack__(dl_device=(KCPU, 0), copy=False)


def test_export_arguments_are_checked(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 1, 2, 2)).astype(np.float32))
    buffer = mpsx.Vector(device, 3).buffer
    for exporter in (image, buffer):
        with pytest.raises(TypeError, match="max_version must be a tuple of 2 ints, given str '1.0'"):
            exporter.__dlpack__(max_version="1.0")
        with pytest.raises(TypeError, match=r"dl_device must be a tuple of 2 ints, given tuple \(1, 0, 0\)"):
            exporter.__dlpack__(dl_device=(1, 0, 0))
        with pytest.raises(TypeError, match="copy must be None, True or False, given str 'yes'"):
            exporter.__dlpack__(copy="yes")
        with pytest.raises(TypeError, match="stream must be an int, given float 1.5"):
            exporter.__dlpack__(stream=1.5)
        with pytest.raises(TypeError):
            exporter.__dlpack__(None)  # keyword-only, as the protocol defines it
        if device.backend == "cuda":
            with pytest.raises(ValueError, match=r"given 0 \(DLPack disallows 0 as ambiguous\)"):
                exporter.__dlpack__(stream=0)
            with pytest.raises(ValueError, match="stream must be None, -1, 1"):
                exporter.__dlpack__(stream=-2)
            exporter.__dlpack__(stream=-1)
            exporter.__dlpack__(stream=2)
            # Handles that are no stream of this process are refused before the driver sees them.
            for handle in (3, 4096, 2**31, 2**47, 2**63 - 1):
                with pytest.raises(ValueError, match=f"or a CUDA stream handle of this process; {handle} is none"):
                    exporter.__dlpack__(stream=handle)
            side = torch.cuda.Stream(device=torch.device(device.name))
            exporter.__dlpack__(stream=side.cuda_stream)
        else:
            with pytest.raises(ValueError, match=r"stream must be None \(or -1\) for a tensor in host memory "
                                                 r"\(DLPack CPU\), given 5"):
                exporter.__dlpack__(stream=5)
            exporter.__dlpack__(stream=-1)


def test_exports_wait_for_the_last_write(device, rng):
    shares(device)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    q = device.new_command_queue()
    cb = q.command_buffer()
    y = neuron(device, 2.0).encode(cb, image)
    with pytest.raises(mpsx.SynchronizationError, match="written by a command buffer that was not committed; commit "
                                                       "it before handing the image to another library"):
        torch.from_dlpack(y)
    # Committed, held back by the queue's thread: the host side waits, cuda orders torch's stream after it.
    gate = threading.Event()
    cb.add_completed_handler(lambda c: gate.wait(10))
    cb2 = q.command_buffer()
    z = neuron(device, 3.0).encode(cb2, y)
    cb.commit()
    cb2.commit()
    opened = threading.Timer(0.3, gate.set)
    opened.start()
    try:
        assert cb2.status == "committed"
        t = torch.from_dlpack(z)  # no synchronize: DLPack's ordering, not a host read
        if device.backend != "cuda":
            assert cb2.status == "completed"  # waited for
        np.testing.assert_allclose(host(t), 6 * x, rtol=1e-6)
    finally:
        gate.set()
        opened.cancel()
    cb2.wait_until_completed()


def test_exports_of_a_failed_write_raise(device, rng):
    cb, y, _ = committed_training_step(device, *failing_update(device, rng))
    assert cb.status == "error"
    with pytest.raises(mpsx.SynchronizationError, match="written by a command buffer that failed"):
        y.__dlpack__()


def test_an_exported_tensor_keeps_the_memory_alive(device, rng):
    shares(device)
    x = rng.standard_normal((8, 4, 16, 16)).astype(np.float32)
    gc.collect()
    before = device.bytes_in_use
    image = mpsx.ImageBatch.from_numpy(device, x)
    t = torch.from_dlpack(image)
    del image
    gc.collect()
    assert device.bytes_in_use >= before + x.nbytes
    others = [mpsx.ImageBatch.from_numpy(device, np.zeros_like(x)) for _ in range(3)]  # would reuse freed memory
    np.testing.assert_array_equal(host(t), x)
    del others, t
    gc.collect()
    assert device.bytes_in_use == before


def test_metal_images_are_copied(device, rng):
    if device.backend != "metal":
        pytest.skip("metal keeps images in textures; cpu and cuda images are shared (the tests above)")
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    with pytest.raises(BufferError, match=r"in textures \(MPSImage\), which DLPack cannot describe; to_numpy\(\) or "
                                          r"__dlpack__\(copy=True\) copies them"):
        torch.from_dlpack(image)
    np.testing.assert_array_equal(torch.from_dlpack(image.__dlpack__(copy=True)).numpy(), x)
    with pytest.raises(BufferError, match="copy=False"):
        mpsx.Image.from_dlpack(device, torch.from_numpy(x), copy=False)
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, torch.from_numpy(x)).to_numpy(), x)


# ---------------------------------------------------------------- import

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_channels_last_tensors_are_shared(device, rng, dtype):
    shares(device)
    x = (rng.random((2, 3, 4, 5)) * 200).astype(dtype)
    t = tensor(device, x, channels_last=True)
    image = mpsx.Image.from_dlpack(device, t, copy=False)
    assert image.shape == x.shape and image.data_type.name == np.dtype(dtype).name.upper()
    assert torch.from_dlpack(image).data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(image.to_numpy(), x)
    t.mul_(2)
    settle(device)
    np.testing.assert_array_equal(image.to_numpy(), host(t))
    image.write(x)
    settle(device)
    np.testing.assert_array_equal(host(t), x)


def test_kernels_read_and_write_imported_memory(device, rng):
    shares(device)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    source = mpsx.Image.from_dlpack(device, tensor(device, x, channels_last=True), copy=False)
    t = tensor(device, np.zeros_like(x), channels_last=True)
    destination = mpsx.Image.from_dlpack(device, t, copy=False)
    write_with_kernel(device, source, destination, -2.0, 0.5)
    np.testing.assert_allclose(host(t), -2 * x + 0.5, rtol=1e-6)


def test_other_layouts_are_copied_on_the_device(device, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    t = tensor(device, x)  # NCHW, torch's default
    image = mpsx.Image.from_dlpack(device, t)
    np.testing.assert_array_equal(image.to_numpy(), x)
    t.zero_()
    settle(device)
    np.testing.assert_array_equal(image.to_numpy(), x)  # a copy does not follow the tensor
    wide = np.concatenate([x, -x], axis=3)
    strided = tensor(device, wide)[:, :, :, ::2]  # every other column
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, strided).to_numpy(), wide[..., ::2])
    broadcast = tensor(device, x[:1]).expand(2, 3, 4, 5)  # stride 0: copied, never aliased
    np.testing.assert_array_equal(mpsx.ImageBatch.from_dlpack(device, broadcast).to_numpy(), np.repeat(x[:1], 2, 0))
    cl = tensor(device, x, channels_last=True)
    copied = mpsx.Image.from_dlpack(device, cl, copy=True)
    cl.zero_()
    settle(device)
    np.testing.assert_array_equal(copied.to_numpy(), x)
    if device.backend in SHARED:
        with pytest.raises(BufferError, match=r"copy=False, but the tensor cannot be shared with .*: the tensor's "
                                              r"\(N, C, H, W\) strides \(60, 20, 5, 1\) are not those of .* images, "
                                              r"\(60, 1, 15, 3\) \(NHWC: PyTorch's channels_last memory format is "
                                              r"shared\); copy=None copies it on the device"):
            mpsx.Image.from_dlpack(device, t, copy=False)


def test_numpy_arrays_come_in(device, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    if device.backend == "cuda":
        with pytest.raises(mpsx.DeviceMismatchError, match=r"a tensor on DLPack device CPU cannot be imported into "
                                                           r"device cuda:\d+, which takes tensors on CUDA:\d+; move "
                                                           r"the tensor to that device first, or copy a host array in "
                                                           r"with from_numpy\(\)"):
            mpsx.Image.from_dlpack(device, x)
        return
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, x).to_numpy(), x)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    view = nhwc.transpose(0, 3, 1, 2)  # (N, C, H, W) over NHWC memory
    image = mpsx.ImageBatch.from_dlpack(device, view, copy=None if device.backend != "cpu" else False)
    np.testing.assert_array_equal(image.to_numpy(), x)
    if device.backend == "cpu":
        nhwc[0, 1, 2, 0] = 42  # pixel (2, 1), channel 0 of image 0
        assert image.to_numpy()[0, 0, 1, 2] == 42
    frozen = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # shareable but for one flag
    frozen.flags.writeable = False  # numpy flags it read-only in a versioned capsule: mpsx copies it
    copied = mpsx.Image.from_dlpack(device, frozen)
    np.testing.assert_array_equal(copied.to_numpy(), x)
    with pytest.raises(BufferError, match="the tensor is read-only"):
        mpsx.Image.from_dlpack(device, frozen, copy=False)


def test_images_take_chw_and_batches_nchw(device, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    image = mpsx.Image.from_dlpack(device, tensor(device, x))
    assert image.shape == (1, 3, 4, 5)
    np.testing.assert_array_equal(image.to_numpy()[0], x)
    with pytest.raises(mpsx.ShapeError, match=r"expected an \(N, C, H, W\) tensor, given one of 3 dims"):
        mpsx.ImageBatch.from_dlpack(device, tensor(device, x))
    with pytest.raises(mpsx.ShapeError, match=r"expected an \(N, C, H, W\) or \(C, H, W\) tensor, given one of 2 dims"):
        mpsx.Image.from_dlpack(device, tensor(device, x[0]))
    with pytest.raises(mpsx.ShapeError, match="given one of 5 dims"):
        mpsx.Image.from_dlpack(device, tensor(device, x[None, None]))
    batch = mpsx.ImageBatch.from_dlpack(device, tensor(device, np.stack([x, -x])))
    assert len(batch) == 2
    np.testing.assert_array_equal(batch[1].to_numpy()[0], -x)


def test_buffers_take_any_shape(device, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = tensor(device, x)
    buffer = mpsx.Buffer.from_dlpack(device, t)
    assert buffer.shape == (3, 4) and buffer.dtype == np.float32 and buffer.length == 48
    np.testing.assert_array_equal(buffer.to_numpy(), x)
    if device.backend in SHARED:
        assert torch.from_dlpack(buffer).data_ptr() == t.data_ptr()
        t.add_(1)
        settle(device)
        np.testing.assert_array_equal(buffer.to_numpy(), x + 1)
    transposed = mpsx.Buffer.from_dlpack(device, t.T)  # a copy, row-major
    assert transposed.shape == (4, 3)
    np.testing.assert_array_equal(transposed.to_numpy(), host(t).T)
    if device.backend in SHARED:
        with pytest.raises(BufferError, match=r"the tensor of shape \(4, 3\) and strides \(1, 4\) is not row-major"):
            mpsx.Buffer.from_dlpack(device, t.T, copy=False)
    for dtype in (np.float16, np.uint8):
        values = (rng.random(7) * 100).astype(dtype)
        np.testing.assert_array_equal(mpsx.Buffer.from_dlpack(device, tensor(device, values)).to_numpy(), values)
    scalar = mpsx.Buffer.from_dlpack(device, torch.tensor(2.5, device=torch_device(device)))
    assert scalar.shape == () and scalar.to_numpy() == 2.5
    empty = mpsx.Buffer.from_dlpack(device, tensor(device, np.zeros((0, 3), np.float32)))
    assert empty.shape == (0, 3) and empty.to_numpy().shape == (0, 3)
    wide = mpsx.Buffer.from_dlpack(device, Crafted(t, (2**20, 0, 2**20), data=0))
    assert wide.shape == (2**20, 0, 2**20) and wide.length == 0 and wide.to_numpy().shape == (2**20, 0, 2**20)
    five = tensor(device, rng.standard_normal((2, 3, 2, 3, 2)).astype(np.float32)).permute(4, 2, 0, 3, 1)
    with pytest.raises(mpsx.ShapeError, match="has more than 4 dims that are not contiguous, which mpsx cannot copy"):
        mpsx.Buffer.from_dlpack(device, five)
    np.testing.assert_array_equal(mpsx.Buffer.from_dlpack(device, five.contiguous()).to_numpy(), host(five))
    with pytest.raises(TypeError, match="expected a float32, float16 or uint8 tensor, given bfloat16"):
        mpsx.Buffer.from_dlpack(device, t.bfloat16())


def test_bfloat16_images_round_trip(device, rng):
    if device.backend == "metal":
        pytest.skip("metal images hold no bfloat16")
    t = tensor(device, rng.standard_normal((2, 3, 4, 5)).astype(np.float32)).bfloat16()
    image = mpsx.Image.from_dlpack(device, t)
    assert image.data_type == mpsx.DataType.BFLOAT16
    back = torch.from_dlpack(image)
    assert back.dtype == torch.bfloat16
    assert torch.equal(back.cpu(), t.cpu())


def test_an_import_keeps_the_producer_alive_until_freed(device, rng):
    memory = tensor(device, rng.standard_normal((1, 2, 3, 4)).astype(np.float32), channels_last=True)
    producer = Crafted(memory, (1, 2, 3, 4), memory.stride())
    image = mpsx.Image.from_dlpack(device, producer)
    shared = device.backend in SHARED
    assert producer.deleted == (0 if shared else 1)  # a copy releases the tensor at once
    np.testing.assert_array_equal(image.to_numpy(), host(memory))
    view = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 2, 3, 4), np.float32))
    cb = device.command_queue.command_buffer()
    neuron(device, 1.0).encode(cb, image, destination_image=view[0])  # the command buffer holds the image too
    del image
    gc.collect()
    assert producer.deleted == (0 if shared else 1)
    cb.commit()
    cb.wait_until_completed()
    gc.collect()
    assert producer.deleted == 1
    # numpy's own deleter, through a weak reference to the array it keeps.
    if device.backend == "cpu":
        nhwc = np.zeros((1, 3, 4, 2), np.float32)
        array = nhwc.transpose(0, 3, 1, 2)
        alive = weakref.ref(array)
        image = mpsx.Image.from_dlpack(device, array, copy=False)
        del array, nhwc
        gc.collect()
        assert alive() is not None
        del image
        gc.collect()
        assert alive() is None


def test_capsules_are_consumed_once(device, rng):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    t = tensor(device, x)
    capsule = t.__dlpack__()
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, capsule).to_numpy(), x)
    assert capsule_name(capsule) == "used_dltensor"
    with pytest.raises(ValueError, match="the DLPack capsule was consumed already \\(a capsule named 'used_dltensor'\\)"
                                         ": a capsule gives its tensor once"):
        mpsx.Image.from_dlpack(device, capsule)
    exported = mpsx.Image.from_numpy(device, x).__dlpack__(max_version=(1, 0), copy=True)
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, exported).to_numpy(), x)
    with pytest.raises(ValueError, match="'used_dltensor_versioned'"):
        mpsx.Buffer.from_dlpack(device, exported)


def test_refused_imports_leave_the_capsule_and_allocate_nothing(device, rng):
    t = tensor(device, rng.integers(0, 9, (1, 2, 3, 4)))  # int64
    capsule = t.__dlpack__()
    in_use = device.bytes_in_use
    with pytest.raises(TypeError, match="expected a float32, float16, bfloat16 or uint8 tensor, given int64"):
        mpsx.Image.from_dlpack(device, capsule)
    assert capsule_name(capsule) == "dltensor" and device.bytes_in_use == in_use
    assert torch.equal(torch.from_dlpack(capsule), t)  # still whole for another consumer


BAD_TENSORS = {
    # name: (Crafted keyword arguments, error class, message)
    "float64": (dict(dtype=(2, 64, 1)), TypeError, "given float64"),
    "int32": (dict(dtype=(0, 32, 1)), TypeError, "given int32"),
    "bool": (dict(dtype=(6, 8, 1)), TypeError, "given bool"),
    "float32 x4 lanes": (dict(dtype=(2, 32, 4)), TypeError, "given float32 x4"),
    "complex64": (dict(dtype=(5, 64, 1)), TypeError, "given complex64"),
    "zero size": (dict(shape=(1, 0, 3, 4)), ValueError, "image feature_channels must be positive, given 0"),
    "zero size, huge others": (dict(shape=(0, 2**40, 2**40, 2**40)), mpsx.ShapeError,
                               r"the element count of the tensor of shape \(0, 1099511627776, 1099511627776, "
                               r"1099511627776\) overflows"),
    "negative size": (dict(shape=(1, 2, -3, 4)), ValueError, r"the tensor's dims must be at least 0, given shape "
                                                             r"\(1, 2, -3, 4\)"),
    "too wide": (dict(shape=(1, 1, 1, 2**31)), ValueError, "image width must be at most 1073741824, given 2147483648"),
    "count overflows": (dict(shape=(2**30, 2**30, 2**30, 2**30)), mpsx.ShapeError,
                        r"the element count of the tensor of shape \(1073741824, 1073741824, 1073741824, "
                        r"1073741824\) overflows"),
    "extent overflows": (dict(shape=(2, 2, 3, 4), strides=(2**62, 1, 8, 2)), mpsx.ShapeError,
                         "the tensor's extent in memory overflows"),
    "negative strides": (dict(strides=(24, 1, -8, 2)), mpsx.ShapeError,
                         r"the tensor's strides \(24, 1, -8, 2\) are negative, which mpsx cannot represent"),
    "null data": (dict(data=0), ValueError, "the tensor has 24 elements and a null data pointer"),
    "past the address space": (dict(data=2**64 - 64), mpsx.ShapeError,
                               "the tensor's memory, 92 bytes from byte 0 of .*, runs past the end of the address "
                               "space"),
    "DLPack 2": (dict(version=(2, 0)), BufferError, r"the tensor is of DLPack 2.0; mpsx reads DLPack 1.x"),
    "no shape": (dict(shape=(), ndim=4), mpsx.ShapeError, "the tensor has 4 dims and no shape"),
    "other device": (dict(device=(7, 0)), mpsx.DeviceMismatchError,
                     r"a tensor on DLPack device device type 7:0 cannot be imported into device"),
}


@pytest.mark.parametrize("case", sorted(BAD_TENSORS))
def test_bad_tensors_raise_clear_errors_before_anything_is_done(device, case):
    arguments, error, message = BAD_TENSORS[case]
    memory = torch.zeros(24, device=torch_device(device))
    arguments = dict(arguments)
    ndim = arguments.pop("ndim", None)
    shape = arguments.pop("shape", (1, 2, 3, 4))
    arguments.setdefault("strides", None if "shape" in BAD_TENSORS[case][0] else (24, 1, 8, 2))
    producer = Crafted(memory, shape, **arguments)
    if ndim is not None:
        producer.ndim, producer.shape = ndim, None
    in_use = device.bytes_in_use
    with pytest.raises(error, match=message):
        mpsx.Image.from_dlpack(device, producer)
    assert producer.deleted == 0 and device.bytes_in_use == in_use  # the capsule was left to its producer


def test_unaligned_tensors_are_copied(device):
    memory = torch.arange(25, dtype=torch.float32, device=torch_device(device))
    # One byte past an element: no kernel may read floats there.
    producer = Crafted(memory, (1, 1, 2, 2), (4, 4, 2, 1), data=memory.data_ptr(), offset=1)
    if device.backend in SHARED:
        with pytest.raises(BufferError, match="the tensor's data is not aligned to its elements"):
            mpsx.Image.from_dlpack(device, producer, copy=False)
    producer = Crafted(memory, (1, 1, 2, 2), (4, 4, 2, 1), offset=4)  # aligned: element 1 on
    np.testing.assert_array_equal(mpsx.Image.from_dlpack(device, producer).to_numpy(), [[[[1, 2], [3, 4]]]])


def test_what_is_no_dlpack_tensor_is_refused(device):
    for thing in ([1.0, 2.0], "text", object()):
        with pytest.raises(TypeError, match="expected a DLPack tensor \\(an object with __dlpack__ and "
                                            "__dlpack_device__: a torch, numpy >= 1.23, cupy or jax array\\) or a "
                                            "DLPack capsule, given"):
            mpsx.Image.from_dlpack(device, thing)

    class WrongDevice:
        def __dlpack_device__(self):
            return "cpu"

        def __dlpack__(self, **kwargs):
            raise AssertionError("not called")

    with pytest.raises(TypeError, match=r"__dlpack_device__\(\) must be a tuple of 2 ints, given str 'cpu'"):
        mpsx.Buffer.from_dlpack(device, WrongDevice())
    with pytest.raises(TypeError, match="expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', given a "
                                        "capsule named 'something'"):
        mpsx.Image.from_dlpack(device, ctypes.pythonapi.PyCapsule_New(1, b"something", None))
    with pytest.raises(TypeError, match="copy must be None, True or False, given int 1"):
        mpsx.Image.from_dlpack(device, torch.zeros(1, 1, 1, 1), copy=1)


def test_objects_made_without_init_raise(device):
    for cls in (mpsx.Image, mpsx.ImageBatch, mpsx.Buffer):
        bare = cls.__new__(cls)
        with pytest.raises(TypeError, match="was made without __init__"):
            bare.__dlpack__()
        with pytest.raises(TypeError, match="was made without __init__"):
            bare.__dlpack_device__()
        with pytest.raises(TypeError, match="was made without __init__"):
            cls.from_dlpack(mpsx.Device.__new__(mpsx.Device), torch.zeros(1, 1, 1, 1))
        with pytest.raises(TypeError):
            cls.from_dlpack(None, torch.zeros(1, 1, 1, 1))


# ---------------------------------------------------------------- other devices and libraries

def gpu_of(device):
    if device.backend != "cuda":
        pytest.skip("needs an mpsx cuda device")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch.device(device.name)


def test_tensors_of_another_device_are_refused(device):
    cpu = mpsx.Device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU: a GPU tensor into the cpu device is tried where it does")
    with pytest.raises(mpsx.DeviceMismatchError, match=r"a tensor on DLPack device CUDA:0 cannot be imported into "
                                                       r"device cpu, which takes tensors on CPU; move the tensor to "
                                                       r"that device first$"):
        mpsx.Image.from_dlpack(cpu, torch.zeros(1, 1, 2, 2, device="cuda:0"))
    if device.backend == "cuda" and torch.cuda.device_count() > 1:
        other = 1 - int(device.name.split(":")[1])
        with pytest.raises(mpsx.DeviceMismatchError, match=f"CUDA:{other} cannot be imported into device"):
            mpsx.Buffer.from_dlpack(device, torch.zeros(3, device=f"cuda:{other}"))


def test_cuda_streams_order_both_ways(device, rng):
    gpu = gpu_of(device)
    x = rng.standard_normal((16, 32, 64, 64)).astype(np.float32)
    # mpsx -> torch: torch's stream waits for a command buffer that has not completed.
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    y = image
    for _ in range(20):
        y = neuron(device, 1.0, 1.0).encode(cb, y)
    cb.commit()
    side = torch.cuda.Stream(gpu)
    with torch.cuda.stream(side):
        seen = torch.from_dlpack(y).clone()
    side.synchronize()
    np.testing.assert_allclose(host(seen), x + 20, rtol=1e-5)
    cb.wait_until_completed()
    # torch -> mpsx: mpsx's queue waits for torch's pending work on its stream.
    with torch.cuda.stream(side):
        t = torch.from_numpy(x).to(gpu, non_blocking=True)
        for _ in range(20):
            t = t * 1.0 + 1.0
        t = t.contiguous(memory_format=torch.channels_last)
        imported = mpsx.Image.from_dlpack(device, t, copy=False)
    got = mpsx.Image.from_numpy(device, np.zeros_like(x))
    write_with_kernel(device, imported, got, 2.0)
    np.testing.assert_allclose(got.to_numpy(), 2 * (x + 20), rtol=1e-5)
    # and a copy made from torch's pending work
    with torch.cuda.stream(side):
        u = torch.from_numpy(x).to(gpu, non_blocking=True) * 3.0
        copied = mpsx.ImageBatch.from_dlpack(device, u)
    np.testing.assert_allclose(copied.to_numpy(), 3 * x, rtol=1e-6)


def test_cupy_arrays_both_ways(device, rng):
    gpu_of(device)
    cupy = pytest.importorskip("cupy")
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    with cupy.cuda.Device(int(device.name.split(":")[1])):
        a = cupy.asarray(x)
        image = mpsx.Image.from_dlpack(device, a)
        np.testing.assert_array_equal(image.to_numpy(), x)
        nhwc = cupy.ascontiguousarray(a.transpose(0, 2, 3, 1))
        shared = mpsx.Image.from_dlpack(device, nhwc.transpose(0, 3, 1, 2), copy=False)
        nhwc *= 2
        cupy.cuda.runtime.deviceSynchronize()
        np.testing.assert_array_equal(shared.to_numpy(), 2 * x)
        back = cupy.from_dlpack(image)
        np.testing.assert_array_equal(cupy.asnumpy(back), x)
        back[0, 0, 0, 0] = 5
        cupy.cuda.runtime.deviceSynchronize()
        assert image.to_numpy()[0, 0, 0, 0] == 5
        np.testing.assert_array_equal(cupy.asnumpy(cupy.from_dlpack(mpsx.Buffer.from_dlpack(device, a))), x)


def test_jax_arrays_both_ways(device, rng):
    gpu_of(device)
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax sees no GPU")
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    a = jax.device_put(x, gpus[int(device.name.split(":")[1])])
    image = mpsx.Image.from_dlpack(device, a)  # jax arrays are immutable: a copy
    np.testing.assert_array_equal(image.to_numpy(), x)
    back = jax.dlpack.from_dlpack(image)
    np.testing.assert_array_equal(np.asarray(back), x)
    buffer = mpsx.Buffer.from_dlpack(device, a.reshape(-1))
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(buffer)), x.reshape(-1))
