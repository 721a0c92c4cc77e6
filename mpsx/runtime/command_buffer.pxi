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
