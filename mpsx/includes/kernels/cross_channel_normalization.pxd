# cdef extern declarations of native/include/mpsx/kernels/cross_channel_normalization.h
from mpsx.includes.errors cimport raise_py_error
from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.device cimport CDevice
from mpsx.includes.kernel cimport CGradientKernel, CUnaryKernel

cdef extern from "mpsx/kernels/cross_channel_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCrossChannelNormalizationProperties "mpsx::CrossChannelNormalizationProperties":
        int64_t kernel_size()
        float alpha()
        float beta()
        float delta()
        void set_alpha(float value) except +raise_py_error
        void set_beta(float value) except +raise_py_error
        void set_delta(float value) except +raise_py_error

    cdef cppclass CCNNCrossChannelNormalization "mpsx::CNNCrossChannelNormalization"(
            CUnaryKernel, CCrossChannelNormalizationProperties):
        CCNNCrossChannelNormalization(shared_ptr[CDevice] device, int64_t kernel_size) except +raise_py_error

    cdef cppclass CCNNCrossChannelNormalizationGradient "mpsx::CNNCrossChannelNormalizationGradient"(
            CGradientKernel, CCrossChannelNormalizationProperties):
        CCNNCrossChannelNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_size) except +raise_py_error
