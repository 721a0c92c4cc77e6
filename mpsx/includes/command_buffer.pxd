# cdef extern declarations of native/include/mpsx/command_buffer.h
from mpsx.includes.errors cimport exception_ptr, raise_py_error
from libc.stdint cimport uint8_t, uint64_t
from libcpp.memory cimport shared_ptr

from mpsx.includes.device cimport CDevice


cdef extern from "<functional>" namespace "std" nogil:
    cdef cppclass CompletedHandler "std::function<void(mpsx::CommandBuffer&)>":
        pass

cdef extern from "mpsx/command_buffer.h" namespace "mpsx" nogil:
    cdef enum class CommandBufferStatus "mpsx::CommandBufferStatus"(uint8_t):
        Error "mpsx::CommandBufferStatus::Error"

    cdef cppclass CCommandBuffer "mpsx::CommandBuffer":
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        shared_ptr[CCommandBuffer] shared_from_this()
        void check_encodable() except +raise_py_error
        void commit() except +raise_py_error
        shared_ptr[CCommandBuffer] commit_and_continue() except +raise_py_error
        void replay() except +raise_py_error
        bint replayable()
        void wait_until_completed() except +raise_py_error
        CommandBufferStatus status()
        exception_ptr error()
        void add_completed_handler(CompletedHandler handler) except +raise_py_error
        size_t command_count()

    cdef cppclass CCommandQueue "mpsx::CommandQueue":
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        shared_ptr[CCommandBuffer] command_buffer(bint replayable) except +raise_py_error
        void wait_until_idle() except +raise_py_error
        bint captures_command_buffers()
        void set_captures_command_buffers(bint on)
        uint64_t captured_command_buffer_count()

cdef extern from "_encoding.h" namespace "mpsx::python":
    # A local of an encoding function: what it recorded after begin() is discarded unless it reaches complete().
    cdef cppclass Encoding:
        void begin(CCommandBuffer& command_buffer)
        void complete()

cdef extern from "_callbacks.h" namespace "mpsx::python":
    ctypedef void (*CompletedCall)(object handler, CCommandBuffer& command_buffer)
    CompletedHandler completed_handler(object handler, CompletedCall call)
    cdef cppclass AtomicBool "std::atomic<bool>":
        void store(bint)
    AtomicBool& finalizing()
    void install_interrupt_check(unsigned long main_thread)
    void before_fork()
    void after_fork()
    bint wait_until_all_idle(double seconds) except +raise_py_error nogil
    bint end_at_exit()
    bint threads_abandoned()
