# cdef extern declarations of native/include/mpsx/graph/initial_gradient.h
from mpsx.includes.graph cimport *

cdef extern from "mpsx/graph/initial_gradient.h" namespace "mpsx" nogil:
    cdef cppclass CNNInitialGradientNode "mpsx::NNInitialGradientNode"(CFilterNode):
        CNNInitialGradientNode(shared_ptr[CImageNode] source) except +raise_py_error
