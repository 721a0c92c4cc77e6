#include "mpsx/kernels/softmax.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Softmax or log-softmax over the channels of pixels [first, first + count).
// Each pixel's max and sum are taken before any of its results is written,
// so a destination that is the source itself stays right.
template <bool Log>
MPSX_CPU_LOOP void forward_pixels(const ImageRegion& x, const ImageRegion& y, int64_t first, int64_t count) {
  const ImageRegion* const regions[2] = {&x, &y};
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(y.data);
  const int64_t channels = x.c, sx = x.stride.c, sy = y.stride.c;
  detail::for_pixels<2>(regions, first, count, [&](const int64_t* o) {
    const float* a = in + o[0];
    float* b = out + o[1];
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < channels; ++c) top = std::max(top, a[c * sx]);
    float sum = 0.0f;
    for (int64_t c = 0; c < channels; ++c) sum += std::exp(a[c * sx] - top);
    if constexpr (Log) {
      const float log_sum = std::log(sum);  // kept apart from top, which would round it away
      for (int64_t c = 0; c < channels; ++c) b[c * sy] = (a[c * sx] - top) - log_sum;
    } else {
      const float scale = 1.0f / sum;
      for (int64_t c = 0; c < channels; ++c) b[c * sy] = std::exp(a[c * sx] - top) * scale;
    }
  });
}

// softmax: dx_k = y_k (dy_k - sum_c dy_c y_c); log-softmax: dx_k = dy_k - exp(y_k) sum_c dy_c.
template <bool Log>
MPSX_CPU_LOOP void gradient_pixels(const ImageRegion& dy, const ImageRegion& y, const ImageRegion& dx, int64_t first,
                                     int64_t count) {
  const ImageRegion* const regions[3] = {&dy, &y, &dx};
  const float* g = static_cast<const float*>(dy.data);
  const float* r = static_cast<const float*>(y.data);
  float* out = static_cast<float*>(dx.data);
  const int64_t channels = dy.c, sg = dy.stride.c, sr = y.stride.c, so = dx.stride.c;
  detail::for_pixels<3>(regions, first, count, [&](const int64_t* o) {
    const float* pg = g + o[0];
    const float* pr = r + o[1];
    float* po = out + o[2];
    float sum = 0.0f;
    if constexpr (Log) {
      for (int64_t c = 0; c < channels; ++c) sum += pg[c * sg];
      for (int64_t c = 0; c < channels; ++c) po[c * so] = pg[c * sg] - std::exp(pr[c * sr]) * sum;
    } else {
      for (int64_t c = 0; c < channels; ++c) sum += pg[c * sg] * pr[c * sr];
      for (int64_t c = 0; c < channels; ++c) po[c * so] = pr[c * sr] * (pg[c * sg] - sum);
    }
  });
}

// Pixels per parallel chunk.
int64_t grain_of(int64_t channels) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(channels, 1)); }

class CpuSoftMax final : public SoftMaxPrimitive {
 public:
  CpuSoftMax(const CpuBackend& backend, const SoftMaxDescriptor& d) : d_(d) {
    // oneDNN's fast softmax wants dense channels-last blocks; regions within
    // larger images (clip rects, feature channel offsets) run the loops below.
    if (!dense(d.source) || !dense(d.destination) || (d.gradient && !dense(d.secondary))) return;
    try {
      build(backend);
    } catch (const dnnl::error&) {  // a layout oneDNN does not take: the loops below
      onednn_ = false;
    }
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    if (onednn_) {
      execute_and_wait(cpu, forward_, source_desc_,
                       unaliased_input(cpu, x.region(), y.region(), 3, OneDnnInPlace::Documented), destination_desc_,
                       y.data());
    } else {
      const ImageRegion& in = x.region();
      const ImageRegion& out = y.region();
      detail::parallel_chunks(in.n * in.h * in.w, grain_of(in.c), [&](int64_t first, int64_t count) {
        if (d_.log)
          Cloned<forward_pixels<true>>::run(in, out, first, count);
        else
          Cloned<forward_pixels<false>>::run(in, out, first, count);
      });
    }
    y.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& result,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region y(cpu, result, 1, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    if (onednn_) {
      dnnl::memory diff_dst(source_desc_, cpu.engine(),
                            const_cast<float*>(unaliased_input(cpu, dy.region(), dx.region(), 3, OneDnnInPlace::Documented)));
      dnnl::memory dst(result_desc_, cpu.engine(),
                       const_cast<float*>(unaliased_input(cpu, y.region(), dx.region(), 4, OneDnnInPlace::Unsupported)));
      dnnl::memory diff_src(destination_desc_, cpu.engine(), dx.data());
      backward_.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
      cpu.stream().wait();
    } else {
      const ImageRegion& g = dy.region();
      detail::parallel_chunks(g.n * g.h * g.w, grain_of(g.c), [&](int64_t first, int64_t count) {
        if (d_.log)
          Cloned<gradient_pixels<true>>::run(g, y.region(), dx.region(), first, count);
        else
          Cloned<gradient_pixels<false>>::run(g, y.region(), dx.region(), first, count);
      });
    }
    dx.store();
  }

 private:
  // Whether the region in `image` is one dense NHWC block as Float32Region
  // presents it: float16 and uint8 regions are converted into dense copies.
  bool dense(const ImageDescriptor& image) const {
    return image.channel_format != DataType::Float32 ||
           (image.feature_channels == d_.channels && image.width == d_.width && image.height == d_.height);
  }

  // oneDNN descriptors of the regions as Float32Region presents them: the
  // image's own layout for float32, dense NHWC otherwise.
  dnnl::memory::desc region_desc(const CpuBackend& backend, const ImageDescriptor& image) const {
    return float32_region_desc(backend, image, d_.images, d_.channels, d_.height, d_.width);
  }

  void build(const CpuBackend& backend) {
    const dnnl::algorithm algorithm = d_.log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    source_desc_ = region_desc(backend, d_.source);
    destination_desc_ = region_desc(backend, d_.destination);
    if (!d_.gradient) {
      forward_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
          backend.engine(), dnnl::prop_kind::forward_inference, algorithm, source_desc_, destination_desc_, 1));
    } else {
      // source: dy (diff_dst); result: y (dst); destination: dx (diff_src).
      result_desc_ = region_desc(backend, d_.secondary);
      dnnl::softmax_forward::primitive_desc hint(backend.engine(), dnnl::prop_kind::forward_training, algorithm,
                                                 destination_desc_, result_desc_, 1);
      backward_ = dnnl::softmax_backward(dnnl::softmax_backward::primitive_desc(
          backend.engine(), algorithm, destination_desc_, source_desc_, result_desc_, 1, hint));
    }
    onednn_ = true;
  }

  SoftMaxDescriptor d_;
  bool onednn_ = false;
  dnnl::memory::desc source_desc_, result_desc_, destination_desc_;
  dnnl::softmax_forward forward_;
  dnnl::softmax_backward backward_;
};

const Registered<SoftMaxPrimitive, CpuSoftMax> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
