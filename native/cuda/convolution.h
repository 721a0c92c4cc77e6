// cuDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): descriptors, and a convolution whose passes are
// prepared once per shape, over image regions of any strides and data types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::cuda {

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

// Scratch slots of the convolution families: 0-1 regions staged for cuDNN or
// cuBLAS, 2 cuDNN's workspace, 3 partial sums of bias gradients, 4 the
// transpose's filter, 5 a filter in the layout and data type cuDNN takes.
constexpr size_t kFirstStagedSlot = 0, kSecondStagedSlot = 1, kWorkspaceSlot = 2, kPartialSumsSlot = 3,
                 kTransposeFilterSlot = 4, kCudnnFilterSlot = 5;

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

// The regions a pass will be given: their data type and their images'
// strides (in elements).
struct CudnnOperand {
  DataType type = DataType::Float32;
  ImageLayout stride;
};

// The regions of a pass on the x side (x, or dx for backward data) and on
// the y side (y, or dy).
struct CudnnOperands {
  CudnnOperand x, y;
};

// The passes to prepare; those left out cannot run.
struct CudnnPasses {
  std::optional<CudnnOperands> forward, backward_data, backward_filter;
};

// A convolution run through cuDNN's backend API: for each pass an operation
// graph of one convolution, and the execution plan of the engine that ran
// fastest when timed on the device, of those cuDNN's heuristics rank best
// that compute as asked within the workspace limit, built once (the choice
// is kept in a plan cache file, which other processes take it from). Float32
// regions compute in exact float32 unless TF32 is allowed; float16 regions
// go to cuDNN in float16, with a filter converted to it, on tensor cores
// that accumulate in float32 (in reduced precision only where the kernel
// allows it). Regions that cuDNN cannot take as they are
// (mixed data types, padding cuDNN cannot express, strides or layouts no
// engine takes) are staged through dense copies in scratch, float32 copies
// last.
class CudnnConvolution {
 public:
  CudnnConvolution(int ordinal, const CudnnConvolutionShape& shape, const CudnnPasses& passes);
  ~CudnnConvolution();

  // y = x * filter, plus biases per y channel unless null.
  void forward(CudaContext& context, const ImageRegion& x, const float* filter, const float* biases,
               const ImageRegion& y) const;
  // dx = the gradient of x from dy, plus biases per x channel unless null.
  void backward_data(CudaContext& context, const ImageRegion& dy, const float* filter, const float* biases,
                     const ImageRegion& dx) const;
  // filter_gradient = the filter's gradient, summed over the images.
  void backward_filter(CudaContext& context, const ImageRegion& x, const ImageRegion& dy,
                       float* filter_gradient) const;

  // How a pass sees a region: in place, or as a dense copy in the pass's
  // data type (NHWC or NCHW) with zero rows and columns around it for the
  // padding cuDNN is not given.
  struct Staging {
    bool copy = false, nchw = false;
    int64_t top = 0, left = 0, bottom = 0, right = 0;
  };

 private:
  // What cuDNN is given, tried in this order until it has an engine for
  // every pass: the regions as they are (NHWC, in place where possible, the
  // padding common to both sides given to cuDNN), then dense copies holding
  // all the padding in NHWC, then in NCHW with a KCRS filter.
  enum class Layout { AsGiven, DenseNhwc, DenseNchw };
  enum class Direction { Forward, BackwardData, BackwardFilter };
  struct Plan;
  struct Pass {
    Direction direction = Direction::Forward;
    // The data type of x, y and the filter (or its gradient) as cuDNN sees
    // them. A float16 pass sums its filter gradient in float32 and writes it
    // in float16 (the engines that write float32 from float16 operands ran
    // 20x slower on an H100), converted to float32 after.
    DataType io = DataType::Float32;
    Staging x, y;
    ImageLayout x_stride, y_stride;  // as cuDNN sees them
    int64_t pad_y = 0, pad_x = 0;    // given to cuDNN
    // Plans for operands aligned to 16 bytes (built with the pass) and to
    // 4 (views at odd channel offsets; built when first needed).
    mutable std::mutex mutex;
    mutable std::unique_ptr<Plan> aligned, unaligned;
  };
  struct Passes {
    std::unique_ptr<Pass> forward, backward_data, backward_filter;
    bool nchw = false;
  };

  // Empty when cuDNN has no engine for some pass. With `float32` every pass
  // computes on float32 copies of regions of other types.
  std::optional<Passes> configure(cudnnHandle_t handle, const CudnnPasses& passes, Layout layout,
                                  bool float32) const;
  std::unique_ptr<Pass> prepare(Direction direction, const CudnnOperands& operands, int64_t pad_y, int64_t pad_x,
                                Layout layout, bool float32) const;
  // Null when no engine runs the pass on operands of that alignment.
  std::unique_ptr<Plan> plan(cudnnHandle_t handle, const Pass& pass, int64_t alignment) const;
  // The index of the candidate that runs fastest on filled operands of
  // these sizes (x, filter, y), timed on the handle's stream.
  size_t fastest(cudnnHandle_t handle, const std::vector<std::unique_ptr<Plan>>& candidates,
                 const size_t (&operand_bytes)[3]) const;
  // Runs a pass on cuDNN's x, filter and y operands.
  void execute(CudaContext& context, const Pass& pass, void* x, const void* filter, void* y) const;
  // The filter as a pass gives it to cuDNN.
  const void* filter_in(CudaContext& context, const Pass& pass, const float* filter) const;

  int ordinal_;
  CudnnConvolutionShape shape_;
  Passes passes_;
};

// The biases' gradient: the result gradient (any data type) summed per
// channel over its images and pixels.
void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient);

}  // namespace mpsx::cuda
