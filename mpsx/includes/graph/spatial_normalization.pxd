# cdef extern declarations of native/include/mpsx/graph/spatial_normalization.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.normalization cimport CResponseNormalizationSettings

cdef extern from "mpsx/graph/spatial_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CSpatialNormalizationNodeSettings "mpsx::SpatialNormalizationNodeSettings"(
            CResponseNormalizationSettings):
        int64_t kernel_width()
        int64_t kernel_height()
        void set_kernel_width(int64_t value) except +raise_py_error
        void set_kernel_height(int64_t value) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationNode "mpsx::CNNSpatialNormalizationNode"(
            CFilterNode, CSpatialNormalizationNodeSettings):
        CCNNSpatialNormalizationNode(shared_ptr[CImageNode] source, int64_t kernel_size) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationGradientNode "mpsx::CNNSpatialNormalizationGradientNode"(
            CFilterNode, CSpatialNormalizationNodeSettings):
        CCNNSpatialNormalizationGradientNode(shared_ptr[CImageNode] source_gradient,
                                             shared_ptr[CImageNode] source_image,
                                             shared_ptr[CStateNode] gradient_state,
                                             int64_t kernel_size) except +raise_py_error
