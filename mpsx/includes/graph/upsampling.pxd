# cdef extern declarations of native/include/mpsx/graph/upsampling.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.upsampling cimport UpsamplingKind

cdef extern from "mpsx/graph/upsampling.h" namespace "mpsx" nogil:
    cdef cppclass CCNNUpsamplingNode "mpsx::CNNUpsamplingNode"(CFilterNode):
        CCNNUpsamplingNode(shared_ptr[CImageNode] source, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                           bool align_corners) except +raise_py_error
        int64_t scale_factor_x()
        int64_t scale_factor_y()
        bool align_corners()

    cdef cppclass CCNNUpsamplingGradientNode "mpsx::CNNUpsamplingGradientNode"(CFilterNode):
        CCNNUpsamplingGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                   shared_ptr[CStateNode] gradient_state, UpsamplingKind kind, double scale_x,
                                   double scale_y) except +raise_py_error
        int64_t scale_factor_x()
        int64_t scale_factor_y()
        bool align_corners()
