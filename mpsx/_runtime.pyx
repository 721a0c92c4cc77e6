# cython: language_level=3, boundscheck=False, wraparound=False, binding=True
# binding=True: functions and methods are introspectable (inspect.signature). An extension class declares its
# constructor's signature as its docstring's first line, "Name(parameters)" then a "--" line (CPython's
# __text_signature__), for help() and inspect.signature; tests/test_typing.py checks it against __init__.
"""Device, CommandQueue, CommandBuffer, Buffer, Vector, images and states."""

import atexit
import operator
import os
import reprlib
import sys
import threading

cimport cython
import enum

import numpy as np

from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New, PyCapsule_SetName)
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint16_t, int32_t, uint64_t
from libcpp.memory cimport shared_ptr
from mpsx.includes.errors cimport make_native
from libcpp.string cimport string
from libcpp.vector cimport vector

from mpsx.includes.buffer cimport CBuffer, CVector
from mpsx.includes.command_buffer cimport (
    CCommandBuffer, CCommandQueue, CommandBufferStatus, completed_handler, end_at_exit, finalizing,
    install_interrupt_check, wait_until_all_idle, before_fork, after_fork)
from mpsx.includes.device cimport CDevice, backend_load_errors, cpu_loop_clone
from mpsx.includes.dlpack cimport (
    Copy, DLDevice, DLManagedTensor, DLManagedTensorVersioned, ExportRequest, Exported, ImportAs, ImportPlan,
    check_device, device_of as dlpack_device_of, export_buffer, export_image, export_request, import_buffer,
    import_image, import_stream, kTensorCapsule, kUsedTensorCapsule, kUsedVersionedCapsule, kVersionedCapsule,
    plan_import, release)
from mpsx.includes.distributed cimport (
    CCollectiveDescriptor, CCommunicator, ReduceOperation, host_all_reduce as host_all_reduce_of, new_group_id)
from mpsx.includes.errors cimport raise_stored
from mpsx.includes.image cimport CImage, ImageDescriptor as CImageDescriptor
from mpsx.includes.registry cimport unregister_primitive
from mpsx.includes.state cimport CState
from mpsx.includes.types cimport DataType as CDataType, kMaxDimension, size_of

from mpsx._errors import DeviceMismatchError, MPSXError, StateError
from mpsx.persistence import _unpickle_device, device_of, reduce as persistence_reduce


class DataType(enum.IntEnum):
    """The data types of images, weights, vectors and buffers.

    FLOAT32, FLOAT16 and UINT8 map to numpy's float32, float16 and uint8; BFLOAT16 has no numpy type and is read as
    float32.

    MPS: MPSDataType
    """
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    UINT8 = 3


cdef dict _NUMPY_OF = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    3: np.dtype(np.uint8),
}


cdef CDataType data_type_of_numpy(object dtype) except *:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return CDataType.Float32
    if dtype == np.float16:
        return CDataType.Float16
    if dtype == np.uint8:
        return CDataType.UInt8
    raise TypeError(f"expected a float32, float16 or uint8 array, given {dtype}")


cdef object numpy_of(CDataType t):
    try:
        return _NUMPY_OF[<int>t]
    except KeyError:
        raise TypeError("bfloat16 data has no numpy type; read it as float32") from None


# ---------------------------------------------------------------- devices

cdef dict _devices = {}


cdef int raise_uninitialized(object obj) except -1:
    name = type(obj).__name__
    raise TypeError(f"this mpsx.{name} was made without __init__ ({name}.__new__ alone, as pickle, copy or a "
                    f"subclass that skips __init__ may do) and has no native object; make it with its constructor "
                    f"or the method that returns it")


cdef str uninitialized_repr(object obj):
    return f"<mpsx.{type(obj).__name__} made without __init__>"


_short_repr = reprlib.Repr()
_short_repr.maxlevel, _short_repr.maxstring, _short_repr.maxother, _short_repr.maxlong = 3, 200, 200, 200


cpdef str quoted(object value):
    """A value as an error message quotes it: its type and at most about 200 characters of its repr, made without
    the whole repr (a crafted file's list of 100,000 arrays would take a minute)."""
    return f"{type(value).__name__} {_short_repr.repr(value)}"


cdef int64_t integer_argument(object value, str name) except? -1:
    # Cython's own conversion to a C integer truncates floats (1.5 becomes 1).
    try:
        i = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, given {quoted(value)}") from None
    if not -2**63 <= i < 2**63:
        raise ValueError(f"{name} must be between -2**63 and 2**63 - 1, given {i}")
    return i


cdef double float_argument(object value, str name) except? -1.0:
    # float() also parses strings; a property takes numbers only.
    if isinstance(value, (bool, str, bytes, bytearray)):
        raise TypeError(f"{name} must be a float, given {quoted(value)}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a float, given {quoted(value)}") from None


cdef Device wrap_device(const shared_ptr[CDevice]& device):
    cdef size_t key = <size_t>device.get()
    cdef Device d = _devices.get(key)
    if d is None:
        d = Device.__new__(Device)
        d.c = device
        _devices[key] = d
    return d


def _backend_load_errors():
    """Why backend libraries built beside the runtime (the cuda one) did not load."""
    CDevice.all()
    cdef const vector[string]* errors = &backend_load_errors()
    return [errors[0][i].decode() for i in range(errors.size())]


def _cpu_loop_clone():
    """For tests: which build of the cpu backend's own hot loops runs, "avx512f", "avx2" or "baseline" (the widest
    that oneDNN's effective ISA includes, which ONEDNN_MAX_CPU_ISA lowers)."""
    return cpu_loop_clone().decode()


def _unregister_primitive(family, backend_kind):
    """For tests, in a process of their own: makes a backend lack a kernel family ("softmax" on "cpu")."""
    unregister_primitive(family.encode(), backend_kind.encode())


def devices():
    """Every usable device, best first (metal, then cuda, then cpu).

    A backend that is missing here is explained by ``Device(name)`` for it
    (``Device("cuda")``): the library that failed to load, or why the build
    has no such backend, and how to install it (``pip install 'mpsx[cuda]'``).

    MPS: MTLCopyAllDevices()
    """
    cdef const vector[shared_ptr[CDevice]]* all_devices = &CDevice.all()
    return [wrap_device(all_devices[0][i]) for i in range(all_devices.size())]


cdef class Device:
    """Device(name=None)
--

    A device: one backend (``"cpu"``, ``"cuda"`` or ``"metal"``) and its default command queue.

    ``name`` is ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"metal"``; None picks the best device present, or the one
    the ``MPSX_DEVICE`` environment variable names (MPS's ``MTLCreateSystemDefaultDevice()``). Raises ValueError for
    a device this machine does not have. Devices compare equal when they are the same device.

    MPS: MTLDevice
    """

    def __init__(self, name=None):
        if name is None:
            name = ""
        elif not isinstance(name, str):
            raise TypeError(f"Device name must be a str or None, given {type(name).__name__}")
        self.c = CDevice.named(name.encode())

    def __mpsx_state__(self):
        return {"device": self.name}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        # The device given to load or copy, else the one saved where this process has it.
        return device_of(state, device)

    def __reduce__(self):
        return (_unpickle_device, (self.name,))

    @property
    def name(self):
        """The device's name, such as ``"cpu"``, ``"cuda:0"`` or ``"metal"``.

        MPS: MTLDevice.name
        """
        return self.native().name().decode()

    @property
    def backend(self):
        """The backend that runs the device's commands: ``"cpu"``, ``"cuda"`` or ``"metal"``.

        MPS: none (mpsx)
        """
        return self.native().backend_name().decode()

    @property
    def command_queue(self):
        """The device's default command queue, made once per device (what most code encodes on).

        MPS: none (mpsx)
        """
        cdef CommandQueue q = CommandQueue.__new__(CommandQueue)
        q.c = self.native().command_queue()
        return q

    def new_command_queue(self):
        """A new command queue of this device; its command buffers run in their own commit order, independently of
        other queues'.

        MPS: -[MTLDevice newCommandQueue]
        """
        cdef CommandQueue q = CommandQueue.__new__(CommandQueue)
        q.c = self.native().new_command_queue()
        return q

    @property
    def bytes_in_use(self):
        """Device memory held by live buffers and images, in bytes (Metal's ``currentAllocatedSize`` also counts what
        mpsx's allocator caches: ``bytes_in_use + bytes_cached``).

        MPS: none (mpsx)
        """
        return self.native().bytes_in_use()

    @property
    def deterministic(self):
        """Whether kernels pick only algorithms whose results repeat bit for bit, run after run and in another process
        (default False).

        On cuda: cuDNN engines without the nondeterministic note, chosen by cuDNN's heuristics instead of by timing
        (slower, as PyTorch's ``cudnn.deterministic``). A kernel's algorithms are chosen at its first encode of a
        shape: set this before. cpu always repeats; metal leaves it to MPS.

        MPS: none (mpsx)
        """
        return self.native().deterministic()

    @deterministic.setter
    def deterministic(self, bint value):
        self.native().set_deterministic(value)

    @property
    def peak_bytes_in_use(self):
        """The most ``bytes_in_use`` has been since the device was made or ``reset_peak_bytes_in_use()`` was called.

        MPS: none (mpsx)
        """
        return self.native().peak_bytes_in_use()

    def reset_peak_bytes_in_use(self):
        """Starts ``peak_bytes_in_use`` again from the bytes in use now.

        MPS: none (mpsx)
        """
        self.native().reset_peak_bytes_in_use()

    @property
    def bytes_cached(self):
        """Device memory the caching allocator keeps for reuse, in bytes (not counted in ``bytes_in_use``).

        MPS: none (mpsx)
        """
        return self.native().bytes_cached()

    def empty_cache(self):
        """Returns the memory the caching allocator keeps to the backend.

        MPS: none (mpsx)
        """
        self.native().trim()

    def __eq__(self, other):
        return isinstance(other, Device) and (<Device>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"mpsx.Device('{self.name}')"


# Waits run pending signal handlers on the main thread (Ctrl-C ends them); in a child of fork() the thread that
# forked is the main thread.
install_interrupt_check(threading.main_thread().ident)
os.register_at_fork(after_in_child=lambda: install_interrupt_check(threading.get_ident()))


def _before_fork():
    before_fork()


def _after_fork():
    after_fork()


# No runtime thread makes its Python thread state during a fork (mpsx/_callbacks.h, thread_state_mutex).
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _exit_timeout():
    value = os.environ.get("MPSX_EXIT_TIMEOUT", "10")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < 1e9:
        sys.stderr.write(f"mpsx: MPSX_EXIT_TIMEOUT must be a number of seconds, given {value!r}; waiting 10 s\n")
        return 10.0
    return seconds


def _drain_at_exit():
    # Queue threads may still call into Python (handlers, data sources): let
    # them finish before the interpreter goes away under them, for at most
    # MPSX_EXIT_TIMEOUT seconds or until Ctrl-C.
    cdef double seconds = _exit_timeout()
    cdef bint idle = False
    try:
        with nogil:
            idle = wait_until_all_idle(seconds)
    except BaseException:
        pass  # Ctrl-C, or what another signal handler raised: stop waiting
    finalizing().store(True)
    if idle:
        return
    message = (f"mpsx: command buffers still running at exit are abandoned (waited {seconds:g} s, "
               f"MPSX_EXIT_TIMEOUT); their results and completed handlers are lost")
    if end_at_exit():
        sys.stderr.write(message + "\n")
        return
    # A completed handler or data source update runs Python code, which the interpreter would end under it, or
    # the C library cannot keep exit()'s status (macOS).
    sys.stderr.write(message + "; the process ends now, with status 1 (" +
                     ("this C library cannot end it at exit with its status" if sys.platform == "darwin" else
                      "a completed handler or data source update runs Python code") + ")\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


atexit.register(_drain_at_exit)


# ---------------------------------------------------------------- command buffers

cdef class CommandQueue:
    """CommandQueue()
--

    A queue of command buffers of one device, run in commit order.

    Not made directly (TypeError): ``Device.command_queue`` is the default queue, ``Device.new_command_queue()``
    makes another.

    MPS: MTLCommandQueue
    """

    def __init__(self):
        raise TypeError("make command queues with Device.new_command_queue() or Device.command_queue")

    @property
    def device(self):
        """The device the queue's commands run on.

        MPS: MTLCommandQueue.device
        """
        return wrap_device(self.native().device_ptr())

    def command_buffer(self, bint replayable=False):
        """A new command buffer of this queue.

        ``replayable=True`` keeps what is encoded onto it after it completes, so that ``replay()`` runs the same
        commands again (on cuda, as one CUDA graph launch).

        MPS: -[MTLCommandQueue commandBuffer]
        """
        cdef CommandBuffer cb = CommandBuffer.__new__(CommandBuffer)
        cb.c = self.native().command_buffer(replayable)
        return cb

    def wait_until_idle(self):
        """Blocks until every committed command buffer of the queue has finished.

        Ctrl-C (a signal handler that raises, on the main thread) ends the wait within about 10 ms; the command
        buffers go on running.

        MPS: none (mpsx)
        """
        cdef CCommandQueue* queue = self.native()
        with nogil:
            queue.wait_until_idle()


cdef void _call_completed_handler(object handler, CCommandBuffer& command_buffer) noexcept with gil:
    # A handler cannot fail a completed command buffer: what it raises is
    # reported through sys.unraisablehook.
    cdef CommandBuffer cb = CommandBuffer.__new__(CommandBuffer)
    cb.c = command_buffer.shared_from_this()
    handler(cb)


_STATUS = ("not_enqueued", "committed", "completed", "error")


cdef class CommandBuffer:
    """CommandBuffer()
--

    Commands encoded onto it run, in order, after ``commit()``.

    Used as a context manager it commits and waits on exit (unless the body raised). It keeps every resource encoded
    onto it alive until it completes. Not made directly (TypeError): ``CommandQueue.command_buffer()`` makes one.

    MPS: MTLCommandBuffer
    """

    def __init__(self):
        raise TypeError("make command buffers with CommandQueue.command_buffer()")

    @property
    def device(self):
        """The device the command buffer's commands run on.

        MPS: MTLCommandBuffer.device
        """
        return wrap_device(self.native().device_ptr())

    def commit(self):
        """Submits the command buffer to its queue; it runs after the command buffers committed before it. Nothing can
        be encoded onto it afterwards (StateError).

        MPS: -[MTLCommandBuffer commit]
        """
        self.native().commit()

    def replay(self):
        """Runs the encoded commands once more, after the last run completed (a replayable command buffer only).

        The commands read and write the same images, states and buffers with the arguments they were encoded with:
        write new inputs into the source images in place between replays. Completed handlers and data source updates
        run again after each replay.

        MPS: none (mpsx)
        """
        self.native().replay()

    @property
    def replayable(self):
        """Whether the command buffer keeps its commands for ``replay()``
        (``CommandQueue.command_buffer(replayable=True)``).

        MPS: none (mpsx)
        """
        return self.native().replayable()

    def wait_until_completed(self):
        """Blocks until the command buffer has completed (or failed: see ``status`` and ``error``).

        Ctrl-C (a signal handler that raises, on the main thread) ends the wait within about 10 ms with that
        exception (KeyboardInterrupt); the command buffer goes on running and can be waited for again.

        MPS: -[MTLCommandBuffer waitUntilCompleted]
        """
        cdef CCommandBuffer* command_buffer = self.native()
        with nogil:
            command_buffer.wait_until_completed()

    @property
    def status(self):
        """``"not_enqueued"``, ``"committed"``, ``"completed"`` or ``"error"``.

        MPS: MTLCommandBuffer.status
        """
        return _STATUS[<int>self.native().status()]

    @property
    def error(self):
        """The exception raised while the command buffer ran (status ``"error"``), or None.

        MPS: MTLCommandBuffer.error
        """
        if self.native().status() != CommandBufferStatus.Error:
            return None
        try:
            raise_stored(self.native().error())
        except BaseException as e:
            return e
        return None

    @property
    def command_count(self):
        """The number of commands encoded so far.

        MPS: none (mpsx)
        """
        return self.native().command_count()

    def add_completed_handler(self, handler):
        """Calls ``handler(command_buffer)`` once the command buffer has completed or failed, on any thread.

        What the handler raises is reported through ``sys.unraisablehook``; it cannot fail the command buffer.
        TypeError for a handler that is not callable.

        MPS: -[MTLCommandBuffer addCompletedHandler:]
        """
        if not callable(handler):
            raise TypeError(f"expected a callable completed handler, given {type(handler).__name__}")
        self.native().add_completed_handler(completed_handler(handler, _call_completed_handler))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
            self.wait_until_completed()
        return False

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.CommandBuffer {self.status} on {self.device.name}>"


# ---------------------------------------------------------------- buffers

cdef Buffer wrap_buffer(const shared_ptr[CBuffer]& buffer, object dtype, tuple shape):
    cdef Buffer b = Buffer.__new__(Buffer)
    b.c = buffer
    b._dtype = np.dtype(dtype)
    b._shape = shape
    return b


# ---------------------------------------------------------------- DLPack

cdef void _dlpack_capsule_destructor(object capsule) noexcept:
    # A capsule no consumer took still owns its tensor.
    cdef DLManagedTensor* managed
    cdef DLManagedTensorVersioned* versioned
    if PyCapsule_IsValid(capsule, kTensorCapsule):
        managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, kTensorCapsule)
        if managed.deleter != NULL:
            managed.deleter(managed)
    elif PyCapsule_IsValid(capsule, kVersionedCapsule):
        versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, kVersionedCapsule)
        if versioned.deleter != NULL:
            versioned.deleter(versioned)


cdef object _capsule(const Exported& exported):
    try:
        return PyCapsule_New(exported.managed, kVersionedCapsule if exported.versioned else kTensorCapsule,
                             _dlpack_capsule_destructor)
    except BaseException:
        release(exported)
        raise


cdef Copy _copy_argument(object copy) except *:
    if copy is None:
        return Copy.IfNeeded
    if isinstance(copy, (bool, np.bool_)):
        return Copy.Always if copy else Copy.Never
    raise TypeError(f"copy must be None, True or False, given {type(copy).__name__} {copy!r}")


cdef tuple _int_pair(object value, str name):
    """A (first, second) pair of ints that fit int32 (DLPack's devices and versions)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a tuple of 2 ints, given {type(value).__name__} {value!r}")
    first, second = integer_argument(value[0], f"{name}[0]"), integer_argument(value[1], f"{name}[1]")
    if not (-2**31 <= first < 2**31 and -2**31 <= second < 2**31):
        raise ValueError(f"{name} must be 32-bit ints, given {value!r}")
    return first, second


cdef ExportRequest _export_request(const CDevice& device, object stream, object max_version, object dl_device,
                                   object copy) except *:
    """__dlpack__'s arguments, checked as the DLPack protocol defines them."""
    cdef bint versioned = max_version is not None and _int_pair(max_version, "max_version")[0] >= 1
    cdef DLDevice to
    if dl_device is not None:
        to.device_type, to.device_id = _int_pair(dl_device, "dl_device")
    cdef Copy c = _copy_argument(copy)
    cdef int64_t s = 0 if stream is None else integer_argument(stream, "stream")
    return export_request(device, versioned, stream is not None, s, dl_device is not None, to, c)


cdef object _dlpack_capsule_of(Device device, object tensor):
    """`tensor` if it is a capsule, else the capsule its __dlpack__ gives once its device was checked: its work
    ordered before mpsx's import stream (the DLPack stream protocol), as a versioned capsule where it makes one."""
    if PyCapsule_CheckExact(tensor):
        return tensor
    try:
        dlpack, dlpack_device = tensor.__dlpack__, tensor.__dlpack_device__
    except AttributeError:
        raise TypeError(f"expected a DLPack tensor (an object with __dlpack__ and __dlpack_device__: a torch, "
                        f"numpy >= 1.23, cupy or jax array) or a DLPack capsule, given "
                        f"{type(tensor).__name__}") from None
    where = dlpack_device()
    device_type, device_id = _int_pair(where, "__dlpack_device__()")
    check_device(device.native()[0], device_type, device_id)
    cdef int64_t stream = import_stream(device.native()[0])
    stream_argument = stream if stream else None
    try:
        return dlpack(stream=stream_argument, max_version=(1, 0))
    except TypeError:
        # Producers older than DLPack 1.0 (numpy < 2.1, torch < 2.4) take no max_version.
        return dlpack(stream=stream_argument)


cdef object _import_dlpack(Device device, object tensor, ImportAs import_as, object copy):
    """What from_dlpack makes: an Image, ImageBatch or Buffer of `tensor`."""
    cdef Copy c = _copy_argument(copy)
    device.native()
    capsule = _dlpack_capsule_of(device, tensor)
    cdef bint versioned = PyCapsule_IsValid(capsule, kVersionedCapsule)
    cdef const char* name
    if not versioned and not PyCapsule_IsValid(capsule, kTensorCapsule):
        name = PyCapsule_GetName(capsule)
        given = "an unnamed capsule" if name == NULL else f"a capsule named {name.decode(errors='replace')!r}"
        if name != NULL and name.startswith(b"used_"):
            raise ValueError(f"the DLPack capsule was consumed already ({given}): a capsule gives its tensor once; "
                             f"ask the producer's __dlpack__() for a new one")
        raise TypeError(f"expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', given {given}")
    name = kVersionedCapsule if versioned else kTensorCapsule
    cdef ImportPlan plan = plan_import(device.shared(), PyCapsule_GetPointer(capsule, name), versioned, import_as, c)
    # Consumed: mpsx calls the tensor's deleter from now on.
    PyCapsule_SetName(capsule, kUsedVersionedCapsule if versioned else kUsedTensorCapsule)
    cdef shared_ptr[CImage] image
    cdef shared_ptr[CBuffer] buffer
    if import_as == ImportAs.Buffer:
        with nogil:
            buffer = import_buffer(plan)
        return wrap_buffer(buffer, numpy_of(plan.data_type), tuple(plan.shape))
    with nogil:
        image = import_image(plan)
    return wrap_image(image) if import_as == ImportAs.Image else wrap_image_batch(image)


cdef class Buffer:
    """Buffer()
--

    Device memory; the gradient and weight buffers of states carry a dtype and shape.

    Host access (``to_numpy``, ``numpy.asarray``, DLPack) follows MPS rules: memory a command buffer writes is
    readable only after ``synchronize(command_buffer)`` and its completion; earlier reads raise
    SynchronizationError. Not made directly (TypeError): buffers come from states, vectors and kernels.

    MPS: MTLBuffer
    """

    def __init__(self):
        raise TypeError("buffers come from states, vectors and kernels")

    @property
    def length(self):
        """The buffer's length in bytes.

        MPS: MTLBuffer.length
        """
        return self.native().length()

    @property
    def device(self):
        """The device that holds the buffer.

        MPS: MTLResource.device
        """
        return wrap_device(self.native().device_ptr())

    @property
    def dtype(self):
        """The numpy dtype of the buffer's values.

        MPS: none (mpsx)
        """
        return self._dtype

    @property
    def shape(self):
        """The shape of the buffer's values, as ``to_numpy()`` returns them.

        MPS: none (mpsx)
        """
        return self._shape

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the buffer readable on the host once it has completed.

        MPS: -[MTLBlitCommandEncoder synchronizeResource:]
        """
        self.native().synchronize(command_buffer.native()[0])

    cdef bint _host_addressable(self) except -1:
        return self.native().device().host_addressable()

    def to_numpy(self, copy=None):
        """The contents as a numpy array of the buffer's dtype and shape.

        Where the host addresses device memory (cpu; metal's shared storage on unified memory) this is a view of the
        buffer unless ``copy=True``; elsewhere a copy. Raises SynchronizationError for memory a command buffer wrote
        that was not synchronized, or whose command buffer has not completed.

        MPS: MTLBuffer.contents
        """
        self.native().check_host_readable(b"the buffer")
        if self._host_addressable() and not copy:
            return np.asarray(self)
        out = np.empty(self._shape, dtype=self._dtype)
        cdef unsigned char[::1] raw = out.reshape(-1).view(np.uint8)
        self.native().read(&raw[0], 0, raw.shape[0], b"the buffer")
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.to_numpy(copy=copy)
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if not self._host_addressable():
            raise BufferError(f"{self.device.name} buffers are not in host memory; use to_numpy() for a copy")
        self.native().check_host_readable(b"the buffer")
        cdef Py_ssize_t itemsize = self._dtype.itemsize
        cdef int ndim = len(self._shape)
        cdef int i
        cdef Py_ssize_t stride = itemsize
        for i in range(ndim - 1, -1, -1):
            self._view_shape[i] = self._shape[i]
            self._view_strides[i] = stride
            stride *= self._shape[i]
        view.buf = self.native().data()
        view.obj = self
        view.len = stride
        view.readonly = 0
        view.itemsize = itemsize
        view.format = _FORMAT[self._dtype.char]
        view.ndim = ndim
        view.shape = self._view_shape
        view.strides = self._view_strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dlpack_device__(self):
        """(device type, device id) of the buffer for DLPack: (1, 0), the CPU, on cpu and metal (unified
        memory), (2, ordinal), CUDA, on cuda.

        MPS: none (mpsx)
        """
        cdef DLDevice d = dlpack_device_of(self.native().device())
        return (d.device_type, d.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the buffer's values (its dtype and shape, row-major), for ``torch.from_dlpack``,
        ``numpy.from_dlpack``, cupy and jax: the buffer's own memory, or with ``copy=True`` a copy on the device.

        As the DLPack protocol defines the arguments: ``stream`` is the consumer's stream on cuda, made to wait
        for the command buffer that last writes the buffer (committed, not necessarily completed; ``-1``: no
        ordering); on the host this waits for it instead. No ``synchronize`` is needed. ``max_version`` of
        (1, 0) or later gives a versioned capsule. ``dl_device=(1, 0)`` on cuda gives a host copy.
        The consumer aliases the buffer: what later command buffers write, it sees.

        MPS: none (mpsx)
        """
        self.native()
        cdef shared_ptr[CBuffer] buffer = self.c
        cdef ExportRequest request = _export_request(buffer.get().device(), stream, max_version, dl_device, copy)
        cdef CDataType data_type = data_type_of_numpy(self._dtype)
        cdef vector[int64_t] shape = self._shape
        cdef Exported exported
        with nogil:
            exported = export_buffer(buffer, data_type, shape, request)
        return _capsule(exported)

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """A buffer of a DLPack tensor's values (torch, numpy >= 1.23, cupy or jax; or a DLPack capsule), on
        ``device``, which the tensor must be on: float32, float16 or uint8, of any shape up to 8 dims.

        A row-major tensor is shared without a copy (``copy=None``, the default): the buffer keeps the tensor
        alive, and each side sees what the other writes. Other strides, a read-only tensor or ``copy=True``
        give a copy on the device; ``copy=False`` raises ``BufferError`` where sharing is impossible. On cuda
        the producer's pending work is ordered before mpsx's through the DLPack stream protocol.

        MPS: none (mpsx)
        """
        return _import_dlpack(device, tensor, ImportAs.Buffer, copy)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.Buffer {self.length} bytes {self._dtype} {self._shape} on {self.device.name}>"


cdef dict _FORMAT = {"f": b"f", "e": b"e", "B": b"B"}


cdef shared_ptr[CBuffer] buffer_from_numpy(Device device, object array, object dtype, str name) except *:
    """A new buffer holding a copy of `array` as `dtype`; an mpsx.Buffer passes through."""
    if array is None:
        raise TypeError(f"{name} must be an mpsx.Buffer or an array, given None")
    if isinstance(array, Buffer):
        if (<Buffer>array).native().device_ptr().get() != device.native():
            raise DeviceMismatchError(f"the buffer is on device {(<Buffer>array).device.name}, expected {device.name}")
        return (<Buffer>array).c
    a = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
    cdef shared_ptr[CBuffer] b = make_native[CBuffer](device.shared(), <size_t>a.nbytes)
    cdef const unsigned char[::1] raw = a.view(np.uint8)
    if raw.shape[0]:
        b.get().write(&raw[0], 0, raw.shape[0])
    return b


cdef class Vector:
    """Vector(device, length, data_type=DataType.FLOAT32)
--

    ``length`` values of one data type (FLOAT32 by default), zero at first, in a Buffer.

    Optimizers keep their momentum, velocity and sums of squares in vectors, and update plain vectors of values.
    ValueError for a negative length. As ``-[MPSVector initWithDevice:descriptor:]``.

    MPS: MPSVector
    """

    def __init__(self, Device device not None, length, data_type=DataType.FLOAT32):
        cdef int64_t n = integer_argument(length, "Vector length")
        if n < 0:
            raise ValueError(f"Vector length must be a non-negative int, given {n}")
        self.c = make_native[CVector](device.shared(), <size_t>n, <CDataType><int>DataType(data_type))
        self.native().buffer().get().fill_zero()

    @staticmethod
    def from_numpy(Device device not None, array):
        """A new vector on ``device`` holding a copy of a 1-D float32 or float16 array (ValueError for another number
        of dimensions, TypeError for another dtype).

        MPS: -[MPSVector initWithDevice:descriptor:]
        """
        a = np.ascontiguousarray(array)
        if a.ndim != 1:
            raise ValueError(f"expected a 1-D array, given shape {a.shape}")
        cdef Vector v = Vector(device, a.shape[0], <int>data_type_of_numpy(a.dtype))
        v.write(a)
        return v

    cpdef write(self, array):
        """Copies a 1-D array of the vector's length into it, converted to the vector's data type (a host write).

        Raises SynchronizationError while a committed command buffer that reads or writes the vector has not
        completed.

        MPS: MTLBuffer.contents
        """
        a = np.ascontiguousarray(array, dtype=numpy_of(self.native().data_type()))
        if a.shape != (self.native().length(),):
            raise ValueError(f"expected an array of shape ({self.native().length()},), given {a.shape}")
        self.native().buffer().get().check_host_writable(b"the vector")
        cdef const unsigned char[::1] raw = a.reshape(-1).view(np.uint8)
        if raw.shape[0]:
            self.native().buffer().get().write(&raw[0], 0, raw.shape[0])

    @property
    def length(self):
        """The number of values.

        MPS: MPSVector.length
        """
        return self.native().length()

    @property
    def data_type(self):
        """The data type of the values.

        MPS: MPSVector.dataType
        """
        return DataType(<int>self.native().data_type())

    @property
    def device(self):
        """The device that holds the vector.

        MPS: MPSVector.device
        """
        return wrap_device(self.native().buffer().get().device_ptr())

    @property
    def buffer(self):
        """The Buffer holding the values (shape ``(length,)``).

        MPS: MPSVector.data
        """
        return wrap_buffer(self.native().buffer(), numpy_of(self.native().data_type()),
                           (self.native().length(),))

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the vector readable on the host once it has completed.

        MPS: -[MPSVector synchronizeOnCommandBuffer:]
        """
        self.native().buffer().get().synchronize(command_buffer.native()[0])

    def to_numpy(self):
        """A copy of the values (SynchronizationError for unsynchronized device writes).

        MPS: MTLBuffer.contents
        """
        return self.buffer.to_numpy(copy=True)

    def __len__(self):
        return self.native().length()

    def __mpsx_state__(self):
        """The device and the values, read on the host: after synchronize(cb) on the command buffer
        that last wrote them, once it has completed (SynchronizationError before)."""
        return {"device": self.device, "values": self.to_numpy()}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return Vector.from_numpy(state["device"], state["values"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.Vector {self.length} x {self.data_type.name.lower()} on {self.device.name}>"


# ---------------------------------------------------------------- images

cdef class ImageDescriptor:
    """ImageDescriptor(channel_format=DataType.FLOAT32, width=None, height=None, feature_channels=None,
        number_of_images=1)
--

    The format and size of an image: ``number_of_images`` images of ``feature_channels`` x ``height`` x ``width``
    values of ``channel_format``.

    ``width``, ``height`` and ``feature_channels`` are required (keywords allowed, as in MPS's factory); ValueError
    for sizes out of the limits of docs/semantics.md. Descriptors compare equal by format and shape. As
    ``+[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:numberOfImages:usage:]``.

    MPS: MPSImageDescriptor
    """

    def __init__(self, channel_format=DataType.FLOAT32, width=None, height=None, feature_channels=None,
                 number_of_images=1):
        if width is None or height is None or feature_channels is None:
            raise TypeError("ImageDescriptor needs width, height and feature_channels")
        self.c.channel_format = <CDataType><int>DataType(channel_format)
        self.c.width = integer_argument(width, "width")
        self.c.height = integer_argument(height, "height")
        self.c.feature_channels = integer_argument(feature_channels, "feature_channels")
        self.c.number_of_images = integer_argument(number_of_images, "number_of_images")
        self.c.validate()

    @property
    def channel_format(self):
        """The data type of the values.

        MPS: MPSImageDescriptor.channelFormat
        """
        return DataType(<int>self.c.channel_format)

    @property
    def width(self):
        """The width in pixels.

        MPS: MPSImageDescriptor.width
        """
        return self.c.width

    @property
    def height(self):
        """The height in pixels.

        MPS: MPSImageDescriptor.height
        """
        return self.c.height

    @property
    def feature_channels(self):
        """The number of feature channels per pixel.

        MPS: MPSImageDescriptor.featureChannels
        """
        return self.c.feature_channels

    @property
    def number_of_images(self):
        """The number of images.

        MPS: MPSImageDescriptor.numberOfImages
        """
        return self.c.number_of_images

    @property
    def shape(self):
        """``(number_of_images, feature_channels, height, width)``: the shape of the image as a numpy array.

        MPS: none (mpsx)
        """
        return (self.c.number_of_images, self.c.feature_channels, self.c.height, self.c.width)

    def __eq__(self, other):
        if not isinstance(other, ImageDescriptor):
            return NotImplemented
        return (self.channel_format, self.shape) == (other.channel_format, other.shape)

    def __hash__(self):
        return hash((self.channel_format, self.shape))

    def __mpsx_state__(self):
        return {"arguments": (self.channel_format, self.width, self.height, self.feature_channels,
                              self.number_of_images)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        return (f"mpsx.ImageDescriptor({self.channel_format!r}, width={self.width}, height={self.height}, "
                f"feature_channels={self.feature_channels}, number_of_images={self.number_of_images})")


cdef ImageDescriptor wrap_descriptor(const CImageDescriptor& d):
    cdef ImageDescriptor out = ImageDescriptor.__new__(ImageDescriptor)
    out.c = d
    return out


cdef Image wrap_image(const shared_ptr[CImage]& image):
    cdef Image out = Image.__new__(Image)
    out.c = image
    return out


cdef ImageBatch wrap_image_batch(const shared_ptr[CImage]& image):
    cdef ImageBatch out = ImageBatch.__new__(ImageBatch)
    out.c = image
    return out


cdef shared_ptr[CImage] image_of(object images) except *:
    """The native image of an Image or ImageBatch."""
    if isinstance(images, Images):
        return (<Images>images).shared()
    raise TypeError(f"expected an mpsx.Image or mpsx.ImageBatch, given {type(images).__name__}")


def _batch_of(CommandBuffer command_buffer, images):
    """The native batch of an ImageBatch, an Image or a list of Images."""
    cdef vector[shared_ptr[CImage]] items
    if isinstance(images, Images):
        return images
    if isinstance(images, (list, tuple)):
        for i, item in enumerate(images):
            if not isinstance(item, Image):
                raise TypeError(f"expected a list of mpsx.Image, item {i} is {type(item).__name__}")
            items.push_back((<Image>item).shared())
        return wrap_image_batch(CImage.gather(command_buffer.native()[0], items))
    raise TypeError(f"expected an mpsx.ImageBatch or a list of mpsx.Image, given {type(images).__name__}")


cdef _from_numpy(shared_ptr[CImage]* out, Device device, array, bint batch):
    a = np.asarray(array)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.ndim == 3 and not batch:
        a = a[None]
    if a.ndim != 4:
        raise ValueError(f"expected an (N, C, H, W) array{'' if batch else ' or (C, H, W)'}, given shape {a.shape}")
    a = np.ascontiguousarray(a)
    cdef CImageDescriptor d
    d.channel_format = data_type_of_numpy(a.dtype)
    d.number_of_images, d.feature_channels, d.height, d.width = a.shape
    d.validate()
    out[0] = make_native[CImage](device.shared(), d)
    cdef const unsigned char[::1] raw = a.reshape(-1).view(np.uint8)
    out[0].get().write(&raw[0], raw.shape[0], d.channel_format)


cdef _to_numpy(const shared_ptr[CImage]& image):
    cdef const CImageDescriptor* d = &image.get().descriptor()
    out = np.empty((d.number_of_images, d.feature_channels, d.height, d.width), dtype=numpy_of(d.channel_format))
    cdef unsigned char[::1] raw = out.reshape(-1).view(np.uint8)
    image.get().read(&raw[0], raw.shape[0], d.channel_format)
    return out


cdef _write(const shared_ptr[CImage]& image, array):
    cdef const CImageDescriptor* d = &image.get().descriptor()
    shape = (d.number_of_images, d.feature_channels, d.height, d.width)
    a = np.asarray(array)
    if a.shape != shape and not (d.number_of_images == 1 and a.shape == shape[1:]):
        raise ValueError(f"expected an array of shape {shape}"
                         f"{' or ' + str(shape[1:]) if d.number_of_images == 1 else ''}, given {a.shape}")
    # Float32 and float16 go between each other in native code (cuda: on the device), not through numpy's slow
    # float16 casts on the host.
    cdef CDataType host_type = d.channel_format
    if a.dtype in (np.float32, np.float16) and host_type in (CDataType.Float32, CDataType.Float16):
        host_type = data_type_of_numpy(a.dtype)
    a = np.ascontiguousarray(a, dtype=numpy_of(host_type))
    cdef const unsigned char[::1] raw = a.reshape(-1).view(np.uint8)
    image.get().write(&raw[0], raw.shape[0], host_type)


# Images are made per encode: a freelist spares their allocation.
@cython.freelist(256)
cdef class Images:
    """Images(*args)
--

    What Image and ImageBatch share: N images of one size and format in one allocation, read and written on the host
    as (N, C, H, W) arrays. Not made directly (TypeError).

    MPS: MPSImage
    """

    def __init__(self, *args):
        raise TypeError("make an mpsx.Image or an mpsx.ImageBatch")

    def to_numpy(self):
        """A copy of the values as an (N, C, H, W) array of the image's data type.

        Raises SynchronizationError for values a command buffer wrote that were not synchronized, or whose command
        buffer has not completed.

        MPS: -[MPSImage readBytes:dataLayout:imageIndex:]
        """
        return _to_numpy(self.shared())

    def __array__(self, dtype=None, copy=None):
        a = _to_numpy(self.shared())
        return a if dtype is None else a.astype(dtype, copy=False)

    def write(self, array):
        """Copies an array of the images' shape (N, C, H, W; (C, H, W) for one image) in, converted to their data type
        (a host write). ValueError for another shape; SynchronizationError while a committed command buffer that reads
        or writes the images has not completed (``wait_until_completed()`` first).

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        _write(self.shared(), array)

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the images readable on the host once it has completed.

        MPS: -[MPSImage synchronizeOnCommandBuffer:]
        """
        self.native().synchronize(command_buffer.native()[0])

    @property
    def width(self):
        """The width in pixels.

        MPS: MPSImage.width
        """
        return self.native().width()

    @property
    def height(self):
        """The height in pixels.

        MPS: MPSImage.height
        """
        return self.native().height()

    @property
    def feature_channels(self):
        """The number of feature channels per pixel.

        MPS: MPSImage.featureChannels
        """
        return self.native().feature_channels()

    @property
    def data_type(self):
        """The data type of the values.

        MPS: MPSImage.featureChannelFormat
        """
        return DataType(<int>self.native().data_type())

    @property
    def shape(self):
        """``(number_of_images, feature_channels, height, width)``.

        MPS: none (mpsx)
        """
        return (self.native().number_of_images(), self.native().feature_channels(),
                self.native().height(), self.native().width())

    @property
    def device(self):
        """The device that holds the images.

        MPS: MPSImage.device
        """
        return wrap_device(self.native().device_ptr())

    def __dlpack_device__(self):
        """(device type, device id) of the images for DLPack: (1, 0), the CPU, on cpu and metal (where
        ``__dlpack__(copy=True)`` copies them to), (2, ordinal), CUDA, on cuda.

        MPS: none (mpsx)
        """
        cdef DLDevice d = dlpack_device_of(self.native().device())
        return (d.device_type, d.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the images as an (N, C, H, W) tensor, as ``to_numpy()`` shapes them, for
        ``torch.from_dlpack``, ``numpy.from_dlpack``, cupy and jax.

        On cpu and cuda it shares the images' memory, whose NHWC layout its strides describe (in PyTorch, an
        NCHW tensor in the channels_last memory format): the consumer sees what later command buffers write,
        and they see what it writes. ``copy=True`` gives a dense (N, C, H, W) copy on the device. Metal keeps
        pixels in textures, which DLPack cannot describe: there ``copy=True`` (or ``to_numpy()``) copies them
        to host memory, and anything else raises ``BufferError``.

        As the DLPack protocol defines the arguments: ``stream`` is the consumer's stream on cuda, made to wait
        for the command buffer that last writes the images (committed, not necessarily completed; ``-1``: no
        ordering); on the host this waits for it instead. No ``synchronize`` is needed. ``max_version`` of
        (1, 0) or later gives a versioned capsule. ``dl_device=(1, 0)`` on cuda gives a host copy, read as
        ``to_numpy()`` reads.

        MPS: none (mpsx)
        """
        cdef shared_ptr[CImage] image = self.shared()
        cdef ExportRequest request = _export_request(image.get().device(), stream, max_version, dl_device, copy)
        cdef Exported exported
        with nogil:
            exported = export_image(image, request)
        return _capsule(exported)

    def __mpsx_state__(self):
        return {"arguments": (self.device, self.to_numpy())}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls.from_numpy(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        n, c, h, w = self.shape
        return f"<mpsx.{type(self).__name__} {n}x{c}x{h}x{w} {self.data_type.name.lower()} on {self.device.name}>"


cdef class Image(Images):
    """Image(device, descriptor)
--

    An image: ``number_of_images`` x ``feature_channels`` x ``height`` x ``width`` values, allocated on ``device``
    as ``descriptor`` says (zero at first).

    ``Image.from_numpy(device, array)`` copies an (N, C, H, W) or (C, H, W) float32, float16 or uint8 array in. An
    image of several images is one MPSImage with ``numberOfImages`` > 1, which kernels treat as a batch. As
    ``-[MPSImage initWithDevice:imageDescriptor:]``.

    MPS: MPSImage
    """

    def __init__(self, Device device not None, ImageDescriptor descriptor not None):
        self.c = make_native[CImage](device.shared(), descriptor.c)

    @staticmethod
    def from_numpy(Device device not None, array):
        """A new image on ``device`` holding a copy of an (N, C, H, W) or (C, H, W) array (float32, float16 or uint8;
        float64 is converted to float32). ValueError for another number of dimensions.

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        cdef Image image = Image.__new__(Image)
        _from_numpy(&image.c, device, array, False)
        return image

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """An image of a DLPack tensor (torch, numpy >= 1.23, cupy or jax; or a DLPack capsule) of shape
        (N, C, H, W) or (C, H, W), float32, float16, bfloat16 or uint8, on ``device``, which the tensor must be on.

        A tensor laid out as the device lays out images is shared without a copy (``copy=None``, the default):
        on cpu and cuda an NHWC one, in PyTorch ``x.contiguous(memory_format=torch.channels_last)``. The image
        keeps the tensor alive, and each side sees what the other writes. Other strides, a read-only tensor or
        ``copy=True`` give a copy on the device (metal: always); ``copy=False`` raises ``BufferError`` where
        sharing is impossible. On cuda the producer's pending work is ordered before mpsx's through the DLPack
        stream protocol, never through the host.

        MPS: none (mpsx)
        """
        return _import_dlpack(device, tensor, ImportAs.Image, copy)

    @property
    def descriptor(self):
        """The image's descriptor.

        MPS: none (mpsx)
        """
        return wrap_descriptor(self.native().descriptor())

    @property
    def number_of_images(self):
        """The number of images.

        MPS: MPSImage.numberOfImages
        """
        return self.native().number_of_images()


cdef class ImageBatch(Images):
    """ImageBatch(device, descriptor)
--

    N images in one allocation, as ``descriptor`` says (``descriptor.number_of_images`` is the batch size).

    ``len(batch)`` is N; ``batch[i]`` is image i and ``batch[i:j]`` a batch of images i to j - 1, each sharing the
    batch's memory; iterating yields the images. ``ImageBatch.from_numpy(device, array)`` copies an (N, C, H, W)
    array in.

    MPS: MPSImageBatch
    """

    def __init__(self, Device device not None, ImageDescriptor descriptor not None):
        self.c = make_native[CImage](device.shared(), descriptor.c)

    @staticmethod
    def from_numpy(Device device not None, array):
        """A new batch on ``device`` holding a copy of an (N, C, H, W) array (float32, float16 or uint8; float64 is
        converted to float32). ValueError for another number of dimensions.

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        cdef ImageBatch batch = ImageBatch.__new__(ImageBatch)
        _from_numpy(&batch.c, device, array, True)
        return batch

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """A batch of the N images of an (N, C, H, W) DLPack tensor, shared or copied as ``Image.from_dlpack``
        does.

        MPS: none (mpsx)
        """
        return _import_dlpack(device, tensor, ImportAs.ImageBatch, copy)

    def __len__(self):
        return self.native().number_of_images()

    def __getitem__(self, index):
        cdef int64_t n = self.native().number_of_images()
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("image batches slice with step 1 only")
            return wrap_image_batch(make_native[CImage](self.native()[0], <int64_t>start, <int64_t>(stop - start)))
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"image batch indices must be ints or slices, given {type(index).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"image {index} of a batch of {n}")
        return wrap_image(make_native[CImage](self.native()[0], <int64_t>i, <int64_t>1))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def descriptor(self):
        """The descriptor of one image of the batch (``number_of_images`` 1).

        MPS: none (mpsx)
        """
        cdef ImageDescriptor d = wrap_descriptor(self.native().descriptor())
        d.c.number_of_images = 1
        return d


# ---------------------------------------------------------------- states

cdef class State:
    """State()
--

    What a forward encode leaves for its gradient, for one batch, and the base of every state class.

    States come from kernels (``result_state`` or ``encode(..., destination_state=True)``); made directly it raises
    TypeError.

    MPS: MPSState
    """

    def __init__(self):
        raise TypeError("states come from kernels (result_state or encode(..., destination_state=True))")

    @property
    def device(self):
        """The device that holds the state's buffers.

        MPS: none (mpsx)
        """
        return wrap_device(self.native().device_ptr())

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the state's buffers readable on the host once it has completed.

        MPS: -[MPSState synchronizeOnCommandBuffer:]
        """
        self.native().synchronize(command_buffer.native()[0])

    @property
    def is_temporary(self):
        """Whether the state is temporary: made by ``temporary_result_state`` or an encode with
        ``destination_state_is_temporary=True``, valid only on that command buffer until ``read_count`` reaches 0.
        Other states are valid on any command buffer of their device.

        MPS: MPSState.isTemporary
        """
        return self.native().is_temporary()

    @property
    def read_count(self):
        """How many more gradient encodes may read a temporary state (1 when made; each such encode takes 1 off, and
        at 0 the state may no longer be used). Always 0 for a non-temporary state, which setting leaves as it is.
        Setting a temporary state's count once it is 0 raises StateError; a negative count ValueError.

        MPS: MPSState.readCount
        """
        return self.native().read_count()

    @read_count.setter
    def read_count(self, value):
        self.native().set_read_count(integer_argument(value, "read_count"))

    def _saved_values(self):
        """The constructor's arguments after the device: the values of a state made from values
        (weights and biases, gamma and beta, mean and variance), which define how it is saved."""
        raise TypeError(f"mpsx cannot save a {type(self).__name__}: it belongs to the encode that made it; only "
                        f"states made from values (weights and biases, gamma and beta, mean and variance) are saved")

    def __mpsx_state__(self):
        """The device and the values, read on the host: after synchronize(cb) on the command buffer
        that last wrote them, once it has completed (SynchronizationError before)."""
        return {"arguments": (self.device,) + tuple(self._saved_values())}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__} ({self.native().class_name().decode()}) on {self.device.name}>"


class StateBatch(tuple):
    """One state per image of a batch: ``count`` times ``state``, a tuple.

    Encodes over a batch return one; for kernels whose state is reused across the batch (convolution, batch
    normalization) every item is the same state. ValueError for a count out of range.

    MPS: MPSStateBatch
    """

    def __new__(cls, state, count):
        n = integer_argument(count, "StateBatch count")
        if not 0 <= n <= kMaxDimension:  # one state per image
            raise ValueError(f"StateBatch count must be between 0 and {kMaxDimension}, given {n}")
        return tuple.__new__(cls, (state,) * n)


def state_batch_increment_read_count(batch, amount):
    """Adds ``amount`` (negative to lower) to the read count of each distinct state of ``batch`` (a StateBatch, a list
    of states or None) once, however often it appears; returns the number of distinct states.

    MPS: MPSStateBatchIncrementReadCount()
    """
    if batch is None:
        return 0
    cdef int64_t n = integer_argument(amount, "amount")
    distinct = []
    for state in batch:
        if not isinstance(state, State):
            raise TypeError(f"expected a batch of mpsx states, given an item of type {type(state).__name__}")
        if not any(state is seen for seen in distinct):
            distinct.append(state)
    for state in distinct:  # every count checked first, so that a refusal changes none
        (<State>state).native()
        if (<State>state).c.get().is_temporary() and (<State>state).c.get().read_count() + n < 0:
            raise ValueError(f"read_count must stay 0 or more: {(<State>state).c.get().read_count()} + {n}")
    for state in distinct:
        if (<State>state).c.get().is_temporary():
            state.read_count = (<State>state).c.get().read_count() + n
    return len(distinct)


# ---------------------------------------------------------------- data parallel


cdef int _call_host_all_reduce(PyObject* function, float* data, size_t count, int mean) except -1:
    values = np.asarray(<float[:count]> data)
    (<object>function)(values, "mean" if mean else "sum")
    return 0


def _new_group_id(Device device not None, str library not None=""):
    """What rank 0 makes and hands the others before they join a group (NCCL's unique id; b"" on cpu)."""
    return new_group_id(device.native()[0], library.encode())


cdef class Communicator:
    """Communicator(device, rank, world_size, group_id=b"", library="", host_all_reduce=None, timeout=300,
        bucket_bytes=26214400)
--

    A member of a data-parallel group, one process per device, that encodes the group's collectives.

    ``mpsx.distributed.init`` makes it: rank ``rank`` of ``world_size``; ``group_id`` and ``library`` are NCCL's
    unique id and library path on cuda; ``host_all_reduce(values, op)`` sums a float32 array in place across the
    group on cpu (MPI); a collective that does not finish within ``timeout`` seconds fails with DistributedError;
    ``bucket_bytes`` is the size of the buckets gradients are packed into.

    MPS: none (mpsx)
    """

    def __init__(self, Device device not None, rank, world_size, bytes group_id not None=b"", str library not None="",
                 host_all_reduce=None, double timeout=300, bucket_bytes=25 << 20):
        cdef CCollectiveDescriptor d
        cdef int64_t bucket = integer_argument(bucket_bytes, "bucket_bytes")
        cdef int64_t r = integer_argument(rank, "rank"), n = integer_argument(world_size, "world_size")
        if bucket < 4:
            raise ValueError(f"bucket_bytes: expected at least 4 bytes, given {bucket}")
        if not 1 <= n <= 1 << 24 or not 0 <= r < n:
            raise ValueError(f"expected a world size of 1 to 2^24 and a rank in [0, world size), given rank {r} of "
                             f"world size {n}")
        d.rank, d.world_size, d.timeout_seconds = <int>r, <int>n, timeout
        d.unique_id, d.library = group_id, library.encode()
        if host_all_reduce is not None:
            if not callable(host_all_reduce):
                raise TypeError(f"host_all_reduce: expected a callable, given {type(host_all_reduce).__name__}")
            d.host_all_reduce = host_all_reduce_of(host_all_reduce, _call_host_all_reduce)
        self.c = make_native[CCommunicator](device.shared(), d, <size_t>bucket)

    @property
    def rank(self):
        """This process's rank in the group.

        MPS: none (mpsx)
        """
        return self.native().rank()

    @property
    def world_size(self):
        """The number of processes in the group.

        MPS: none (mpsx)
        """
        return self.native().world_size()

    @property
    def device(self):
        """The device whose buffers this member reduces.

        MPS: none (mpsx)
        """
        return wrap_device(self.native().device())

    @property
    def bucket_bytes(self):
        """The size, in bytes, of the buckets gradients are packed into: one collective call each.

        MPS: none (mpsx)
        """
        return self.native().bucket_bytes()

    @property
    def collective_calls(self):
        """The collective calls encoded so far (one per bucket).

        MPS: none (mpsx)
        """
        return self.native().collective_calls()

    @property
    def layout_checks(self):
        """The bucket layout checks run so far: one exchange over the group before the first all-reduce of each
        layout (operation, buffer sizes, buckets) the group reduces, none in a group of one.

        MPS: none (mpsx)
        """
        return self.native().layout_checks()

    def encode_all_reduce(self, CommandBuffer command_buffer not None, items, op="sum"):
        """Encodes, on ``command_buffer``, an all-reduce over the group in place of the float32 values of Buffers and
        Vectors and of the trainable gradients of gradient states (a convolution's weights and biases, a
        normalization's gamma and beta).

        ``items`` is one of those or a sequence of them; they are packed into buckets of ``bucket_bytes``, one
        collective call each. ``op`` is ``"sum"`` or ``"mean"``. TypeError for another item, ValueError for another
        op. Before the first all-reduce of a layout (op, buffer sizes, buckets) new to the group, one exchange checks
        that every rank has the same; where they differ, the command buffer fails on every rank with a
        DistributedError naming the difference.

        MPS: none (mpsx)
        """
        cdef CCommunicator* communicator = self.native()
        cdef vector[shared_ptr[CBuffer]] buffers
        cdef ReduceOperation operation
        if op == "sum":
            operation = ReduceOperation.Sum
        elif op == "mean":
            operation = ReduceOperation.Mean
        else:
            raise ValueError(f"op: expected 'sum' or 'mean', given {op!r}")
        if isinstance(items, (Buffer, Vector, State)):
            items = (items,)
        for item in items:
            if isinstance(item, Buffer):
                (<Buffer>item).native()
                buffers.push_back((<Buffer>item).c)
            elif isinstance(item, Vector):
                if (<Vector>item).native().data_type() != CDataType.Float32:
                    raise TypeError(f"all_reduce: expected float32 vectors, given one of "
                                    f"{DataType(<int>(<Vector>item).native().data_type())!r}")
                buffers.push_back((<Vector>item).native().buffer())
            elif isinstance(item, State):
                before = buffers.size()
                (<State>item).native().append_trainable_gradients(buffers)
                if buffers.size() == before:
                    raise TypeError(f"all_reduce: a {type(item).__name__} has no trainable gradients to reduce")
            else:
                raise TypeError(f"all_reduce: expected Buffers, Vectors or gradient states, given "
                                f"{type(item).__name__}")
        communicator.encode_all_reduce(command_buffer.native()[0], buffers, operation)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.Communicator rank {self.rank} of {self.world_size} on {self.device.name}>"

