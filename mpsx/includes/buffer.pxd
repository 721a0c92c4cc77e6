# cdef extern declarations of native/include/mpsx/buffer.h
from mpsx.includes.common cimport *

cdef extern from "mpsx/buffer.h" namespace "mpsx" nogil:
    cdef cppclass CBuffer "mpsx::Buffer":
        CBuffer(shared_ptr[CDevice] device, size_t length) except +raise_py_error
        size_t length()
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        void* data()
        uint64_t id()
        void synchronize(CCommandBuffer& command_buffer) except +raise_py_error
        void check_host_readable(const char* what) except +raise_py_error
        void check_host_writable(const char* what) except +raise_py_error
        void read(void* destination, size_t offset, size_t bytes, const char* what) except +raise_py_error
        void write(const void* source, size_t offset, size_t bytes) except +raise_py_error
        void fill_zero() except +raise_py_error

    cdef cppclass CVector "mpsx::Vector":
        CVector(shared_ptr[CDevice] device, size_t length, DataType data_type) except +raise_py_error
        CVector(shared_ptr[CBuffer] buffer, size_t offset, size_t length, DataType data_type, size_t vectors,
                size_t vector_bytes) except +raise_py_error
        size_t length()
        size_t offset()
        size_t vectors()
        size_t vector_bytes()
        DataType data_type()
        const shared_ptr[CBuffer]& buffer()
        CDevice& device()
        @staticmethod
        shared_ptr[CVector] temporary(CCommandBuffer& command_buffer, size_t length,
                                      DataType data_type) except +raise_py_error
        bint is_temporary()
        int64_t read_count()
        void set_read_count(int64_t count) except +raise_py_error
        void check_host_access() except +raise_py_error
