#include "mpsx/kernels/dropout.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// out = in / keep where the mask keeps, else 0, over float32 regions of
// equal extents; the mask of the state at `origin`.
void apply_mask(const ImageRegion& in, const ImageRegion& out, const DropoutOrigin& origin,
                const DropoutGradientState& state, float keep) {
  const DropoutDescriptor& d = state.descriptor();
  const uint8_t* mask = static_cast<const uint8_t*>(state.mask()->data());
  const int64_t mc = state.mask_channels(), mh = state.mask_height(), mw = state.mask_width();
  const float* x = static_cast<const float*>(in.data);
  float* y = static_cast<float*>(out.data);
  detail::parallel_chunks(in.n * in.h, std::max<int64_t>(1, 16384 / std::max<int64_t>(in.w * in.c, 1)),
                          [&](int64_t first, int64_t rows) {
                            for (int64_t r = first; r < first + rows; ++r) {
                              int64_t n = r / in.h, row = r % in.h;
                              int64_t plane = (origin.image + n) * mc;
                              int64_t my = d.mask_stride_y ? origin.y + row : 0;
                              for (int64_t column = 0; column < in.w; ++column) {
                                int64_t mx = d.mask_stride_x ? origin.x + column : 0;
                                const float* px = x + detail::pixel_offset(in, n, row, column);
                                float* py = y + detail::pixel_offset(out, n, row, column);
                                for (int64_t c = 0; c < in.c; ++c) {
                                  int64_t channel = d.mask_stride_z ? origin.channel + c : 0;
                                  bool kept = mask[((plane + channel) * mh + my) * mw + mx] != 0;
                                  py[c * out.stride.c] = kept ? px[c * in.stride.c] / keep : 0.0f;
                                }
                              }
                            }
                          });
}

class CpuDropout final : public DropoutPrimitive {
 public:
  explicit CpuDropout(const DropoutDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               const DropoutOrigin& origin, const DropoutGenerator& generator,
               DropoutGradientState& state) const override {
    CpuContext& cpu = context_of(context);
    uint8_t* mask = static_cast<uint8_t*>(state.mask()->data());
    const int64_t count = static_cast<int64_t>(state.mask()->length());
    detail::parallel_chunks((count + 3) / 4, 4096, [&](int64_t first, int64_t blocks) {
      for (int64_t b = first; b < first + blocks; ++b) {
        const Philox4x32 words = generator.block(static_cast<uint64_t>(b));
        for (int64_t i = 0; i < 4 && 4 * b + i < count; ++i) mask[4 * b + i] = generator.kept(words.v[i]) ? 1 : 0;
      }
    });
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    apply_mask(x.region(), y.region(), origin, state, d_.keep_probability);
    y.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion&,
                const ImageRegion& destination_gradient, const DropoutOrigin& origin,
                const DropoutGradientState& state) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region dx(cpu, destination_gradient, 1, false);
    apply_mask(dy.region(), dx.region(), origin, state, d_.keep_probability);
    dx.store();
  }

 private:
  DropoutDescriptor d_;
};

const Registered<DropoutPrimitive, CpuDropout> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
