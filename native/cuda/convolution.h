// cuDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): descriptors, and a convolution whose passes are
// prepared once per shape, over image regions of any strides and data types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "backend.h"

namespace mpsx::cuda {

// A cuDNN descriptor owned for the life of the object. Descriptors are host
// objects: neither creating nor destroying them needs a current device.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { MPSX_CUDA_CHECK(Create(&descriptor_)); }
  ~CudnnDescriptor() { Destroy(descriptor_); }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  operator T() const { return descriptor_; }

 private:
  T descriptor_ = nullptr;
};

using CudnnTensor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using CudnnFilter = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using CudnnConvolutionDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                                   cudnnDestroyConvolutionDescriptor>;

// Scratch slots of the convolution families: 0-1 regions staged for cuDNN or
// cuBLAS, 2 cuDNN's workspace, 3 partial sums of bias gradients, 4 the
// transpose's filter, 5 a filter in planar (KCRS) layout.
constexpr size_t kFirstStagedSlot = 0, kSecondStagedSlot = 1, kWorkspaceSlot = 2, kPartialSumsSlot = 3,
                 kTransposeFilterSlot = 4, kPlanarFilterSlot = 5;

// A convolution as cuDNN runs it, x -> y: cross-correlation with the KRSC
// filter [y_channels][kernel_height][kernel_width][x_channels / groups]. The
// padding of x may be asymmetric.
struct CudnnConvolutionShape {
  int64_t images = 0, groups = 1;
  int64_t x_channels = 0, x_height = 0, x_width = 0;
  int64_t y_channels = 0, y_height = 0, y_width = 0;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t kernel_height = 1, kernel_width = 1, stride_y = 1, stride_x = 1, dilation_y = 1, dilation_x = 1;
  bool tensor_float32 = false;  // products on TF32 tensor cores
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

// A convolution with its algorithms chosen once, by cuDNN's heuristics, in
// exact float32 arithmetic. Regions that cuDNN cannot take as they are
// (another data type, padding cuDNN cannot express, strides or layouts no
// algorithm takes) are staged through dense float32 copies in scratch.
class CudnnConvolution {
 public:
  CudnnConvolution(int ordinal, const CudnnConvolutionShape& shape, const CudnnPasses& passes);

  // y = x * filter, plus biases per y channel unless null.
  void forward(CudaContext& context, const ImageRegion& x, const float* filter, const float* biases,
               const ImageRegion& y) const;
  // dx = the gradient of x from dy, plus biases per x channel unless null.
  void backward_data(CudaContext& context, const ImageRegion& dy, const float* filter, const float* biases,
                     const ImageRegion& dx) const;
  // filter_gradient = the filter's gradient, summed over the images.
  void backward_filter(CudaContext& context, const ImageRegion& x, const ImageRegion& dy,
                       float* filter_gradient) const;

  // How a pass sees a region: in place, or as a dense float32 copy (NHWC or
  // NCHW) with zero rows and columns around it for the padding cuDNN is not
  // given.
  struct Staging {
    bool copy = false, nchw = false;
    int64_t top = 0, left = 0, bottom = 0, right = 0;
  };

 private:
  // What cuDNN is given, tried in this order until it has an algorithm for
  // every pass: the regions as they are (NHWC, in place where possible, the
  // padding common to both sides given to cuDNN), then dense copies holding
  // all the padding in NHWC, then in NCHW with a KCRS filter.
  enum class Layout { AsGiven, DenseNhwc, DenseNchw };
  struct Pass {
    Staging x, y;
    CudnnTensor x_tensor, y_tensor;
    int algorithm = 0;
    size_t workspace = 0;
  };
  struct Passes {
    std::unique_ptr<Pass> forward, backward_data, backward_filter;
    bool nchw = false;
  };

  // Empty when cuDNN has no algorithm for some pass.
  std::optional<Passes> configure(cudnnHandle_t handle, const CudnnPasses& passes, Layout layout);
  std::unique_ptr<Pass> prepare(const CudnnOperands& operands, int64_t pad_y, int64_t pad_x, Layout layout) const;
  void* workspace(CudaContext& context, const Pass& pass) const;
  // The filter as the configuration gives it to cuDNN.
  const float* filter_in(CudaContext& context, const float* filter) const;

  CudnnConvolutionShape shape_;
  CudnnFilter filter_;
  CudnnConvolutionDescriptor convolution_;
  Passes passes_;
};

// The biases' gradient: the result gradient (any data type) summed per
// channel over its images and pixels.
void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient);

}  // namespace mpsx::cuda
