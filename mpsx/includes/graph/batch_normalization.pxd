# cdef extern declarations of native/include/mpsx/graph/batch_normalization.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.batch_normalization cimport CBatchNormalizationDataSource

cdef extern from "mpsx/graph/batch_normalization.h" namespace "mpsx" nogil:
    cdef enum class BatchNormalizationFlags "mpsx::BatchNormalizationFlags"(uint32_t):
        pass

    cdef cppclass CCNNBatchNormalizationNode "mpsx::CNNBatchNormalizationNode"(CFilterNode):
        CCNNBatchNormalizationNode(shared_ptr[CImageNode] source,
                                   shared_ptr[CBatchNormalizationDataSource] data_source) except +raise_py_error
        BatchNormalizationFlags flags

    cdef cppclass CCNNBatchNormalizationGradientNode "mpsx::CNNBatchNormalizationGradientNode"(CFilterNode):
        CCNNBatchNormalizationGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                           shared_ptr[CStateNode] gradient_state) except +raise_py_error
