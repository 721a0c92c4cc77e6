#include "mpsx/kernels/initial_gradient.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

class CpuInitialGradient final : public InitialGradientPrimitive {
 public:
  CpuInitialGradient(const CpuBackend&, const InitialGradientDescriptor&) {}

  void forward(ExecutionContext& context, const ImageRegion&, const ImageRegion& destination) const override {
    Float32Region y(context_of(context), destination, 0, false);
    const ImageRegion& out = y.region();
    float* ys = y.data();
    detail::parallel_chunks(out.n * out.h, std::max<int64_t>(1, 16384 / std::max<int64_t>(out.w * out.c, 1)),
                            [&](int64_t first, int64_t rows) {
                              for (int64_t r = first; r < first + rows; ++r)
                                for (int64_t column = 0; column < out.w; ++column) {
                                  float* q = ys + detail::pixel_offset(out, r / out.h, r % out.h, column);
                                  for (int64_t c = 0; c < out.c; ++c) q[c * out.stride.c] = 1.0f;
                                }
                            });
    y.store();
  }
};

const Registered<InitialGradientPrimitive, CpuInitialGradient> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
