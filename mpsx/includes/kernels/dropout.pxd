# cdef extern declarations of native/include/mpsx/kernels/dropout.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/dropout.h" namespace "mpsx" nogil:
    cdef cppclass DropoutDescriptor "mpsx::DropoutDescriptor":
        float keep_probability
        uint64_t seed
        int64_t mask_stride_x, mask_stride_y, mask_stride_z

    cdef cppclass CDropoutGradientState "mpsx::DropoutGradientState"(CState):
        int64_t mask_images()
        int64_t mask_channels()
        int64_t mask_height()
        int64_t mask_width()
        void read_mask(void* destination) except +raise_py_error

    cdef cppclass CCNNDropout "mpsx::CNNDropout"(CUnaryKernel):
        CCNNDropout(shared_ptr[CDevice] device, DropoutDescriptor descriptor) except +raise_py_error
        const DropoutDescriptor& dropout_descriptor()

    cdef cppclass CCNNDropoutGradient "mpsx::CNNDropoutGradient"(CGradientKernel):
        CCNNDropoutGradient(shared_ptr[CDevice] device, DropoutDescriptor descriptor) except +raise_py_error
        const DropoutDescriptor& dropout_descriptor()
