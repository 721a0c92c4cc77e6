# cdef extern declarations of native/include/mpsx/kernels/arithmetic.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/arithmetic.h" namespace "mpsx" nogil:
    cdef enum class ArithmeticOperation "mpsx::ArithmeticOperation"(int32_t):
        Add "mpsx::ArithmeticOperation::Add"
        Subtract "mpsx::ArithmeticOperation::Subtract"
        Multiply "mpsx::ArithmeticOperation::Multiply"
        Divide "mpsx::ArithmeticOperation::Divide"
        Compare "mpsx::ArithmeticOperation::Compare"

    cdef enum class ComparisonType "mpsx::ComparisonType"(int32_t):
        pass

    cdef cppclass ArithmeticParameters "mpsx::ArithmeticParameters":
        float primary_scale, secondary_scale, bias, minimum, maximum, threshold
        ComparisonType comparison

    cdef cppclass CCNNArithmetic "mpsx::CNNArithmetic"(CBinaryKernel):
        CCNNArithmetic(shared_ptr[CDevice] device, ArithmeticOperation operation) except +raise_py_error
        ArithmeticParameters parameters
        int64_t primary_stride_in_feature_channels, secondary_stride_in_feature_channels

    cdef cppclass CCNNArithmeticGradient "mpsx::CNNArithmeticGradient"(CGradientKernel):
        CCNNArithmeticGradient(shared_ptr[CDevice] device, ArithmeticOperation operation,
                               bool is_secondary_source_filter) except +raise_py_error
        bool is_secondary_source_filter()
        float primary_scale, secondary_scale, bias, minimum_value, maximum_value
        int64_t secondary_stride_in_feature_channels
