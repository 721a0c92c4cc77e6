// cuDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): a convolution whose passes are prepared once
// per shape (their plans: cudnn_plan.h), over image regions of any strides
// and data types.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>

#include "backend.h"
#include "cudnn_plan.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::cuda {

// Scratch slots of the convolution families: 0-1 regions staged for cuDNN or
// cuBLAS, 2 cuDNN's workspace, 3 partial sums of bias gradients, 4 the
// transpose's filter, 5 a filter in the layout and data type cuDNN takes, 6
// a sub-pixel convolution's intermediate result.
constexpr size_t kFirstStagedSlot = 0, kSecondStagedSlot = 1, kWorkspaceSlot = 2, kPartialSumsSlot = 3,
                 kTransposeFilterSlot = 4, kCudnnFilterSlot = 5, kSubPixelSlot = 6;

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

  // y = x * filter, plus biases per y channel unless null. The KRSC
  // filter is of `filter_type`.
  void forward(CudaContext& context, const ImageRegion& x, const void* filter, DataType filter_type,
               const float* biases, const ImageRegion& y) const;
  // dx = the gradient of x from dy, plus biases per x channel unless null.
  void backward_data(CudaContext& context, const ImageRegion& dy, const void* filter, DataType filter_type,
                     const float* biases, const ImageRegion& dx) const;
  // The KRSC filter type the pass that reads the filter (forward, else
  // backward_data) takes as it is: float16 for NHWC float16 passes, else
  // float32.
  DataType filter_type() const;
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
  struct Pass : CudnnOperation {
    Staging x, y;
    // Plans for operands aligned to 16 bytes (built with the pass) and to
    // 4 (views at odd channel offsets; built when first needed).
    mutable std::mutex mutex;
    mutable std::unique_ptr<CudnnPlan> aligned, unaligned;
  };
  struct Passes {
    std::unique_ptr<Pass> forward, backward_data, backward_filter;
    bool nchw = false;
  };

  // Empty when cuDNN has no engine for some pass. With `float32` every pass
  // computes on float32 copies of regions of other types.
  std::optional<Passes> configure(cudnnHandle_t handle, const CudnnPasses& passes, Layout layout,
                                  bool float32) const;
  std::unique_ptr<Pass> prepare(CudnnDirection direction, const CudnnOperands& operands, int64_t pad_y, int64_t pad_x,
                                Layout layout, bool float32) const;
  // Runs a pass on cuDNN's x, filter and y operands.
  void execute(CudaContext& context, const Pass& pass, void* x, const void* filter, void* y) const;
  // The filter, KRSC of `type`, as a pass gives it to cuDNN.
  const void* filter_in(CudaContext& context, const Pass& pass, const void* filter, DataType type) const;

  int ordinal_;
  CudnnConvolutionShape shape_;
  Passes passes_;
};

// The biases' gradient: the result gradient (any data type) summed per
// channel over its images and pixels.
void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient);

}  // namespace mpsx::cuda
