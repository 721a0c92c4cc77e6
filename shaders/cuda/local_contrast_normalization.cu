// One thread per element, 64-bit indices, no shared memory: each forward
// element sums its window; each gradient element sums over the windows that
// read it, recomputing each window's mean and variance (kernel^4 work per
// element, kept simple on purpose).
#include "local_contrast_normalization.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

using Index = int64_t;

struct LcnWindow {
  int64_t kw, kh;    // kernel size
  int64_t first_x, first_y;  // top-left tap of the window of pixel (0, 0)
  int64_t width, height;     // source size (pixels off it read 0)
};

struct Stats {
  float mean, t;
};

// Mean and T = delta + alpha * variance of the window of normalized pixel
// (ox, oy) in channel c of image n, both divided by kw * kh.
__device__ Stats window_stats(const LcnWindow& w, const LocalContrastNormalizationParameters& p, const Strided<Index>& x,
                              Index n, Index c, Index ox, Index oy) {
  const int64_t wx = w.first_x + ox, wy = w.first_y + oy;
  const int64_t x0 = max(wx, int64_t{0}), x1 = min(wx + w.kw, w.width);
  const int64_t y0 = max(wy, int64_t{0}), y1 = min(wy + w.kh, w.height);
  const float taps = static_cast<float>(w.kw * w.kh);
  float sum = 0.0f;
  for (int64_t yy = y0; yy < y1; ++yy)
    for (int64_t xx = x0; xx < x1; ++xx) sum += x.load(x.at(n, c, yy, xx));
  const float mean = sum / taps;
  float squares = 0.0f;
  for (int64_t yy = y0; yy < y1; ++yy)
    for (int64_t xx = x0; xx < x1; ++xx) {
      const float d = x.load(x.at(n, c, yy, xx)) - mean;
      squares += d * d;
    }
  const int64_t inside = (x1 > x0 ? x1 - x0 : 0) * (y1 > y0 ? y1 - y0 : 0);
  squares += static_cast<float>(w.kw * w.kh - inside) * mean * mean;
  return {mean, p.delta + p.alpha * (squares / taps)};
}

__global__ void forward_kernel(LcnWindow w, LocalContrastNormalizationParameters p, Extents<Index> e, Strided<Index> x,
                               Strided<Index> y, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index n, oy, ox;
    const Index c = e.element(i, &n, &oy, &ox);
    const Stats s = window_stats(w, p, x, n, c, ox, oy);
    const float centre = x.load(x.at(n, c, w.first_y + oy + w.kh / 2, w.first_x + ox + w.kw / 2));
    y.store(y.at(n, c, oy, ox), p.pm + p.ps * (centre - p.p0 * s.mean) * powf(s.t, -p.beta));
  }
}

// dx(v) = A(centre at v) - sum over the windows reading v of (A * p0 / N + B * (v - M)),
// with A = dy * ps * T^-beta and B = A * (2 alpha beta / N) * (x_centre - p0 * M) / T.
__global__ void gradient_kernel(LcnWindow w, LocalContrastNormalizationParameters p, Extents<Index> e,
                                Strided<Index> dy, Index dy_width, Index dy_height, Strided<Index> x,
                                Strided<Index> dx, Index count) {
  const float taps = static_cast<float>(w.kw * w.kh);
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index n, sy, sx;
    const Index c = e.element(i, &n, &sy, &sx);
    const float v = x.load(x.at(n, c, sy, sx));
    // Normalized pixels whose windows read (sx, sy).
    const int64_t oy0 = max(sy - w.first_y - w.kh + 1, int64_t{0}), oy1 = min(sy - w.first_y + 1, dy_height);
    const int64_t ox0 = max(sx - w.first_x - w.kw + 1, int64_t{0}), ox1 = min(sx - w.first_x + 1, dy_width);
    const int64_t centre_x = sx - w.first_x - w.kw / 2, centre_y = sy - w.first_y - w.kh / 2;
    float value = 0.0f;
    for (int64_t oy = oy0; oy < oy1; ++oy)
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        const Stats s = window_stats(w, p, x, n, c, ox, oy);
        const float centre = x.load(x.at(n, c, w.first_y + oy + w.kh / 2, w.first_x + ox + w.kw / 2));
        const float a = dy.load(dy.at(n, c, oy, ox)) * p.ps * powf(s.t, -p.beta);
        const float b = a * (2.0f * p.alpha * p.beta / taps) * (centre - p.p0 * s.mean) / s.t;
        value -= a * p.p0 / taps + b * (v - s.mean);
        if (ox == centre_x && oy == centre_y) value += a;
      }
    dx.store(dx.at(n, c, sy, sx), value);
  }
}

LcnWindow window_of(const LocalContrastNormalizationDescriptor& d, const LocalContrastNormalizationPass& pass,
                 const ImageRegion& x) {
  return {d.kernel_width, d.kernel_height, pass.first_x, pass.first_y, x.w, x.h};
}

}  // namespace

void local_contrast_normalization_forward(const LocalContrastNormalizationDescriptor& d,
                                          const LocalContrastNormalizationPass& pass, const ImageRegion& x,
                                          const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(window_of(d, pass, x), pass.parameters, Extents<Index>(y),
                                                        Strided<Index>(x), Strided<Index>(y), count);
}

void local_contrast_normalization_gradient(const LocalContrastNormalizationDescriptor& d,
                                           const LocalContrastNormalizationPass& pass, const ImageRegion& dy,
                                           const ImageRegion& x, const ImageRegion& dx, cudaStream_t stream) {
  const int64_t count = dx.element_count();
  if (count == 0) return;
  gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(window_of(d, pass, x), pass.parameters, Extents<Index>(dx),
                                                         Strided<Index>(dy), dy.w, dy.h, Strided<Index>(x),
                                                         Strided<Index>(dx), count);
}

}  // namespace mpsx::cuda
