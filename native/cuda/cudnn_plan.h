// cuDNN's backend (graph) API for one convolution pass: its descriptors, and
// the execution plan of the engine chosen for it, timed on the device and
// kept in the plan cache (plan_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::cuda {

// Engines that need more workspace are passed over.
constexpr int64_t kWorkspaceLimit = int64_t(256) << 20;

// A descriptor of cuDNN's backend (graph) API, owned for the life of the
// object. Descriptors are host objects: neither creating nor destroying them
// needs a current device.
class CudnnBackendDescriptor {
 public:
  CudnnBackendDescriptor() = default;
  explicit CudnnBackendDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnBackendDescriptor();
  CudnnBackendDescriptor(CudnnBackendDescriptor&& other) noexcept : descriptor_(other.descriptor_) {
    other.descriptor_ = nullptr;
  }
  CudnnBackendDescriptor& operator=(CudnnBackendDescriptor&& other) noexcept;
  operator cudnnBackendDescriptor_t() const { return descriptor_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set(cudnnBackendAttributeName_t name, const CudnnBackendDescriptor& value);
  void set(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> values);
  // False where cuDNN does not support what the descriptor describes.
  bool try_finalize();
  void finalize();

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

// A convolution as cuDNN runs it, x -> y: cross-correlation with the KRSC
// filter [y_channels][kernel_height][kernel_width][x_channels / groups]. The
// padding of x may be asymmetric.
struct CudnnConvolutionShape : ConvolutionWindow {
  int64_t images = 0;
  int64_t x_channels = 0, x_height = 0, x_width = 0;
  int64_t y_channels = 0, y_height = 0, y_width = 0;
  bool tensor_float32 = false;  // products on TF32 tensor cores
  bool deterministic = false;   // Backend::deterministic when it was made
};

// Dense NHWC or NCHW strides (for a filter, n being k: KRSC or KCRS).
ImageLayout dense_layout(int64_t c, int64_t h, int64_t w, bool nchw);

// The filter [k][r][s][c] as an image region (n = k), KRSC or KCRS.
ImageRegion filter_region(void* data, const CudnnConvolutionShape& s, bool kcrs, DataType type = DataType::Float32);

enum class CudnnDirection { Forward, BackwardData, BackwardFilter };

// A pass as cuDNN's operation graph of one convolution describes it.
struct CudnnOperation {
  CudnnDirection direction = CudnnDirection::Forward;
  // The data type of x, y and the filter (or its gradient) as cuDNN sees
  // them. A float16 pass sums its filter gradient in float32 and writes it
  // in float16 (the engines that write float32 from float16 operands ran
  // 20x slower on an H100), converted to float32 after.
  DataType io = DataType::Float32;
  int64_t x_height = 0, x_width = 0;  // x with the padding staged into it
  ImageLayout x_stride, y_stride;     // as cuDNN sees them
  int64_t pad_y = 0, pad_x = 0;       // given to cuDNN
  bool nchw = false;                  // NCHW operands and a KCRS filter
};

// An execution plan and the variant packs of the operand addresses it last
// ran on: training loops reuse a few addresses, so steady-state execution
// builds no descriptor.
struct CudnnPlan {
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

  void execute(cudnnHandle_t handle, void* x, const void* filter, void* y, void* workspace_data);
  // False where the engine fails on the pack's operands.
  bool try_execute(cudnnHandle_t handle, const CudnnBackendDescriptor& pack);
  static CudnnBackendDescriptor variant_pack(void* const (&pointers)[4]);
};

// Primitives are built on encoding threads, away from any queue and its
// handle: algorithm queries and engine timings use one cuDNN handle per
// device, on a stream of its own, under a lock. The handles live as long as
// the process (destroying them at exit could come after the CUDA runtime has
// gone).
struct QueryHandles {
  std::mutex mutex;
  std::vector<cudnnHandle_t> handles;

  // With `mutex` held and the device current.
  cudnnHandle_t of(int ordinal);
};

QueryHandles& query_handles();

// The plan of a pass on operands aligned to `alignment` bytes, built with
// the query handle of device `ordinal` (its mutex held), of the engine that
// ran fastest when timed on the device, of those cuDNN's heuristics rank
// best that compute as asked within the workspace limit. A pass timed
// before, in this process or another (the plan cache), takes the engine
// chosen then. Plans for unaligned operands are built while a queue runs,
// and a deterministic convolution's must be the same in every process: they
// take the heuristics' first choice instead of timing on the device. Null
// when no engine runs the pass on operands of that alignment.
std::unique_ptr<CudnnPlan> plan_pass(cudnnHandle_t handle, int ordinal, const CudnnConvolutionShape& shape,
                                     const CudnnOperation& operation, int64_t alignment);

}  // namespace mpsx::cuda
