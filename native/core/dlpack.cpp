#include "mpsx/dlpack.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/buffer.h"
#include "mpsx/checked.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"

namespace mpsx {

dlpack::DLDevice Backend::dlpack_device() const {
  if (!host_addressable()) fail<BufferError>("the ", kind(), " backend has no DLPack device");
  return {dlpack::kDLCPU, 0};
}

void Backend::copy_device_region(const ImageRegion& from, const ImageRegion& to) {
  if (!host_addressable()) fail<Error>("the ", kind(), " backend copies no regions of its memory");
  wait_for_host_writes();
  copy_region(from, to);
}

namespace dlpack {
namespace {

std::string type_name(DLDataType t) {
  std::string name;
  switch (t.code) {
    case kDLInt: name = "int"; break;
    case kDLUInt: name = "uint"; break;
    case kDLFloat: name = "float"; break;
    case kDLBfloat: name = "bfloat"; break;
    case kDLComplex: name = "complex"; break;
    case kDLBool: return t.lanes == 1 ? "bool" : "bool x" + std::to_string(t.lanes);
    default: name = "type code " + std::to_string(t.code) + " of ";
  }
  name += std::to_string(t.bits);
  if (t.lanes != 1) name += " x" + std::to_string(t.lanes);
  return name;
}

DLDataType dl_type_of(DataType t) {
  switch (t) {
    case DataType::Float32: return {kDLFloat, 32, 1};
    case DataType::Float16: return {kDLFloat, 16, 1};
    case DataType::BFloat16: return {kDLBfloat, 16, 1};
    case DataType::UInt8: return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

// The data type mpsx holds `t` in, or TypeError.
DataType data_type_of(DLDataType t, ImportAs as) {
  const bool image = as != ImportAs::Buffer;
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DataType::Float32;
    if (t.code == kDLFloat && t.bits == 16) return DataType::Float16;
    if (t.code == kDLUInt && t.bits == 8) return DataType::UInt8;
    if (t.code == kDLBfloat && t.bits == 16 && image) return DataType::BFloat16;
  }
  fail<TypeMismatchError>(image ? "expected a float32, float16, bfloat16 or uint8 tensor, given "
                                : "expected a float32, float16 or uint8 tensor, given ",
                          type_name(t));
}

std::string dims_text(const int64_t* values, int32_t count) {
  std::string text = "(";
  for (int32_t i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + (count == 1 ? ",)" : ")");
}

// What an exported tensor holds until its consumer calls the deleter.
template <class Managed>
struct Holder {
  Managed managed{};
  std::shared_ptr<const void> owner;
  int64_t shape[kMaxDimensions] = {};
  int64_t strides[kMaxDimensions] = {};
  static void deleter(Managed* managed) {
    if (managed) delete static_cast<Holder*>(managed->manager_ctx);
  }
};

// Memory to export: `data` on `device`, kept by `owner`.
struct View {
  void* data = nullptr;
  DLDevice device{kDLCPU, 0};
  DataType data_type = DataType::Float32;
  std::vector<int64_t> shape, strides;
  std::shared_ptr<const void> owner;
  bool copied = false;
};

template <class Managed>
Holder<Managed>* hold(const View& view) {
  auto* holder = new Holder<Managed>;
  holder->owner = view.owner;
  DLTensor& t = holder->managed.dl_tensor;
  t.data = view.data;
  t.device = view.device;
  t.ndim = static_cast<int32_t>(view.shape.size());
  t.dtype = dl_type_of(view.data_type);
  std::copy(view.shape.begin(), view.shape.end(), holder->shape);
  std::copy(view.strides.begin(), view.strides.end(), holder->strides);
  t.shape = holder->shape;
  t.strides = holder->strides;
  t.byte_offset = 0;  // as torch, cupy and numpy export: data points at the first element
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = &Holder<Managed>::deleter;
  return holder;
}

Exported exported(const View& view, bool versioned) {
  if (!versioned) return {&hold<DLManagedTensor>(view)->managed, false};
  auto* holder = hold<DLManagedTensorVersioned>(view);
  holder->managed.version = {kDLPackMajorVersion, kDLPackMinorVersion};
  holder->managed.flags = view.copied ? kIsCopied : 0;
  return {&holder->managed, true};
}

// Strides of a compact row-major tensor of `shape`, whose dims' product fits
// int64_t when its dims of 0 count as 1.
std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// A dense block of host memory for a copy handed to another library.
std::shared_ptr<void> host_block(size_t bytes) {
  void* data = std::malloc(bytes ? bytes : 1);
  if (!data) fail<OutOfMemoryError>("out of memory: could not allocate ", bytes, " bytes of host memory");
  return std::shared_ptr<void>(data, std::free);
}

ImageRegion dense_region(void* data, DataType type, const ImageDescriptor& d) {
  ImageRegion r;
  r.data = data;
  r.data_type = type;
  r.n = d.number_of_images;
  r.c = d.feature_channels;
  r.h = d.height;
  r.w = d.width;
  r.stride = nchw_layout(d);
  return r;
}

// A region of `count` consecutive elements.
ImageRegion run_region(void* data, DataType type, int64_t count) {
  ImageRegion r;
  r.data = data;
  r.data_type = type;
  r.n = r.c = r.h = 1;
  r.w = count;
  r.stride = ImageLayout{count, count, count, 1};
  return r;
}

const DLTensor& tensor_of(void* managed, bool versioned) {
  return versioned ? static_cast<DLManagedTensorVersioned*>(managed)->dl_tensor
                   : static_cast<DLManagedTensor*>(managed)->dl_tensor;
}

// The tensor's deleter, called once mpsx is done with its memory.
std::shared_ptr<void> adopt(void* managed, bool versioned) {
  if (versioned)
    return std::shared_ptr<void>(managed, [](void* m) {
      auto* t = static_cast<DLManagedTensorVersioned*>(m);
      if (t->deleter) t->deleter(t);
    });
  return std::shared_ptr<void>(managed, [](void* m) {
    auto* t = static_cast<DLManagedTensor*>(m);
    if (t->deleter) t->deleter(t);
  });
}

}  // namespace

std::string name_of(DLDevice device) {
  std::string kind;
  switch (device.device_type) {
    case kDLCPU: return "CPU";
    case kDLCUDA: kind = "CUDA"; break;
    case kDLCUDAHost: kind = "CUDAHost"; break;
    case kDLCUDAManaged: kind = "CUDAManaged"; break;
    case kDLMetal: kind = "Metal"; break;
    default: kind = "device type " + std::to_string(device.device_type);
  }
  return kind + ":" + std::to_string(device.device_id);
}

DLDevice device_of(const Device& device) { return device.backend().dlpack_device(); }

ExportRequest export_request(const Device& device, bool versioned, bool has_stream, int64_t stream,
                             bool has_dl_device, DLDevice dl_device, Copy copy) {
  device.check_process();
  ExportRequest r;
  r.versioned = versioned;
  r.copy = copy;
  const DLDevice own = device_of(device);
  if (has_dl_device && (dl_device.device_type != own.device_type || dl_device.device_id != own.device_id)) {
    if (dl_device.device_type != kDLCPU || dl_device.device_id != 0)
      fail<BufferError>("memory of device ", device.name(), " (DLPack ", name_of(own),
                        ") cannot be exported to DLPack device ", name_of(dl_device),
                        "; only to its own or, by a copy, to the CPU");
    if (copy == Copy::Never)
      fail<BufferError>("memory of device ", device.name(), " reaches the CPU only by a copy, and copy=False refuses ",
                        "one; to_numpy() copies it too");
    r.to_host = true;
    r.copy = Copy::Always;
  }
  if (own.device_type == kDLCPU || r.to_host) {
    // No streams on the host: the consumer reads once the export returns.
    if (has_stream && stream != -1)
      fail<ArgumentError>("stream must be None (or -1) for a tensor in host memory (DLPack ", name_of(own),
                          "), given ", stream);
    r.ordered = !has_stream;
    return r;
  }
  if (!has_stream) stream = 1;  // DLPack: None is CUDA's legacy default stream
  if (stream == 0 || stream < -1)
    fail<ArgumentError>("stream must be None, -1, 1 (the legacy default stream), 2 (the per-thread default stream) "
                        "or a CUDA stream handle, given ", stream,
                        stream == 0 ? " (DLPack disallows 0 as ambiguous)" : "");
  r.ordered = stream != -1;
  r.stream = r.ordered ? stream : 0;
  if (r.ordered) device.backend().check_foreign_stream(stream);
  return r;
}

void release(const Exported& e) {
  if (!e.managed) return;
  if (e.versioned) {
    auto* m = static_cast<DLManagedTensorVersioned*>(e.managed);
    m->deleter(m);
  } else {
    auto* m = static_cast<DLManagedTensor*>(e.managed);
    m->deleter(m);
  }
}

Exported export_image(const std::shared_ptr<Image>& image, const ExportRequest& request) {
  const Image& im = *image;
  im.check_host_access();
  const ImageDescriptor& d = im.descriptor();
  Backend& backend = im.device().backend();
  View view;
  view.data_type = d.channel_format;
  view.shape = {d.number_of_images, d.feature_channels, d.height, d.width};
  view.device = device_of(im.device());
  const size_t bytes = static_cast<size_t>(d.element_count()) * size_of(d.channel_format);
  if (request.to_host) {
    // A host read, under the host's rules, as to_numpy().
    auto block = host_block(bytes);
    im.read(block.get(), bytes, d.channel_format);
    view.data = block.get();
    view.owner = std::move(block);
    view.device = {kDLCPU, 0};
    view.strides = row_major(view.shape);
    view.copied = true;
    return exported(view, request.versioned);
  }
  if (request.copy != Copy::Always) {
    if (im.storage())
      fail<BufferError>("the pixels of a ", im.device().name(), " image are in textures (MPSImage), which DLPack ",
                        "cannot describe; to_numpy() or __dlpack__(copy=True) copies them to host memory");
    im.buffer()->prepare_export("the image", request.ordered, request.stream);
    const ImageLayout& l = im.layout();
    view.data = im.data();
    view.strides = {l.n, l.c, l.h, l.w};
    view.owner = image;
    return exported(view, request.versioned);
  }
  // A dense (N, C, H, W) copy on the device, made once the writes are done.
  im.buffer()->prepare_export("the image", true, 0);
  auto copy = make_pooled<Buffer>(im.device_ptr(), bytes);
  const ImageRegion to = dense_region(copy->data(), d.channel_format, d);
  if (im.storage())
    backend.read_region(im.whole(), to);  // a backend with storages keeps its buffers in host memory
  else
    backend.copy_device_region(im.whole(), to);
  view.data = copy->data();
  view.strides = row_major(view.shape);
  view.owner = std::move(copy);
  view.copied = true;
  return exported(view, request.versioned);
}

Exported export_buffer(const std::shared_ptr<Buffer>& buffer, DataType data_type, const std::vector<int64_t>& shape,
                       const ExportRequest& request) {
  if (shape.size() > static_cast<size_t>(kMaxDimensions))
    fail<ShapeError>("DLPack exports of at most ", kMaxDimensions, " dims, given ", shape.size());
  int64_t count = 1, volume = 1;
  for (int64_t extent : shape) {
    if (extent < 0) fail<ArgumentError>("buffer dims must be at least 0, given ", extent);
    volume = checked_mul(volume, std::max<int64_t>(extent, 1), "the element count of a buffer");
    count *= extent;
  }
  const size_t bytes = checked_bytes(count, size_of(data_type), "the byte count of a buffer");
  if (bytes > buffer->length())
    fail<ShapeError>("a buffer of ", count, " ", name_of(data_type), " values needs ", bytes, " bytes; it has ",
                     buffer->length());
  View view;
  view.data_type = data_type;
  view.shape = shape;
  view.strides = row_major(shape);
  view.device = device_of(buffer->device());
  if (request.to_host) {
    auto block = host_block(bytes);
    buffer->read(block.get(), 0, bytes, "the buffer");
    view.data = block.get();
    view.owner = std::move(block);
    view.device = {kDLCPU, 0};
    view.copied = true;
    return exported(view, request.versioned);
  }
  if (request.copy != Copy::Always) {
    buffer->prepare_export("the buffer", request.ordered, request.stream);
    view.data = buffer->data();
    view.owner = buffer;
    return exported(view, request.versioned);
  }
  buffer->prepare_export("the buffer", true, 0);
  auto copy = make_pooled<Buffer>(buffer->device_ptr(), bytes);
  buffer->device().backend().copy_device_region(run_region(buffer->data(), data_type, count),
                                                run_region(copy->data(), data_type, count));
  view.data = copy->data();
  view.owner = std::move(copy);
  view.copied = true;
  return exported(view, request.versioned);
}

void check_device(const Device& device, int32_t device_type, int32_t device_id) {
  device.check_process();
  const DLDevice own = device_of(device), given{device_type, device_id};
  if (own.device_type == given.device_type && own.device_id == given.device_id) return;
  fail<DeviceMismatchError>("a tensor on DLPack device ", name_of(given), " cannot be imported into device ",
                            device.name(), ", which takes tensors on ", name_of(own),
                            "; move the tensor to that device first",
                            given.device_type == kDLCPU ? ", or copy a host array in with from_numpy()" : "");
}

namespace {

// Whether the tensor is flagged read-only (only a versioned one can say);
// BufferError for a DLPack major version mpsx does not read.
bool read_only_flag(const void* managed, bool versioned) {
  if (!versioned) return false;
  const auto* m = static_cast<const DLManagedTensorVersioned*>(managed);
  if (m->version.major != kDLPackMajorVersion)
    fail<BufferError>("the tensor is of DLPack ", m->version.major, ".", m->version.minor, "; mpsx reads DLPack ",
                      kDLPackMajorVersion, ".x");
  return (m->flags & kReadOnly) != 0;
}

// ShapeError for a number of dims an import `as` does not take.
void check_ndim(const DLTensor& t, ImportAs as) {
  if (as == ImportAs::ImageBatch ? t.ndim != 4 : as == ImportAs::Image ? (t.ndim != 3 && t.ndim != 4)
                                                                        : (t.ndim < 0 || t.ndim > kMaxDimensions))
    fail<ShapeError>(as == ImportAs::ImageBatch ? "expected an (N, C, H, W) tensor"
                     : as == ImportAs::Image    ? "expected an (N, C, H, W) or (C, H, W) tensor"
                                                : "expected a tensor of at most 8 dims",
                     ", given one of ", t.ndim, " dims");
  if (t.ndim > 0 && !t.shape) fail<ShapeError>("the tensor has ", t.ndim, " dims and no shape");
}

// The tensor's element count, once its bytes are known to fit. Dims of 0
// count as 1 here too: row-major strides (a buffer's, on the host as in
// DLPack) then fit, even of an empty tensor.
int64_t element_count(const DLTensor& t, DataType type) {
  int64_t volume = 1;
  bool empty = false;
  for (int32_t i = 0; i < t.ndim; ++i) {
    const int64_t extent = t.shape[i];
    if (extent < 0)
      fail<ArgumentError>("the tensor's dims must be at least 0, given shape ", dims_text(t.shape, t.ndim));
    volume = checked_mul(volume, std::max<int64_t>(extent, 1), "the element count of the tensor of shape ",
                         dims_text(t.shape, t.ndim));
    empty = empty || extent == 0;
  }
  checked_bytes(volume, size_of(type), "the byte count of the tensor of shape ", dims_text(t.shape, t.ndim));
  return empty ? 0 : volume;
}

// The tensor's strides (row-major where DLPack gives none); ShapeError for
// negative ones.
std::vector<int64_t> strides_of(const DLTensor& t, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides = t.strides ? std::vector<int64_t>(t.strides, t.strides + t.ndim) : row_major(shape);
  for (int64_t stride : strides)
    if (stride < 0)
      fail<ShapeError>("the tensor's strides ", dims_text(strides.data(), t.ndim), " are negative, which mpsx cannot ",
                       "represent; copy it in its own library first");
  return strides;
}

// The tensor's first element, once its last element's offset is known to
// stay inside the address space, so that a copy or a view stays inside the
// tensor.
void* first_element(const DLTensor& t, const std::vector<int64_t>& strides, int64_t count, DataType type) {
  int64_t span = 0;
  if (count > 0)
    for (int32_t i = 0; i < t.ndim; ++i)
      if (__builtin_add_overflow(span, checked_mul(t.shape[i] - 1, strides[i], "the tensor's extent in memory"),
                                 &span))
        fail<ShapeError>("the tensor's extent in memory overflows: shape ", dims_text(t.shape, t.ndim), ", strides ",
                         dims_text(strides.data(), t.ndim));
  const size_t extent = checked_bytes(span, size_of(type), "the tensor's extent in memory");
  uintptr_t last = 0;
  if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data), t.byte_offset, &last) ||
      __builtin_add_overflow(last, extent, &last))
    fail<ShapeError>("the tensor's memory, ", extent, " bytes from byte ", t.byte_offset, " of ", t.data,
                     ", runs past the end of the address space");
  if (count > 0 && !t.data) fail<ArgumentError>("the tensor has ", count, " elements and a null data pointer");
  return static_cast<char*>(t.data) + t.byte_offset;
}

// An image's descriptor and (N, C, H, W) region; why its memory cannot be
// shared where its strides are not the backend's image layout, else "".
std::string plan_image_region(ImportPlan& plan, const std::vector<int64_t>& strides) {
  ImageDescriptor& d = plan.descriptor;
  ImageRegion& r = plan.region;
  const int first = static_cast<int>(plan.shape.size()) - 3;  // (C, H, W) is one image
  d.channel_format = plan.data_type;
  d.number_of_images = first ? plan.shape[0] : 1;
  d.feature_channels = plan.shape[first];
  d.height = plan.shape[first + 1];
  d.width = plan.shape[first + 2];
  d.validate();
  r.n = d.number_of_images;
  r.c = d.feature_channels;
  r.h = d.height;
  r.w = d.width;
  r.stride = ImageLayout{first ? strides[0] : 0, strides[first], strides[first + 1], strides[first + 2]};
  const ImageLayout l = plan.device->backend().image_layout(d);
  // Strides of dims of one element address nothing.
  const bool same_layout = (r.n == 1 || r.stride.n == l.n) && (r.c == 1 || r.stride.c == l.c) &&
                           (r.h == 1 || r.stride.h == l.h) && (r.w == 1 || r.stride.w == l.w);
  if (same_layout) return {};
  const int64_t expected[4] = {l.n, l.c, l.h, l.w}, given[4] = {r.stride.n, r.stride.c, r.stride.h, r.stride.w};
  return "the tensor's (N, C, H, W) strides " + dims_text(given, 4) + " are not those of " + plan.device->name() +
         " images, " + dims_text(expected, 4) + " (NHWC: PyTorch's channels_last memory format is shared)";
}

// A buffer's region: its dims of one element dropped, dims contiguous with
// the next merged, the groups left in the innermost of four dims; why its
// memory cannot be shared where it is not row-major, else "".
std::string plan_buffer_region(ImportPlan& plan, const DLTensor& t, const std::vector<int64_t>& strides,
                               int64_t count, Copy copy) {
  int64_t extent[kMaxDimensions], stride[kMaxDimensions];
  int groups = 0;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (plan.shape[i] == 1) continue;
    int64_t outer = 0;
    if (groups > 0 && !__builtin_mul_overflow(plan.shape[i], strides[i], &outer) && stride[groups - 1] == outer) {
      extent[groups - 1] *= plan.shape[i];
      stride[groups - 1] = strides[i];
      continue;
    }
    extent[groups] = plan.shape[i];
    stride[groups] = strides[i];
    ++groups;
  }
  std::string refused;
  if (count > 0 && !(groups == 0 || (groups == 1 && stride[0] == 1)))
    refused = "the tensor of shape " + dims_text(t.shape, t.ndim) + " and strides " +
              dims_text(strides.data(), t.ndim) + " is not row-major (C-contiguous), as mpsx buffers are";
  if (groups > 4 && (!refused.empty() || copy == Copy::Always))
    fail<ShapeError>("the tensor of shape ", dims_text(t.shape, t.ndim), " and strides ",
                     dims_text(strides.data(), t.ndim), " has more than 4 dims that are not contiguous, which mpsx ",
                     "cannot copy; make it contiguous in its own library first");
  ImageRegion& r = plan.region;
  int64_t* extents[4] = {&r.n, &r.c, &r.h, &r.w};
  int64_t* region_strides[4] = {&r.stride.n, &r.stride.c, &r.stride.h, &r.stride.w};
  for (int k = 0; k < 4; ++k) {
    const int g = k - (4 - groups);  // the groups fill the innermost dims
    *extents[k] = count == 0 ? (k == 3 ? 0 : 1) : g >= 0 ? extent[g] : 1;
    *region_strides[k] = g >= 0 && count > 0 ? stride[g] : 0;
  }
  return refused;
}

// Why the planned region cannot be shared with the device, the layout's
// reason first; "" where it can.
std::string sharing_refusal(const ImportPlan& plan, std::string layout_refusal, bool read_only) {
  if (!layout_refusal.empty()) return layout_refusal;
  if (read_only)
    return "the tensor is read-only (DLPack's read-only flag), and mpsx kernels may write what they are given";
  if (reinterpret_cast<uintptr_t>(plan.region.data) % static_cast<uintptr_t>(size_of(plan.data_type)) != 0)
    return "the tensor's data is not aligned to its elements";
  if (!plan.device->backend().runs_on_foreign_memory()) return "its kernels run only on memory mpsx allocated";
  return {};
}

}  // namespace

ImportPlan plan_import(std::shared_ptr<Device> device, void* managed, bool versioned, ImportAs as, Copy copy) {
  device->check_process();
  if (!managed) fail<TypeMismatchError>("the DLPack capsule holds no tensor");
  ImportPlan plan;
  plan.device = std::move(device);
  plan.managed = managed;
  plan.versioned = versioned;
  plan.as = as;
  const bool read_only = read_only_flag(managed, versioned);
  const DLTensor& t = tensor_of(managed, versioned);
  check_device(*plan.device, t.device.device_type, t.device.device_id);
  plan.data_type = data_type_of(t.dtype, as);
  check_ndim(t, as);
  plan.shape.assign(t.shape, t.shape + t.ndim);
  const int64_t count = element_count(t, plan.data_type);
  const std::vector<int64_t> strides = strides_of(t, plan.shape);
  plan.region.data = first_element(t, strides, count, plan.data_type);
  plan.region.data_type = plan.data_type;
  std::string layout_refusal = as != ImportAs::Buffer ? plan_image_region(plan, strides)
                                                      : plan_buffer_region(plan, t, strides, count, copy);
  const std::string refused = sharing_refusal(plan, std::move(layout_refusal), read_only);
  if (copy == Copy::Never && !refused.empty())
    fail<BufferError>("copy=False, but the tensor cannot be shared with ", plan.device->name(), ": ", refused,
                      "; copy=None copies it on the device");
  plan.zero_copy = refused.empty() && copy != Copy::Always;
  return plan;
}

std::shared_ptr<Image> import_image(const ImportPlan& plan) {
  std::shared_ptr<void> owner = adopt(plan.managed, plan.versioned);
  Backend& backend = plan.device->backend();
  backend.order_after_import();
  const ImageDescriptor& d = plan.descriptor;
  if (plan.zero_copy) {
    const size_t bytes = static_cast<size_t>(plan.region.span()) * size_of(d.channel_format);
    auto buffer = make_pooled<Buffer>(plan.device, plan.region.data, bytes, std::move(owner));
    return make_pooled<Image>(std::move(buffer), d);
  }
  auto image = make_pooled<Image>(plan.device, d);
  if (image->storage())
    backend.write_region(plan.region, image->whole());  // a backend with storages takes host tensors only
  else
    backend.copy_device_region(plan.region, image->whole());
  return image;
}

std::shared_ptr<Buffer> import_buffer(const ImportPlan& plan) {
  std::shared_ptr<void> owner = adopt(plan.managed, plan.versioned);
  Backend& backend = plan.device->backend();
  backend.order_after_import();
  const int64_t count = plan.region.element_count();
  const size_t bytes = static_cast<size_t>(count) * size_of(plan.data_type);
  if (plan.zero_copy) return make_pooled<Buffer>(plan.device, plan.region.data, bytes, std::move(owner));
  auto buffer = make_pooled<Buffer>(plan.device, bytes);
  ImageRegion to = plan.region;
  to.data = buffer->data();
  to.stride = ImageLayout{to.c * to.h * to.w, to.h * to.w, to.w, 1};
  backend.copy_device_region(plan.region, to);
  return buffer;
}

int64_t import_stream(const Device& device) { return device.backend().import_stream(); }

}  // namespace dlpack
}  // namespace mpsx
