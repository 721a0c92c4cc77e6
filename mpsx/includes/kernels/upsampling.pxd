# cdef extern declarations of native/include/mpsx/kernels/upsampling.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/upsampling.h" namespace "mpsx" nogil:
    cdef enum class UpsamplingKind "mpsx::UpsamplingKind"(int32_t):
        Nearest "mpsx::UpsamplingKind::Nearest"
        Bilinear "mpsx::UpsamplingKind::Bilinear"

    cdef cppclass CUpsamplingParameters "mpsx::UpsamplingParameters":
        int64_t scale_factor_x()
        int64_t scale_factor_y()
        bool align_corners()

    cdef cppclass CCNNUpsampling "mpsx::CNNUpsampling"(CUnaryKernel, CUpsamplingParameters):
        CCNNUpsampling(shared_ptr[CDevice] device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                       bool align_corners) except +raise_py_error

    cdef cppclass CCNNUpsamplingGradient "mpsx::CNNUpsamplingGradient"(CGradientKernel, CUpsamplingParameters):
        CCNNUpsamplingGradient(shared_ptr[CDevice] device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                               bool align_corners) except +raise_py_error
