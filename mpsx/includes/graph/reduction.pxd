# cdef extern declarations of native/include/mpsx/graph/reduction.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.reduction cimport ReductionKind
from mpsx.includes.types cimport Region

cdef extern from "mpsx/graph/reduction.h" namespace "mpsx" nogil:
    cdef cppclass CNNUnaryReductionNode "mpsx::NNUnaryReductionNode"(CFilterNode):
        CNNUnaryReductionNode(shared_ptr[CImageNode] source, ReductionKind kind) except +raise_py_error
        const Region& clip_rect_source()
        void set_clip_rect_source(const Region& value) except +raise_py_error
        float weight

    cdef cppclass CNNReductionSpatialMeanGradientNode "mpsx::NNReductionSpatialMeanGradientNode"(CFilterNode):
        CNNReductionSpatialMeanGradientNode(shared_ptr[CImageNode] source_gradient,
                                            shared_ptr[CImageNode] source_image,
                                            shared_ptr[CStateNode] gradient_state) except +raise_py_error
