#include "mpsx/kernels/convolution_transpose.h"
#include "mpsx/registry.h"

#include <algorithm>

#include "convolution.h"
#include "mpsx/half.h"

namespace mpsx::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// OHWI weights rotated by 180 degrees in space; rotating twice restores them.
void rotate(const float* from, float* to, const ConvolutionTransposeShape& s) {
  const int64_t kh = s.kernel_height, kw = s.kernel_width, per_tap = s.input_channels / s.groups;
  for (int64_t o = 0; o < s.output_channels; ++o)
    for (int64_t y = 0; y < kh; ++y)
      for (int64_t x = 0; x < kw; ++x)
        std::copy_n(from + ((o * kh + y) * kw + x) * per_tap, per_tap,
                    to + ((o * kh + kh - 1 - y) * kw + kw - 1 - x) * per_tap);
}

// Every pixel of a region of T (float, or float16 bits) set to the biases.
template <class T, class Convert>
void fill_biases(const ImageRegion& r, const float* biases, Convert convert) {
  T* data = static_cast<T*>(r.data);
  for (int64_t n = 0; n < r.n; ++n)
    for (int64_t y = 0; y < r.h; ++y)
      for (int64_t x = 0; x < r.w; ++x) {
        T* pixel = data + n * r.stride.n + y * r.stride.h + x * r.stride.w;
        for (int64_t c = 0; c < r.c; ++c) pixel[c * r.stride.c] = convert(biases[c]);
      }
}

void fill_biases(const ImageRegion& r, const float* biases) {
  if (r.data_type == DataType::Float16) return fill_biases<uint16_t>(r, biases, float_to_half);
  fill_biases<float>(r, biases, [](float v) { return v; });
}

// Per-channel sums of a region over images and pixels, its elements `T`
// read as floats by value(T).
template <class T, class Value>
void sum_channels_of(const ImageRegion& r, float* sums, Value value) {
  const T* data = static_cast<const T*>(r.data);
  std::fill_n(sums, r.c, 0.0f);
  for (int64_t n = 0; n < r.n; ++n)
    for (int64_t y = 0; y < r.h; ++y)
      for (int64_t x = 0; x < r.w; ++x) {
        const T* pixel = data + n * r.stride.n + y * r.stride.h + x * r.stride.w;
        for (int64_t c = 0; c < r.c; ++c) sums[c] += value(pixel[c * r.stride.c]);
      }
}

// A float32 region, or a float16 one (a gradient pass run in float16).
MPSX_CPU_LOOP void sum_channels(const ImageRegion& r, float* sums) {
  if (r.data_type == DataType::Float16)
    sum_channels_of<uint16_t>(r, sums, half_to_float);
  else
    sum_channels_of<float>(r, sums, [](float v) { return v; });
}

// MPS convolves the expanded source with the weights as given; a oneDNN
// deconvolution spreads each source pixel over the filter, which is the same
// with the filter rotated by 180 degrees. The part of the destination no
// source pixel reaches gets the biases.
class CpuConvolutionTranspose final
    : public ConvolutionTransposePrimitive,
      OhwiWeightsPasses<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                        dnnl::deconvolution_backward_weights> {
 public:
  CpuConvolutionTranspose(const CpuBackend& backend, const ConvolutionTransposeShape& s)
      : OhwiWeightsPasses(backend.engine(), weights_desc(s, tag::ohwi)), s_(s) {
    const dnnl::engine& engine = backend.engine();
    reaches_all_ = s.reads_source() && s.reached_y == 0 && s.reached_x == 0 && s.reached_height == s.height &&
                   s.reached_width == s.width;
    if (!s.reads_source()) return;
    const bool try_half = may_run_in_float16(s.source_type, s.destination_type);
    // oneDNN 3.2's reference deconvolution, the one it runs for a destination
    // that is not one dense block (a destination larger than the result, a
    // channel offset), writes past that destination: the forward pass writes
    // a dense block, copied into place.
    auto dense_dst = [&](bool half) {
      return memory::desc({s.images, s.output_channels, s.reached_height, s.reached_width}, pass_type(half),
                          tag::nhwc);
    };
    memory::desc bias({s.output_channels}, memory::data_type::f32, tag::x);
    memory::dims strides{s.stride_y, s.stride_x}, dilates{s.dilation_y - 1, s.dilation_x - 1};
    memory::dims pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
    auto attr = user_scratchpad();
    auto algorithm = dnnl::algorithm::deconvolution_direct;
    auto forward_pd = [&](const memory::desc& source, const memory::desc& destination, bool half) {
      return dnnl::deconvolution_forward::primitive_desc(engine, dnnl::prop_kind::forward_training, algorithm,
                                                         source, weights_desc(s, tag::any, pass_type(half)), bias,
                                                         destination, strides, dilates, pad_l, pad_r, attr);
    };
    make_forward(try_half, [&](bool half) { return forward_pd(source_desc(s, half), dense_dst(half), half); });
    dense_result_ = reached_desc(forward_half_) == dense_dst(forward_half_);
    if (!s.gradient) return;
    make_backward_data(try_half, [&](bool half) {
      return dnnl::deconvolution_backward_data::primitive_desc(
          engine, algorithm, source_gradient_desc(s, half), weights_desc(s, tag::any, pass_type(half)),
          reached_desc(half), strides, dilates, pad_l, pad_r,
          forward_pd(source_gradient_desc(s, half), reached_desc(half), half), attr);
    });
    // Float32 weight gradients, from float16 regions too. Bias gradients sum
    // over the whole destination, reached or not: computed apart.
    make_backward_weights(try_half, [&](bool half) {
      return dnnl::deconvolution_backward_weights::primitive_desc(
          engine, algorithm, source_desc(s, half), weights_desc(s, tag::any), reached_desc(half), strides, dilates,
          pad_l, pad_r, forward_pd(source_desc(s, half), reached_desc(half), half), attr);
    });
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    PassRegion y(cpu, destination, 1, false, forward_half_);
    if (!reaches_all_) fill_biases(y.region(), static_cast<const float*>(biases));
    if (s_.reads_source()) {
      PassRegion x(cpu, source, 0, true, forward_half_);
      ImageRegion result = reached_region(y);
      ImageRegion dense = result;
      if (!dense_result_) {
        dense.stride = ImageLayout{result.h * result.w * result.c, 1, result.w * result.c, result.c};
        dense.data =
            cpu.scratch(kDenseResultSlot, static_cast<size_t>(dense.element_count()) * size_of(dense.data_type));
      }
      execute_forward(cpu, x.data(), rotated(cpu, weights), biases, dense.data);
      if (!dense_result_) copy_region(dense, result);
    }
    y.store();
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CpuContext& cpu = context_of(context);
    PassRegion dy(cpu, result_gradient, 0, true, data_half_);
    PassRegion dx(cpu, source_gradient, 1, false, data_half_);
    execute_backward_data(cpu, reached(dy), rotated(cpu, weights), dx.data());
    dx.store();
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CpuContext& cpu = context_of(context);
    PassRegion dy(cpu, result_gradient, 1, true, weights_half_);
    if (biases_gradient) {
      float* sums = static_cast<float*>(biases_gradient);
      Cloned<sum_channels>::run(dy.region(), sums);
    }
    if (!weights_gradient) return;
    float* gradient = static_cast<float*>(weights_gradient);
    const size_t count = user_weights_.get_size() / sizeof(float);
    if (!s_.reads_source()) {
      std::fill_n(gradient, count, 0.0f);
      return;
    }
    PassRegion x(cpu, source, 0, true, weights_half_);
    float* rotated_gradient = static_cast<float*>(cpu.scratch(kHostWeightsSlot, count * sizeof(float)));
    execute_backward_weights(cpu, x.data(), reached(dy), rotated_gradient, nullptr);
    rotate(rotated_gradient, gradient, s_);
  }

 private:
  // The reached block inside the region a pass takes of the whole destination.
  memory::desc reached_desc(bool half) const {
    ImageLayout v =
        view_stride(s_.destination_type, s_.destination_stride, s_.output_channels, s_.height, s_.width, half);
    return memory::desc({s_.images, s_.output_channels, s_.reached_height, s_.reached_width}, pass_type(half),
                        {v.n, v.c, v.h, v.w});
  }

  void* reached(const PassRegion& whole) const {
    const ImageRegion& r = whole.region();
    return static_cast<char*>(r.data) + (s_.reached_y * r.stride.h + s_.reached_x * r.stride.w) * size_of(r.data_type);
  }

  ImageRegion reached_region(const PassRegion& whole) const {
    ImageRegion r = whole.region();
    r.data = reached(whole);
    r.h = s_.reached_height;
    r.w = s_.reached_width;
    return r;
  }

  const float* rotated(CpuContext& cpu, const void* weights) const {
    float* to = static_cast<float*>(cpu.scratch(kHostWeightsSlot, user_weights_.get_size()));
    rotate(static_cast<const float*>(weights), to, s_);
    return to;
  }

  ConvolutionTransposeShape s_;
  bool reaches_all_ = false;
  bool dense_result_ = false;
};

const Registered<ConvolutionTransposePrimitive, CpuConvolutionTranspose> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
