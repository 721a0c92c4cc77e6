# cdef extern declarations of native/include/mpsx/kernels/initial_gradient.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/initial_gradient.h" namespace "mpsx" nogil:
    cdef cppclass CNNInitialGradient "mpsx::NNInitialGradient"(CUnaryKernel):
        CNNInitialGradient(shared_ptr[CDevice] device) except +raise_py_error
