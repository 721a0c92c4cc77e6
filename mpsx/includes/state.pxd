# cdef extern declarations of native/include/mpsx/state.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.image cimport ImageDescriptor

cdef extern from "mpsx/state.h" namespace "mpsx" nogil:
    cdef cppclass CState "mpsx::State":
        CState(shared_ptr[CDevice] device)
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        const char* class_name()
        bool is_temporary()
        int64_t read_count()
        void set_read_count(int64_t count) except +raise_py_error
        void make_temporary(const CCommandBuffer& command_buffer)
        void synchronize(CCommandBuffer& command_buffer) except +raise_py_error
        void append_trainable_gradients(vector[shared_ptr[CBuffer]]& gradients)
        void set_resources(vector[size_t] sizes) except +raise_py_error
        void set_resources(vector[shared_ptr[CBuffer]] buffers) except +raise_py_error
        size_t resource_count()
        size_t buffer_size_at(size_t index) except +raise_py_error
        shared_ptr[CBuffer] resource_at(size_t index, bool allocate) except +raise_py_error
        size_t resource_size() except +raise_py_error

    cdef cppclass CGradientState "mpsx::GradientState"(CState):
        bool encoded
        ImageDescriptor source_descriptor
