# cdef extern declarations of native/include/mpsx/kernels/local_contrast_normalization.h
from mpsx.includes.errors cimport raise_py_error
from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.device cimport CDevice
from mpsx.includes.kernel cimport CGradientKernel, CUnaryKernel

cdef extern from "mpsx/kernels/local_contrast_normalization.h" namespace "mpsx" nogil:
    cdef cppclass LocalContrastNormalizationParameters "mpsx::LocalContrastNormalizationParameters":
        float alpha, beta, delta, p0, pm, ps

    cdef cppclass CCNNLocalContrastNormalization "mpsx::CNNLocalContrastNormalization"(CUnaryKernel):
        CCNNLocalContrastNormalization(shared_ptr[CDevice] device, int64_t kernel_width,
                                       int64_t kernel_height) except +raise_py_error
        int64_t lcn_kernel_width()
        int64_t lcn_kernel_height()
        LocalContrastNormalizationParameters parameters

    cdef cppclass CCNNLocalContrastNormalizationGradient "mpsx::CNNLocalContrastNormalizationGradient"(
            CGradientKernel):
        CCNNLocalContrastNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_width,
                                               int64_t kernel_height) except +raise_py_error
        int64_t lcn_kernel_width()
        int64_t lcn_kernel_height()
        LocalContrastNormalizationParameters parameters
