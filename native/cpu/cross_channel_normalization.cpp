#include "mpsx/kernels/cross_channel_normalization.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Plain C++ rather than oneDNN's lrn_across_channels: for an even N oneDNN's
// window is [k - (N-1)/2, k + N/2], the mirror of MPS's Q(k), and its
// backward pass is its own formula; these loops are MPS's formula for every N.

// Per-thread scratch of 2 * channels floats: grows once, then reused.
float* scratch_of(int64_t channels) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(2 * channels)) scratch.resize(static_cast<size_t>(2 * channels));
  return scratch.data();
}

// Calls f(offsets) for pixels [first, first + count) of regions of equal
// extents, counted in (image, row, column) order.
template <size_t K, class F>
inline void for_pixels(const ImageRegion* const (&regions)[K], int64_t first, int64_t count, F&& f) {
  const ImageRegion& r0 = *regions[0];
  for (int64_t p = first; p < first + count; ++p) {
    const int64_t x = p % r0.w, row = p / r0.w;
    const int64_t y = row % r0.h, n = row / r0.h;
    int64_t offsets[K];
    for (size_t k = 0; k < K; ++k) offsets[k] = detail::pixel_offset(*regions[k], n, y, x);
    f(offsets);
  }
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
  for_pixels<2>(regions, first, count, [&](const int64_t* o) {
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
  for_pixels<3>(regions, first, count, [&](const int64_t* o) {
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

// Pixels per parallel chunk.
int64_t grain_of(int64_t channels) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(channels, 1)); }

class CpuCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  explicit CpuCrossChannelNormalization(const CrossChannelNormalizationDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    const ImageRegion& in = x.region();
    detail::parallel_chunks(in.n * in.h * in.w, grain_of(in.c), [&](int64_t first, int64_t count) {
      forward_pixels(d_, p, in, y.region(), first, count);
    });
    y.store();
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region x(cpu, source, 1, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    const ImageRegion& g = dy.region();
    detail::parallel_chunks(g.n * g.h * g.w, grain_of(g.c), [&](int64_t first, int64_t count) {
      gradient_pixels(d_, p, g, x.region(), dx.region(), first, count);
    });
    dx.store();
  }

 private:
  CrossChannelNormalizationDescriptor d_;
};

std::unique_ptr<CrossChannelNormalizationPrimitive> make_cross_channel_normalization(
    Backend&, const CrossChannelNormalizationDescriptor& descriptor) {
  return std::make_unique<CpuCrossChannelNormalization>(descriptor);
}

const RegisterPrimitive<CrossChannelNormalizationPrimitive> registered("cpu", make_cross_channel_normalization);

}  // namespace

}  // namespace mpsx::cpu
