# cdef extern declarations of native/include/mpsx/data_source.h
from mpsx.includes.common cimport *

cdef extern from "mpsx/data_source.h" namespace "mpsx" nogil:
    cdef cppclass HostArray "mpsx::HostArray":
        const void* data
        size_t count
        DataType type
        shared_ptr[void] owner
        vector[int64_t] shape
