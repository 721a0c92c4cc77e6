# cdef extern declarations of native/include/mpsx/kernels/spatial_normalization.h
from mpsx.includes.errors cimport raise_py_error
from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.device cimport CDevice
from mpsx.includes.kernel cimport CGradientKernel, CUnaryKernel

cdef extern from "mpsx/kernels/spatial_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CSpatialNormalizationProperties "mpsx::SpatialNormalizationProperties":
        int64_t kernel_size()
        float alpha()
        float beta()
        float delta()
        void set_alpha(float value) except +raise_py_error
        void set_beta(float value) except +raise_py_error
        void set_delta(float value) except +raise_py_error

    cdef cppclass CCNNSpatialNormalization "mpsx::CNNSpatialNormalization"(
            CUnaryKernel, CSpatialNormalizationProperties):
        CCNNSpatialNormalization(shared_ptr[CDevice] device, int64_t kernel_width,
                                 int64_t kernel_height) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationGradient "mpsx::CNNSpatialNormalizationGradient"(
            CGradientKernel, CSpatialNormalizationProperties):
        CCNNSpatialNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_width,
                                         int64_t kernel_height) except +raise_py_error
