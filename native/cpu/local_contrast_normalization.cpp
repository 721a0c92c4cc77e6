// MPSCNNLocalContrastNormalization on the cpu: plain loops (oneDNN's LRN
// divides by the local energy, not the local variance).
#include "mpsx/kernels/local_contrast_normalization.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend.h"
#include "mpsx/checked.h"

namespace mpsx::cpu {
namespace {

// The scratch slot of the gradient's per-centre terms (Float32Region takes 0 to 2).
constexpr size_t kTermsSlot = 3;

inline const float* at(const ImageRegion& r, int64_t n, int64_t c, int64_t y, int64_t x) {
  return static_cast<const float*>(r.data) + n * r.stride.n + c * r.stride.c + y * r.stride.h + x * r.stride.w;
}
inline float* at_mutable(const ImageRegion& r, int64_t n, int64_t c, int64_t y, int64_t x) {
  return static_cast<float*>(r.data) + n * r.stride.n + c * r.stride.c + y * r.stride.h + x * r.stride.w;
}

// What the tap at (xx, yy) reads in channel c of image n.
inline double tap_value(const ImageRegion& x, EdgeMode mode, int64_t n, int64_t c, int64_t yy, int64_t xx) {
  const int64_t ty = tap(mode, yy, x.h), tx = tap(mode, xx, x.w);
  return ty < 0 || tx < 0 ? 0.0 : static_cast<double>(*at(x, n, c, ty, tx));
}

// Mean and T = delta + alpha * variance of the window whose top-left tap is
// (wx, wy) in channel c of image n; taps off the source read as `mode` says
// and count in N either way.
struct Stats {
  double mean, t;
};
Stats stats(const ImageRegion& x, EdgeMode mode, int64_t n, int64_t c, int64_t wx, int64_t wy, int64_t kw,
            int64_t kh, const LocalContrastNormalizationParameters& p) {
  const double taps = static_cast<double>(kw) * static_cast<double>(kh);
  double sum = 0;
  for (int64_t yy = wy; yy < wy + kh; ++yy)
    for (int64_t xx = wx; xx < wx + kw; ++xx) sum += tap_value(x, mode, n, c, yy, xx);
  const double mean = sum / taps;
  // Two passes: the variance is never below 0 by rounding.
  double squares = 0;
  for (int64_t yy = wy; yy < wy + kh; ++yy)
    for (int64_t xx = wx; xx < wx + kw; ++xx) {
      double d = tap_value(x, mode, n, c, yy, xx) - mean;
      squares += d * d;
    }
  return {mean, static_cast<double>(p.delta) + static_cast<double>(p.alpha) * (squares / taps)};
}

int64_t rows_per_chunk(int64_t width, int64_t channels, int64_t taps) {
  double work = static_cast<double>(width) * static_cast<double>(channels) * static_cast<double>(taps) * 2.0 + 1.0;
  return std::max<int64_t>(1, static_cast<int64_t>(65536.0 / work));
}

class CpuLocalContrastNormalization final : public LocalContrastNormalizationPrimitive {
 public:
  explicit CpuLocalContrastNormalization(const LocalContrastNormalizationDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const LocalContrastNormalizationPass& pass, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xr(cpu, source, 0, true);
    Float32Region yr(cpu, destination, 1, false);
    const ImageRegion &x = xr.region(), &y = yr.region();
    const LocalContrastNormalizationParameters& p = pass.parameters;
    const int64_t kw = d_.kernel_width, kh = d_.kernel_height;
    detail::parallel_chunks(y.n * y.h, rows_per_chunk(y.w, y.c, kw * kh), [&](int64_t first, int64_t rows) {
      for (int64_t row = first; row < first + rows; ++row) {
        const int64_t n = row / y.h, oy = row % y.h, wy = pass.first_y + oy;
        for (int64_t ox = 0; ox < y.w; ++ox) {
          const int64_t wx = pass.first_x + ox;
          for (int64_t c = 0; c < y.c; ++c) {
            Stats s = stats(x, pass.edge_mode, n, c, wx, wy, kw, kh, p);
            double centre = *at(x, n, c, wy + kh / 2, wx + kw / 2);
            double value = p.pm + p.ps * (centre - p.p0 * s.mean) * std::pow(s.t, -static_cast<double>(p.beta));
            *at_mutable(y, n, c, oy, ox) = static_cast<float>(value);
          }
        }
      }
    });
    yr.store();
  }

  // With A = dy * ps * T^-beta and B = A * (2 alpha beta / N) * (x_centre -
  // p0 * M) / T per centre, a source pixel v gets
  //   A of the centre at v - sum over the windows reading v (each as often as
  //   its taps read v) of
  //   (A * p0 / N + B * (v - M)).
  void gradient(ExecutionContext& context, const LocalContrastNormalizationPass& pass,
                const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dyr(cpu, source_gradient, 0, true);
    Float32Region dxr(cpu, destination_gradient, 1, false);
    Float32Region xr(cpu, source_image, 2, true);
    const ImageRegion &dy = dyr.region(), &dx = dxr.region(), &x = xr.region();
    const LocalContrastNormalizationParameters& p = pass.parameters;
    const int64_t kw = d_.kernel_width, kh = d_.kernel_height;
    const double taps = static_cast<double>(kw) * static_cast<double>(kh);
    const int64_t centres = checked_count({dy.n, dy.h, dy.w, dy.c}, "the local contrast normalization gradient's terms");
    // Per centre (n, y, x, c): A, B and C = A * p0 / N - B * M.
    double* terms = static_cast<double*>(
        cpu.scratch(kTermsSlot, checked_bytes(checked_mul(centres, 3, "the gradient's terms"), sizeof(double),
                                              "the gradient's terms")));
    auto term = [&](int64_t n, int64_t oy, int64_t ox, int64_t c) {
      return terms + (((n * dy.h + oy) * dy.w + ox) * dy.c + c) * 3;
    };
    detail::parallel_chunks(dy.n * dy.h, rows_per_chunk(dy.w, dy.c, kw * kh), [&](int64_t first, int64_t rows) {
      for (int64_t row = first; row < first + rows; ++row) {
        const int64_t n = row / dy.h, oy = row % dy.h, wy = pass.first_y + oy;
        for (int64_t ox = 0; ox < dy.w; ++ox) {
          const int64_t wx = pass.first_x + ox;
          for (int64_t c = 0; c < dy.c; ++c) {
            Stats s = stats(x, pass.edge_mode, n, c, wx, wy, kw, kh, p);
            double centre = *at(x, n, c, wy + kh / 2, wx + kw / 2);
            double a = static_cast<double>(*at(dy, n, c, oy, ox)) * p.ps *
                       std::pow(s.t, -static_cast<double>(p.beta));
            double b = a * (2.0 * p.alpha * p.beta / taps) * (centre - p.p0 * s.mean) / s.t;
            double* t = term(n, oy, ox, c);
            t[0] = a;
            t[1] = b;
            t[2] = a * p.p0 / taps - b * s.mean;
          }
        }
      }
    });
    // Per source pixel (sx, sy): the centres whose windows read it, counted
    // reads(...) times each. ZERO: oy in [sy - first_y - kh + 1, sy - first_y],
    // once each. CLAMP: for sy on an edge, any centre whose window reaches
    // beyond that edge too (every centre row is a candidate; reads() is 0 for
    // the others). Likewise for columns.
    const bool clamp = pass.edge_mode == EdgeMode::Clamp;
    detail::parallel_chunks(dx.n * dx.h, rows_per_chunk(dx.w, dx.c, kw * kh), [&](int64_t first, int64_t rows) {
      for (int64_t row = first; row < first + rows; ++row) {
        const int64_t n = row / dx.h, sy = row % dx.h;
        int64_t oy0 = std::max<int64_t>(sy - pass.first_y - kh + 1, 0);
        int64_t oy1 = std::min<int64_t>(sy - pass.first_y + 1, dy.h);
        if (clamp && sy == 0) oy0 = 0;
        if (clamp && sy == dx.h - 1) oy1 = dy.h;
        const int64_t centre_y = sy - pass.first_y - kh / 2;
        for (int64_t sx = 0; sx < dx.w; ++sx) {
          int64_t ox0 = std::max<int64_t>(sx - pass.first_x - kw + 1, 0);
          int64_t ox1 = std::min<int64_t>(sx - pass.first_x + 1, dy.w);
          if (clamp && sx == 0) ox0 = 0;
          if (clamp && sx == dx.w - 1) ox1 = dy.w;
          const int64_t centre_x = sx - pass.first_x - kw / 2;
          const bool is_centre = centre_y >= 0 && centre_y < dy.h && centre_x >= 0 && centre_x < dy.w;
          for (int64_t c = 0; c < dx.c; ++c) {
            double sum_b = 0, sum_c = 0;
            for (int64_t oy = oy0; oy < oy1; ++oy) {
              const int64_t wy = pass.first_y + oy;
              const int64_t reads_y = reads(pass.edge_mode, sy, dx.h, wy, wy + kh - 1);
              if (reads_y == 0) continue;
              for (int64_t ox = ox0; ox < ox1; ++ox) {
                const int64_t wx = pass.first_x + ox;
                const double m = static_cast<double>(reads_y * reads(pass.edge_mode, sx, dx.w, wx, wx + kw - 1));
                const double* t = term(n, oy, ox, c);
                sum_b += m * t[1];
                sum_c += m * t[2];
              }
            }
            double value = -static_cast<double>(*at(x, n, c, sy, sx)) * sum_b - sum_c;
            if (is_centre) value += term(n, centre_y, centre_x, c)[0];
            *at_mutable(dx, n, c, sy, sx) = static_cast<float>(value);
          }
        }
      }
    });
    dxr.store();
  }

 private:
  LocalContrastNormalizationDescriptor d_;
};

const Registered<LocalContrastNormalizationPrimitive, CpuLocalContrastNormalization> registered("cpu");

}  // namespace
}  // namespace mpsx::cpu
