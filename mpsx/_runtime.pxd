# The runtime's Python classes, declared for cimport by the other modules.
from libcpp.memory cimport shared_ptr

from mpsx.includes.buffer cimport CBuffer, CVector
from mpsx.includes.command_buffer cimport CCommandBuffer, CCommandQueue
from mpsx.includes.device cimport CDevice
from mpsx.includes.image cimport CImage, ImageDescriptor as CImageDescriptor
from mpsx.includes.state cimport CState


cdef class Device:
    cdef shared_ptr[CDevice] c


cdef class CommandQueue:
    cdef shared_ptr[CCommandQueue] c


cdef class CommandBuffer:
    cdef shared_ptr[CCommandBuffer] c


cdef class Buffer:
    cdef shared_ptr[CBuffer] c
    cdef object _dtype
    cdef tuple _shape
    cdef Py_ssize_t _view_shape[8]
    cdef Py_ssize_t _view_strides[8]
    cdef bint _host_addressable(self)


cdef class Vector:
    cdef shared_ptr[CVector] c
    cpdef write(self, array)


cdef class ImageDescriptor:
    cdef CImageDescriptor c


cdef class Images:
    cdef shared_ptr[CImage] c


cdef class Image(Images):
    pass


cdef class ImageBatch(Images):
    pass


cdef class State:
    cdef shared_ptr[CState] c


cdef Device wrap_device(const shared_ptr[CDevice]& device)
cdef Image wrap_image(const shared_ptr[CImage]& image)
cdef ImageBatch wrap_image_batch(const shared_ptr[CImage]& image)
cdef Buffer wrap_buffer(const shared_ptr[CBuffer]& buffer, object dtype, tuple shape)
cdef shared_ptr[CImage] image_of(object images) except *
cdef shared_ptr[CBuffer] buffer_from_numpy(Device device, object array, object dtype) except *
