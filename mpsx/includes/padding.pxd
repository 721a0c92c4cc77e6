# cdef extern declarations of native/include/mpsx/padding.h
from mpsx.includes.common cimport *

cdef extern from "mpsx/padding.h" namespace "mpsx" nogil:
    cdef cppclass CPaddingPolicy "mpsx::PaddingPolicy":
        uint32_t padding_method()
        string label() except +raise_py_error

    cdef cppclass CDefaultPadding "mpsx::DefaultPadding"(CPaddingPolicy):
        @staticmethod
        shared_ptr[const CDefaultPadding] with_method(uint32_t method)
        @staticmethod
        shared_ptr[const CDefaultPadding] for_tensorflow_average_pooling(bool valid_only)
        bool clamps_edges()
