# cdef extern declarations of native/include/mpsx/graph/arithmetic.h
from mpsx.includes.errors cimport raise_py_error
from libcpp.memory cimport shared_ptr

from mpsx.includes.graph cimport CFilterNode, CImageNode

cdef extern from "mpsx/graph/arithmetic.h" namespace "mpsx" nogil:
    cdef cppclass CNNAdditionNode "mpsx::NNAdditionNode"(CFilterNode):
        CNNAdditionNode(shared_ptr[CImageNode] left, shared_ptr[CImageNode] right) except +raise_py_error
