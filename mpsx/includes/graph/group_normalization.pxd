# cdef extern declarations of native/include/mpsx/graph/group_normalization.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.group_normalization cimport CGroupNormalizationDataSource

cdef extern from "mpsx/graph/group_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCNNGroupNormalizationNode "mpsx::CNNGroupNormalizationNode"(CFilterNode):
        CCNNGroupNormalizationNode(shared_ptr[CImageNode] source,
                                   shared_ptr[CGroupNormalizationDataSource] data_source) except +raise_py_error

    cdef cppclass CCNNGroupNormalizationGradientNode "mpsx::CNNGroupNormalizationGradientNode"(CFilterNode):
        CCNNGroupNormalizationGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                           shared_ptr[CStateNode] gradient_state) except +raise_py_error
