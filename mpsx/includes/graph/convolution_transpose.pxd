# cdef extern declarations of native/include/mpsx/graph/convolution_transpose.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.convolution cimport AccumulatorPrecision, CConvolutionDataSource

cdef extern from "mpsx/graph/convolution_transpose.h" namespace "mpsx" nogil:
    cdef cppclass CCNNConvolutionTransposeNode "mpsx::CNNConvolutionTransposeNode"(CFilterNode):
        CCNNConvolutionTransposeNode(shared_ptr[CImageNode] source, shared_ptr[CStateNode] convolution_gradient_state,
                                     shared_ptr[CConvolutionDataSource] weights) except +raise_py_error
        AccumulatorPrecision accumulator_precision

    cdef cppclass CCNNConvolutionTransposeGradientNode "mpsx::CNNConvolutionTransposeGradientNode"(CFilterNode):
        CCNNConvolutionTransposeGradientNode(shared_ptr[CImageNode] source_gradient,
                                             shared_ptr[CImageNode] source_image,
                                             shared_ptr[CStateNode] gradient_state,
                                             shared_ptr[CConvolutionDataSource] weights) except +raise_py_error
