# cdef extern declarations of native/include/mpsx/graph/reshape.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.reshape cimport ImageCoordinate
from mpsx.includes.types cimport EdgeMode

cdef extern from "mpsx/graph/reshape.h" namespace "mpsx" nogil:
    cdef cppclass CNNPadNode "mpsx::NNPadNode"(CFilterNode):
        CNNPadNode(shared_ptr[CImageNode] source, ImageCoordinate padding_size_before,
                   ImageCoordinate padding_size_after, EdgeMode edge_mode) except +raise_py_error
        const ImageCoordinate& padding_size_before()
        const ImageCoordinate& padding_size_after()
        EdgeMode edge_mode()
        float fill_value

    cdef cppclass CNNPadGradientNode "mpsx::NNPadGradientNode"(CFilterNode):
        CNNPadGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                           shared_ptr[CStateNode] gradient_state) except +raise_py_error

    cdef cppclass CNNReshapeNode "mpsx::NNReshapeNode"(CFilterNode):
        CNNReshapeNode(shared_ptr[CImageNode] source, int64_t result_width, int64_t result_height,
                       int64_t result_feature_channels) except +raise_py_error
        const ImageCoordinate& result_size()

    cdef cppclass CNNReshapeGradientNode "mpsx::NNReshapeGradientNode"(CFilterNode):
        CNNReshapeGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                               shared_ptr[CStateNode] gradient_state) except +raise_py_error
