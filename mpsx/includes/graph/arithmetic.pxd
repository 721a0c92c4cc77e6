# cdef extern declarations of native/include/mpsx/graph/arithmetic.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.arithmetic cimport ArithmeticOperation, ArithmeticParameters

cdef extern from "mpsx/graph/arithmetic.h" namespace "mpsx" nogil:
    cdef cppclass CNNBinaryArithmeticNode "mpsx::NNBinaryArithmeticNode"(CFilterNode):
        CNNBinaryArithmeticNode(ArithmeticOperation operation, shared_ptr[CImageNode] left,
                                shared_ptr[CImageNode] right) except +raise_py_error
        ArithmeticOperation operation()
        ArithmeticParameters parameters
        int64_t primary_stride_in_pixels_x, primary_stride_in_pixels_y, primary_stride_in_feature_channels
        int64_t secondary_stride_in_pixels_x, secondary_stride_in_pixels_y, secondary_stride_in_feature_channels

    cdef cppclass CNNArithmeticGradientNode "mpsx::NNArithmeticGradientNode"(CFilterNode):
        CNNArithmeticGradientNode(ArithmeticOperation operation, shared_ptr[CImageNode] source_gradient,
                                  shared_ptr[CImageNode] source_image, shared_ptr[CStateNode] gradient_state,
                                  bool is_secondary_source_filter) except +raise_py_error
        bool is_secondary_source_filter()
        float primary_scale, secondary_scale, bias, minimum_value, maximum_value
        int64_t secondary_stride_in_pixels_x, secondary_stride_in_pixels_y, secondary_stride_in_feature_channels
