# cdef extern declarations of native/include/mpsx/graph/dropout.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.dropout cimport DropoutDescriptor

cdef extern from "mpsx/graph/dropout.h" namespace "mpsx" nogil:
    cdef cppclass CCNNDropoutNode "mpsx::CNNDropoutNode"(CFilterNode):
        CCNNDropoutNode(shared_ptr[CImageNode] source, DropoutDescriptor descriptor) except +raise_py_error
        const DropoutDescriptor& descriptor()

    cdef cppclass CCNNDropoutGradientNode "mpsx::CNNDropoutGradientNode"(CFilterNode):
        CCNNDropoutGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                shared_ptr[CStateNode] gradient_state,
                                DropoutDescriptor descriptor) except +raise_py_error
        const DropoutDescriptor& descriptor()
