# cdef extern declarations of native/include/mpsx/device.h
from mpsx.includes.errors cimport raise_py_error
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from mpsx.includes.command_buffer cimport CCommandQueue

cdef extern from "mpsx/backend.h" namespace "mpsx" nogil:
    cdef cppclass CBackend "mpsx::Backend":
        const char* loop_clone()
        bint runs_float16_convolutions()
        const char* onednn_isa()

cdef extern from "mpsx/device.h" namespace "mpsx" nogil:
    cdef cppclass CDevice "mpsx::Device":
        @staticmethod
        const vector[shared_ptr[CDevice]]& all "all"() except +raise_py_error
        @staticmethod
        shared_ptr[CDevice] named(const string& name) except +raise_py_error
        const string& name()
        const char* backend_name()
        CBackend& backend()
        bint host_addressable()
        bint deterministic()
        void set_deterministic(bint value)
        const shared_ptr[CCommandQueue]& command_queue() except +raise_py_error
        shared_ptr[CCommandQueue] new_command_queue() except +raise_py_error
        void trim()
        size_t bytes_in_use()
        size_t peak_bytes_in_use()
        void reset_peak_bytes_in_use()
        size_t bytes_cached()

cdef extern from "mpsx/backend.h" namespace "mpsx" nogil:
    const vector[string]& backend_load_errors()
