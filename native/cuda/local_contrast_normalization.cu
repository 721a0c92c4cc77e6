// One thread per element, 64-bit indices, no shared memory: each forward
// element sums its window; each gradient element sums over the windows that
// read it, recomputing each window's mean and variance (kernel^4 work per
// element, kept simple on purpose).
#include "local_contrast_normalization.cuh"

#include "elements.cuh"
#include "window_taps.cuh"

namespace mpsx::cuda {
namespace {

using Index = int64_t;

struct LcnWindow {
  int64_t kw, kh;    // kernel size
  int64_t first_x, first_y;  // top-left tap of the window of pixel (0, 0)
  int64_t width, height;     // source size (pixels off it read 0, or with clamp the nearest pixel)
  bool clamp;                // edge_mode CLAMP
};

struct Stats {
  float mean, t;
};

// What the tap at (xx, yy) reads in channel c of image n.
__device__ float tap_value(const LcnWindow& w, const Strided<Index>& x, Index n, Index c, int64_t yy, int64_t xx) {
  const int64_t ty = tap(w.clamp, yy, w.height), tx = tap(w.clamp, xx, w.width);
  return ty < 0 || tx < 0 ? 0.0f : x.load(x.at(n, c, ty, tx));
}

// Mean and T = delta + alpha * variance of the window of normalized pixel
// (ox, oy) in channel c of image n, both divided by kw * kh; taps off the
// source read as tap() says and count either way.
__device__ Stats window_stats(const LcnWindow& w, const LocalContrastNormalizationParameters& p, const Strided<Index>& x,
                              Index n, Index c, Index ox, Index oy) {
  const int64_t wx = w.first_x + ox, wy = w.first_y + oy;
  const float taps = static_cast<float>(w.kw * w.kh);
  float sum = 0.0f;
  for (int64_t yy = wy; yy < wy + w.kh; ++yy)
    for (int64_t xx = wx; xx < wx + w.kw; ++xx) sum += tap_value(w, x, n, c, yy, xx);
  const float mean = sum / taps;
  float squares = 0.0f;
  for (int64_t yy = wy; yy < wy + w.kh; ++yy)
    for (int64_t xx = wx; xx < wx + w.kw; ++xx) {
      const float d = tap_value(w, x, n, c, yy, xx) - mean;
      squares += d * d;
    }
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

// dx(v) = A(centre at v) - sum over the windows reading v, each as often as
// its taps read v (reads()), of (A * p0 / N + B * (v - M)), with
// A = dy * ps * T^-beta and B = A * (2 alpha beta / N) * (x_centre - p0 * M) / T.
// The candidate windows: ZERO, oy in [sy - first_y - kh + 1, sy - first_y];
// clamp, for sy on an edge, every centre row up to that edge too (reads() is
// 0 for the others). Likewise for columns. As pass 2 in
// native/cpu/local_contrast_normalization.cpp.
__global__ void gradient_kernel(LcnWindow w, LocalContrastNormalizationParameters p, Extents<Index> e,
                                Strided<Index> dy, Index dy_width, Index dy_height, Strided<Index> x,
                                Strided<Index> dx, Index count) {
  const float taps = static_cast<float>(w.kw * w.kh);
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index n, sy, sx;
    const Index c = e.element(i, &n, &sy, &sx);
    const float v = x.load(x.at(n, c, sy, sx));
    // Normalized pixels whose windows read (sx, sy).
    int64_t oy0 = max(sy - w.first_y - w.kh + 1, int64_t{0}), oy1 = min(sy - w.first_y + 1, dy_height);
    int64_t ox0 = max(sx - w.first_x - w.kw + 1, int64_t{0}), ox1 = min(sx - w.first_x + 1, dy_width);
    if (w.clamp && sy == 0) oy0 = 0;
    if (w.clamp && sy == w.height - 1) oy1 = dy_height;
    if (w.clamp && sx == 0) ox0 = 0;
    if (w.clamp && sx == w.width - 1) ox1 = dy_width;
    const int64_t centre_x = sx - w.first_x - w.kw / 2, centre_y = sy - w.first_y - w.kh / 2;
    float value = 0.0f;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      const int64_t wy = w.first_y + oy;
      const int64_t reads_y = reads(w.clamp, sy, w.height, wy, wy + w.kh - 1);
      if (reads_y == 0) continue;
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        const int64_t wx = w.first_x + ox;
        const float m = static_cast<float>(reads_y * reads(w.clamp, sx, w.width, wx, wx + w.kw - 1));
        const Stats s = window_stats(w, p, x, n, c, ox, oy);
        const float centre = x.load(x.at(n, c, w.first_y + oy + w.kh / 2, w.first_x + ox + w.kw / 2));
        const float a = dy.load(dy.at(n, c, oy, ox)) * p.ps * powf(s.t, -p.beta);
        const float b = a * (2.0f * p.alpha * p.beta / taps) * (centre - p.p0 * s.mean) / s.t;
        value -= m * (a * p.p0 / taps + b * (v - s.mean));
        if (ox == centre_x && oy == centre_y) value += a;
      }
    }
    dx.store(dx.at(n, c, sy, sx), value);
  }
}

LcnWindow window_of(const LocalContrastNormalizationDescriptor& d, const LocalContrastNormalizationPass& pass,
                 const ImageRegion& x) {
  return {d.kernel_width, d.kernel_height, pass.first_x, pass.first_y, x.w, x.h, pass.edge_mode == EdgeMode::Clamp};
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
