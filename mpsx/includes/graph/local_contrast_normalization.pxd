# cdef extern declarations of native/include/mpsx/graph/local_contrast_normalization.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.local_contrast_normalization cimport LocalContrastNormalizationParameters

cdef extern from "mpsx/graph/local_contrast_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCNNLocalContrastNormalizationNode "mpsx::CNNLocalContrastNormalizationNode"(CFilterNode):
        CCNNLocalContrastNormalizationNode(shared_ptr[CImageNode] source, int64_t kernel_size) except +raise_py_error
        int64_t kernel_width()
        int64_t kernel_height()
        void set_kernel_width(int64_t value) except +raise_py_error
        void set_kernel_height(int64_t value) except +raise_py_error
        LocalContrastNormalizationParameters parameters

    cdef cppclass CCNNLocalContrastNormalizationGradientNode "mpsx::CNNLocalContrastNormalizationGradientNode"(
            CFilterNode):
        CCNNLocalContrastNormalizationGradientNode(shared_ptr[CImageNode] source_gradient,
                                                   shared_ptr[CImageNode] source_image,
                                                   shared_ptr[CStateNode] gradient_state, int64_t kernel_width,
                                                   int64_t kernel_height) except +raise_py_error
        int64_t kernel_width()
        int64_t kernel_height()
        LocalContrastNormalizationParameters parameters
