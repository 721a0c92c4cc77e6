#include "mpsx/kernels/arithmetic.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <mutex>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Element strides of a region as the destination's loop reads it: 0 along
// a dimension of extent 1 that the destination spans, so it repeats.
struct Strides {
  int64_t n, c, h, w;
};
Strides broadcast_strides(const ImageRegion& r) {
  return {r.stride.n, r.c == 1 ? 0 : r.stride.c, r.h == 1 ? 0 : r.stride.h, r.w == 1 ? 0 : r.stride.w};
}

// y = f(a, b) over y's extents, a and b broadcast.
template <class F>
void binary_loop(const ImageRegion& a, const ImageRegion& b, const ImageRegion& y, F f) {
  const Strides sa = broadcast_strides(a), sb = broadcast_strides(b);
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  float* py = static_cast<float*>(y.data);
  const int64_t per_row = std::max<int64_t>(1, y.w * y.c);
  detail::parallel_chunks(y.n * y.h, std::max<int64_t>(1, 16384 / per_row), [&](int64_t first, int64_t count) {
    for (int64_t row = first; row < first + count; ++row) {
      const int64_t n = row / y.h, r = row % y.h;
      const float* ra = pa + n * sa.n + r * sa.h;
      const float* rb = pb + n * sb.n + r * sb.h;
      float* ry = py + n * y.stride.n + r * y.stride.h;
      for (int64_t x = 0; x < y.w; ++x)
        for (int64_t c = 0; c < y.c; ++c)
          ry[x * y.stride.w + c * y.stride.c] = f(ra[x * sa.w + c * sa.c], rb[x * sb.w + c * sb.c]);
    }
  });
}

inline float clamp(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

void forward_values(const ImageRegion& a, const ImageRegion& b, const ImageRegion& y, const ArithmeticParameters& p) {
  const float ps = p.primary_scale, ss = p.secondary_scale, bias = p.bias, lo = p.minimum, hi = p.maximum;
  const float t = p.threshold;
  switch (p.operation) {
    case ArithmeticOperation::Add:
      return binary_loop(a, b, y, [=](float u, float v) { return clamp(ps * u + ss * v + bias, lo, hi); });
    case ArithmeticOperation::Subtract:
      return binary_loop(a, b, y, [=](float u, float v) { return clamp(ps * u - ss * v + bias, lo, hi); });
    case ArithmeticOperation::Multiply:
      return binary_loop(a, b, y, [=](float u, float v) { return clamp((ps * u) * (ss * v) + bias, lo, hi); });
    case ArithmeticOperation::Divide:
      return binary_loop(a, b, y, [=](float u, float v) { return clamp((ps * u) / (ss * v) + bias, lo, hi); });
    case ArithmeticOperation::Compare:
      switch (p.comparison) {
        case ComparisonType::Equal:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(std::fabs(u - v) <= t ? 1.f : 0.f, lo, hi); });
        case ComparisonType::NotEqual:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(std::fabs(u - v) <= t ? 0.f : 1.f, lo, hi); });
        case ComparisonType::Less:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(u < v ? 1.f : 0.f, lo, hi); });
        case ComparisonType::LessOrEqual:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(u <= v ? 1.f : 0.f, lo, hi); });
        case ComparisonType::Greater:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(u > v ? 1.f : 0.f, lo, hi); });
        case ComparisonType::GreaterOrEqual:
          return binary_loop(a, b, y, [=](float u, float v) { return clamp(u >= v ? 1.f : 0.f, lo, hi); });
        case ComparisonType::Count: return;
      }
  }
}

// The plain case oneDNN's binary primitive computes: no scales, bias or
// clamp, an arithmetic operation; broadcast dimensions have extent 1.
bool fits_onednn(const ArithmeticParameters& p) {
  return p.operation != ArithmeticOperation::Compare && p.primary_scale == 1 && p.secondary_scale == 1 &&
         p.bias == 0 && p.minimum == -3.402823466e+38f && p.maximum == 3.402823466e+38f;
}

dnnl::algorithm algorithm_of(ArithmeticOperation operation) {
  switch (operation) {
    case ArithmeticOperation::Add: return dnnl::algorithm::binary_add;
    case ArithmeticOperation::Subtract: return dnnl::algorithm::binary_sub;
    case ArithmeticOperation::Multiply: return dnnl::algorithm::binary_mul;
    default: return dnnl::algorithm::binary_div;
  }
}

class CpuArithmetic final : public ArithmeticPrimitive {
 public:
  explicit CpuArithmetic(ArithmeticOperation operation) : operation_(operation) {}

  void forward(ExecutionContext& context, const ImageRegion& primary, const ImageRegion& secondary,
               const ImageRegion& destination, const ArithmeticParameters& parameters) const override {
    CpuContext& cpu = context_of(context);
    Float32Region a(cpu, primary, 0, true);
    Float32Region b(cpu, secondary, 1, true);
    Float32Region y(cpu, destination, 2, false);
    if (fits_onednn(parameters)) {
      // oneDNN broadcasts src1 only: the primary must span the destination.
      const ImageRegion& ra = a.region();
      if (ra.n == y.region().n && ra.c == y.region().c && ra.h == y.region().h && ra.w == y.region().w) {
        run_onednn(cpu, ra, b.region(), y.region());
        y.store();
        return;
      }
    }
    forward_values(a.region(), b.region(), y.region(), parameters);
    y.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion* other,
                const ImageRegion& destination_gradient, float scale) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    const ImageRegion& g = dy.region();
    const ImageRegion& out = dx.region();
    const Strides so = broadcast_strides(out);
    const float* pg = static_cast<const float*>(g.data);
    float* po = static_cast<float*>(out.data);
    const float* pt = nullptr;
    Strides st{};
    Float32Region* held = nullptr;
    Float32Region o_region(cpu, other ? *other : source_gradient, 1, other != nullptr);
    if (other) {
      held = &o_region;
      st = broadcast_strides(held->region());
      pt = static_cast<const float*>(held->region().data);
    }
    // Images are never broadcast: each image's sums are its own.
    detail::parallel_chunks(g.n, 1, [&](int64_t first, int64_t count) {
      for (int64_t n = first; n < first + count; ++n) {
        for (int64_t y = 0; y < out.h; ++y)
          for (int64_t x = 0; x < out.w; ++x)
            for (int64_t c = 0; c < out.c; ++c)
              po[n * out.stride.n + y * out.stride.h + x * out.stride.w + c * out.stride.c] = 0;
        for (int64_t y = 0; y < g.h; ++y)
          for (int64_t x = 0; x < g.w; ++x)
            for (int64_t c = 0; c < g.c; ++c) {
              float v = pg[n * g.stride.n + y * g.stride.h + x * g.stride.w + c * g.stride.c];
              if (pt) v *= pt[n * st.n + y * st.h + x * st.w + c * st.c];
              po[n * so.n + y * so.h + x * so.w + c * so.c] += scale * v;
            }
      }
    });
    dx.store();
  }

 private:
  // One oneDNN binary primitive per configuration of the three regions,
  // built on first use; queues run concurrently, hence the lock.
  const dnnl::binary& primitive_for(CpuContext& cpu, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                    const dnnl::memory::desc& y) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Cached& c : cache_)
      if (c.a == a && c.b == b && c.y == y) return c.primitive;
    dnnl::binary::primitive_desc pd(cpu.engine(), algorithm_of(operation_), a, b, y);
    cache_.push_back(Cached{a, b, y, dnnl::binary(pd)});
    return cache_.back().primitive;
  }

  void run_onednn(CpuContext& cpu, const ImageRegion& a, const ImageRegion& b, const ImageRegion& y) const {
    const dnnl::binary& primitive = primitive_for(cpu, memory_desc(a), memory_desc(b), memory_desc(y));
    primitive.execute(cpu.stream(), {{DNNL_ARG_SRC_0, memory_of(cpu.engine(), a)},
                                     {DNNL_ARG_SRC_1, memory_of(cpu.engine(), b)},
                                     {DNNL_ARG_DST, memory_of(cpu.engine(), y)}});
    cpu.stream().wait();
  }

  ArithmeticOperation operation_;
  struct Cached {
    dnnl::memory::desc a, b, y;
    dnnl::binary primitive;
  };
  mutable std::mutex mutex_;
  mutable std::deque<Cached> cache_;
};

const Registered<ArithmeticPrimitive, CpuArithmetic> registered("cpu");

}  // namespace
}  // namespace mpsx::cpu
