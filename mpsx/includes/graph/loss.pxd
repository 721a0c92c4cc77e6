# cdef extern declarations of native/include/mpsx/graph/loss.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.loss cimport LossDescriptor

cdef extern from "mpsx/graph/loss.h" namespace "mpsx" nogil:
    cdef cppclass CCNNLossNode "mpsx::CNNLossNode"(CFilterNode):
        CCNNLossNode(shared_ptr[CImageNode] source, LossDescriptor descriptor) except +raise_py_error
        const LossDescriptor& descriptor()
        const shared_ptr[CStateNode]& input_labels()

    cdef cppclass CLossCallback "mpsx::LossCallback":
        pass

    cdef cppclass CNNForwardLossNode "mpsx::NNForwardLossNode"(CFilterNode):
        CNNForwardLossNode(shared_ptr[CImageNode] source, shared_ptr[CImageNode] labels,
                           shared_ptr[CImageNode] weights, LossDescriptor descriptor) except +raise_py_error
        const LossDescriptor& descriptor()
        shared_ptr[CLossCallback] property_call_back

    cdef cppclass CNNLossGradientNode "mpsx::NNLossGradientNode"(CFilterNode):
        CNNLossGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                            shared_ptr[CImageNode] labels, shared_ptr[CImageNode] weights,
                            shared_ptr[CStateNode] gradient_state, LossDescriptor descriptor,
                            bool is_labels_gradient_filter) except +raise_py_error
        const LossDescriptor& descriptor()
        bool is_labels_gradient_filter()
        shared_ptr[CLossCallback] property_call_back

cdef extern from "_graph.h" namespace "mpsx::python":
    ctypedef object (*WrapLossImage)(const shared_ptr[CImage]&)
    shared_ptr[CLossCallback] make_python_loss_callback(object callback, WrapLossImage wrap)
    PyObject* python_loss_callback_object(const shared_ptr[CLossCallback]& callback)
