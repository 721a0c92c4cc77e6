# cdef extern declarations of native/include/mpsx/kernels/upsampling.h
from mpsx.includes.errors cimport raise_py_error
from libc.stdint cimport int32_t, int64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr

from mpsx.includes.device cimport CDevice
from mpsx.includes.kernel cimport CGradientKernel, CUnaryKernel

cdef extern from "mpsx/kernels/upsampling.h" namespace "mpsx" nogil:
    cdef enum class UpsamplingKind "mpsx::UpsamplingKind"(int32_t):
        Nearest "mpsx::UpsamplingKind::Nearest"
        Bilinear "mpsx::UpsamplingKind::Bilinear"

    cdef cppclass CCNNUpsampling "mpsx::CNNUpsampling"(CUnaryKernel):
        CCNNUpsampling(shared_ptr[CDevice] device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                       cbool align_corners) except +raise_py_error
        int64_t scale_factor_x()
        int64_t scale_factor_y()
        cbool align_corners()

    cdef cppclass CCNNUpsamplingGradient "mpsx::CNNUpsamplingGradient"(CGradientKernel):
        CCNNUpsamplingGradient(shared_ptr[CDevice] device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                               cbool align_corners) except +raise_py_error
        int64_t scale_factor_x()
        int64_t scale_factor_y()
        cbool align_corners()
