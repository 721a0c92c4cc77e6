# cdef extern declarations of native/include/mpsx/graph/loss.h
from mpsx.includes.errors cimport raise_py_error
from libcpp.memory cimport shared_ptr

from mpsx.includes.graph cimport CFilterNode, CImageNode, CStateNode
from mpsx.includes.kernels.loss cimport LossDescriptor

cdef extern from "mpsx/graph/loss.h" namespace "mpsx" nogil:
    cdef cppclass CCNNLossNode "mpsx::CNNLossNode"(CFilterNode):
        CCNNLossNode(shared_ptr[CImageNode] source, LossDescriptor descriptor) except +raise_py_error
        const LossDescriptor& descriptor()
        const shared_ptr[CStateNode]& input_labels()
