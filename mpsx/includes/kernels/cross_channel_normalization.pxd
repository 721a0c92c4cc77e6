# cdef extern declarations of native/include/mpsx/kernels/cross_channel_normalization.h
from mpsx.includes.kernel cimport *
from mpsx.includes.kernels.normalization cimport CResponseNormalizationProperties

cdef extern from "mpsx/kernels/cross_channel_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCNNCrossChannelNormalization "mpsx::CNNCrossChannelNormalization"(
            CUnaryKernel, CResponseNormalizationProperties):
        CCNNCrossChannelNormalization(shared_ptr[CDevice] device, int64_t kernel_size) except +raise_py_error

    cdef cppclass CCNNCrossChannelNormalizationGradient "mpsx::CNNCrossChannelNormalizationGradient"(
            CGradientKernel, CResponseNormalizationProperties):
        CCNNCrossChannelNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_size) except +raise_py_error
