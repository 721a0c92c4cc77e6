# The runtime's Python classes, declared for cimport by the other modules.
#
# Each class holds its native object in `c`. An object made by cls.__new__(cls)
# without __init__ (pickle, copy and introspection tools do this) holds none:
# reach the native object through native() (a pointer) or shared() (the
# shared_ptr), which raise TypeError then, never through `c` directly.
from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.buffer cimport CBuffer, CVector
from mpsx.includes.command_buffer cimport CCommandBuffer, CCommandQueue
from mpsx.includes.device cimport CDevice
from mpsx.includes.distributed cimport CCommunicator
from mpsx.includes.image cimport CImage, ImageDescriptor as CImageDescriptor
from mpsx.includes.state cimport CState
from mpsx.includes.kernel cimport CDefaultImageAllocator


# Raises the TypeError of an object made without __init__.
cdef int raise_uninitialized(object obj) except -1
# repr of an object made without __init__.
cdef str uninitialized_repr(object obj)
# An int argument as int64, refusing floats and values out of range.
cpdef str quoted(object value)
cdef int64_t integer_argument(object value, str name) except? -1
cdef double float_argument(object value, str name) except? -1.0


cdef class Device:
    cdef shared_ptr[CDevice] c

    cdef inline CDevice* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef inline shared_ptr[CDevice] shared(self) except *:
        if not self.c:
            raise_uninitialized(self)
        return self.c


cdef class CommandQueue:
    cdef shared_ptr[CCommandQueue] c

    cdef inline CCommandQueue* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()


cdef class CommandBuffer:
    cdef shared_ptr[CCommandBuffer] c
    # MPSCommandBuffer: the command buffer it was made from (c until commit_and_continue), and its predicate.
    cdef shared_ptr[CCommandBuffer] first
    cdef object _predicate

    cdef inline CCommandBuffer* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()


cdef class Buffer:
    cdef shared_ptr[CBuffer] c
    cdef object _dtype
    cdef tuple _shape
    cdef Py_ssize_t _view_shape[8]
    cdef Py_ssize_t _view_strides[8]
    cdef bint _host_addressable(self) except -1

    cdef inline CBuffer* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()


cdef class VectorDescriptor:
    cdef int64_t _length, _vectors, _vector_bytes
    cdef object _data_type


cdef class Vector:
    cdef shared_ptr[CVector] c
    cdef object _given  # the Buffer a vector made on one views, else None
    cpdef write(self, array)
    cdef tuple _shape(self)

    cdef inline CVector* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef inline shared_ptr[CVector] shared(self) except *:
        if not self.c:
            raise_uninitialized(self)
        return self.c


cdef class ImageDescriptor:
    cdef CImageDescriptor c


cdef class Images:
    cdef shared_ptr[CImage] c
    cdef object label_   # MPSImage.label: str or None
    cdef object parent_  # MPSImage.parent: the Images this one views, or None

    cdef inline CImage* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef inline shared_ptr[CImage] shared(self) except *:
        if not self.c:
            raise_uninitialized(self)
        return self.c


cdef class Image(Images):
    pass


cdef class TemporaryImage(Image):
    pass


cdef class TemporaryVector(Vector):
    pass


cdef class ImageBatch(Images):
    pass


cdef class ImageAllocator:
    cdef shared_ptr[CDefaultImageAllocator] c  # MPS's default allocators; empty for Python ones


cdef class State:
    cdef shared_ptr[CState] c
    cdef object _label

    cdef inline CState* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef inline shared_ptr[CState] shared(self) except *:
        if not self.c:
            raise_uninitialized(self)
        return self.c


cdef Device wrap_device(const shared_ptr[CDevice]& device)
cdef CommandBuffer wrap_command_buffer(const shared_ptr[CCommandBuffer]& command_buffer)
cdef Image wrap_image(const shared_ptr[CImage]& image)
cdef ImageBatch wrap_image_batch(const shared_ptr[CImage]& image)
cdef ImageAllocator wrap_image_allocator(const shared_ptr[CDefaultImageAllocator]& allocator)
cdef Buffer wrap_buffer(const shared_ptr[CBuffer]& buffer, object dtype, tuple shape)
cdef shared_ptr[CImage] image_of(object images) except *
cdef shared_ptr[CBuffer] buffer_from_numpy(Device device, object array, object dtype, str name) except *


cdef class Communicator:
    cdef shared_ptr[CCommunicator] c

    cdef inline CCommunicator* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()
