# Command queues and command buffers (included by _runtime.pyx).

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
        return wrap_command_buffer(self.native().command_buffer(replayable))

    def wait_until_idle(self):
        """Blocks until every committed command buffer of the queue has finished.

        Ctrl-C (a signal handler that raises, on the main thread) ends the wait within about 10 ms; the command
        buffers go on running.

        MPS: none (mpsx)
        """
        cdef CCommandQueue* queue = self.native()
        with nogil:
            queue.wait_until_idle()

    @property
    def capture_command_buffers(self):
        """Whether the queue's command buffers capture themselves (default ``True`` where the backend can: cuda).

        A command buffer committed on cuda whose commands (kernels, shapes, arguments and the memory they use) equal
        those of an earlier commit of the queue, the second time they are seen, runs as one CUDA graph launch, as a
        replayed command buffer does; results, states, handlers and errors are those of running its commands.
        Command buffers with a command that is not keyed (docs/semantics.md, "Command buffers that capture
        themselves") run their commands. Setting it applies to command buffers made afterwards; on a backend that
        can not, it stays ``False``. ``MPSX_CAPTURE_ENCODES=0`` in the environment makes queues start with it off.

        MPS: none (mpsx)
        """
        return self.native().captures_command_buffers()

    @capture_command_buffers.setter
    def capture_command_buffers(self, bint value):
        self.native().set_captures_command_buffers(value)

    @property
    def captured_command_buffer_count(self):
        """The command buffers of this queue that ran as an earlier commit's CUDA graph.

        MPS: none (mpsx)
        """
        return self.native().captured_command_buffer_count()


cdef CommandBuffer wrap_command_buffer(const shared_ptr[CCommandBuffer]& command_buffer):
    cdef CommandBuffer cb = CommandBuffer.__new__(CommandBuffer)
    cb.c = command_buffer
    cb.first = command_buffer
    return cb


cdef void _call_completed_handler(object handler, CCommandBuffer& command_buffer) noexcept with gil:
    # A handler cannot fail a completed command buffer: what it raises is
    # reported through sys.unraisablehook.
    handler(wrap_command_buffer(command_buffer.shared_from_this()))


_STATUS = ("not_enqueued", "committed", "completed", "error")


cdef class CommandBuffer:
    """CommandBuffer(command_buffer)
--

    Commands encoded onto it run, in order, after ``commit()``.

    Used as a context manager it commits and waits on exit (unless the body raised). It keeps every resource encoded
    onto it alive until it completes. ``CommandQueue.command_buffer()`` makes one.

    It is MPS's MPSCommandBuffer too: ``commit_and_continue()`` commits the work encoded so far and goes on with a
    new command buffer of the same queue, its ``root_command_buffer``, which runs after it; temporary images and
    states made before stay usable. ``CommandBuffer(command_buffer)`` (``command_buffer_with_command_buffer``) is a
    new object on the same command buffer, which can continue apart from ``command_buffer``: that one stays the
    committed one.

    MPS: MTLCommandBuffer, MPSCommandBuffer
    """

    def __init__(self, CommandBuffer command_buffer not None):
        self.c = command_buffer.native().shared_from_this()
        self.first = self.c

    @classmethod
    def command_buffer_with_command_buffer(cls, CommandBuffer command_buffer not None):
        """``CommandBuffer(command_buffer)``: a new object on ``command_buffer``'s command buffer.

        MPS: +[MPSCommandBuffer commandBufferWithCommandBuffer:]
        """
        return cls(command_buffer)

    @classmethod
    def command_buffer_from_command_queue(cls, CommandQueue command_queue not None):
        """A new command buffer of ``command_queue`` (``command_queue.command_buffer()``).

        MPS: +[MPSCommandBuffer commandBufferFromCommandQueue:]
        """
        return command_queue.command_buffer()

    def commit_and_continue(self):
        """Commits the command buffer and goes on with a new one of the same queue (replayable if this one is): the
        encodes that follow go to it, and it runs after this one. Temporary images and states made before stay
        usable on it. What was added before (completed handlers, ``synchronize``) stays with the committed one,
        which ``root_command_buffer`` read before the call returns; ``status`` and ``wait_until_completed()`` are
        the new one's (not committed yet: ``wait_until_completed()`` raises StateError until ``commit()``).

        MPS: -[MPSCommandBuffer commitAndContinue]
        """
        self.c = self.native().commit_and_continue()

    @property
    def root_command_buffer(self):
        """The command buffer the encodes go to now: this one until ``commit_and_continue()``, then the newest it
        made (a new CommandBuffer object on it).

        MPS: MPSCommandBuffer.rootCommandBuffer
        """
        return wrap_command_buffer(self.native().shared_from_this())

    @property
    def command_buffer(self):
        """The command buffer this one was made from (before any ``commit_and_continue()``), as a new CommandBuffer
        object.

        MPS: MPSCommandBuffer.commandBuffer
        """
        self.native()
        return wrap_command_buffer(self.first)

    @property
    def predicate(self):
        """A Predicate, or None (the default). MPS applies a predicate to the encodes that take
        MPSKernelEncodeOptions, and no encode of its CNN API does (MPSCommandBuffer.h): kept, and applied to none.

        MPS: MPSCommandBuffer.predicate
        """
        self.native()
        return self._predicate

    @predicate.setter
    def predicate(self, value):
        self.native()
        if value is not None and not isinstance(value, Predicate):
            raise TypeError(f"predicate must be an mpsx.Predicate or None, given {quoted(value)}")
        self._predicate = value

    def prefetch_heap_for_workload_size(self, size):
        """A hint that encodes will need ``size`` bytes of temporary storage. mpsx keeps no MTLHeap cache: the
        device's pool gives storage as it is asked for, so there is nothing to warm; ``size`` must be a
        non-negative int.

        MPS: -[MPSCommandBuffer prefetchHeapForWorkloadSize:]
        """
        self.native()
        if integer_argument(size, "size") < 0:
            raise ValueError(f"size must be 0 or more, given {size}")

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


cdef class Predicate:
    """Predicate(buffer=None, offset=0, device=None)
--

    A predicate: the uint32 at ``offset`` (a multiple of 4) of ``buffer``, true where it is not 0, for a command
    buffer's ``predicate``; ``Predicate(device=device)`` makes a 4-byte buffer of its own, holding 0. As
    ``-[MPSPredicate initWithBuffer:offset:]`` and ``-[MPSPredicate initWithDevice:]``.

    MPS: MPSPredicate
    """
    cdef Buffer _buffer
    cdef size_t _offset

    def __init__(self, Buffer buffer=None, offset=0, Device device=None):
        cdef int64_t at = integer_argument(offset, "offset")
        if (buffer is None) == (device is None):
            raise TypeError("Predicate takes a buffer (and offset) or a device, given "
                            f"{'both' if device is not None else 'neither'}")
        if device is not None:
            if at != 0:
                raise ValueError(f"offset must be 0 for a predicate made with a device, given {at}")
            buffer = wrap_buffer(make_native[CBuffer](device.shared(), <size_t>4), np.dtype(np.uint32), (1,))
            buffer.native().fill_zero()
        if at < 0 or at % 4 or at + 4 > <int64_t>buffer.native().length():
            raise ValueError(f"offset must be a multiple of 4 with 4 bytes of the buffer's {buffer.native().length()} "
                             f"at it, given {at}")
        self._buffer = buffer
        self._offset = <size_t>at

    @classmethod
    def predicate_with_buffer(cls, Buffer buffer not None, offset):
        """``Predicate(buffer, offset)``.

        MPS: +[MPSPredicate predicateWithBuffer:offset:]
        """
        return cls(buffer, offset)

    @property
    def predicate_buffer(self):
        """The buffer that holds the predicate.

        MPS: MPSPredicate.predicateBuffer
        """
        if self._buffer is None:
            raise_uninitialized(self)
        return self._buffer

    @property
    def predicate_offset(self):
        """The predicate's byte offset in ``predicate_buffer``.

        MPS: MPSPredicate.predicateOffset
        """
        if self._buffer is None:
            raise_uninitialized(self)
        return self._offset

    def __repr__(self):
        if self._buffer is None:
            return uninitialized_repr(self)
        return f"<mpsx.Predicate at byte {self._offset} of a {self._buffer.length}-byte buffer>"
