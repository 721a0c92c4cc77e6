#include "mpsx/kernels/cross_channel_normalization.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// oneDNN's lrn_across_channels sums over [k - (N-1)/2, k + (N+1)/2 - 1] with
// alpha/N: MPS's Q(k) for an odd N. It runs odd windows over dense regions;
// even windows (whose oneDNN window is the mirror of MPS's) and regions
// within larger images run the loops below, which are MPS's formula for
// every N (and run N = 1, see the constructor).

// Per-thread scratch of 2 * channels floats: grows once, then reused.
float* scratch_of(int64_t channels) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(2 * channels)) scratch.resize(static_cast<size_t>(2 * channels));
  return scratch.data();
}

// L_k = delta + alpha/N * sum_{q in Q(k)} x_q^2 for every channel k of one
// pixel, by a running sum over the window.
void denominators(const CrossChannelNormalizationDescriptor& d, const CrossChannelNormalizationParameters& p,
                  const float* x, int64_t sx, float* l) {
  const int64_t channels = d.channels, before = d.before(), after = d.after();
  const float scale = p.alpha / static_cast<float>(d.kernel_size);
  // Window of channel 0: [0, after].
  double sum = 0.0;
  for (int64_t q = 0; q <= std::min(after, channels - 1); ++q) sum += double(x[q * sx]) * x[q * sx];
  for (int64_t k = 0; k < channels; ++k) {
    l[k] = p.delta + scale * static_cast<float>(sum);
    const int64_t enter = k + 1 + after, leave = k - before;  // window of k + 1
    if (enter < channels) sum += double(x[enter * sx]) * x[enter * sx];
    if (leave >= 0) sum -= double(x[leave * sx]) * x[leave * sx];
  }
}

void forward_pixels(const CrossChannelNormalizationDescriptor& d, const CrossChannelNormalizationParameters& p,
                    const ImageRegion& x, const ImageRegion& y, int64_t first, int64_t count) {
  const ImageRegion* const regions[2] = {&x, &y};
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(y.data);
  const int64_t channels = d.channels, sx = x.stride.c, sy = y.stride.c;
  float* l = scratch_of(channels);
  detail::for_pixels<2>(regions, first, count, [&](const int64_t* o) {
    const float* a = in + o[0];
    float* b = out + o[1];
    denominators(d, p, a, sx, l);  // every x read before any y is written: y may be x
    for (int64_t c = 0; c < channels; ++c) b[c * sy] = a[c * sx] * std::pow(l[c], -p.beta);
  });
}

// dx_j = dy_j L_j^-beta - (2 alpha beta / N) x_j sum_{k in R(j)} dy_k x_k L_k^(-beta-1).
void gradient_pixels(const CrossChannelNormalizationDescriptor& d, const CrossChannelNormalizationParameters& p,
                     const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx, int64_t first,
                     int64_t count) {
  const ImageRegion* const regions[3] = {&dy, &x, &dx};
  const float* g = static_cast<const float*>(dy.data);
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(dx.data);
  const int64_t channels = d.channels, sg = dy.stride.c, sx = x.stride.c, so = dx.stride.c;
  // R(j) = [j - after, j + before]: the channels whose window holds j.
  const int64_t before = d.before(), after = d.after();
  const float scale = 2.0f * p.alpha * p.beta / static_cast<float>(d.kernel_size);
  float* l = scratch_of(channels);
  float* t = l + channels;
  detail::for_pixels<3>(regions, first, count, [&](const int64_t* o) {
    const float* pg = g + o[0];
    const float* px = in + o[1];
    float* po = out + o[2];
    denominators(d, p, px, sx, l);
    for (int64_t k = 0; k < channels; ++k) t[k] = pg[k * sg] * px[k * sx] * std::pow(l[k], -p.beta - 1.0f);
    // Running sum of t over R(0) = [0, before], then R(j) onward.
    double sum = 0.0;
    for (int64_t k = 0; k <= std::min(before, channels - 1); ++k) sum += t[k];
    for (int64_t j = 0; j < channels; ++j) {
      const float value = pg[j * sg] * std::pow(l[j], -p.beta) - scale * px[j * sx] * static_cast<float>(sum);
      const int64_t enter = j + 1 + before, leave = j - after;  // window of j + 1
      if (enter < channels) sum += t[enter];
      if (leave >= 0) sum -= t[leave];
      po[j * so] = value;  // dy_j and x_j were read: dx may be either
    }
  });
}

// Scratch slot of oneDNN's copy of the source its result overwrites (in
// place; core refuses a gradient over its inputs). Float32Region takes 0 to
// 2, the gradient's forward-training pass 3 and 4.
constexpr size_t kCopySlot = 5;

// Pixels per parallel chunk.
int64_t grain_of(int64_t channels) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(channels, 1)); }

class CpuCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  CpuCrossChannelNormalization(const CpuBackend& backend, const CrossChannelNormalizationDescriptor& d)
      : d_(d), engine_(backend.engine()) {
    // N = 1 stays on the loops too: oneDNN's backward pass crashed there
    // (oneDNN as built here, beta 1 and 0.75).
    if (d.kernel_size % 2 == 0 || d.kernel_size < 3 || !dense(d.source) || !dense(d.destination) || (d.gradient && !dense(d.secondary)))
      return;
    source_desc_ = region_desc(backend, d.source);
    destination_desc_ = region_desc(backend, d.destination);
    if (d.gradient) secondary_desc_ = region_desc(backend, d.secondary);
    onednn_ = true;
  }

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    if (const std::shared_ptr<const Built> built = onednn(p)) {
      execute_and_wait(cpu, built->forward, source_desc_,
                       unaliased_input(cpu, x.region(), y.region(), kCopySlot, OneDnnInPlace::Unsupported),
                       destination_desc_, y.data());
    } else {
      const ImageRegion& in = x.region();
      detail::parallel_chunks(in.n * in.h * in.w, grain_of(in.c), [&](int64_t first, int64_t count) {
        forward_pixels(d_, p, in, y.region(), first, count);
      });
    }
    y.store();
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region x(cpu, source, 1, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    if (const std::shared_ptr<const Built> built = onednn(p)) {
      dnnl::memory diff_dst(source_desc_, cpu.engine(), dy.data());
      dnnl::memory src(secondary_desc_, cpu.engine(), x.data());
      dnnl::memory diff_src(destination_desc_, cpu.engine(), dx.data());
      std::unordered_map<int, dnnl::memory> arguments = {
          {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_SRC, diff_src}};
      if (built->workspace_bytes > 0) {
        // The backward pass reads the forward pass's workspace: run the
        // forward pass into scratch first (its result is not kept).
        const dnnl::memory::desc& ws_desc = built->workspace_desc;
        dnnl::memory workspace(ws_desc, cpu.engine(), cpu.scratch(3, built->workspace_bytes));
        dnnl::memory dst(secondary_desc_dense(), cpu.engine(),
                         cpu.scratch(4, static_cast<size_t>(x.region().element_count()) * sizeof(float)));
        built->training.execute(cpu.stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, workspace}});
        arguments.insert({DNNL_ARG_WORKSPACE, workspace});
      }
      built->backward.execute(cpu.stream(), arguments);
      cpu.stream().wait();
    } else {
      const ImageRegion& g = dy.region();
      detail::parallel_chunks(g.n * g.h * g.w, grain_of(g.c), [&](int64_t first, int64_t count) {
        gradient_pixels(d_, p, g, x.region(), dx.region(), first, count);
      });
    }
    dx.store();
  }

 private:
  // oneDNN primitives for one set of alpha, beta and delta.
  struct Built {
    CrossChannelNormalizationParameters p;
    dnnl::lrn_forward forward, training;
    dnnl::lrn_backward backward;
    dnnl::memory::desc workspace_desc;
    size_t workspace_bytes = 0;
  };

  // The primitives for `p`, built when the parameters change (oneDNN bakes
  // them into its primitive); nullptr where the loops run. The lock guards
  // queues that share the kernel; a command keeps its primitives alive.
  std::shared_ptr<const Built> onednn(const CrossChannelNormalizationParameters& p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!onednn_) return nullptr;
    if (built_ && built_->p.alpha == p.alpha && built_->p.beta == p.beta && built_->p.delta == p.delta)
      return built_;
    try {
      auto b = std::make_shared<Built>();
      b->p = p;
      const auto algorithm = dnnl::algorithm::lrn_across_channels;
      const dnnl::memory::dim size = d_.kernel_size;
      if (!d_.gradient) {
        b->forward = dnnl::lrn_forward(dnnl::lrn_forward::primitive_desc(
            engine_, dnnl::prop_kind::forward_inference, algorithm, source_desc_, destination_desc_, size, p.alpha,
            p.beta, p.delta));
      } else {
        // source: dy (diff_dst); secondary: x (src); destination: dx (diff_src).
        dnnl::lrn_forward::primitive_desc hint(engine_, dnnl::prop_kind::forward_training, algorithm, secondary_desc_,
                                               secondary_desc_dense(), size, p.alpha, p.beta, p.delta);
        b->workspace_desc = hint.workspace_desc();
        b->workspace_bytes = b->workspace_desc.get_size();
        if (b->workspace_bytes > 0) b->training = dnnl::lrn_forward(hint);
        b->backward = dnnl::lrn_backward(dnnl::lrn_backward::primitive_desc(
            engine_, algorithm, destination_desc_, source_desc_, secondary_desc_, size, p.alpha, p.beta, p.delta,
            hint));
      }
      built_ = std::move(b);
      return built_;
    } catch (const dnnl::error&) {  // a configuration oneDNN does not take: the loops
      onednn_ = false;
      return nullptr;
    }
  }

  // Whether the region in `image` is one dense NHWC block as Float32Region
  // presents it: float16 and uint8 regions are converted into dense copies.
  bool dense(const ImageDescriptor& image) const {
    return image.channel_format != DataType::Float32 ||
           (image.feature_channels == d_.channels && image.width == d_.width && image.height == d_.height);
  }

  // Dense NHWC float32 of the region's extents.
  dnnl::memory::desc secondary_desc_dense() const {
    return dnnl::memory::desc({d_.images, d_.channels, d_.height, d_.width}, dnnl::memory::data_type::f32,
                              {d_.height * d_.width * d_.channels, 1, d_.width * d_.channels, d_.channels});
  }

  // oneDNN descriptors of the regions as Float32Region presents them: the
  // image's own layout for float32, dense NHWC otherwise.
  dnnl::memory::desc region_desc(const CpuBackend& backend, const ImageDescriptor& image) const {
    return float32_region_desc(backend, image, d_.images, d_.channels, d_.height, d_.width);
  }

  CrossChannelNormalizationDescriptor d_;
  dnnl::engine engine_;
  mutable bool onednn_ = false;
  dnnl::memory::desc source_desc_, secondary_desc_, destination_desc_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const Built> built_;
};

const Registered<CrossChannelNormalizationPrimitive, CpuCrossChannelNormalization> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
