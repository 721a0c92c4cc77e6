# cdef extern declarations of native/include/mpsx/graph/convolution.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.convolution cimport AccumulatorPrecision, CConvolutionDataSource

cdef extern from "mpsx/graph/convolution.h" namespace "mpsx" nogil:
    cdef cppclass CCNNConvolutionNode "mpsx::CNNConvolutionNode"(CFilterNode):
        CCNNConvolutionNode(shared_ptr[CImageNode] source, shared_ptr[CConvolutionDataSource] weights,
                            bool fully_connected) except +raise_py_error
        const shared_ptr[CConvolutionDataSource]& weights()
        AccumulatorPrecision accumulator_precision

    cdef cppclass CCNNConvolutionGradientNode "mpsx::CNNConvolutionGradientNode"(CFilterNode):
        CCNNConvolutionGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                    shared_ptr[CStateNode] gradient_state, shared_ptr[CConvolutionDataSource] weights,
                                    bool fully_connected) except +raise_py_error
