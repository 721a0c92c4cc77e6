#include "mpsx/kernels/gram_matrix_calculation.h"

#include <algorithm>

#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// y[i] += a * x[i], i < count: the loop the compiler vectorizes. The cpu
// backend's float32 views keep channels innermost (CpuBackend::image_layout,
// float32_layout), so every row below is contiguous.
MPSX_CPU_LOOP void axpy(float* y, const float* x, float a, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += a * x[i];
}

// Matrix rows (pixels) computed together: each pass over the pixels (rows
// of S) feeds this many, so the source is read C / kRows times.
constexpr int64_t kRows = 8;

// Rows f0 .. f1 - 1 of image n's matrix: G[f][c] = alpha * sum_p x[p][f] *
// x[p][c], written to y(n, c, 0, f).
MPSX_CPU_LOOP void matrix_rows(const ImageRegion* in, const float* x, const ImageRegion* out, float* y, int64_t n,
                               int64_t f0, int64_t f1, float alpha) {
  const int64_t channels = in->c, pixels = in->h * in->w;
  float* rows = y + n * out->stride.n;
  for (int64_t f = f0; f < f1; ++f)
    for (int64_t c = 0; c < channels; ++c) rows[f * out->stride.w + c] = 0.0f;
  for (int64_t p = 0; p < pixels; ++p) {
    const float* px = x + detail::pixel_offset(*in, n, p / in->w, p % in->w);
    for (int64_t f = f0; f < f1; ++f) axpy(rows + f * out->stride.w, px, px[f], channels);
  }
  for (int64_t f = f0; f < f1; ++f)
    for (int64_t c = 0; c < channels; ++c) rows[f * out->stride.w + c] *= alpha;
}

// dx[p] = sum_c x[p][c] * S[c] for pixels p0 .. p1 - 1 of image n, S (dense,
// symmetric) its alpha * (dG + dG^T); each row of S read serves them all.
MPSX_CPU_LOOP void pixel_gradients(const ImageRegion* in, const float* x, const ImageRegion* out, float* dx,
                                   const float* s, int64_t n, int64_t p0, int64_t p1) {
  const int64_t channels = in->c;
  const float* px[kRows];
  float* pdx[kRows];
  for (int64_t p = p0; p < p1; ++p) {
    px[p - p0] = x + detail::pixel_offset(*in, n, p / in->w, p % in->w);
    pdx[p - p0] = dx + detail::pixel_offset(*out, n, p / in->w, p % in->w);
    for (int64_t f = 0; f < channels; ++f) pdx[p - p0][f] = 0.0f;
  }
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < p1 - p0; ++i) axpy(pdx[i], s + c * channels, px[i][c], channels);
}

// GramMatrixPrimitive's formulas in loops over float32 views, accumulating in
// float32.
class CpuGramMatrix final : public GramMatrixPrimitive {
 public:
  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               float alpha) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xs(cpu, source, 0, true);
    Float32Region ys(cpu, destination, 1, false);
    const ImageRegion& in = xs.region();
    const ImageRegion& out = ys.region();
    const float* x = xs.data();
    float* y = ys.data();
    const int64_t channels = in.c, pixels = in.h * in.w;
    const int64_t blocks = (channels + kRows - 1) / kRows;
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(kRows * channels * pixels, 1));
    detail::parallel_chunks(in.n * blocks, grain, [&](int64_t first, int64_t count) {
      for (int64_t task = first; task < first + count; ++task) {
        const int64_t f0 = task % blocks * kRows;
        Cloned<matrix_rows>::run(&in, x, &out, y, task / blocks, f0, std::min(f0 + kRows, channels), alpha);
      }
    });
    ys.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float alpha) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dys(cpu, source_gradient, 0, true);
    Float32Region xs(cpu, source, 1, true);
    Float32Region dxs(cpu, destination_gradient, 2, false);
    const ImageRegion& dg = dys.region();
    const ImageRegion& in = xs.region();
    const ImageRegion& out = dxs.region();
    const float* dy = dys.data();
    const float* x = xs.data();
    float* dx = dxs.data();
    const int64_t channels = in.c, pixels = in.h * in.w;
    // S = alpha * (dG + dG^T) per image, dense; symmetric, so dx[p] =
    // sum_c x[p][c] * S[c] (row c).
    float* s = static_cast<float*>(
        cpu.scratch(3, checked_bytes(checked_count({in.n, channels, channels}, "the gram gradient's matrices"),
                                     sizeof(float), "the gram gradient's matrices")));
    for (int64_t n = 0; n < in.n; ++n)
      for (int64_t f = 0; f < channels; ++f)
        for (int64_t c = 0; c < channels; ++c) {
          // dG[f][c] is at (n, c, 0, f).
          const float* g = dy + n * dg.stride.n;
          s[(n * channels + f) * channels + c] =
              alpha * (g[c * dg.stride.c + f * dg.stride.w] + g[f * dg.stride.c + c * dg.stride.w]);
        }
    // Tasks of kRows pixels (of one image), which share each row of S read.
    const int64_t blocks = (pixels + kRows - 1) / kRows;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(kRows * channels * channels, 1));
    detail::parallel_chunks(in.n * blocks, grain, [&](int64_t first, int64_t count) {
      for (int64_t task = first; task < first + count; ++task) {
        const int64_t n = task / blocks, p0 = task % blocks * kRows;
        Cloned<pixel_gradients>::run(&in, x, &out, dx, s + n * channels * channels, n, p0,
                                     std::min(p0 + kRows, pixels));
      }
    });
    dxs.store();
  }
};

const Registered<GramMatrixPrimitive, CpuGramMatrix> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
