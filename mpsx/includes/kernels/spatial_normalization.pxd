# cdef extern declarations of native/include/mpsx/kernels/spatial_normalization.h
from mpsx.includes.kernel cimport *
from mpsx.includes.kernels.normalization cimport CResponseNormalizationProperties

cdef extern from "mpsx/kernels/spatial_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CSpatialNormalizationProperties "mpsx::SpatialNormalizationProperties"(
            CResponseNormalizationProperties):
        pass

    cdef cppclass CCNNSpatialNormalization "mpsx::CNNSpatialNormalization"(
            CUnaryKernel, CSpatialNormalizationProperties):
        CCNNSpatialNormalization(shared_ptr[CDevice] device, int64_t kernel_width,
                                 int64_t kernel_height) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationGradient "mpsx::CNNSpatialNormalizationGradient"(
            CGradientKernel, CSpatialNormalizationProperties):
        CCNNSpatialNormalizationGradient(shared_ptr[CDevice] device, int64_t kernel_width,
                                         int64_t kernel_height) except +raise_py_error
