# cdef extern declarations of native/include/mpsx/errors.h
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string

cdef extern from "mpsx/errors.h" namespace "mpsx" nogil:
    cdef cppclass CError "mpsx::Error":
        const char* what()

    cdef cppclass CForeignError "mpsx::ForeignError"(CError):
        CForeignError(const string& message, shared_ptr[void] payload)

cdef extern from "<exception>" namespace "std" nogil:
    cdef cppclass exception_ptr:
        pass

cdef extern from "_errors.h" namespace "mpsx::python":
    # The handler of every `except +raise_py_error` declaration.
    cdef int raise_py_error() except *
    void raise_stored(exception_ptr error) except *

cdef extern from "_callbacks.h" namespace "mpsx::python":
    shared_ptr[void] hold(object o)
    CForeignError fetch_foreign_error()

cdef extern from "<memory>" namespace "std" nogil:
    # std::make_shared whose exceptions (from the constructors) get our translation.
    shared_ptr[T] make_native "std::make_shared"[T](...) except +raise_py_error
