#include "mpsx/kernels/convolution_transpose.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "convolution.cuh"
#include "convolution.h"
#include "convolution_transpose.cuh"

namespace mpsx::cuda {
namespace {

// The transpose as cuDNN sees it: the data gradient of the convolution x -> y
// from the reached block of the destination (x) to the source block (y),
// padded as the shape says. Source pixel i then reaches destination pixels
// i * stride - pad + tap * dilation, weighted by filter tap `tap`, as in the
// cpu backend's deconvolution; that filter is the weights rotated by 180
// degrees (MPS convolves the expanded source with the weights as given), with
// in and out exchanged because cuDNN's filter leads with the channels of y.
CudnnConvolutionShape cudnn_shape(const ConvolutionTransposeShape& s, bool deterministic) {
  CudnnConvolutionShape c;
  static_cast<ConvolutionWindow&>(c) = s;
  c.images = s.images;
  c.x_channels = s.output_channels;
  c.x_height = s.reached_height;
  c.x_width = s.reached_width;
  c.y_channels = s.input_channels;
  c.y_height = s.source_height;
  c.y_width = s.source_width;
  c.tensor_float32 = s.accumulator_precision == AccumulatorPrecision::Half;
  c.deterministic = deterministic;
  return c;
}

// Forward is cuDNN's backward data; the source's gradient its forward, the
// weights' gradient its backward filter.
CudnnPasses cudnn_passes(const ConvolutionTransposeShape& s) {
  const CudnnOperand source{s.source_type, s.source_stride}, result{s.destination_type, s.destination_stride};
  CudnnPasses passes;
  if (!s.gradient) {
    passes.backward_data = CudnnOperands{result, source};
    return passes;
  }
  // The gradient of the source has the gradient's precision.
  passes.forward = CudnnOperands{result, CudnnOperand{s.destination_type, s.source_stride}};
  passes.backward_filter = CudnnOperands{result, source};
  return passes;
}

// The part of the destination no source pixel reaches gets the biases; the
// biases' gradient sums the whole destination gradient, reached or not.
class CudaConvolutionTranspose final : public ConvolutionTransposePrimitive {
 public:
  CudaConvolutionTranspose(const CudaBackend& backend, const ConvolutionTransposeShape& s) : s_(s) {
    filter_shape_.input_channels = s.input_channels;
    filter_shape_.output_channels = s.output_channels;
    filter_shape_.groups = s.groups;
    filter_shape_.kernel_height = s.kernel_height;
    filter_shape_.kernel_width = s.kernel_width;
    reaches_all_ = s.reads_source() && s.reached_y == 0 && s.reached_x == 0 && s.reached_height == s.height &&
                   s.reached_width == s.width;
    if (s.reads_source())
      cudnn_ = std::make_unique<CudnnConvolution>(backend.ordinal(), cudnn_shape(s, backend.deterministic),
                                                  cudnn_passes(s));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    auto* b = static_cast<const float*>(biases);
    if (!reaches_all_) fill_biases(destination, b, cuda.stream());
    if (cudnn_) cudnn_->backward_data(cuda, source, filter(cuda, weights), DataType::Float32, b, reached(destination));
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CudaContext& cuda = context_of(context);
    cudnn_->forward(cuda, reached(result_gradient), filter(cuda, weights), DataType::Float32, nullptr,
                    source_gradient);
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CudaContext& cuda = context_of(context);
    if (biases_gradient) sum_biases_gradient(cuda, result_gradient, static_cast<float*>(biases_gradient));
    if (!weights_gradient) return;
    auto* gradient = static_cast<float*>(weights_gradient);
    if (!cudnn_) {
      cuda.fill_zero(gradient, weight_bytes());
      return;
    }
    auto* filter_gradient = static_cast<float*>(cuda.scratch(kTransposeFilterSlot, weight_bytes()));
    cudnn_->backward_filter(cuda, reached(result_gradient), source, filter_gradient);
    weights_of_filter(filter_gradient, gradient, filter_shape_, cuda.stream());
  }

 private:
  size_t weight_bytes() const {
    return static_cast<size_t>(s_.output_channels * s_.kernel_height * s_.kernel_width *
                               (s_.input_channels / s_.groups)) *
           sizeof(float);
  }

  const float* filter(CudaContext& cuda, const void* weights) const {
    auto* to = static_cast<float*>(cuda.scratch(kTransposeFilterSlot, weight_bytes()));
    filter_of_weights(static_cast<const float*>(weights), to, filter_shape_, cuda.stream());
    return to;
  }

  // The reached block of the whole destination region (or its gradient).
  ImageRegion reached(const ImageRegion& whole) const {
    ImageRegion r = whole;
    const int64_t offset = s_.reached_y * whole.stride.h + s_.reached_x * whole.stride.w;
    r.data = static_cast<char*>(whole.data) + offset * static_cast<int64_t>(size_of(whole.data_type));
    r.h = s_.reached_height;
    r.w = s_.reached_width;
    return r;
  }

  ConvolutionTransposeShape s_;
  TransposeFilterShape filter_shape_;
  bool reaches_all_ = false;
  std::unique_ptr<CudnnConvolution> cudnn_;
};

const Registered<ConvolutionTransposePrimitive, CudaConvolutionTranspose> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
