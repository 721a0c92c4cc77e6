# States and state batches (included by _runtime.pyx).

class StateResourceType(enum.IntEnum):
    """What a state's resource is: NONE (no resource at that index), BUFFER; mpsx has no TEXTURE resources.

    MPS: MPSStateResourceType
    """
    NONE = 0
    BUFFER = 1
    TEXTURE = 2


class StateResourceList:
    """StateResourceList()

    The sizes, in bytes, of the buffers a State made with it holds (MPS lists textures too; mpsx has none). As
    ``-[MPSStateResourceList init]``.

    MPS: MPSStateResourceList
    """

    def __init__(self):
        self.buffer_sizes = []

    @classmethod
    def resource_list(cls):
        """An empty list.

        MPS: +[MPSStateResourceList resourceList]
        """
        return cls()

    @classmethod
    def resource_list_with_buffer_sizes(cls, *sizes):
        """A list of buffers of ``sizes`` bytes.

        MPS: +[MPSStateResourceList resourceListWithBufferSizes:]
        """
        made = cls()
        for size in sizes:
            made.append_buffer(size)
        return made

    def append_buffer(self, size):
        """Adds a buffer of ``size`` bytes (0 or more).

        MPS: -[MPSStateResourceList appendBuffer:]
        """
        cdef int64_t n = integer_argument(size, "size")
        if n < 0:
            raise ValueError(f"a buffer size must be 0 or more, given {n}")
        _sizes_of(self).append(n)

    def __repr__(self):
        sizes = self.__dict__.get("buffer_sizes")
        if sizes is None:
            return uninitialized_repr(self)
        return f"mpsx.StateResourceList.resource_list_with_buffer_sizes({', '.join(map(str, sizes))})"


def _sizes_of(resource_list):
    sizes = resource_list.__dict__.get("buffer_sizes")
    if sizes is None:
        raise_uninitialized(resource_list)
    return sizes


cdef vector[size_t] _buffer_sizes(object resource_list) except *:
    if not isinstance(resource_list, StateResourceList):
        raise TypeError(f"resource_list must be an mpsx.StateResourceList, given {quoted(resource_list)}")
    cdef vector[size_t] sizes
    for size in _sizes_of(resource_list):
        n = integer_argument(size, "a buffer size")
        if n < 0:
            raise ValueError(f"a buffer size must be 0 or more, given {n}")
        sizes.push_back(<size_t>n)
    return sizes


cdef class State:
    """State(device=None, buffer_size=None, resource_list=None, resource=None, resources=None)
--

    What a forward encode leaves for its gradient, for one batch, and the base of every state class.

    The families' states come from kernels (``result_state`` or ``encode(..., destination_state=True)``). A State
    made directly holds resources, as MPSState's initializers make it: ``State(device, buffer_size=n)`` one buffer
    of n bytes, ``State(device, resource_list=list)`` the buffers of a StateResourceList (each made when first
    asked for), ``State(resource=buffer)`` or ``State(resources=[buffers])`` the buffers given.

    MPS: MPSState
    """

    def __init__(self, Device device=None, buffer_size=None, resource_list=None, resource=None, resources=None):
        if type(self) is not State:
            raise TypeError(f"{type(self).__name__} states come from kernels (result_state or encode(..., "
                            f"destination_state=True))")
        cdef vector[shared_ptr[CBuffer]] buffers
        forms = [buffer_size is not None, resource_list is not None, resource is not None, resources is not None]
        if sum(forms) > 1 or (device is None) != (forms[2] or forms[3]):
            raise TypeError("State takes a device with buffer_size or resource_list (or neither), or resource or "
                            "resources alone")
        if device is not None:
            self.c = make_native[CState](device.shared())
            if buffer_size is not None:
                self.c.get().set_resources(_buffer_sizes(StateResourceList.resource_list_with_buffer_sizes(
                    buffer_size)))
            elif resource_list is not None:
                self.c.get().set_resources(_buffer_sizes(resource_list))
            return
        items = [resource] if resource is not None else list(resources)
        for i, item in enumerate(items):
            if not isinstance(item, Buffer):
                raise TypeError(f"expected mpsx.Buffer resources, item {i} is {quoted(item)}")
            buffers.push_back((<Buffer>item).c)
        if buffers.empty():
            raise ValueError("State(resources=...) needs at least one buffer: its device is theirs")
        self.c = make_native[CState](buffers[0].get().device_ptr())
        self.c.get().set_resources(buffers)

    @classmethod
    def temporary_state_with_command_buffer(cls, CommandBuffer command_buffer not None, buffer_size=None,
                                            resource_list=None):
        """A temporary State of ``command_buffer`` (read count 1) holding a buffer of ``buffer_size`` bytes, the
        buffers of ``resource_list``, or none.

        MPS: +[MPSState temporaryStateWithCommandBuffer:bufferSize:]
        """
        if cls is not State:
            raise TypeError(f"{cls.__name__} states come from kernels (temporary_result_state)")
        cdef State state = State(command_buffer.device, buffer_size=buffer_size, resource_list=resource_list)
        state.c.get().make_temporary(command_buffer.native()[0])
        return state

    @property
    def resource_count(self):
        """The number of resources the state was made with (0 for the families' states, whose buffers are their
        properties).

        MPS: MPSState.resourceCount
        """
        return self.native().resource_count()

    def resource_at_index(self, index, allocate_memory=True):
        """The buffer at ``index``; where it was not made yet, made now if ``allocate_memory``, else None. ValueError
        for an index past ``resource_count``.

        MPS: -[MPSState resourceAtIndex:allocateMemory:]
        """
        cdef int64_t i = integer_argument(index, "index")
        if i < 0:
            raise ValueError(f"index must be 0 or more, given {i}")
        cdef shared_ptr[CBuffer] b = self.native().resource_at(<size_t>i, bool(allocate_memory))
        if not b:
            return None
        return wrap_buffer(b, np.dtype(np.uint8), (<int64_t>b.get().length(),))

    @property
    def resource(self):
        """The first resource (made now if need be), or None for a state without resources.

        MPS: MPSState.resource
        """
        return self.resource_at_index(0) if self.native().resource_count() else None

    def buffer_size_at_index(self, index):
        """The size in bytes of the buffer at ``index``.

        MPS: -[MPSState bufferSizeAtIndex:]
        """
        cdef int64_t i = integer_argument(index, "index")
        if i < 0:
            raise ValueError(f"index must be 0 or more, given {i}")
        return self.native().buffer_size_at(<size_t>i)

    def resource_type_at_index(self, index):
        """StateResourceType.BUFFER for a resource, NONE past ``resource_count``.

        MPS: -[MPSState resourceTypeAtIndex:]
        """
        cdef int64_t i = integer_argument(index, "index")
        return StateResourceType.BUFFER if 0 <= i < <int64_t>self.native().resource_count() else \
            StateResourceType.NONE

    def resource_size(self):
        """The bytes of the state's resources.

        MPS: -[MPSState resourceSize]
        """
        return self.native().resource_size()

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        """The descriptor a kernel given this state as a source state makes its destination with: here
        ``suggested_descriptor`` unchanged. The states that size a destination (a convolution's gradient state, for a
        convolution transpose) do it natively.

        MPS: -[MPSState destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:]
        """
        self.native()
        return suggested_descriptor

    @property
    def label(self):
        """A name for the state, or None (the default).

        MPS: MPSState.label
        """
        self.native()
        return self._label

    @label.setter
    def label(self, value):
        self.native()
        if value is not None and not isinstance(value, str):
            raise TypeError(f"label must be a str or None, given {quoted(value)}")
        self._label = value

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
