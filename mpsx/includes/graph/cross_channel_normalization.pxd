# cdef extern declarations of native/include/mpsx/graph/cross_channel_normalization.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.normalization cimport CResponseNormalizationSettings, ResponseNormalizationParameters

cdef extern from "mpsx/graph/cross_channel_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCNNCrossChannelNormalizationNode "mpsx::CNNCrossChannelNormalizationNode"(
            CFilterNode, CResponseNormalizationSettings):
        CCNNCrossChannelNormalizationNode(shared_ptr[CImageNode] source, int64_t kernel_size) except +raise_py_error
        int64_t kernel_size()
        void set_kernel_size(int64_t value) except +raise_py_error

    cdef cppclass CCNNCrossChannelNormalizationGradientNode "mpsx::CNNCrossChannelNormalizationGradientNode"(
            CFilterNode):
        CCNNCrossChannelNormalizationGradientNode(shared_ptr[CImageNode] source_gradient,
                                                  shared_ptr[CImageNode] source_image,
                                                  shared_ptr[CStateNode] gradient_state,
                                                  int64_t kernel_size) except +raise_py_error
        int64_t kernel_size()
        const ResponseNormalizationParameters& parameters()
