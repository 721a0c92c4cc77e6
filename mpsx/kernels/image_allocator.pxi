# Image allocators (MPSImageAllocator) on kernels, graphs and image nodes: the native defaults, or Python objects
# through _image_allocator.h.

from mpsx.includes.kernel cimport (
    CDefaultImageAllocator, CImageAllocator, CPythonImageAllocator, ImageAllocatorCalls, default_allocator_of,
    image_allocator_calls, python_allocator_of)
from mpsx.includes.command_buffer cimport CCommandBuffer
from mpsx._runtime cimport ImageAllocator, Images, wrap_image_allocator


cdef set_image_allocator(shared_ptr[CImageAllocator]* slot, object value, str name, bint temporary_is_none=False):
    """Sets an allocator slot from ``value``: None (the slot's default), one of MPS's defaults, or any object with
    image_for_command_buffer(). Where ``temporary_is_none``, TemporaryImage's default is the slot's default too."""
    if value is None:
        slot[0].reset()
        return
    if isinstance(value, ImageAllocator) and (<ImageAllocator>value).c:
        if temporary_is_none and (<ImageAllocator>value).c.get().temporary():
            slot[0].reset()
        else:
            slot[0] = <shared_ptr[CImageAllocator]>(<ImageAllocator>value).c
        return
    if not callable(getattr(value, "image_for_command_buffer", None)):
        raise TypeError(f"{name} must be an image allocator (an object with image_for_command_buffer(), such as "
                        f"mpsx.Image.default_allocator()) or None, given {quoted(value)}")
    slot[0] = <shared_ptr[CImageAllocator]>make_native[CPythonImageAllocator](<PyObject*>value)


cdef object image_allocator_value(const shared_ptr[CImageAllocator]& allocator, bint temporary_default):
    """What an allocator slot reads: the object it was set to, else the default it stands for."""
    if not allocator:
        return wrap_image_allocator(CDefaultImageAllocator.for_temporary_images() if temporary_default else
                                    CDefaultImageAllocator.for_images())
    cdef PyObject* python = python_allocator_of(allocator)
    if python != NULL:
        return <object>python
    return wrap_image_allocator(default_allocator_of(allocator))


cdef shared_ptr[CImage] _allocator_image(object allocator, const shared_ptr[CCommandBuffer]& command_buffer,
                                         const CImageDescriptor& descriptor, const shared_ptr[CKernel]& kernel) except *:
    cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
    d.c = descriptor
    cdef int64_t count = descriptor.number_of_images
    batch = getattr(allocator, "image_batch_for_command_buffer", None)
    if count > 1 and callable(batch):
        d.c.number_of_images = 1
        method = "image_batch_for_command_buffer"
        result = batch(wrap_command_buffer(command_buffer), d, _wrap_kernel(kernel), count)
    else:
        method = "image_for_command_buffer"
        result = allocator.image_for_command_buffer(wrap_command_buffer(command_buffer), d, _wrap_kernel(kernel))
    if not isinstance(result, Images):
        raise TypeError(f"{type(allocator).__name__}.{method}() must return an mpsx.Image or ImageBatch, returned "
                        f"{quoted(result)}")
    return (<Images>result).shared()


cdef ImageAllocatorCalls* _image_allocator_calls = &image_allocator_calls()
_image_allocator_calls.image = _allocator_image
