// Group (and instance) normalization on the cpu.
//
// One channel per group (every instance normalization) runs on oneDNN's
// batch normalization, one image at a time: batch normalization of a batch
// of one image is instance normalization of that image (per channel mean and
// biased variance over H x W, 1 / sqrt(variance + epsilon), then gamma and
// beta), and its backward pass with use_scale | use_shift gives dx, dgamma
// and dbeta from the saved mean and variance. The forward statistics are
// ours (moments() below), given to oneDNN with use_global_stats: oneDNN's
// forward_training sums in float32 over the whole image, which put y off by
// 6e-5 on 512 x 512 images and 2e-4 on values 100 sigma from zero, where
// the loops keep float64 precision. oneDNN 3.2 has no group
// normalization primitive (3.3 adds it), so groups of several channels run
// the loops below (float64 sums, one (image, group) per task), and so do
// - images whose pixels are not one dense NHWC block (a clip rect or offset
//   inside a larger image, a channel range of a wider one), which oneDNN's
//   optimized batch normalization kernels are not written for;
// - a destination overlapping its source other than exactly in place, and a
//   destination gradient overlapping the source (oneDNN runs in place only
//   dst over src and diff_src over diff_dst);
// - empty regions, and configurations oneDNN refuses.
#include "mpsx/kernels/group_normalization.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.h"
#include "normalization.h"

namespace mpsx::cpu {
namespace {

// Scratch slots: 0-2 hold Float32Region copies of float16 regions, 3 the
// per-image sums of moments() or dgamma and dbeta of the oneDNN gradient.
constexpr size_t kSumsSlot = 3;

// Per channel mean and biased variance of one image of `pixels` dense NHWC
// pixels: float sums about the first pixel's values (which keep
// E[d^2] - E[d]^2 well conditioned) over blocks of pixels, folded into
// float64. `sums` holds 2 * channels doubles and 2 * channels floats.
void moments(const float* __restrict x, int64_t pixels, int64_t channels, double* __restrict sums,
             float* __restrict mean, float* __restrict variance) {
  double* sum = sums;
  double* squares = sums + channels;
  float* s = reinterpret_cast<float*>(sums + 2 * channels);
  float* q = s + channels;
  const float* shift = x;
  for (int64_t c = 0; c < channels; ++c) sum[c] = squares[c] = 0.0;
  add_moments(x, pixels, channels, shift, s, q, sum, squares);
  for (int64_t c = 0; c < channels; ++c) {
    const double m = sum[c] / static_cast<double>(pixels);
    mean[c] = static_cast<float>(shift[c] + m);
    variance[c] = static_cast<float>(std::max(squares[c] / static_cast<double>(pixels) - m * m, 0.0));
  }
}

inline int64_t at(const ImageRegion& r, int64_t n, int64_t c, int64_t y, int64_t x) {
  return n * r.stride.n + c * r.stride.c + y * r.stride.h + x * r.stride.w;
}

// f(index) over every pixel of channel c of image n.
template <class F>
inline void for_pixels(const ImageRegion& r, int64_t n, int64_t c, F&& f) {
  for (int64_t y = 0; y < r.h; ++y)
    for (int64_t x = 0; x < r.w; ++x) f(at(r, n, c, y, x), y, x);
}

// Whether each image of a float32 region is one dense NHWC block (the
// images themselves may lie anywhere: stride.n is free).
bool dense_images(const ImageRegion& r) { return r.stride.c == 1 && r.stride.w == r.c && r.stride.h == r.w * r.c; }

// Whether float32 regions a and b are the same elements (in place).
bool same(const ImageRegion& a, const ImageRegion& b) { return a.data == b.data && a.stride.n == b.stride.n; }

// What a oneDNN primitive is built for: its direction, the extents of one
// image and epsilon (which oneDNN bakes into the primitive).
struct Shape {
  bool gradient;
  int64_t c, h, w;
  float epsilon;
  bool operator==(const Shape& o) const {
    return gradient == o.gradient && c == o.c && h == o.h && w == o.w &&
           std::memcmp(&epsilon, &o.epsilon, sizeof epsilon) == 0;  // bitwise: a NaN matches itself
  }
};

// Argument slots of the primitives: forward src, dst, scale, shift, mean,
// variance; backward src, diff_dst, diff_src, scale, mean, variance,
// diff_scale, diff_shift.
constexpr int kForwardArguments[] = {DNNL_ARG_SRC,  DNNL_ARG_DST,  DNNL_ARG_SCALE,
                                     DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
constexpr int kGradientArguments[] = {DNNL_ARG_SRC,  DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC,   DNNL_ARG_SCALE,
                                      DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT};
constexpr int kMaxArguments = 8;

// A batch normalization primitive over one dense NHWC image of a shape;
// empty where oneDNN refused the shape (the loops run it).
struct Built {
  Shape shape;
  dnnl::primitive primitive;
  dnnl::memory::desc image, channels;
};

// The memory objects of one primitive for one queue's context: made on the
// first encode, then each execution only points them at its data, so the
// steady state allocates nothing. Only the context's worker thread uses it.
struct Binding {
  const CpuContext* context;
  std::shared_ptr<const Built> built;
  int count = 0;
  dnnl::memory memory[kMaxArguments];
  dnnl_exec_arg_t arguments[kMaxArguments];

  void set(int slot, const void* data) const { memory[slot].set_data_handle(const_cast<void*>(data)); }
  void execute(CpuContext& cpu) const {
    dnnl::error::wrap_c_api(dnnl_primitive_execute(built->primitive.get(), cpu.stream().get(), count, arguments),
                            "could not execute a batch normalization primitive");
  }
};

// At most this many shapes (and context bindings) are kept per kernel; the
// oldest make way (a command still running keeps its own by shared_ptr).
constexpr size_t kMaxKept = 16;

template <class T>
void keep(std::vector<std::shared_ptr<const T>>& kept, size_t& next, std::shared_ptr<const T> made) {
  if (kept.size() < kMaxKept) return kept.push_back(std::move(made));
  kept[next] = std::move(made);
  next = (next + 1) % kMaxKept;
}

class CpuGroupNormalization final : public GroupNormalizationPrimitive {
 public:
  explicit CpuGroupNormalization(const CpuBackend& backend) : engine_(backend.engine()) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination, int64_t groups,
               const float* gamma, const float* beta, float epsilon,
               GroupNormalizationStatistics& statistics) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xs(cpu, source, 0, true), ys(cpu, destination, 1, false);
    if (groups == source.c && forward_onednn(cpu, xs.region(), ys.region(), gamma, beta, epsilon, statistics))
      return ys.store();
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
    if (groups == source.c && gradient_onednn(cpu, dys.region(), xs.region(), dxs.region(), gamma, epsilon,
                                              statistics, gradient_for_gamma, gradient_for_beta))
      return dxs.store();
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

 private:
  // The oneDNN forward pass, image by image; false where the loops run.
  bool forward_onednn(CpuContext& cpu, const ImageRegion& x, const ImageRegion& y, const float* gamma,
                      const float* beta, float epsilon, GroupNormalizationStatistics& statistics) const {
    if (x.element_count() == 0 || !dense_images(x) || !dense_images(y) || (!same(x, y) && overlap(x, y)))
      return false;
    const std::shared_ptr<const Binding> b = binding(cpu, Shape{false, x.c, x.h, x.w, epsilon});
    if (!b) return false;
    float* means = static_cast<float*>(statistics.mean->data());
    float* variances = static_cast<float*>(statistics.variance->data());
    // Statistics index n * groups + c, groups == c. Every image is read
    // before any is written: y may be x.
    const int64_t channels = x.c;
    const size_t per_image = static_cast<size_t>(2 * channels) * (sizeof(double) + sizeof(float));
    char* sums = static_cast<char*>(cpu.scratch(kSumsSlot, static_cast<size_t>(x.n) * per_image));
    detail::parallel_chunks(x.n, 1, [&](int64_t first, int64_t images) {
      for (int64_t n = first; n < first + images; ++n)
        moments(static_cast<const float*>(x.data) + n * x.stride.n, x.h * x.w, channels,
                reinterpret_cast<double*>(sums + n * per_image), means + n * channels, variances + n * channels);
    });
    b->set(2, gamma);
    b->set(3, beta);
    for (int64_t n = 0; n < x.n; ++n) {
      b->set(0, static_cast<const float*>(x.data) + n * x.stride.n);
      b->set(1, static_cast<float*>(y.data) + n * y.stride.n);
      b->set(4, means + n * channels);
      b->set(5, variances + n * channels);
      b->execute(cpu);
    }
    cpu.stream().wait();
    return true;
  }

  // The oneDNN backward pass, image by image, with dgamma and dbeta summed
  // over the images (written, not added to); false where the loops run.
  bool gradient_onednn(CpuContext& cpu, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                       const float* gamma, float epsilon, GroupNormalizationStatistics& statistics,
                       float* gradient_for_gamma, float* gradient_for_beta) const {
    if (x.element_count() == 0 || !dense_images(dy) || !dense_images(x) || !dense_images(dx) || overlap(dx, x) ||
        (!same(dx, dy) && overlap(dx, dy)))
      return false;
    const std::shared_ptr<const Binding> b = binding(cpu, Shape{true, x.c, x.h, x.w, epsilon});
    if (!b) return false;
    const int64_t channels = x.c;
    const float* means = static_cast<const float*>(statistics.mean->data());
    const float* variances = static_cast<const float*>(statistics.variance->data());
    // Per image: dgamma then dbeta (images x channels is the statistics' size: no overflow).
    float* diffs = static_cast<float*>(cpu.scratch(kSumsSlot, static_cast<size_t>(2 * x.n * channels) * sizeof(float)));
    b->set(3, gamma);
    for (int64_t n = 0; n < x.n; ++n) {
      b->set(0, static_cast<const float*>(x.data) + n * x.stride.n);
      b->set(1, static_cast<const float*>(dy.data) + n * dy.stride.n);
      b->set(2, static_cast<float*>(dx.data) + n * dx.stride.n);
      b->set(4, means + n * channels);
      b->set(5, variances + n * channels);
      b->set(6, diffs + 2 * n * channels);
      b->set(7, diffs + (2 * n + 1) * channels);
      b->execute(cpu);
    }
    cpu.stream().wait();
    for (int64_t c = 0; c < channels; ++c) {
      double dgamma = 0.0, dbeta = 0.0;
      for (int64_t n = 0; n < x.n; ++n) {
        dgamma += diffs[2 * n * channels + c];
        dbeta += diffs[(2 * n + 1) * channels + c];
      }
      gradient_for_gamma[c] = static_cast<float>(dgamma);
      gradient_for_beta[c] = static_cast<float>(dbeta);
    }
    return true;
  }

  // The memory objects of `cpu` for the primitive of `shape`, the primitive
  // built on its first use; nullptr where oneDNN refuses the shape. The lock
  // guards queues that share the kernel.
  std::shared_ptr<const Binding> binding(CpuContext& cpu, const Shape& shape) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& b : bindings_)
      if (b->context == &cpu && b->built->shape == shape) return b;
    std::shared_ptr<const Built> built;
    for (const auto& candidate : built_)
      if (candidate->shape == shape) built = candidate;
    if (!built) {
      built = build(shape);
      keep(built_, next_built_, built);
    }
    if (!built->primitive) return nullptr;
    auto b = std::make_shared<Binding>();
    b->context = &cpu;
    b->built = built;
    const int* slots = shape.gradient ? kGradientArguments : kForwardArguments;
    b->count = shape.gradient ? 8 : 6;
    for (int i = 0; i < b->count; ++i) {
      const bool image = slots[i] == DNNL_ARG_SRC || slots[i] == DNNL_ARG_DST || slots[i] == DNNL_ARG_DIFF_DST ||
                         slots[i] == DNNL_ARG_DIFF_SRC;
      b->memory[i] = dnnl::memory(image ? built->image : built->channels, engine_, nullptr);
      b->arguments[i] = dnnl_exec_arg_t{slots[i], b->memory[i].get()};
    }
    keep(bindings_, next_binding_, std::shared_ptr<const Binding>(b));
    return b;
  }

  std::shared_ptr<const Built> build(const Shape& shape) const {
    auto b = std::make_shared<Built>();
    b->shape = shape;
    using dnnl::memory;
    b->image = memory::desc({1, shape.c, shape.h, shape.w}, memory::data_type::f32, memory::format_tag::nhwc);
    b->channels = memory::desc({shape.c}, memory::data_type::f32, memory::format_tag::a);
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    try {
      if (!shape.gradient) {  // the statistics are given (moments())
        b->primitive = dnnl::batch_normalization_forward(dnnl::batch_normalization_forward::primitive_desc(
            engine_, dnnl::prop_kind::forward_inference, b->image, b->image, shape.epsilon,
            flags | dnnl::normalization_flags::use_global_stats));
      } else {
        const dnnl::batch_normalization_forward::primitive_desc forward(
            engine_, dnnl::prop_kind::forward_training, b->image, b->image, shape.epsilon, flags);
        b->primitive = dnnl::batch_normalization_backward(dnnl::batch_normalization_backward::primitive_desc(
            engine_, dnnl::prop_kind::backward, b->image, b->image, b->image, shape.epsilon, flags, forward));
      }
    } catch (const dnnl::error&) {  // a configuration oneDNN does not take: the loops
      b->primitive = dnnl::primitive();
    }
    return b;
  }

  dnnl::engine engine_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const Built>> built_;
  mutable std::vector<std::shared_ptr<const Binding>> bindings_;
  mutable size_t next_built_ = 0, next_binding_ = 0;
};

const Registered<GroupNormalizationPrimitive, CpuGroupNormalization> registered("cpu");

}  // namespace
}  // namespace mpsx::cpu
