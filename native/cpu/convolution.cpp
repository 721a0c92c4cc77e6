#include "mpsx/kernels/convolution.h"
#include "mpsx/registry.h"

#include "convolution.h"

namespace mpsx::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

class CpuConvolution final : public ConvolutionPrimitive, OhwiWeightsPrimitive {
 public:
  CpuConvolution(const dnnl::engine& engine, const ConvolutionShape& s)
      : OhwiWeightsPrimitive(engine, weights_desc(s, tag::ohwi)) {
    memory::desc src = region_desc(s.images, s.input_channels, s.source_height, s.source_width, s.source_type,
                                   s.source_stride);
    memory::desc dst =
        region_desc(s.images, s.output_channels, s.height, s.width, s.destination_type, s.destination_stride);
    memory::desc bias({s.output_channels}, memory::data_type::f32, tag::x);
    memory::dims strides{s.stride_y, s.stride_x}, dilates{s.dilation_y - 1, s.dilation_x - 1};
    memory::dims pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
    auto attr = user_scratchpad();
    auto algorithm = dnnl::algorithm::convolution_direct;
    forward_pd_ = dnnl::convolution_forward::primitive_desc(
        engine, dnnl::prop_kind::forward_training, algorithm, src, weights_desc(s, tag::any), bias, dst, strides,
        dilates, pad_l, pad_r, attr);
    forward_ = dnnl::convolution_forward(forward_pd_);
    weights_to_forward_ = reorder_if_needed(user_weights_, forward_pd_.weights_desc());
    if (!s.gradient) return;
    // The gradient of the source has the gradient's precision, hence maybe another layout.
    memory::desc diff_src = region_desc(s.images, s.input_channels, s.source_height, s.source_width,
                                        s.destination_type, s.source_stride);
    auto hint_data = dnnl::convolution_forward::primitive_desc(
        engine, dnnl::prop_kind::forward_training, algorithm, diff_src, weights_desc(s, tag::any), bias, dst,
        strides, dilates, pad_l, pad_r, attr);
    data_pd_ = dnnl::convolution_backward_data::primitive_desc(engine, algorithm, diff_src, weights_desc(s, tag::any),
                                                               dst, strides, dilates, pad_l, pad_r, hint_data, attr);
    data_ = dnnl::convolution_backward_data(data_pd_);
    weights_to_data_ = reorder_if_needed(user_weights_, data_pd_.weights_desc());
    weights_pd_ = dnnl::convolution_backward_weights::primitive_desc(
        engine, algorithm, src, weights_desc(s, tag::any), bias, dst, strides, dilates, pad_l, pad_r, forward_pd_,
        attr);
    weights_ = dnnl::convolution_backward_weights(weights_pd_);
    weights_from_gradient_ = reorder_if_needed(weights_pd_.diff_weights_desc(), user_weights_);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    memory w = weights_in(cpu, weights, weights_to_forward_, forward_pd_.weights_desc());
    forward_.execute(cpu.stream(), {{DNNL_ARG_SRC, memory(forward_pd_.src_desc(), engine_, x.data())},
                                    {DNNL_ARG_WEIGHTS, w},
                                    {DNNL_ARG_BIAS, memory(forward_pd_.bias_desc(), engine_, const_cast<void*>(biases))},
                                    {DNNL_ARG_DST, memory(forward_pd_.dst_desc(), engine_, y.data())},
                                    {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, forward_pd_)}});
    y.store();
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, result_gradient, 0, true);
    Float32Region dx(cpu, source_gradient, 1, false);
    memory w = weights_in(cpu, weights, weights_to_data_, data_pd_.weights_desc());
    data_.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, memory(data_pd_.diff_dst_desc(), engine_, dy.data())},
                                 {DNNL_ARG_WEIGHTS, w},
                                 {DNNL_ARG_DIFF_SRC, memory(data_pd_.diff_src_desc(), engine_, dx.data())},
                                 {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, data_pd_)}});
    dx.store();
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region dy(cpu, result_gradient, 1, true);
    memory user(user_weights_, engine_, weights_gradient);
    memory diff_weights = weights_from_gradient_
                              ? memory(weights_pd_.diff_weights_desc(), engine_,
                                       cpu.scratch(kDiffWeightsSlot, weights_pd_.diff_weights_desc().get_size()))
                              : user;
    weights_.execute(cpu.stream(),
                     {{DNNL_ARG_SRC, memory(weights_pd_.src_desc(), engine_, x.data())},
                      {DNNL_ARG_DIFF_DST, memory(weights_pd_.diff_dst_desc(), engine_, dy.data())},
                      {DNNL_ARG_DIFF_WEIGHTS, diff_weights},
                      {DNNL_ARG_DIFF_BIAS, memory(weights_pd_.diff_bias_desc(), engine_, biases_gradient)},
                      {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, weights_pd_)}});
    if (weights_from_gradient_) weights_from_gradient_.execute(cpu.stream(), diff_weights, user);
  }

 private:
  dnnl::convolution_forward::primitive_desc forward_pd_;
  dnnl::convolution_forward forward_;
  dnnl::reorder weights_to_forward_;
  dnnl::convolution_backward_data::primitive_desc data_pd_;
  dnnl::convolution_backward_data data_;
  dnnl::reorder weights_to_data_;
  dnnl::convolution_backward_weights::primitive_desc weights_pd_;
  dnnl::convolution_backward_weights weights_;
  dnnl::reorder weights_from_gradient_;
};

std::unique_ptr<ConvolutionPrimitive> make_convolution(Backend& backend, const ConvolutionShape& shape) {
  return std::make_unique<CpuConvolution>(static_cast<CpuBackend&>(backend).engine(), shape);
}

const RegisterPrimitive<ConvolutionPrimitive> registered("cpu", make_convolution);

}  // namespace

}  // namespace mpsx::cpu
