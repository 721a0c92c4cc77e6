# cdef extern declarations of native/include/mpsx/graph/concatenation.h
from mpsx.includes.graph cimport *

cdef extern from "mpsx/graph/concatenation.h" namespace "mpsx" nogil:
    cdef cppclass CNNConcatenationNode "mpsx::NNConcatenationNode"(CFilterNode):
        CNNConcatenationNode(vector[shared_ptr[CImageNode]] sources) except +raise_py_error

    cdef cppclass CNNConcatenationGradientNode "mpsx::NNConcatenationGradientNode"(CFilterNode):
        CNNConcatenationGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                     shared_ptr[CStateNode] gradient_state, int64_t index) except +raise_py_error
        int64_t index()
