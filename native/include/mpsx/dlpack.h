// DLPack (github.com/dmlc/dlpack, the array API's __dlpack__ protocol): how
// mpsx hands its images and buffers to other libraries (torch, numpy, cupy,
// jax) and takes theirs, without a copy where the layouts allow
// (docs/semantics.md, "DLPack").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsx/image.h"

namespace mpsx::dlpack {

// The ABI of dlpack.h 1.0, under its own names.
enum DLDeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLMetal = 8, kDLCUDAManaged = 13 };
enum DLDataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};
inline constexpr uint32_t kDLPackMajorVersion = 1;
inline constexpr uint32_t kDLPackMinorVersion = 0;
inline constexpr uint64_t kReadOnly = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY
inline constexpr uint64_t kIsCopied = 2;  // DLPACK_FLAG_BITMASK_IS_COPIED

// The names of capsules, before and after a consumer took their tensor.
inline constexpr char kTensorCapsule[] = "dltensor";
inline constexpr char kVersionedCapsule[] = "dltensor_versioned";
inline constexpr char kUsedTensorCapsule[] = "used_dltensor";
inline constexpr char kUsedVersionedCapsule[] = "used_dltensor_versioned";

// The largest number of dimensions mpsx takes or gives (a Buffer's shape).
inline constexpr int32_t kMaxDimensions = 8;

// DLPack's copy argument: False, None, True.
enum class Copy : uint8_t { Never, IfNeeded, Always };

// "CPU", "CUDA:1", "Metal:0", for messages.
std::string name_of(DLDevice device);
// Where `device`'s memory is, as __dlpack_device__ says: cpu and metal
// (unified memory) kDLCPU, cuda kDLCUDA with its ordinal.
DLDevice device_of(const Device& device);

// What a consumer asked of __dlpack__, checked for memory of one device.
struct ExportRequest {
  bool versioned = false;  // max_version >= (1, 0): a DLManagedTensorVersioned
  Copy copy = Copy::IfNeeded;
  // The consumer's stream (cuda: a cudaStream_t; 1 and 2 are CUDA's legacy
  // and per-thread default streams, as DLPack numbers them), and whether
  // mpsx orders its pending writes before it (not for stream -1).
  int64_t stream = 0;
  bool ordered = true;
  bool to_host = false;  // dl_device is the host, the device is not: a host copy
};

// Checks __dlpack__'s arguments against `device` (ValueError for a stream
// DLPack does not allow there, BufferError for a dl_device it cannot reach).
ExportRequest export_request(const Device& device, bool versioned, bool has_stream, int64_t stream,
                             bool has_dl_device, DLDevice dl_device, Copy copy);

// A capsule's payload: a DLManagedTensor, or a DLManagedTensorVersioned.
// Its deleter releases what it holds, on any thread.
struct Exported {
  void* managed = nullptr;
  bool versioned = false;
};
void release(const Exported& exported);

// The pixels of `image` as an (N, C, H, W) tensor whose strides are the
// backend's layout (NHWC on cpu and cuda: PyTorch's channels_last), sharing
// its memory, or with Copy::Always a dense (N, C, H, W) copy. Its last
// writer must have been committed: the consumer's stream is ordered after it
// (cuda), or this waits for it. BufferError where the pixels are in an
// ImageStorage (metal textures) and no copy is allowed. Blocks: call it
// without the GIL.
Exported export_image(const std::shared_ptr<Image>& image, const ExportRequest& request);
// The same for a buffer of `shape` values of `data_type`, row-major.
Exported export_buffer(const std::shared_ptr<Buffer>& buffer, DataType data_type, const std::vector<int64_t>& shape,
                       const ExportRequest& request);

// What an import makes of a tensor.
enum class ImportAs : uint8_t { Image, ImageBatch, Buffer };

// Another library's tensor, checked for what mpsx makes of it before its
// capsule is consumed, so that a refused import leaves the capsule as it was.
struct ImportPlan {
  std::shared_ptr<Device> device;
  void* managed = nullptr;
  bool versioned = false;
  ImportAs as = ImportAs::Image;
  DataType data_type = DataType::Float32;
  std::vector<int64_t> shape;  // the tensor's; an image's descriptor for images
  ImageDescriptor descriptor;
  // The tensor as up to four strided dims: an image's (N, C, H, W), a
  // buffer's dims merged where they are contiguous.
  ImageRegion region;
  bool zero_copy = false;
};

// The DLPack device a tensor of `device_type`, `device_id` must be on to be
// imported into `device`: DeviceMismatchError naming both otherwise.
void check_device(const Device& device, int32_t device_type, int32_t device_id);
// TypeError for a data type mpsx cannot hold, ShapeError for dims, sizes or
// strides it cannot represent, ValueError for sizes out of range,
// DeviceMismatchError for another device, BufferError where `copy` is
// Never and the tensor cannot be shared (strides other than the backend's
// layout, read-only, another device's kind of memory).
ImportPlan plan_import(std::shared_ptr<Device> device, void* managed, bool versioned, ImportAs as, Copy copy);
// Takes the tensor over (its capsule consumed by then): an image or buffer
// over its memory, which keeps it until freed, or a copy, after which the
// tensor is released. Blocks for a copy: call it without the GIL.
std::shared_ptr<Image> import_image(const ImportPlan& plan);
std::shared_ptr<Buffer> import_buffer(const ImportPlan& plan);

// The stream (cuda: a cudaStream_t handle) a producer orders its work
// before, for an import into `device`; 0 where the backend has none.
int64_t import_stream(const Device& device);

}  // namespace mpsx::dlpack
