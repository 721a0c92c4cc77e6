# How the errors of native/include/mpsx/errors.h reach Python (mpsx/_errors.h translates them).
from libcpp.memory cimport shared_ptr

cdef extern from "<exception>" namespace "std" nogil:
    cdef cppclass exception_ptr:
        pass

cdef extern from "_errors.h" namespace "mpsx::python":
    # The handler of every `except +raise_py_error` declaration.
    cdef int raise_py_error() except *
    void raise_stored(exception_ptr error) except *

cdef extern from "_callbacks.h" namespace "mpsx::python":
    shared_ptr[void] hold(object o)

cdef extern from "<memory>" namespace "std" nogil:
    # std::make_shared whose exceptions (from the constructors) get our translation.
    shared_ptr[T] make_native "std::make_shared"[T](...) except +raise_py_error
