# cdef extern declarations of native/include/mpsx/kernels/pooling.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/pooling.h" namespace "mpsx" nogil:
    cdef enum class PoolingKind "mpsx::PoolingKind"(int32_t):
        Max "mpsx::PoolingKind::Max"
        Average "mpsx::PoolingKind::Average"
        L2Norm "mpsx::PoolingKind::L2Norm"
        DilatedMax "mpsx::PoolingKind::DilatedMax"

    # mpsx::Window of kernel.h, as pooling kernels return it.
    cdef cppclass PoolingWindow "mpsx::Window":
        int64_t kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y

    cdef cppclass CPoolingParameters "mpsx::PoolingParameters":
        const PoolingWindow& pooling_window()
        int64_t zero_pad_size_x()
        int64_t zero_pad_size_y()
        void set_zero_pad_size_x(int64_t value) except +raise_py_error
        void set_zero_pad_size_y(int64_t value) except +raise_py_error

    cdef cppclass CCNNPooling "mpsx::CNNPooling"(CUnaryKernel, CPoolingParameters):
        CCNNPooling(shared_ptr[CDevice] device, PoolingKind kind, int64_t kernel_width, int64_t kernel_height,
                    int64_t stride_x, int64_t stride_y, int64_t dilation_x, int64_t dilation_y) except +raise_py_error

    cdef cppclass CCNNPoolingGradient "mpsx::CNNPoolingGradient"(CGradientKernel, CPoolingParameters):
        CCNNPoolingGradient(shared_ptr[CDevice] device, PoolingKind kind, int64_t kernel_width, int64_t kernel_height,
                            int64_t stride_x, int64_t stride_y, int64_t dilation_x,
                            int64_t dilation_y) except +raise_py_error
        int64_t source_size_width()
        int64_t source_size_height()
        int64_t source_size_depth()
        void set_source_size(int64_t width, int64_t height, int64_t depth) except +raise_py_error

    const int64_t kAllSourceSize "mpsx::CNNPoolingGradient::kAll"
