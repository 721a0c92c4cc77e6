#include "mpsx/kernels/reduction.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

class CpuReduction final : public ReductionPrimitive {
 public:
  CpuReduction(const CpuBackend&, const ReductionDescriptor&) {}

  void feature_channels_sum(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                            float weight) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    const ImageRegion& in = x.region();
    const ImageRegion& out = y.region();
    const float* xs = x.data();
    float* ys = y.data();
    detail::parallel_chunks(in.n * in.h, std::max<int64_t>(1, 16384 / std::max<int64_t>(in.w * in.c, 1)),
                            [&](int64_t first, int64_t rows) {
                              for (int64_t r = first; r < first + rows; ++r) {
                                const int64_t n = r / in.h, row = r % in.h;
                                for (int64_t column = 0; column < in.w; ++column) {
                                  const float* p = xs + detail::pixel_offset(in, n, row, column);
                                  float sum = 0.0f;
                                  for (int64_t c = 0; c < in.c; ++c) sum += weight * p[c * in.stride.c];
                                  ys[detail::pixel_offset(out, n, row, column)] = sum;
                                }
                              }
                            });
    y.store();
  }
};

const Registered<ReductionPrimitive, CpuReduction> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
