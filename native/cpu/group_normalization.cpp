// Group (and instance) normalization on the cpu: plain C++ loops with
// float64 sums, one (image, group) per task. oneDNN's group normalization
// primitive is not used (docs/semantics.md says why).
#include "mpsx/kernels/group_normalization.h"
#include "mpsx/registry.h"

#include <cmath>
#include <cstdint>

#include "backend.h"

namespace mpsx::cpu {
namespace {

inline int64_t at(const ImageRegion& r, int64_t n, int64_t c, int64_t y, int64_t x) {
  return n * r.stride.n + c * r.stride.c + y * r.stride.h + x * r.stride.w;
}

// f(index) over every pixel of channel c of image n.
template <class F>
inline void for_pixels(const ImageRegion& r, int64_t n, int64_t c, F&& f) {
  for (int64_t y = 0; y < r.h; ++y)
    for (int64_t x = 0; x < r.w; ++x) f(at(r, n, c, y, x), y, x);
}

class CpuGroupNormalization final : public GroupNormalizationPrimitive {
 public:
  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination, int64_t groups,
               const float* gamma, const float* beta, float epsilon,
               GroupNormalizationStatistics& statistics) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xs(cpu, source, 0, true), ys(cpu, destination, 1, false);
    const ImageRegion &xr = xs.region(), &yr = ys.region();
    const float* x = xs.data();
    float* y = ys.data();
    float* means = static_cast<float*>(statistics.mean->data());
    float* variances = static_cast<float*>(statistics.variance->data());
    const int64_t per_group = source.c / groups;
    const double count = static_cast<double>(per_group * source.h * source.w);
    detail::parallel_chunks(source.n * groups, 1, [&](int64_t first, int64_t pairs) {
      for (int64_t pair = first; pair < first + pairs; ++pair) {
        const int64_t n = pair / groups, c0 = (pair % groups) * per_group;
        double sum = 0.0;
        for (int64_t c = c0; c < c0 + per_group; ++c) for_pixels(xr, n, c, [&](int64_t i, int64_t, int64_t) { sum += x[i]; });
        const double mean = count > 0 ? sum / count : 0.0;
        double squares = 0.0;
        for (int64_t c = c0; c < c0 + per_group; ++c)
          for_pixels(xr, n, c, [&](int64_t i, int64_t, int64_t) {
            const double d = x[i] - mean;
            squares += d * d;
          });
        const double variance = count > 0 ? squares / count : 0.0;
        means[pair] = static_cast<float>(mean);
        variances[pair] = static_cast<float>(variance);
        const double inverse = 1.0 / std::sqrt(variance + static_cast<double>(epsilon));
        for (int64_t c = c0; c < c0 + per_group; ++c) {
          const double scale = inverse * gamma[c], shift = beta[c];
          for_pixels(xr, n, c, [&](int64_t i, int64_t py, int64_t px) {
            y[at(yr, n, c, py, px)] = static_cast<float>((x[i] - mean) * scale + shift);
          });
        }
      }
    });
    ys.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t groups, const float* gamma, const float*,
                float epsilon, GroupNormalizationStatistics& statistics, float* gradient_for_gamma,
                float* gradient_for_beta) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dys(cpu, source_gradient, 0, true), xs(cpu, source, 1, true),
        dxs(cpu, destination_gradient, 2, false);
    const ImageRegion &dyr = dys.region(), &xr = xs.region(), &dxr = dxs.region();
    const float* dy = dys.data();
    const float* x = xs.data();
    float* dx = dxs.data();
    const float* means = static_cast<const float*>(statistics.mean->data());
    const float* variances = static_cast<const float*>(statistics.variance->data());
    const int64_t per_group = source.c / groups;
    const double count = static_cast<double>(per_group * source.h * source.w);
    auto inverse_of = [&](int64_t pair) { return 1.0 / std::sqrt(static_cast<double>(variances[pair]) + epsilon); };
    // gamma and beta first: dx may be dy's memory.
    detail::parallel_chunks(source.c, 1, [&](int64_t first, int64_t channels) {
      for (int64_t c = first; c < first + channels; ++c) {
        double dgamma = 0.0, dbeta = 0.0;
        for (int64_t n = 0; n < source.n; ++n) {
          const int64_t pair = n * groups + c / per_group;
          const double mean = means[pair], inverse = inverse_of(pair);
          for_pixels(xr, n, c, [&](int64_t i, int64_t py, int64_t px) {
            const double g = dy[at(dyr, n, c, py, px)];
            dgamma += g * (x[i] - mean) * inverse;
            dbeta += g;
          });
        }
        gradient_for_gamma[c] = static_cast<float>(dgamma);
        gradient_for_beta[c] = static_cast<float>(dbeta);
      }
    });
    // dx = inverse * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
    detail::parallel_chunks(source.n * groups, 1, [&](int64_t first, int64_t pairs) {
      for (int64_t pair = first; pair < first + pairs; ++pair) {
        const int64_t n = pair / groups, c0 = (pair % groups) * per_group;
        const double mean = means[pair], inverse = inverse_of(pair);
        double sum = 0.0, products = 0.0;
        for (int64_t c = c0; c < c0 + per_group; ++c)
          for_pixels(xr, n, c, [&](int64_t i, int64_t py, int64_t px) {
            const double g = static_cast<double>(dy[at(dyr, n, c, py, px)]) * gamma[c];
            sum += g;
            products += g * (x[i] - mean) * inverse;
          });
        const double mean_g = count > 0 ? sum / count : 0.0, mean_gx = count > 0 ? products / count : 0.0;
        for (int64_t c = c0; c < c0 + per_group; ++c)
          for_pixels(xr, n, c, [&](int64_t i, int64_t py, int64_t px) {
            const double g = static_cast<double>(dy[at(dyr, n, c, py, px)]) * gamma[c];
            const double xhat = (x[i] - mean) * inverse;
            dx[at(dxr, n, c, py, px)] = static_cast<float>(inverse * (g - mean_g - xhat * mean_gx));
          });
      }
    });
    dxs.store();
  }
};

std::unique_ptr<GroupNormalizationPrimitive> make_group_normalization(Backend&, const GroupNormalizationDescriptor&) {
  return std::make_unique<CpuGroupNormalization>();
}

const RegisterPrimitive<GroupNormalizationPrimitive> registered("cpu", make_group_normalization);

}  // namespace
}  // namespace mpsx::cpu
