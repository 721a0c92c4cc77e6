#include "mpsx/kernels/scale.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// The per-axis taps of one pass, made once when the primitive is built.
class CpuScale final : public ScalePrimitive {
 public:
  CpuScale(const CpuBackend&, const ScaleDescriptor& d)
      : x_(scale_taps(d.kind, d.transform.scale_x, d.transform.translate_x, d.offset_x, d.source_width, d.first_x,
                      d.width)),
        y_(scale_taps(d.kind, d.transform.scale_y, d.transform.translate_y, d.offset_y, d.source_height, d.first_y,
                      d.height)) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    resample(x.region(), y.region());
    y.store();
  }

 private:
  // y[row, column] = sum over the taps of wy * wx * x[iy, ix], per channel.
  void resample(const ImageRegion& in, const ImageRegion& out) const {
    const float* x = static_cast<const float*>(in.data);
    float* y = static_cast<float*>(out.data);
    const int64_t taps = x_.per_output * y_.per_output;
    detail::parallel_chunks(
        out.n * out.h, std::max<int64_t>(1, 4096 / std::max<int64_t>(out.w * out.c * taps, 1)),
        [&](int64_t first, int64_t rows) {
          for (int64_t r = first; r < first + rows; ++r) {
            const int64_t n = r / out.h, row = r % out.h;
            for (int64_t column = 0; column < out.w; ++column) {
              float* q = y + detail::pixel_offset(out, n, row, column);
              for (int64_t c = 0; c < out.c; ++c) q[c * out.stride.c] = 0.0f;
              for (int64_t ky = 0; ky < y_.per_output; ++ky) {
                const size_t ty = static_cast<size_t>(row * y_.per_output + ky);
                const float wy = y_.weight[ty];
                if (wy == 0.0f) continue;
                for (int64_t kx = 0; kx < x_.per_output; ++kx) {
                  const size_t tx = static_cast<size_t>(column * x_.per_output + kx);
                  const float w = wy * x_.weight[tx];
                  if (w == 0.0f) continue;
                  const float* p = x + detail::pixel_offset(in, n, y_.index[ty], x_.index[tx]);
                  for (int64_t c = 0; c < out.c; ++c) q[c * out.stride.c] += w * p[c * in.stride.c];
                }
              }
            }
          }
        });
  }

  ScaleTaps x_, y_;
};

const Registered<ScalePrimitive, CpuScale> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
