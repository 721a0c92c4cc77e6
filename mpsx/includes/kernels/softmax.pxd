# cdef extern declarations of native/include/mpsx/kernels/softmax.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/softmax.h" namespace "mpsx" nogil:
    cdef cppclass CCNNSoftMax "mpsx::CNNSoftMax"(CUnaryKernel):
        CCNNSoftMax(shared_ptr[CDevice] device, bool log) except +raise_py_error

    cdef cppclass CCNNSoftMaxGradient "mpsx::CNNSoftMaxGradient"(CGradientKernel):
        CCNNSoftMaxGradient(shared_ptr[CDevice] device, bool log) except +raise_py_error
