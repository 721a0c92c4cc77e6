# cdef extern declarations of native/include/mpsx/dlpack.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.image cimport CImage

cdef extern from "mpsx/dlpack.h" namespace "mpsx::dlpack" nogil:
    const char* kTensorCapsule "mpsx::dlpack::kTensorCapsule"
    const char* kVersionedCapsule "mpsx::dlpack::kVersionedCapsule"
    const char* kUsedTensorCapsule "mpsx::dlpack::kUsedTensorCapsule"
    const char* kUsedVersionedCapsule "mpsx::dlpack::kUsedVersionedCapsule"

    cdef cppclass DLDevice "mpsx::dlpack::DLDevice":
        int32_t device_type
        int32_t device_id

    cdef cppclass DLManagedTensor "mpsx::dlpack::DLManagedTensor":
        void (*deleter)(DLManagedTensor*)

    cdef cppclass DLManagedTensorVersioned "mpsx::dlpack::DLManagedTensorVersioned":
        void (*deleter)(DLManagedTensorVersioned*)

    cdef enum class Copy "mpsx::dlpack::Copy"(uint8_t):
        Never "mpsx::dlpack::Copy::Never"
        IfNeeded "mpsx::dlpack::Copy::IfNeeded"
        Always "mpsx::dlpack::Copy::Always"

    cdef enum class ImportAs "mpsx::dlpack::ImportAs"(uint8_t):
        Image "mpsx::dlpack::ImportAs::Image"
        ImageBatch "mpsx::dlpack::ImportAs::ImageBatch"
        Buffer "mpsx::dlpack::ImportAs::Buffer"

    DLDevice device_of(const CDevice& device) except +raise_py_error

    cdef cppclass ExportRequest "mpsx::dlpack::ExportRequest":
        pass

    ExportRequest export_request(const CDevice& device, bool versioned, bool has_stream, int64_t stream,
                                 bool has_dl_device, DLDevice dl_device, Copy copy) except +raise_py_error

    cdef cppclass Exported "mpsx::dlpack::Exported":
        void* managed
        bool versioned

    void release(const Exported& exported)
    Exported export_image(const shared_ptr[CImage]& image, const ExportRequest& request) except +raise_py_error
    Exported export_buffer(const shared_ptr[CBuffer]& buffer, DataType data_type, const vector[int64_t]& shape,
                           const ExportRequest& request) except +raise_py_error

    cdef cppclass ImportPlan "mpsx::dlpack::ImportPlan":
        DataType data_type
        vector[int64_t] shape

    void check_device(const CDevice& device, int32_t device_type, int32_t device_id) except +raise_py_error
    ImportPlan plan_import(shared_ptr[CDevice] device, void* managed, bool versioned, ImportAs import_as,
                           Copy copy) except +raise_py_error
    shared_ptr[CImage] import_image(const ImportPlan& plan) except +raise_py_error
    shared_ptr[CBuffer] import_buffer(const ImportPlan& plan) except +raise_py_error
    int64_t import_stream(const CDevice& device) except +raise_py_error
