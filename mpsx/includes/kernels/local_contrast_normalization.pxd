# cdef extern declarations of native/include/mpsx/kernels/local_contrast_normalization.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/local_contrast_normalization.h" namespace "mpsx" nogil:
    cdef cppclass LocalContrastNormalizationParameters "mpsx::LocalContrastNormalizationParameters":
        float alpha, beta, delta, p0, pm, ps

    cdef cppclass CLocalContrastNormalizationSettings "mpsx::LocalContrastNormalizationSettings":
        int64_t lcn_kernel_width()
        int64_t lcn_kernel_height()
        LocalContrastNormalizationParameters parameters

    cdef cppclass CCNNLocalContrastNormalization "mpsx::CNNLocalContrastNormalization"(
            CUnaryKernel, CLocalContrastNormalizationSettings):
        CCNNLocalContrastNormalization(shared_ptr[CDevice] device, int64_t kernel_width,
                                       int64_t kernel_height) except +raise_py_error

    cdef cppclass CCNNLocalContrastNormalizationGradient "mpsx::CNNLocalContrastNormalizationGradient"(
            CGradientKernel, CLocalContrastNormalizationSettings):
        CCNNLocalContrastNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_width,
                                               int64_t kernel_height) except +raise_py_error
