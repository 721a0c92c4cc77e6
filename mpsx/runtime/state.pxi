# States and state batches (included by _runtime.pyx).

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

    # No __dict__: the layout stays tuple's on every Python, so its stub is the same everywhere.
    __slots__ = ()

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
