# cdef extern declarations of native/include/mpsx/graph/softmax.h
from mpsx.includes.graph cimport *

cdef extern from "mpsx/graph/softmax.h" namespace "mpsx" nogil:
    cdef cppclass CCNNSoftMaxNode "mpsx::CNNSoftMaxNode"(CFilterNode):
        CCNNSoftMaxNode(shared_ptr[CImageNode] source, bool log) except +raise_py_error

    cdef cppclass CCNNSoftMaxGradientNode "mpsx::CNNSoftMaxGradientNode"(CFilterNode):
        CCNNSoftMaxGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                shared_ptr[CStateNode] gradient_state, bool log) except +raise_py_error
