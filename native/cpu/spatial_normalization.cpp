#include "mpsx/kernels/spatial_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Plain C++: oneDNN's lrn_within_channel is documented with alpha/n, not
// MPS's alpha/(k*k), and its even windows and borders are not documented to
// match MPS's.

// Scratch slots (Float32Region takes 0 to 2): per element of the written
// region, in (image, row, column, channel) order.
constexpr size_t kFirstSlot = 3;

// T(o) = delta + alpha/(k*k) * the sum of x^2 over the window of source pixel
// (row, column), channel offset `c` of the whole-image region x.
inline float denominator(const SpatialNormalizationDescriptor& d, const SpatialNormalizationParameters& p,
                         const ImageRegion& x, const float* image, int64_t c, int64_t row, int64_t column) {
  const int64_t top = std::max<int64_t>(0, row - d.before()), bottom = std::min(x.h - 1, row + d.after());
  const int64_t left = std::max<int64_t>(0, column - d.before()), right = std::min(x.w - 1, column + d.after());
  double sum = 0.0;
  for (int64_t r = top; r <= bottom; ++r)
    for (int64_t q = left; q <= right; ++q) {
      const float v = image[r * x.stride.h + q * x.stride.w + c * x.stride.c];
      sum += double(v) * v;
    }
  return p.delta + p.alpha / static_cast<float>(d.kernel_size * d.kernel_size) * static_cast<float>(sum);
}

// Calls f(n, row, column, index) for every pixel of the written region, in
// parallel; index counts pixels in (image, row, column) order.
template <class F>
void for_region_pixels(const SpatialNormalizationDescriptor& d, F&& f) {
  const int64_t pixels = d.images * d.height * d.width;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(d.channels, 1));
  detail::parallel_chunks(pixels, grain, [&](int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) f(i / (d.height * d.width), (i / d.width) % d.height, i % d.width, i);
  });
}

class CpuSpatialNormalization final : public SpatialNormalizationPrimitive {
 public:
  explicit CpuSpatialNormalization(const SpatialNormalizationDescriptor& d)
      : d_(d),
        bytes_(checked_bytes(checked_count({d.images, d.height, d.width, d.channels},
                                           "MPSCNNSpatialNormalization: the region's element count"),
                             sizeof(float), "MPSCNNSpatialNormalization: the scratch size")) {}

  void forward(ExecutionContext& context, const SpatialNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xr(cpu, source, 0, true);
    Float32Region yr(cpu, destination, 1, false);
    const ImageRegion& x = xr.region();
    const ImageRegion& y = yr.region();
    const int64_t channels = d_.channels;
    // Pass 1: factors T^-beta of the whole region, read from x only; pass 2
    // writes y, so y may be x.
    float* factors = static_cast<float*>(cpu.scratch(kFirstSlot, bytes()));
    const float* in = xr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* image = in + n * x.stride.n;
      for (int64_t c = 0; c < channels; ++c)
        factors[i * channels + c] =
            std::pow(denominator(d_, p, x, image, c, row + d_.source_y, column + d_.source_x), -p.beta);
    });
    float* out = yr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* a = in + n * x.stride.n + (row + d_.source_y) * x.stride.h + (column + d_.source_x) * x.stride.w;
      float* b = out + detail::pixel_offset(y, n, row, column);
      for (int64_t c = 0; c < channels; ++c) b[c * y.stride.c] = a[c * x.stride.c] * factors[i * channels + c];
    });
    yr.store();
  }

  void gradient(ExecutionContext& context, const SpatialNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dyr(cpu, source_gradient, 0, true);
    Float32Region xr(cpu, source, 1, true);
    Float32Region dxr(cpu, destination_gradient, 2, false);
    const ImageRegion& dy = dyr.region();
    const ImageRegion& x = xr.region();
    const ImageRegion& dx = dxr.region();
    const int64_t channels = d_.channels;
    // Pass 1, per element o of the written region: direct = dy(o) T(o)^-beta
    // and spread = dy(o) x(o) T(o)^(-beta-1).
    float* direct = static_cast<float*>(cpu.scratch(kFirstSlot, bytes()));
    float* spread = static_cast<float*>(cpu.scratch(kFirstSlot + 1, bytes()));
    const float* g = dyr.data();
    const float* in = xr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* image = in + n * x.stride.n;
      const float* pg = g + detail::pixel_offset(dy, n, row, column);
      const int64_t sr = row + d_.source_y, sc = column + d_.source_x;
      for (int64_t c = 0; c < channels; ++c) {
        const float t = denominator(d_, p, x, image, c, sr, sc);
        const float power = std::pow(t, -p.beta);
        const float gc = pg[c * dy.stride.c];
        direct[i * channels + c] = gc * power;
        spread[i * channels + c] = gc * image[sr * x.stride.h + sc * x.stride.w + c * x.stride.c] * power / t;
      }
    });
    // Pass 2, per pixel s of the whole source: dx(s) = [s written] direct(s)
    // - (2 alpha beta / (k*k)) x(s) * the sum of spread(o) over the written
    // o whose window holds s: rows o in [s - after, s + before], and columns.
    // It reads x(s) and scratch only, so dx may be x or dy.
    const float scale = 2.0f * p.alpha * p.beta / static_cast<float>(d_.kernel_size * d_.kernel_size);
    float* out = dxr.data();
    const int64_t pixels = x.n * x.h * x.w;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(channels, 1));
    detail::parallel_chunks(pixels, grain, [&](int64_t first, int64_t count) {
      for (int64_t s = first; s < first + count; ++s) {
        const int64_t n = s / (x.h * x.w), row = (s / x.w) % x.h, column = s % x.w;
        // The written region's rows and columns, relative to its origin.
        const int64_t r = row - d_.source_y, q = column - d_.source_x;
        const int64_t top = std::max<int64_t>(0, r - d_.after()), bottom = std::min(d_.height - 1, r + d_.before());
        const int64_t left = std::max<int64_t>(0, q - d_.after()), right = std::min(d_.width - 1, q + d_.before());
        const bool written = r >= 0 && r < d_.height && q >= 0 && q < d_.width;
        const float* a = in + detail::pixel_offset(x, n, row, column);
        float* b = out + detail::pixel_offset(dx, n, row, column);
        for (int64_t c = 0; c < channels; ++c) {
          double sum = 0.0;
          for (int64_t o_row = top; o_row <= bottom; ++o_row)
            for (int64_t o_column = left; o_column <= right; ++o_column)
              sum += spread[((n * d_.height + o_row) * d_.width + o_column) * channels + c];
          const float first_term = written ? direct[((n * d_.height + r) * d_.width + q) * channels + c] : 0.0f;
          b[c * dx.stride.c] = first_term - scale * a[c * x.stride.c] * static_cast<float>(sum);
        }
      }
    });
    dxr.store();
  }

 private:
  size_t bytes() const { return bytes_; }

  SpatialNormalizationDescriptor d_;
  size_t bytes_;
};

std::unique_ptr<SpatialNormalizationPrimitive> make_spatial_normalization(
    Backend&, const SpatialNormalizationDescriptor& descriptor) {
  return std::make_unique<CpuSpatialNormalization>(descriptor);
}

const RegisterPrimitive<SpatialNormalizationPrimitive> registered("cpu", make_spatial_normalization);

}  // namespace

}  // namespace mpsx::cpu
