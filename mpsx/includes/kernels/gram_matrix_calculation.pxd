# cdef extern declarations of native/include/mpsx/kernels/gram_matrix_calculation.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/gram_matrix_calculation.h" namespace "mpsx" nogil:
    cdef cppclass CNNGramMatrixCalculation "mpsx::NNGramMatrixCalculation"(CUnaryKernel):
        CNNGramMatrixCalculation(shared_ptr[CDevice] device, float alpha) except +raise_py_error
        float alpha()
        void set_alpha(float alpha) except +raise_py_error

    cdef cppclass CNNGramMatrixCalculationGradient "mpsx::NNGramMatrixCalculationGradient"(CGradientKernel):
        CNNGramMatrixCalculationGradient(shared_ptr[CDevice] device, float alpha) except +raise_py_error
        float alpha()
        void set_alpha(float alpha) except +raise_py_error
