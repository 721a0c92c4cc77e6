#include "mpsx/kernels/gram_matrix_calculation.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Plain loops over float32 views, any layout: one matrix row (image n,
// channel f) per task in the forward pass, one pixel per task in the
// gradient.
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
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(channels * pixels, 1));
    detail::parallel_chunks(in.n * channels, grain, [&](int64_t first, int64_t count) {
      for (int64_t row = first; row < first + count; ++row) {
        const int64_t n = row / channels, f = row % channels;
        // G[f][c] at (n, c, 0, f).
        float* g = y + n * out.stride.n + f * out.stride.w;
        for (int64_t c = 0; c < channels; ++c) g[c * out.stride.c] = 0.0f;
        for (int64_t p = 0; p < pixels; ++p) {
          const float* px = x + detail::pixel_offset(in, n, p / in.w, p % in.w);
          const float a = px[f * in.stride.c];
          for (int64_t c = 0; c < channels; ++c) g[c * out.stride.c] += a * px[c * in.stride.c];
        }
        for (int64_t c = 0; c < channels; ++c) g[c * out.stride.c] *= alpha;
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
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(channels * channels, 1));
    detail::parallel_chunks(in.n * pixels, grain, [&](int64_t first, int64_t count) {
      for (int64_t q = first; q < first + count; ++q) {
        const int64_t n = q / pixels, p = q % pixels, row = p / in.w, column = p % in.w;
        const float* px = x + detail::pixel_offset(in, n, row, column);
        float* pdx = dx + detail::pixel_offset(out, n, row, column);
        const float* g = dy + n * dg.stride.n;
        for (int64_t f = 0; f < channels; ++f) {
          // dG[f][c] is at (c, x f); dG[c][f] at (f, x c).
          float sum = 0.0f;
          for (int64_t c = 0; c < channels; ++c)
            sum += (g[c * dg.stride.c + f * dg.stride.w] + g[f * dg.stride.c + c * dg.stride.w]) * px[c * in.stride.c];
          pdx[f * out.stride.c] = alpha * sum;
        }
      }
    });
    dxs.store();
  }
};

const Registered<GramMatrixPrimitive, CpuGramMatrix> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
