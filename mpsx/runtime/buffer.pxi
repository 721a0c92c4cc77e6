# Buffers and vectors, and their DLPack exchange (included by _runtime.pyx).

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


cdef size_t _element_size(object data_type) except 0:
    return np.dtype(numpy_of(<CDataType><int>DataType(data_type))).itemsize


cdef class VectorDescriptor:
    """VectorDescriptor(length, data_type=DataType.FLOAT32, vectors=1, vector_bytes=None)
--

    The shape of a Vector: ``vectors`` vectors of ``length`` values of ``data_type``, ``vector_bytes`` apart
    (default and least: one vector's bytes; a multiple of the element size).

    MPS: MPSVectorDescriptor
    """

    def __init__(self, length, data_type=DataType.FLOAT32, vectors=1, vector_bytes=None):
        self._data_type = DataType(data_type)
        self._length = _vector_count(length, "length", 0)
        self._vectors = _vector_count(vectors, "vectors", 1)
        cdef size_t element = _element_size(self._data_type)
        cdef int64_t least = checked_vector_bytes(self._length, element)
        self._vector_bytes = least if vector_bytes is None else _vector_count(vector_bytes, "vector_bytes", 0)
        if self._vector_bytes < least or self._vector_bytes % element:
            raise ValueError(f"vector_bytes must be a multiple of {element} of at least {least} (a vector's bytes), "
                             f"given {self._vector_bytes}")

    @classmethod
    def vector_descriptor_with_length(cls, length, data_type=DataType.FLOAT32, vectors=1, vector_bytes=None):
        """``VectorDescriptor(length, data_type, vectors, vector_bytes)``.

        MPS: +[MPSVectorDescriptor vectorDescriptorWithLength:vectors:vectorBytes:dataType:]
        """
        return cls(length, data_type, vectors, vector_bytes)

    @staticmethod
    def vector_bytes_for_length(length, data_type):
        """The stride mpsx recommends for vectors of ``length`` values: their bytes (no padding helps its backends).

        MPS: +[MPSVectorDescriptor vectorBytesForLength:dataType:]
        """
        return checked_vector_bytes(_vector_count(length, "length", 0), _element_size(data_type))

    @property
    def length(self):
        """The number of values of one vector.

        MPS: MPSVectorDescriptor.length
        """
        return self._length

    @length.setter
    def length(self, value):
        cdef int64_t n = _vector_count(value, "length", 0)
        cdef int64_t least = checked_vector_bytes(n, _element_size(self._data_type))
        if least > self._vector_bytes:
            self._vector_bytes = least
        self._length = n

    @property
    def data_type(self):
        """The type of the values.

        MPS: MPSVectorDescriptor.dataType
        """
        return self._data_type

    @data_type.setter
    def data_type(self, value):
        t = DataType(value)
        cdef size_t element = _element_size(t)
        cdef int64_t least = checked_vector_bytes(self._length, element)
        self._data_type = t
        if least > self._vector_bytes or self._vector_bytes % element:
            self._vector_bytes = least

    @property
    def vectors(self):
        """The number of vectors.

        MPS: MPSVectorDescriptor.vectors
        """
        return self._vectors

    @property
    def vector_bytes(self):
        """The bytes from one vector's first value to the next one's.

        MPS: MPSVectorDescriptor.vectorBytes
        """
        return self._vector_bytes

    def __eq__(self, other):
        if not isinstance(other, VectorDescriptor):
            return NotImplemented
        cdef VectorDescriptor o = other
        return (self._length, self._data_type, self._vectors, self._vector_bytes) == (
            o._length, o._data_type, o._vectors, o._vector_bytes)

    def __hash__(self):
        return hash((self._length, self._data_type, self._vectors, self._vector_bytes))

    def __repr__(self):
        if self._data_type is None:
            return uninitialized_repr(self)
        return (f"mpsx.VectorDescriptor({self._length}, {self._data_type!r}, vectors={self._vectors}, "
                f"vector_bytes={self._vector_bytes})")


cdef int64_t _vector_count(object value, str name, int64_t least) except? -1:
    cdef int64_t n = integer_argument(value, name)
    if n < least:
        raise ValueError(f"{name} must be {least} or more, given {n}")
    return n


cdef int64_t checked_vector_bytes(int64_t count, size_t element) except? -1:
    if count > kMaxDimension * kMaxDimension:
        raise ValueError(f"a vector of {count} values is too long")
    return count * <int64_t>element



cdef class Vector:
    """Vector(device=None, length=None, data_type=DataType.FLOAT32, descriptor=None, buffer=None, offset=0)
--

    ``length`` values of one data type (FLOAT32 by default), zero at first, in a Buffer; or ``Vector(device,
    descriptor=d)`` of a VectorDescriptor of one vector. ``Vector(buffer=b, descriptor=d, offset=0)`` views the
    ``d.vectors`` vectors of ``d.length`` values, ``d.vector_bytes`` apart, from byte ``offset`` of ``b`` (a multiple
    of the element size), sharing its memory. As ``-[MPSVector initWithDevice:descriptor:]``,
    ``-[MPSVector initWithBuffer:descriptor:]`` and ``-[MPSVector initWithBuffer:offset:descriptor:]``.

    Optimizers keep their momentum, velocity and sums of squares in vectors, and update plain vectors of values (one
    vector each). ValueError for a negative length.

    MPS: MPSVector
    """

    def __init__(self, Device device=None, length=None, data_type=DataType.FLOAT32, VectorDescriptor descriptor=None,
                 Buffer buffer=None, offset=0):
        cdef int64_t n, at = integer_argument(offset, "offset")
        if buffer is not None:
            if device is not None or length is not None or descriptor is None:
                raise TypeError("Vector(buffer=..., offset=..., descriptor=...) takes a buffer with a descriptor, "
                                "and neither a device nor a length")
            if at < 0:
                raise ValueError(f"offset must be 0 or more, given {at}")
            self.c = make_native[CVector](buffer.c, <size_t>at, <size_t>descriptor._length,
                                          <CDataType><int>descriptor._data_type, <size_t>descriptor._vectors,
                                          <size_t>descriptor.vector_bytes)
            self._given = buffer
            return
        if device is None or at != 0 or (length is None) == (descriptor is None):
            raise TypeError("Vector takes a device with a length (and data_type) or a descriptor, or a buffer with a "
                            "descriptor (and offset)")
        if descriptor is not None:
            if descriptor._vectors != 1 or descriptor.vector_bytes != descriptor._length * _element_size(
                    descriptor._data_type):
                raise ValueError("a Vector made on a device holds one vector: give a descriptor of vectors=1 and "
                                 "the default vector_bytes, or make the buffer and use Vector(buffer=..., ...)")
            length, data_type = descriptor._length, descriptor._data_type
        n = integer_argument(length, "Vector length")
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
        self.native().check_host_access()
        a = np.ascontiguousarray(array, dtype=numpy_of(self.native().data_type()))
        if a.shape != self._shape():
            raise ValueError(f"expected an array of shape {self._shape()}, given {a.shape}")
        self.native().buffer().get().check_host_writable(b"the vector")
        cdef const unsigned char[::1] raw
        cdef size_t i
        for i in range(self.native().vectors()):
            raw = a.reshape(self.native().vectors(), -1)[i].view(np.uint8)
            if raw.shape[0]:
                self.native().buffer().get().write(&raw[0], self.native().offset() + i * self.native().vector_bytes(),
                                                   raw.shape[0])

    cdef tuple _shape(self):
        cdef object length = self.native().length()
        if self.native().vectors() == 1:
            return (length,)
        return (self.native().vectors(), length)

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
        """The Buffer holding the values (shape ``(length,)``; for a vector made on a buffer, that buffer).

        MPS: MPSVector.data
        """
        self.native().check_host_access()
        if self._given is not None:
            return self._given
        return wrap_buffer(self.native().buffer(), numpy_of(self.native().data_type()),
                           (self.native().length(),))

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the vector readable on the host once it has completed.

        MPS: -[MPSVector synchronizeOnCommandBuffer:]
        """
        self.native().buffer().get().synchronize(command_buffer.native()[0])

    def to_numpy(self):
        """A copy of the values, shaped (length,), or (vectors, length) for several vectors (SynchronizationError for
        unsynchronized device writes).

        MPS: MTLBuffer.contents
        """
        self.native().check_host_access()
        cdef CBuffer* b = self.native().buffer().get()
        b.check_host_readable(b"the vector")
        out = np.empty((self.native().vectors(), self.native().length()), dtype=numpy_of(self.native().data_type()))
        cdef unsigned char[::1] raw
        cdef size_t i
        for i in range(self.native().vectors()):
            raw = out[i].view(np.uint8)
            if raw.shape[0]:
                b.read(&raw[0], self.native().offset() + i * self.native().vector_bytes(), raw.shape[0], b"the vector")
        return out.reshape(self._shape())

    @property
    def offset(self):
        """The byte offset of the first value in ``buffer`` (0 unless made with one).

        MPS: MPSVector.offset
        """
        return self.native().offset()

    @property
    def vectors(self):
        """The number of vectors (1 unless made from a descriptor of several).

        MPS: MPSVector.vectors
        """
        return self.native().vectors()

    @property
    def vector_bytes(self):
        """The bytes from one vector's first value to the next one's.

        MPS: MPSVector.vectorBytes
        """
        return self.native().vector_bytes()

    def resource_size(self):
        """The bytes of storage the vector holds: its buffer's length, or 0 for a vector made on a buffer given
        (MPS: "when the MPSMatrix is created with -initWithBuffer:descriptor: ... 0 will be returned").

        MPS: -[MPSVector resourceSize]
        """
        return 0 if self._given is not None else self.native().buffer().get().length()

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
        return f"<mpsx.{type(self).__name__} {self.length} x {self.data_type.name.lower()} on {self.device.name}>"


cdef class TemporaryVector(Vector):
    """TemporaryVector(command_buffer, descriptor)
--

    A vector of ``descriptor.length`` values (a VectorDescriptor of one vector), contents undefined, that only
    kernels encoding onto ``command_buffer`` read and write, while its ``read_count`` (1 at first) is above 0: each
    encode that reads it (an optimizer's gradient, values, momentum, velocity or sum of squares) lowers the count by
    1, and reading or writing it at 0 raises StateError, as does using it on another command buffer. The host never
    reads or writes it (SynchronizationError), as MPS keeps it in GPU private memory. As
    ``+[MPSTemporaryVector temporaryVectorWithCommandBuffer:descriptor:]``.

    MPS: MPSTemporaryVector
    """

    def __init__(self, CommandBuffer command_buffer not None, VectorDescriptor descriptor not None):
        if descriptor._vectors != 1:
            raise ValueError(f"a TemporaryVector holds one vector: give a descriptor of vectors=1, given "
                             f"vectors={descriptor._vectors}")
        self.c = CVector.temporary(command_buffer.native()[0], <size_t>descriptor._length,
                                   <CDataType><int>descriptor._data_type)

    @classmethod
    def temporary_vector_with_command_buffer(cls, command_buffer, descriptor):
        """The same as ``TemporaryVector(command_buffer, descriptor)``: a new temporary vector.

        MPS: +[MPSTemporaryVector temporaryVectorWithCommandBuffer:descriptor:]
        """
        return cls(command_buffer, descriptor)

    @classmethod
    def prefetch_storage_with_command_buffer(cls, CommandBuffer command_buffer not None, descriptor_list):
        """A hint of the temporary vectors ``command_buffer`` will use, which MPS says is never necessary: mpsx
        checks the arguments and does nothing else (its device pool reuses storage across command buffers).

        MPS: +[MPSTemporaryVector prefetchStorageWithCommandBuffer:descriptorList:]
        """
        for i, d in enumerate(descriptor_list):
            if not isinstance(d, VectorDescriptor):
                raise TypeError(f"expected a list of mpsx.VectorDescriptor, item {i} is {type(d).__name__}")

    @property
    def read_count(self):
        """The reads left before the contents become undefined (1 at first); each encode that reads the vector
        lowers it by 1. Setting it raises StateError once it is 0, and ValueError below 0.

        MPS: MPSTemporaryVector.readCount
        """
        return self.native().read_count()

    @read_count.setter
    def read_count(self, value):
        self.native().set_read_count(integer_argument(value, "read_count"))

    @staticmethod
    def from_numpy(Device device not None, array):
        """Refused (TypeError): the host never writes a temporary vector; ``Vector.from_numpy`` makes a vector of an
        array.

        MPS: none (mpsx)
        """
        raise TypeError("a TemporaryVector is never written by the host; make an mpsx.Vector.from_numpy")
