# cdef extern declarations of native/include/mpsx/distributed.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CBuffer

cdef extern from "mpsx/distributed.h" namespace "mpsx" nogil:
    cdef enum class ReduceOperation "mpsx::ReduceOperation"(uint8_t):
        Sum "mpsx::ReduceOperation::Sum"
        Mean "mpsx::ReduceOperation::Mean"

    cdef cppclass HostAllReduce "std::function<void(float*, size_t, mpsx::ReduceOperation)>":
        pass

    cdef cppclass CCollectiveDescriptor "mpsx::CollectiveDescriptor":
        int rank
        int world_size
        string unique_id
        string library
        HostAllReduce host_all_reduce
        double timeout_seconds

    cdef cppclass CCommunicator "mpsx::Communicator":
        CCommunicator(shared_ptr[CDevice] device, const CCollectiveDescriptor& descriptor,
                      size_t bucket_bytes) except +raise_py_error
        int rank()
        int world_size()
        const shared_ptr[CDevice]& device()
        size_t bucket_bytes()
        uint64_t collective_calls()
        uint64_t layout_checks()
        void encode_all_reduce(CCommandBuffer& command_buffer, const vector[shared_ptr[CBuffer]]& buffers,
                               ReduceOperation operation) except +raise_py_error

    string new_group_id(CDevice& device, const string& library) except +raise_py_error

cdef extern from "_distributed.h" namespace "mpsx::python":
    ctypedef int (*HostAllReduceCall)(PyObject* function, float* data, size_t count, int mean) except -1
    HostAllReduce host_all_reduce(object function, HostAllReduceCall call)
