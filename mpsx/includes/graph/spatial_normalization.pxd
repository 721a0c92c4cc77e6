# cdef extern declarations of native/include/mpsx/graph/spatial_normalization.h
from mpsx.includes.errors cimport raise_py_error
from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.graph cimport CFilterNode, CImageNode, CStateNode

cdef extern from "mpsx/graph/spatial_normalization.h" namespace "mpsx" nogil:
    cdef cppclass SpatialNormalizationNodeParameters "mpsx::SpatialNormalizationParameters":
        float alpha, beta, delta

    cdef cppclass CSpatialNormalizationNodeSettings "mpsx::SpatialNormalizationNodeSettings":
        int64_t kernel_width()
        int64_t kernel_height()
        void set_kernel_width(int64_t value) except +raise_py_error
        void set_kernel_height(int64_t value) except +raise_py_error
        const SpatialNormalizationNodeParameters& parameters()
        void set_alpha(float value) except +raise_py_error
        void set_beta(float value) except +raise_py_error
        void set_delta(float value) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationNode "mpsx::CNNSpatialNormalizationNode"(
            CFilterNode, CSpatialNormalizationNodeSettings):
        CCNNSpatialNormalizationNode(shared_ptr[CImageNode] source, int64_t kernel_size) except +raise_py_error

    cdef cppclass CCNNSpatialNormalizationGradientNode "mpsx::CNNSpatialNormalizationGradientNode"(
            CFilterNode, CSpatialNormalizationNodeSettings):
        CCNNSpatialNormalizationGradientNode(shared_ptr[CImageNode] source_gradient,
                                             shared_ptr[CImageNode] source_image,
                                             shared_ptr[CStateNode] gradient_state,
                                             int64_t kernel_size) except +raise_py_error
