#include "mpsx/kernels/convolution.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "convolution.cuh"
#include "convolution.h"
#include "image.cuh"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::cuda {
namespace {

// Engines that need more workspace are passed over.
constexpr int64_t kWorkspaceLimit = int64_t(256) << 20;
// Engines timed per pass, of those the heuristics rank best: float16
// passes at batch 32 of the reference CNN found their fastest at positions
// 11 to 14 (of about 40) on an H100; float32 ones have about 10 engines.
constexpr size_t kTunedEngines = 16;
// The unique ids of a pass's operands in its variant packs.
constexpr int64_t kX = 1, kFilter = 2, kY = 3;

// cuBLAS products in exact float32 unless the kernel's accumulator
// precision is half: then on TF32 tensor cores.
cublasComputeType_t gemm_compute(bool tensor_float32) {
  return tensor_float32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Dense NHWC or NCHW strides (for a filter, n being k: KRSC or KCRS).
ImageLayout dense_layout(int64_t c, int64_t h, int64_t w, bool nchw) {
  return nchw ? ImageLayout{c * h * w, h * w, w, 1} : ImageLayout{h * w * c, 1, w * c, c};
}

// The filter [k][r][s][c] as an image region (n = k), KRSC or KCRS.
ImageRegion filter_region(void* data, const CudnnConvolutionShape& s, bool kcrs, DataType type = DataType::Float32) {
  const int64_t c = s.x_channels / s.groups;
  return ImageRegion{data, type, s.y_channels, c, s.kernel_height, s.kernel_width,
                     dense_layout(c, s.kernel_height, s.kernel_width, kcrs)};
}

size_t filter_bytes(const CudnnConvolutionShape& s, DataType type) {
  return static_cast<size_t>(filter_region(nullptr, s, false).element_count()) * size_of(type);
}

cudnnDataType_t cudnn_type(DataType type) {
  return type == DataType::Float16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// Primitives are built on encoding threads, away from any queue and its
// handle: algorithm queries and engine timings use one cuDNN handle per
// device, on a stream of its own, under a lock. The handles live as long as
// the process (destroying them at exit could come after the CUDA runtime has
// gone).
struct QueryHandles {
  std::mutex mutex;
  std::vector<cudnnHandle_t> handles;

  // With `mutex` held and the device current.
  cudnnHandle_t of(int ordinal) {
    if (static_cast<size_t>(ordinal) >= handles.size()) handles.resize(ordinal + 1, nullptr);
    if (!handles[ordinal]) {
      cudaStream_t stream = nullptr;
      MPSX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      MPSX_CUDA_CHECK(cudnnCreate(&handles[ordinal]));
      MPSX_CUDA_CHECK(cudnnSetStream(handles[ordinal], stream));
    }
    return handles[ordinal];
  }
};

class CudaEvent {
 public:
  CudaEvent() { MPSX_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  operator cudaEvent_t() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

QueryHandles& query_handles() {
  static QueryHandles* handles = new QueryHandles;
  return *handles;
}

// Which engine configuration timing chose for a pass: the heuristics mode
// that listed it, its place in their list, and its engine's global index (a
// check that the list is still the one timed).
struct EngineChoice {
  int64_t mode = 0, position = 0, engine = 0;
};

// The engine choices of timed passes, kept across processes in a file, as
// cuDNN's frontend and PyTorch's benchmark mode keep theirs within one:
// MPSX_PLAN_CACHE names it (empty: no file), by default
// $XDG_CACHE_HOME/mpsx/cudnn-plans.txt (~/.cache/...). A line per choice,
// "key<TAB>mode position engine", appended in one write so that processes
// sharing the file do not interleave lines; lines that do not parse are
// ignored, and a later line for a key wins. A process with a tool injected
// into CUDA (CUDA_INJECTION64_PATH: profilers; compute-sanitizer's
// NV_SANITIZER_INJECTION_* settings), which slows kernels unevenly, reads the
// file but appends nothing. Guarded by the query handles' mutex.
class PlanCache {
 public:
  static PlanCache& instance() {
    static PlanCache* cache = new PlanCache;
    return *cache;
  }

  const EngineChoice* find(const std::string& key) {
    load();
    auto found = entries_.find(key);
    return found == entries_.end() ? nullptr : &found->second;
  }

  void store(const std::string& key, const EngineChoice& choice) {
    load();
    entries_[key] = choice;
    if (path_.empty() || injected_) return;
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ignored);
    const std::string line =
        key + "\t" + std::to_string(choice.mode) + " " + std::to_string(choice.position) + " " +
        std::to_string(choice.engine) + "\n";
    if (FILE* file = std::fopen(path_.c_str(), "a")) {
      std::setvbuf(file, nullptr, _IONBF, 0);  // the line in one write
      std::fwrite(line.data(), 1, line.size(), file);
      std::fclose(file);
    }
  }

 private:
  void load() {
    if (loaded_) return;
    loaded_ = true;
    for (const char* name : {"CUDA_INJECTION64_PATH", "NV_SANITIZER_INJECTION_PORT_BASE"})
      if (const char* value = std::getenv(name); value && *value) injected_ = true;
    if (const char* given = std::getenv("MPSX_PLAN_CACHE")) {
      path_ = given;
    } else if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
      path_ = std::string(cache) + "/mpsx/cudnn-plans.txt";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
      path_ = std::string(home) + "/.cache/mpsx/cudnn-plans.txt";
    }
    if (path_.empty()) return;
    std::ifstream file(path_);
    std::string line;
    while (std::getline(file, line)) {
      const size_t tab = line.rfind('\t');
      if (tab == std::string::npos) continue;
      std::istringstream fields(line.substr(tab + 1));
      EngineChoice choice;
      std::string rest;
      if (fields >> choice.mode >> choice.position >> choice.engine && !(fields >> rest) && choice.position >= 0)
        entries_[line.substr(0, tab)] = choice;
    }
  }

  bool loaded_ = false, injected_ = false;
  std::string path_;
  std::unordered_map<std::string, EngineChoice> entries_;
};

// The engine of an engine configuration; false where cuDNN does not say.
bool engine_of(const CudnnBackendDescriptor& config, CudnnBackendDescriptor& engine) {
  engine = CudnnBackendDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine;
  int64_t count = 0;
  return cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                  &raw) == CUDNN_STATUS_SUCCESS;
}

// The global index of an engine, or -1.
int64_t engine_index(const CudnnBackendDescriptor& engine) {
  int64_t count = 0, index = -1;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index) !=
      CUDNN_STATUS_SUCCESS)
    return -1;
  return index;
}

// What a plan cache key says of the device and the library: a choice timed
// on one GPU or cuDNN is not taken for another.
const std::string& device_key(int ordinal) {
  static std::vector<std::string> keys;  // guarded by the query handles' mutex
  if (static_cast<size_t>(ordinal) >= keys.size()) keys.resize(ordinal + 1);
  if (keys[ordinal].empty()) {
    cudaDeviceProp properties{};
    MPSX_CUDA_CHECK(cudaGetDeviceProperties(&properties, ordinal));
    keys[ordinal] = "cudnn " + std::to_string(cudnnGetVersion()) + " " + properties.name + " sm" +
                    std::to_string(properties.major * 10 + properties.minor) + "x" +
                    std::to_string(properties.multiProcessorCount);
  }
  return keys[ordinal];
}

// Whether the engine computes as the convolution asks: never on inputs
// converted to a narrower type; on tensor cores only where they are allowed
// (TF32) or the operands are narrower than float32 already; with sums in
// reduced precision only where the kernel's accumulator precision is half.
bool computes_as_asked(const CudnnBackendDescriptor& engine, bool tensor_cores, bool reduced_precision,
                       bool deterministic) {
  int64_t count = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (deterministic && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
    if (!tensor_cores && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
    if (!reduced_precision && notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
  }
  return true;
}

// A region as a pass's staging shows it to cuDNN: the region itself, or its
// copy in scratch inside zero padding.
class StagedRegion {
 public:
  StagedRegion(CudaContext& context, const ImageRegion& region, const CudnnConvolution::Staging& staging,
               DataType type, size_t slot, bool load)
      : context_(context), region_(region), interior_(region), copy_(staging.copy) {
    if (!copy_) {
      data_ = region.data;
      return;
    }
    const int64_t h = region.h + staging.top + staging.bottom, w = region.w + staging.left + staging.right;
    const size_t element = size_of(type), bytes = static_cast<size_t>(region.n * region.c * h * w) * element;
    data_ = context.scratch(slot, bytes);
    const ImageLayout layout = dense_layout(region.c, h, w, staging.nchw);
    interior_ = ImageRegion{static_cast<char*>(data_) + (staging.top * layout.h + staging.left * layout.w) * element,
                            type,
                            region.n,
                            region.c,
                            region.h,
                            region.w,
                            layout};
    if (!load) return;
    if (h != region.h || w != region.w) context.fill_zero(data_, bytes);
    copy_region(region, interior_, context.stream());
  }

  // What cuDNN reads or writes, padding included.
  void* data() const { return data_; }
  // The values of the region within it.
  const ImageRegion& view() const { return interior_; }
  // Writes a copy back into the region.
  void store() const {
    if (copy_) copy_region(interior_, region_, context_.stream());
  }

 private:
  CudaContext& context_;
  ImageRegion region_, interior_;
  bool copy_;
  void* data_ = nullptr;
};

}  // namespace

CudnnBackendDescriptor::CudnnBackendDescriptor(cudnnBackendDescriptorType_t type) {
  MPSX_CUDA_CHECK(cudnnBackendCreateDescriptor(type, &descriptor_));
}

CudnnBackendDescriptor::~CudnnBackendDescriptor() {
  if (descriptor_) cudnnBackendDestroyDescriptor(descriptor_);
}

CudnnBackendDescriptor& CudnnBackendDescriptor::operator=(CudnnBackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (descriptor_) cudnnBackendDestroyDescriptor(descriptor_);
    descriptor_ = other.descriptor_;
    other.descriptor_ = nullptr;
  }
  return *this;
}

void CudnnBackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                                 const void* values) {
  MPSX_CUDA_CHECK(cudnnBackendSetAttribute(descriptor_, name, type, count, values));
}

void CudnnBackendDescriptor::set(cudnnBackendAttributeName_t name, const CudnnBackendDescriptor& value) {
  cudnnBackendDescriptor_t raw = value;
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

void CudnnBackendDescriptor::set(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> values) {
  set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.begin());
}

bool CudnnBackendDescriptor::try_finalize() { return cudnnBackendFinalize(descriptor_) == CUDNN_STATUS_SUCCESS; }

void CudnnBackendDescriptor::finalize() { MPSX_CUDA_CHECK(cudnnBackendFinalize(descriptor_)); }

// An execution plan and the variant packs of the operand addresses it last
// ran on: training loops reuse a few addresses, so steady-state execution
// builds no descriptor.
struct CudnnConvolution::Plan {
  std::vector<CudnnBackendDescriptor> parts;  // what the plan was built from
  CudnnBackendDescriptor plan;
  int64_t workspace = 0;

  struct VariantPack {
    void* pointers[4] = {};  // x, filter, y, workspace
    CudnnBackendDescriptor descriptor;
  };
  std::mutex mutex;
  VariantPack packs[8];
  size_t next = 0;

  void execute(cudnnHandle_t handle, void* x, const void* filter, void* y, void* workspace_data) {
    void* const pointers[4] = {x, const_cast<void*>(filter), y, workspace_data};
    std::lock_guard<std::mutex> lock(mutex);
    VariantPack* pack = nullptr;
    for (VariantPack& p : packs)
      if (p.descriptor && std::equal(pointers, pointers + 4, p.pointers)) pack = &p;
    if (!pack) {
      pack = &packs[next++ % std::size(packs)];
      pack->descriptor = variant_pack(pointers);
      std::copy(pointers, pointers + 4, pack->pointers);
    }
    MPSX_CUDA_CHECK(cudnnBackendExecute(handle, plan, pack->descriptor));
  }

  // False where the engine fails on the pack's operands.
  bool try_execute(cudnnHandle_t handle, const CudnnBackendDescriptor& pack) {
    return cudnnBackendExecute(handle, plan, pack) == CUDNN_STATUS_SUCCESS;
  }

  static CudnnBackendDescriptor variant_pack(void* const (&pointers)[4]) {
    CudnnBackendDescriptor descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const int64_t ids[3] = {kX, kFilter, kY};
    descriptor.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, ids);
    descriptor.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
    descriptor.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &pointers[3]);
    descriptor.finalize();
    return descriptor;
  }
};

CudnnConvolution::CudnnConvolution(int ordinal, const CudnnConvolutionShape& shape, const CudnnPasses& passes)
    : ordinal_(ordinal), shape_(shape) {
  const CudnnConvolutionShape& s = shape_;
  DeviceScope scope(ordinal);
  QueryHandles& queries = query_handles();
  std::lock_guard<std::mutex> lock(queries.mutex);
  cudnnHandle_t handle = queries.of(ordinal);
  for (bool float32 : {false, true}) {
    for (Layout layout : {Layout::AsGiven, Layout::DenseNhwc, Layout::DenseNchw}) {
      if (std::optional<Passes> configured = configure(handle, passes, layout, float32)) {
        passes_ = std::move(*configured);
        return;
      }
    }
  }
  fail<Error>("cuDNN has no engine within ", kWorkspaceLimit >> 20, " MiB of workspace for the convolution of ",
              s.images, "x", s.x_channels, "x", s.x_height, "x", s.x_width, " (NxCxHxW, padding ", s.pad_top, ", ",
              s.pad_left, ", ", s.pad_bottom, ", ", s.pad_right, ") into ", s.y_channels, "x", s.y_height, "x",
              s.y_width, " with a ", s.kernel_width, "x", s.kernel_height, " kernel, stride ", s.stride_x, "x",
              s.stride_y, ", dilation ", s.dilation_x, "x", s.dilation_y, ", groups ", s.groups);
}

CudnnConvolution::~CudnnConvolution() = default;

std::optional<CudnnConvolution::Passes> CudnnConvolution::configure(cudnnHandle_t handle,
                                                                    const CudnnPasses& requested, Layout layout,
                                                                    bool float32) const {
  const CudnnConvolutionShape& s = shape_;
  Passes passes;
  passes.nchw = layout == Layout::DenseNchw;
  // cuDNN pads both sides alike: as given, it gets the padding common to
  // both, and copies of x hold the rest.
  const bool as_given = layout == Layout::AsGiven;
  const int64_t pad_y = as_given ? std::min(s.pad_top, s.pad_bottom) : 0;
  const int64_t pad_x = as_given ? std::min(s.pad_left, s.pad_right) : 0;
  const std::pair<const std::optional<CudnnOperands>*, Direction> wanted[] = {
      {&requested.forward, Direction::Forward},
      {&requested.backward_data, Direction::BackwardData},
      {&requested.backward_filter, Direction::BackwardFilter}};
  for (const auto& [operands, direction] : wanted) {
    if (!*operands) continue;
    std::unique_ptr<Pass> p = prepare(direction, **operands, pad_y, pad_x, layout, float32);
    p->aligned = plan(handle, *p, 16);
    if (!p->aligned) return std::nullopt;
    (direction == Direction::Forward        ? passes.forward
     : direction == Direction::BackwardData ? passes.backward_data
                                            : passes.backward_filter) = std::move(p);
  }
  return passes;
}

std::unique_ptr<CudnnConvolution::Pass> CudnnConvolution::prepare(Direction direction, const CudnnOperands& operands,
                                                                  int64_t pad_y, int64_t pad_x, Layout layout,
                                                                  bool float32) const {
  const CudnnConvolutionShape& s = shape_;
  const bool dense = layout != Layout::AsGiven, nchw = layout == Layout::DenseNchw;
  auto p = std::make_unique<Pass>();
  p->direction = direction;
  p->pad_y = pad_y;
  p->pad_x = pad_x;
  p->x.top = s.pad_top - pad_y;
  p->x.left = s.pad_left - pad_x;
  p->x.bottom = s.pad_bottom - pad_y;
  p->x.right = s.pad_right - pad_x;
  bool padded = p->x.top || p->x.left || p->x.bottom || p->x.right;
  // Float16 on both sides goes to cuDNN as it is; anything else as float32.
  const bool half = !float32 && operands.x.type == DataType::Float16 && operands.y.type == DataType::Float16;
  p->io = half ? DataType::Float16 : DataType::Float32;
  p->x.copy = dense || padded || operands.x.type != p->io;
  p->y.copy = dense || operands.y.type != p->io;
  p->x.nchw = p->y.nchw = nchw;
  const int64_t h = s.x_height + p->x.top + p->x.bottom, w = s.x_width + p->x.left + p->x.right;
  p->x_stride = p->x.copy ? dense_layout(s.x_channels, h, w, nchw) : operands.x.stride;
  p->y_stride = p->y.copy ? dense_layout(s.y_channels, s.y_height, s.y_width, nchw) : operands.y.stride;

  // The shapes the families compute must be the ones cuDNN derives.
  auto extent = [](int64_t size, int64_t pad, int64_t kernel, int64_t stride, int64_t dilation) {
    return (size + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
  };
  const int64_t y_height = extent(h, pad_y, s.kernel_height, s.stride_y, s.dilation_y);
  const int64_t y_width = extent(w, pad_x, s.kernel_width, s.stride_x, s.dilation_x);
  if (y_height != s.y_height || y_width != s.y_width)
    fail<Error>("cuDNN derives a ", y_height, "x", y_width, " result from a ", h, "x", w,
                " padded source; the convolution expects ", s.y_height, "x", s.y_width);
  return p;
}

std::unique_ptr<CudnnConvolution::Plan> CudnnConvolution::plan(cudnnHandle_t handle, const Pass& pass,
                                                               int64_t alignment) const {
  const CudnnConvolutionShape& s = shape_;
  size_t bytes[3] = {};  // x, filter, y
  auto tensor = [&](int64_t id, DataType data_type, int64_t n, int64_t c, int64_t h, int64_t w,
                    const ImageLayout& stride) {
    bytes[id - kX] = static_cast<size_t>(ImageRegion{nullptr, data_type, n, c, h, w, stride}.span()) *
                     size_of(data_type);
    CudnnBackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t type = cudnn_type(data_type);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, {n, c, h, w});
    t.set(CUDNN_ATTR_TENSOR_STRIDES, {stride.n, stride.c, stride.h, stride.w});
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, {id});
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {alignment});
    return t;
  };
  const ImageRegion filter = filter_region(nullptr, s, pass.x.nchw);
  std::vector<CudnnBackendDescriptor> parts;
  parts.push_back(tensor(kX, pass.io, s.images, s.x_channels, s.x_height + pass.x.top + pass.x.bottom,
                         s.x_width + pass.x.left + pass.x.right, pass.x_stride));
  parts.push_back(tensor(kFilter, pass.io, filter.n, filter.c, filter.h, filter.w, filter.stride));
  parts.push_back(tensor(kY, pass.io, s.images, s.y_channels, s.y_height, s.y_width, pass.y_stride));
  for (CudnnBackendDescriptor& t : parts)
    if (!t.try_finalize()) return nullptr;

  CudnnBackendDescriptor convolution(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  convolution.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, {2});
  convolution.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  convolution.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  convolution.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, {s.dilation_y, s.dilation_x});
  convolution.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {s.stride_y, s.stride_x});
  convolution.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {pass.pad_y, pass.pad_x});
  convolution.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {pass.pad_y, pass.pad_x});
  if (!convolution.try_finalize()) return nullptr;

  // The operation's attributes: alpha, beta, convolution, filter, x side, y side.
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, convolution, filter, x, y;
  };
  static const Names names[] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
  const Names& n = names[static_cast<int>(pass.direction)];
  CudnnBackendDescriptor operation(n.type);
  const float one = 1.0f, zero = 0.0f;
  operation.set(n.alpha, CUDNN_TYPE_FLOAT, 1, &one);
  operation.set(n.beta, CUDNN_TYPE_FLOAT, 1, &zero);
  operation.set(n.convolution, convolution);
  operation.set(n.x, parts[0]);
  operation.set(n.filter, parts[1]);
  operation.set(n.y, parts[2]);
  if (!operation.try_finalize()) return nullptr;
  CudnnBackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, operation);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (!graph.try_finalize()) return nullptr;

  // A pass timed before, in this process or another, takes the engine
  // chosen then. Plans for unaligned operands are built while a queue runs,
  // and a deterministic convolution's must be the same in every process:
  // they take the heuristics' first choice instead of timing on the device.
  const bool timed = alignment == 16 && !s.deterministic;
  std::string key;
  const EngineChoice* cached = nullptr;
  if (timed) {
    std::ostringstream k;
    k << device_key(ordinal_) << " " << static_cast<int>(pass.direction) << " " << size_of(pass.io) << " "
      << s.tensor_float32 << " " << s.images << " " << s.x_channels << "x" << s.x_height + pass.x.top + pass.x.bottom
      << "x" << s.x_width + pass.x.left + pass.x.right << " " << s.y_channels << "x" << s.y_height << "x"
      << s.y_width << " " << s.kernel_height << "x" << s.kernel_width << " " << s.stride_y << "," << s.stride_x
      << " " << s.dilation_y << "," << s.dilation_x << " " << pass.pad_y << "," << pass.pad_x << " " << s.groups
      << " " << pass.x_stride.n << "," << pass.x_stride.c << "," << pass.x_stride.h << "," << pass.x_stride.w << " "
      << pass.y_stride.n << "," << pass.y_stride.c << "," << pass.y_stride.h << "," << pass.y_stride.w << " "
      << pass.x.nchw;
    key = k.str();
    cached = PlanCache::instance().find(key);
  }

  // Engines in the heuristics' order, best first; fallbacks after; only the
  // one of `only` where given.
  std::vector<std::unique_ptr<Plan>> candidates;
  std::vector<EngineChoice> choices;
  auto list = [&](const EngineChoice* only) {
    const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int64_t mode = 0; mode < 2; ++mode) {
      if (only && only->mode != mode) continue;
      CudnnBackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
      heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mode]);
      int64_t count = 0;
      if (!heuristics.try_finalize() ||
          cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                   &count, nullptr) != CUDNN_STATUS_SUCCESS)
        continue;
      std::vector<CudnnBackendDescriptor> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(configs.back());
      }
      if (cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &count, raw.data()) != CUDNN_STATUS_SUCCESS)
        continue;
      const int64_t first = only ? only->position : 0, end = only ? std::min(count, first + 1) : count;
      for (int64_t i = first; i < end && candidates.size() < kTunedEngines; ++i) {
        CudnnBackendDescriptor engine;
        if (!engine_of(configs[i], engine)) continue;
        const int64_t index = engine_index(engine);
        if (only && index != only->engine) continue;
        if (!computes_as_asked(engine, s.tensor_float32 || pass.io != DataType::Float32, s.tensor_float32,
                               s.deterministic))
          continue;
        CudnnBackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
        int64_t workspace = 0, returned = 0;
        if (!plan.try_finalize() ||
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &returned,
                                     &workspace) != CUDNN_STATUS_SUCCESS ||
            workspace > kWorkspaceLimit)
          continue;
        auto candidate = std::make_unique<Plan>();
        candidate->plan = std::move(plan);
        candidate->workspace = workspace;
        candidates.push_back(std::move(candidate));
        choices.push_back(EngineChoice{mode, i, index});
      }
    }
  };
  // A cached choice that no longer builds (another cuDNN build, another
  // workspace limit) is timed again.
  if (cached) list(cached);
  const bool reused = !candidates.empty();
  if (!reused) list(nullptr);
  if (candidates.empty()) return nullptr;
  size_t chosen = 0;
  if (timed && !reused) {
    chosen = fastest(handle, candidates, bytes);
    PlanCache::instance().store(key, choices[chosen]);
  }
  std::unique_ptr<Plan> result = std::move(candidates[chosen]);
  parts.push_back(std::move(convolution));
  parts.push_back(std::move(operation));
  parts.push_back(std::move(graph));
  result->parts = std::move(parts);
  return result;
}

size_t CudnnConvolution::fastest(cudnnHandle_t handle, const std::vector<std::unique_ptr<Plan>>& candidates,
                                 const size_t (&operand_bytes)[3]) const {
  if (candidates.size() == 1) return 0;
  // Operands of the plans' sizes, filled, on the query handle's stream.
  cudaStream_t stream = nullptr;
  MPSX_CUDA_CHECK(cudnnGetStream(handle, &stream));
  int64_t workspace = 0;
  for (const auto& c : candidates) workspace = std::max(workspace, c->workspace);
  void* pointers[4] = {};
  const size_t bytes[4] = {operand_bytes[0], operand_bytes[1], operand_bytes[2], static_cast<size_t>(workspace)};
  struct Operands {
    void** pointers;
    cudaStream_t stream;
    ~Operands() {
      for (int i = 0; i < 4; ++i)
        if (pointers[i]) cudaFreeAsync(pointers[i], stream);
      cudaStreamSynchronize(stream);
    }
  } operands{pointers, stream};
  for (int i = 0; i < 4; ++i) {
    if (!bytes[i]) continue;
    MPSX_CUDA_CHECK(cudaMallocAsync(&pointers[i], bytes[i], stream));
    // Not zeros, which some engines run faster on than on real data: bytes
    // 0x3c make float32 0.0115 and float16 1.06.
    MPSX_CUDA_CHECK(cudaMemsetAsync(pointers[i], 0x3c, bytes[i], stream));
  }
  const CudnnBackendDescriptor pack = Plan::variant_pack(pointers);
  CudaEvent start, stop;
  size_t best = 0;
  float best_ms = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Plan& plan = *candidates[i];
    // One run to warm up, then the fastest of a few trials of a few runs
    // timed together: one trial misjudged small convolutions often enough to
    // change a step's time by a tenth.
    constexpr int kTrials = 3, kRuns = 3;
    bool ran = plan.try_execute(handle, pack);
    float ms = -1;
    for (int trial = 0; ran && trial < kTrials; ++trial) {
      MPSX_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int run = 0; ran && run < kRuns; ++run) ran = plan.try_execute(handle, pack);
      MPSX_CUDA_CHECK(cudaEventRecord(stop, stream));
      MPSX_CUDA_CHECK(cudaEventSynchronize(stop));
      float trial_ms = 0;
      MPSX_CUDA_CHECK(cudaEventElapsedTime(&trial_ms, start, stop));
      if (ms < 0 || trial_ms < ms) ms = trial_ms;
    }
    if (ran && (best_ms < 0 || ms < best_ms)) {
      best = i;
      best_ms = ms;
    }
  }
  return best;
}

void CudnnConvolution::execute(CudaContext& context, const Pass& pass, void* x, const void* filter, void* y) const {
  Plan* plan = pass.aligned.get();
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(filter) | reinterpret_cast<uintptr_t>(y)) & 15) {
    std::lock_guard<std::mutex> lock(pass.mutex);
    if (!pass.unaligned) {
      QueryHandles& queries = query_handles();
      std::lock_guard<std::mutex> query_lock(queries.mutex);
      pass.unaligned = this->plan(queries.of(ordinal_), pass, static_cast<int64_t>(size_of(pass.io)));
      if (!pass.unaligned)
        fail<Error>("cuDNN has no engine for this convolution on operands at addresses not aligned to 16 bytes");
    }
    plan = pass.unaligned.get();
  }
  void* workspace = plan->workspace ? context.scratch(kWorkspaceSlot, static_cast<size_t>(plan->workspace)) : nullptr;
  plan->execute(context.cudnn(), x, filter, y, workspace);
}

const void* CudnnConvolution::filter_in(CudaContext& context, const Pass& pass, const float* filter) const {
  if (!passes_.nchw && pass.io == DataType::Float32) return filter;
  const ImageRegion in = filter_region(context.scratch(kCudnnFilterSlot, filter_bytes(shape_, pass.io)), shape_,
                                       passes_.nchw, pass.io);
  copy_region(filter_region(const_cast<float*>(filter), shape_, false), in, context.stream());
  return in.data;
}

void CudnnConvolution::forward(CudaContext& context, const ImageRegion& x, const float* filter, const float* biases,
                               const ImageRegion& y) const {
  const Pass& p = *passes_.forward;
  StagedRegion in(context, x, p.x, p.io, kFirstStagedSlot, true);
  StagedRegion out(context, y, p.y, p.io, kSecondStagedSlot, false);
  execute(context, p, in.data(), filter_in(context, p, filter), out.data());
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_data(CudaContext& context, const ImageRegion& dy, const float* filter,
                                     const float* biases, const ImageRegion& dx) const {
  const Pass& p = *passes_.backward_data;
  StagedRegion in(context, dy, p.y, p.io, kFirstStagedSlot, true);
  StagedRegion out(context, dx, p.x, p.io, kSecondStagedSlot, false);
  execute(context, p, out.data(), filter_in(context, p, filter), in.data());
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_filter(CudaContext& context, const ImageRegion& x, const ImageRegion& dy,
                                       float* filter_gradient) const {
  const Pass& p = *passes_.backward_filter;
  StagedRegion in(context, x, p.x, p.io, kFirstStagedSlot, true);
  StagedRegion gradient(context, dy, p.y, p.io, kSecondStagedSlot, true);
  const ImageRegion krsc = filter_region(filter_gradient, shape_, false);
  const bool direct = !passes_.nchw && p.io == DataType::Float32;
  const ImageRegion out =
      direct ? krsc
             : filter_region(context.scratch(kCudnnFilterSlot, filter_bytes(shape_, p.io)), shape_, passes_.nchw, p.io);
  execute(context, p, in.data(), out.data, gradient.data());
  if (!direct) copy_region(out, krsc, context.stream());
}

void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient) {
  auto* partials = static_cast<float*>(context.scratch(kPartialSumsSlot, channel_sums_scratch_bytes(result_gradient)));
  channel_sums(result_gradient, biases_gradient, partials, context.stream());
}

namespace {

// The leading dimension of a float32 view whose images are matrix rows.
int64_t leading_dimension(const ImageRegion& view) { return view.n > 1 ? view.stride.n : view.c * view.h * view.w; }

// True if a region of these strides holds each image's values as one row in
// (h, w, c) order, as a matrix product takes them.
bool rows_in_place(const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return s.c == 1 && (w == 1 || s.w == c) && (h == 1 || s.h == w * c) && (n == 1 || s.n >= h * w * c);
}

// The same of the float32 view of such a region (Float32Region): views of
// other types are dense copies.
bool image_rows(DataType type, const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return type != DataType::Float32 || rows_in_place(s, n, c, h, w);
}

// One window on the whole source block (the fully connected layer), on
// regions a matrix product takes as they are.
bool is_matrix_product(const ConvolutionShape& s) {
  if (s.groups != 1 || s.height != 1 || s.width != 1 || s.kernel_height != s.source_height ||
      s.kernel_width != s.source_width || s.pad_top || s.pad_left || s.pad_bottom || s.pad_right)
    return false;
  const int64_t n = s.images, in = s.input_channels, h = s.source_height, w = s.source_width;
  // The result (or its gradient), the source, and the source's gradient.
  return image_rows(s.destination_type, s.destination_stride, n, s.output_channels, 1, 1) &&
         image_rows(s.source_type, s.source_stride, n, in, h, w) &&
         (!s.gradient || image_rows(s.destination_type, s.source_stride, n, in, h, w));
}

// A column-major matrix: its data, type and leading dimension.
struct Matrix {
  const void* data;
  cudaDataType_t type;
  int64_t ld;
};

// A region as a matrix product takes it: itself where the product runs in
// float16, otherwise its float32 view, which store() writes back.
class MatrixRows {
 public:
  MatrixRows(CudaContext& cuda, const ImageRegion& region, size_t slot, bool load, bool half) : region_(region) {
    if (!half) region_ = view_.emplace(cuda, region, slot, load).region();
  }
  const ImageRegion& region() const { return region_; }
  Matrix matrix() const {
    return {region_.data, region_.data_type == DataType::Float16 ? CUDA_R_16F : CUDA_R_32F,
            leading_dimension(region_)};
  }
  void store() const {
    if (view_) view_->store();
  }

 private:
  std::optional<Float32Region> view_;
  ImageRegion region_;
};

// C = op(A) op(B) + beta C, summed in float32 (TF32 products where allowed;
// float16 operands on tensor cores).
void gemm(CudaContext& context, bool tensor_float32, cublasOperation_t a_op, cublasOperation_t b_op, int64_t m,
          int64_t n, int64_t k, Matrix a, Matrix b, float beta, Matrix c) {
  const float one = 1.0f;
  MPSX_CUDA_CHECK(cublasGemmEx_64(context.cublas(), a_op, b_op, m, n, k, &one, a.data, a.type, a.ld, b.data, b.type,
                                  b.ld, &beta, const_cast<void*>(c.data), c.type, c.ld, gemm_compute(tensor_float32),
                                  CUBLAS_GEMM_DEFAULT));
}

CudnnConvolutionShape cudnn_shape(const ConvolutionShape& s, bool deterministic) {
  CudnnConvolutionShape c;
  static_cast<ConvolutionWindow&>(c) = s;
  c.images = s.images;
  c.x_channels = s.input_channels;
  c.x_height = s.source_height;
  c.x_width = s.source_width;
  c.y_channels = s.output_channels;
  c.y_height = s.height;
  c.y_width = s.width;
  c.tensor_float32 = s.accumulator_precision == AccumulatorPrecision::Half;
  c.deterministic = deterministic;
  return c;
}

CudnnPasses cudnn_passes(const ConvolutionShape& s) {
  const CudnnOperand source{s.source_type, s.source_stride}, result{s.destination_type, s.destination_stride};
  CudnnPasses passes;
  if (!s.gradient) {
    passes.forward = CudnnOperands{source, result};
    return passes;
  }
  // The gradient of the source has the gradient's precision.
  passes.backward_data = CudnnOperands{CudnnOperand{s.destination_type, s.source_stride}, result};
  passes.backward_filter = CudnnOperands{source, result};
  return passes;
}

// OHWI weights are cuDNN's KRSC filter as they are. A fully connected layer
// whose regions allow it is a matrix product instead: with x [images][k]
// (k = h * w * in, an image's NHWC values) and the weights W [out][k],
// y = x W^T + b, dx = dy W, dW = dy^T x, in cuBLAS's column-major terms the
// transposes of those. Float16 regions that are rows as they are go to
// cuBLAS in float16 with the weights converted (float32 sums, a float32
// weights gradient); others as float32 views.
class CudaConvolution final : public ConvolutionPrimitive {
 public:
  CudaConvolution(const CudaBackend& backend, const ConvolutionShape& s) : s_(s) {
    if (!is_matrix_product(s)) {
      cudnn_ = std::make_unique<CudnnConvolution>(backend.ordinal(), cudnn_shape(s, backend.deterministic),
                                                  cudnn_passes(s));
      return;
    }
    const int64_t n = s.images, in = s.input_channels, h = s.source_height, w = s.source_width;
    half_ = s.source_type == DataType::Float16 && s.destination_type == DataType::Float16 &&
            rows_in_place(s.source_stride, n, in, h, w) &&
            rows_in_place(s.destination_stride, n, s.output_channels, 1, 1);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    auto* w = static_cast<const float*>(weights);
    auto* b = static_cast<const float*>(biases);
    if (cudnn_) {
      cudnn_->forward(cuda, source, w, b, destination);
      return;
    }
    MatrixRows x(cuda, source, kFirstStagedSlot, true, half_);
    MatrixRows y(cuda, destination, kSecondStagedSlot, false, half_);
    if (b) fill_biases(y.region(), b, cuda.stream());
    gemm(cuda, tensor_float32(), CUBLAS_OP_T, CUBLAS_OP_N, s_.output_channels, s_.images, values_per_image(), weights_in(cuda, w),
         x.matrix(), b ? 1.0f : 0.0f, y.matrix());
    y.store();
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CudaContext& cuda = context_of(context);
    auto* w = static_cast<const float*>(weights);
    if (cudnn_) {
      cudnn_->backward_data(cuda, result_gradient, w, nullptr, source_gradient);
      return;
    }
    MatrixRows dy(cuda, result_gradient, kFirstStagedSlot, true, half_);
    MatrixRows dx(cuda, source_gradient, kSecondStagedSlot, false, half_);
    gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_N, values_per_image(), s_.images, s_.output_channels, weights_in(cuda, w),
         dy.matrix(), 0.0f, dx.matrix());
    dx.store();
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CudaContext& cuda = context_of(context);
    if (biases_gradient) sum_biases_gradient(cuda, result_gradient, static_cast<float*>(biases_gradient));
    if (!weights_gradient) return;
    auto* dw = static_cast<float*>(weights_gradient);
    if (cudnn_) {
      cudnn_->backward_filter(cuda, source, result_gradient, dw);
      return;
    }
    MatrixRows x(cuda, source, kFirstStagedSlot, true, half_);
    MatrixRows dy(cuda, result_gradient, kSecondStagedSlot, true, half_);
    gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_T, values_per_image(), s_.output_channels, s_.images, x.matrix(),
         dy.matrix(), 0.0f, Matrix{dw, CUDA_R_32F, values_per_image()});
  }

 private:
  // The values of one source image the window reads.
  int64_t values_per_image() const { return s_.source_height * s_.source_width * s_.input_channels; }
  // TF32 products of float32 operands where the kernel allows them.
  bool tensor_float32() const { return !half_ && s_.accumulator_precision == AccumulatorPrecision::Half; }
  // The weights W [out][k] as the product takes them: float16 in scratch
  // where it runs in float16.
  Matrix weights_in(CudaContext& cuda, const float* w) const {
    if (!half_) return {w, CUDA_R_32F, values_per_image()};
    const int64_t count = s_.output_channels * values_per_image();
    const ImageRegion from{const_cast<float*>(w), DataType::Float32, 1, count, 1, 1, ImageLayout{count, 1, count, count}};
    ImageRegion to = from;
    to.data = cuda.scratch(kCudnnFilterSlot, static_cast<size_t>(count) * size_of(DataType::Float16));
    to.data_type = DataType::Float16;
    copy_region(from, to, cuda.stream());
    return {to.data, CUDA_R_16F, values_per_image()};
  }

  ConvolutionShape s_;
  std::unique_ptr<CudnnConvolution> cudnn_;
  bool half_ = false;  // a matrix product on float16 rows
};

std::unique_ptr<ConvolutionPrimitive> make_convolution(Backend& backend, const ConvolutionShape& shape) {
  return std::make_unique<CudaConvolution>(static_cast<CudaBackend&>(backend), shape);
}

const RegisterPrimitive<ConvolutionPrimitive> registered("cuda", make_convolution);

}  // namespace

}  // namespace mpsx::cuda
