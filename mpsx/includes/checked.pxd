# cdef extern declarations of native/include/mpsx/checked.h
from mpsx.includes.common cimport *

cdef extern from "mpsx/checked.h" namespace "mpsx" nogil:
    float checked_parameter(float value, const char* owner, const char* name) except +raise_py_error
