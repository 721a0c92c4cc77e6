#include "mpsx/kernels/gram_matrix_calculation.h"

#include <algorithm>
#include <cstring>

#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// The blocks the loops keep in registers: kRows matrix rows (or pixels) by
// kColumns channels, each pass over the pixels (rows of S) feeding them all.
// The cpu backend's float32 views keep channels innermost
// (CpuBackend::image_layout, float32_layout): a block's columns are
// contiguous. Full blocks take loops of constant bounds, which the compiler
// unrolls and vectorizes.
constexpr int64_t kRows = 8, kColumns = 16;
using Block = float[kRows][kColumns];

// block[r][j] = sum_p x[p][f0 + r] * x[p][c0 + j] over image n's pixels,
// r < rows, j < columns.
template <bool Full>
MPSX_CPU_LOOP void correlate(const ImageRegion* in, const float* x, int64_t n, int64_t f0, int64_t rows, int64_t c0,
                             int64_t columns, Block& block) {
  const int64_t R = Full ? kRows : rows, K = Full ? kColumns : columns;
  Block sums = {};  // a local: nothing else may alias it, so it stays in registers
  for (int64_t row = 0; row < in->h; ++row)
    for (int64_t column = 0; column < in->w; ++column) {
      const float* px = x + detail::pixel_offset(*in, n, row, column);
#pragma GCC unroll 8
      for (int64_t r = 0; r < R; ++r) {
        const float a = px[f0 + r];
        for (int64_t j = 0; j < K; ++j) sums[r][j] += a * px[c0 + j];
      }
    }
  std::memcpy(block, sums, sizeof(Block));
}

// Rows f0 .. f1 - 1 (at most kRows) of image n's matrix G[f][c] = alpha *
// sum_p x[p][f] * x[p][c], written to y(n, c, 0, f). G is symmetric: the
// rows are computed from column f0 on, and the columns after f1 - 1 written
// as rows too, so each element has one writer and the work is halved.
MPSX_CPU_LOOP void matrix_rows(const ImageRegion* in, const float* x, const ImageRegion* out, float* y, int64_t n,
                               int64_t f0, int64_t f1, float alpha) {
  const int64_t channels = in->c, rows = f1 - f0, ws = out->stride.w;
  float* g = y + n * out->stride.n;
  Block block;
  for (int64_t c0 = f0; c0 < channels; c0 += kColumns) {
    const int64_t columns = std::min(kColumns, channels - c0);
    if (rows == kRows && columns == kColumns)
      correlate<true>(in, x, n, f0, rows, c0, columns, block);
    else
      correlate<false>(in, x, n, f0, rows, c0, columns, block);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < columns; ++j) {
        const int64_t f = f0 + r, c = c0 + j;
        const float v = alpha * block[r][j];
        g[f * ws + c] = v;
        if (c >= f1) g[c * ws + f] = v;
      }
  }
}

// block[i][j] = sum_c px[i][c] * S[c][f0 + j], i < pixels, j < columns.
template <bool Full>
MPSX_CPU_LOOP void transform(const float* const* px, const float* s, int64_t channels, int64_t f0, int64_t pixels,
                             int64_t columns, Block& block) {
  const int64_t R = Full ? kRows : pixels, K = Full ? kColumns : columns;
  Block sums = {};
  for (int64_t c = 0; c < channels; ++c) {
    const float* sc = s + c * channels + f0;
    for (int64_t i = 0; i < R; ++i) {
      const float a = px[i][c];
      for (int64_t j = 0; j < K; ++j) sums[i][j] += a * sc[j];
    }
  }
  std::memcpy(block, sums, sizeof(Block));
}

// dx[p] = sum_c x[p][c] * S[c] for pixels p0 .. p1 - 1 (at most kRows) of
// image n, S its alpha * (dG + dG^T), dense and symmetric.
MPSX_CPU_LOOP void pixel_gradients(const ImageRegion* in, const float* x, const ImageRegion* out, float* dx,
                                   const float* s, int64_t n, int64_t p0, int64_t p1) {
  const int64_t channels = in->c, pixels = p1 - p0;
  const float* px[kRows];
  float* pdx[kRows];
  for (int64_t p = p0; p < p1; ++p) {
    px[p - p0] = x + detail::pixel_offset(*in, n, p / in->w, p % in->w);
    pdx[p - p0] = dx + detail::pixel_offset(*out, n, p / in->w, p % in->w);
  }
  Block block;
  for (int64_t f0 = 0; f0 < channels; f0 += kColumns) {
    const int64_t columns = std::min(kColumns, channels - f0);
    if (pixels == kRows && columns == kColumns)
      transform<true>(px, s, channels, f0, pixels, columns, block);
    else
      transform<false>(px, s, channels, f0, pixels, columns, block);
    for (int64_t i = 0; i < pixels; ++i)
      for (int64_t j = 0; j < columns; ++j) pdx[i][f0 + j] = block[i][j];
  }
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
        // Row blocks from both ends in turn: the first are the longest (the
        // triangle), and each thread takes a contiguous share of the tasks.
        const int64_t k = task % blocks, f0 = (k % 2 == 0 ? k / 2 : blocks - 1 - k / 2) * kRows;
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
