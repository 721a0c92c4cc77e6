#include "mpsx/kernels/convolution.h"

#include <optional>

#include "mpsx/registry.h"

#include "convolution.h"

namespace mpsx::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

class CpuConvolution final
    : public ConvolutionPrimitive,
      OhwiWeightsPasses<dnnl::convolution_forward, dnnl::convolution_backward_data,
                        dnnl::convolution_backward_weights> {
 public:
  CpuConvolution(CpuBackend& backend, const ConvolutionShape& shape)
      : OhwiWeightsPasses(backend.engine(), weights_desc(shape, tag::ohwi)) {
    if (shape.sub_pixel_scale_factor > 1) sub_pixel_.emplace(backend, shape);
    const ConvolutionShape& s = sub_pixel_ ? sub_pixel_->intermediate_shape() : shape;
    const dnnl::engine& engine = backend.engine();
    const bool try_half = may_run_in_float16(s.source_type, s.destination_type);
    auto dst = [&](bool half) {
      return region_desc(s.images, s.output_channels, s.height, s.width, s.destination_type, s.destination_stride,
                         half);
    };
    memory::desc bias({s.output_channels}, memory::data_type::f32, tag::x);
    memory::dims strides{s.stride_y, s.stride_x}, dilates{s.dilation_y - 1, s.dilation_x - 1};
    memory::dims pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
    auto attr = user_scratchpad();
    auto algorithm = dnnl::algorithm::convolution_direct;
    auto forward_pd = [&](const memory::desc& source, const memory::desc& destination, bool half) {
      return dnnl::convolution_forward::primitive_desc(
          engine, dnnl::prop_kind::forward_training, algorithm, source, weights_desc(s, tag::any, pass_type(half)),
          bias, destination, strides, dilates, pad_l, pad_r, attr);
    };
    make_forward(try_half, [&](bool half) { return forward_pd(source_desc(s, half), dst(half), half); });
    if (!s.gradient) return;
    make_backward_data(try_half, [&](bool half) {
      return dnnl::convolution_backward_data::primitive_desc(
          engine, algorithm, source_gradient_desc(s, half), weights_desc(s, tag::any, pass_type(half)), dst(half),
          strides, dilates, pad_l, pad_r, forward_pd(source_gradient_desc(s, half), dst(half), half), attr);
    });
    // Float32 weight and bias gradients, from float16 regions too.
    make_backward_weights(try_half, [&](bool half) {
      return dnnl::convolution_backward_weights::primitive_desc(
          engine, algorithm, source_desc(s, half), weights_desc(s, tag::any), bias, dst(half), strides, dilates,
          pad_l, pad_r, forward_pd(source_desc(s, half), dst(half), half), attr);
    });
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    PassRegion x(cpu, source, 0, true, forward_half_);
    const ImageRegion result =
        sub_pixel_ ? sub_pixel_->intermediate(cpu.scratch(kSubPixelSlot, sub_pixel_->intermediate_bytes()))
                   : destination;
    PassRegion y(cpu, result, 1, false, forward_half_);
    execute_forward(cpu, x.data(), weights, biases, y.data());
    y.store();
    if (sub_pixel_)
      sub_pixel_->rearrange(context, result, destination,
                            [](const ImageRegion& from, const ImageRegion& to) { copy_region(from, to); });
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CpuContext& cpu = context_of(context);
    PassRegion dy(cpu, result_gradient, 0, true, data_half_);
    PassRegion dx(cpu, source_gradient, 1, false, data_half_);
    execute_backward_data(cpu, dy.data(), weights, dx.data());
    dx.store();
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CpuContext& cpu = context_of(context);
    PassRegion x(cpu, source, 0, true, weights_half_);
    PassRegion dy(cpu, result_gradient, 1, true, weights_half_);
    execute_backward_weights(cpu, x.data(), dy.data(), weights_gradient, biases_gradient);
  }

 private:
  std::optional<SubPixelConvolution> sub_pixel_;
};

const Registered<ConvolutionPrimitive, CpuConvolution> registered("cpu");

}  // namespace

// The effective ISA (which ONEDNN_MAX_CPU_ISA can lower) includes
// avx512_core_fp16: that ISA or an AMX one above it, whose bits include its
// own. There oneDNN's float16 kernels accumulate in float32 (AVX-512 FP16
// converts to float32 first; AMX-FP16 accumulates in float32). Below it
// oneDNN has reference kernels for float16, or on avx2_vnni_2 conversions
// to float32 that were never measured here.
bool runs_float16_convolutions() {
  static const bool native = [] {
    const auto fp16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_fp16);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & fp16) == fp16;
  }();
  return native;
}

}  // namespace mpsx::cpu
