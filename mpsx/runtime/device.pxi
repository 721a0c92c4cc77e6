# Devices (mpsx.devices(), Device), argument helpers, and what the process does at fork()
# and at exit (included by _runtime.pyx).

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
    return CDevice.named(b"cpu").get().backend().loop_clone().decode()


def _cpu_onednn_isa():
    """For the bench: the instruction set oneDNN's kernels run, as ONEDNN_MAX_CPU_ISA names it ("AVX2",
    "AVX512_CORE_AMX", ...; "DEFAULT" where oneDNN has no x86 ISA)."""
    return CDevice.named(b"cpu").get().backend().onednn_isa().decode()


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
        """Returns the memory the caching allocator keeps to the backend: every cached block of more than 64 KiB, and
        every 2 MiB slab the smaller blocks are cut from once none of its blocks is in use (a slab with a block in use
        keeps its cached blocks, which ``bytes_cached`` still counts).

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
        if threads_abandoned():
            end_at_exit()  # a thread given up on (an NCCL join past its timeout) may still be inside NCCL
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
