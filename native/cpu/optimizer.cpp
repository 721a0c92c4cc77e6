#include "mpsx/kernels/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend.h"
#include "mpsx/half.h"
#include "mpsx/registry.h"

namespace mpsx::cpu {
namespace {

// float32 views of `count` values of every array of an update.
struct Block {
  const float* gradient;
  const float* values;
  float* result;
  float* momentum;
  float* velocity;
  float* maximum_velocity;
  float* sum_of_squares;
};

// The gradient the update formulas use: clipped (before rescaling, as
// MPSNNOptimizerDescriptor says), rescaled, plus the gradient of the
// regularization loss at the value.
template <RegularizationType R, bool Clip>
inline float prepared(float g, float value, const OptimizerScalars& s) {
  if constexpr (Clip) g = std::min(std::max(g, s.gradient_clip_min), s.gradient_clip_max);
  g *= s.gradient_rescale;
  if constexpr (R == RegularizationType::L1)
    g += s.regularization_scale * static_cast<float>((value > 0.0f) - (value < 0.0f));
  if constexpr (R == RegularizationType::L2) g += s.regularization_scale * value;
  return g;
}

enum class Momentum { None, Classic, Nesterov };

// The loops copy the scalars so that stores through the arrays cannot alias
// them, and mark the optimizer's own vectors restrict (the core checks that
// they share no memory); result may be values.
template <RegularizationType R, bool Clip, Momentum M>
MPSX_CPU_LOOP void stochastic_gradient_descent(const OptimizerScalars& scalars, const Block& b, int64_t n) {
  const OptimizerScalars s = scalars;
  const float lr = s.learning_rate, mu = s.momentum_scale;
  const float* g = b.gradient;
  const float* v = b.values;
  float* out = b.result;
  float* __restrict m = b.momentum;
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i], d = prepared<R, Clip>(g[i], x, s);
    if constexpr (M == Momentum::None) {
      out[i] = x - lr * d;
    } else if constexpr (M == Momentum::Classic) {
      const float mt = mu * m[i] + lr * d;
      m[i] = mt;
      out[i] = x - mt;
    } else {
      const float mt = mu * m[i] + d;
      m[i] = mt;
      out[i] = x - lr * (d + mt * mu);
    }
  }
}

template <RegularizationType R, bool Clip, bool MaximumVelocity>
MPSX_CPU_LOOP void adam(const OptimizerScalars& scalars, const Block& b, int64_t n) {
  const OptimizerScalars s = scalars;
  const float lr = s.learning_rate, beta1 = s.beta1, beta2 = s.beta2, epsilon = s.epsilon;
  const float keep1 = s.one_minus_beta1, keep2 = s.one_minus_beta2;
  const float* g = b.gradient;
  const float* v = b.values;
  float* out = b.result;
  float* __restrict m = b.momentum;
  float* __restrict velocity = b.velocity;
  float* __restrict maximum = b.maximum_velocity;
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i], d = prepared<R, Clip>(g[i], x, s);
    const float mt = beta1 * m[i] + keep1 * d;
    float vt = beta2 * velocity[i] + keep2 * d * d;
    m[i] = mt;
    velocity[i] = vt;
    if constexpr (MaximumVelocity) {
      vt = std::max(maximum[i], vt);
      maximum[i] = vt;
    }
    out[i] = x - lr * mt / (std::sqrt(vt) + epsilon);
  }
}

template <RegularizationType R, bool Clip>
MPSX_CPU_LOOP void rmsprop(const OptimizerScalars& scalars, const Block& b, int64_t n) {
  const OptimizerScalars s = scalars;
  const float lr = s.learning_rate, decay = s.decay, keep = s.one_minus_decay, epsilon = s.epsilon;
  const float* g = b.gradient;
  const float* v = b.values;
  float* out = b.result;
  float* __restrict squares = b.sum_of_squares;
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i], d = prepared<R, Clip>(g[i], x, s);
    const float st = decay * squares[i] + keep * d * d;
    squares[i] = st;
    out[i] = x - lr * d / (std::sqrt(st) + epsilon);
  }
}

using Loop = void (*)(const OptimizerScalars&, const Block&, int64_t);

template <RegularizationType R, bool Clip>
Loop loop_of(const OptimizerConfiguration& c) {
  switch (c.kind) {
    case OptimizerKind::StochasticGradientDescent:
      if (!c.momentum) return &Cloned<stochastic_gradient_descent<R, Clip, Momentum::None>>::run;
      return c.nesterov ? &Cloned<stochastic_gradient_descent<R, Clip, Momentum::Nesterov>>::run
                        : &Cloned<stochastic_gradient_descent<R, Clip, Momentum::Classic>>::run;
    case OptimizerKind::Adam: return c.maximum_velocity ? &Cloned<adam<R, Clip, true>>::run : &Cloned<adam<R, Clip, false>>::run;
    case OptimizerKind::RMSProp: return &Cloned<rmsprop<R, Clip>>::run;
  }
  return nullptr;
}

template <RegularizationType R>
Loop loop_of(const OptimizerConfiguration& c) {
  return c.gradient_clipping ? loop_of<R, true>(c) : loop_of<R, false>(c);
}

Loop loop_of(const OptimizerConfiguration& c) {
  switch (c.regularization_type) {
    case RegularizationType::L1: return loop_of<RegularizationType::L1>(c);
    case RegularizationType::L2: return loop_of<RegularizationType::L2>(c);
    default: return loop_of<RegularizationType::None>(c);
  }
}

template <class T>
T* advanced(T* p, int64_t first) {
  return p ? p + first : nullptr;
}

class CpuOptimizer final : public OptimizerPrimitive {
 public:
  explicit CpuOptimizer(const OptimizerConfiguration& c) : loop_(loop_of(c)), type_(c.data_type), scalars_(c) {}

  void update(ExecutionContext&, const OptimizerStep& step, const OptimizerArrayList& list) const override {
    OptimizerScalars scalars = scalars_;
    scalars.learning_rate = step.learning_rate;
    for (size_t i = 0; i < list.count; ++i) update(scalars, list.arrays[i]);
  }

 private:
  void update(const OptimizerScalars& scalars, const OptimizerArrays& a) const {
    // Fewer values than this do not pay for starting a thread team.
    constexpr int64_t kGrain = 1 << 15;
    const int64_t n = static_cast<int64_t>(a.count);
    if (type_ == DataType::Float32) {
      detail::parallel_chunks(n, kGrain, [&](int64_t first, int64_t count) {
        auto f = [&](void* p) { return advanced(static_cast<float*>(p), first); };
        Block b{advanced(static_cast<const float*>(a.gradient), first),
                advanced(static_cast<const float*>(a.values), first),
                f(a.result), f(a.momentum), f(a.velocity), f(a.maximum_velocity), f(a.sum_of_squares)};
        loop_(scalars, b, count);
      });
      return;
    }
    detail::parallel_chunks(n, kGrain, [&](int64_t first, int64_t count) { update_half(scalars, a, first, count); });
  }

  // float16 arrays go through float32 tiles on the stack.
  void update_half(const OptimizerScalars& scalars, const OptimizerArrays& a, int64_t first, int64_t count) const {
    constexpr int64_t kTile = 256;
    float tiles[7][kTile];
    for (int64_t at = first; at < first + count; at += kTile) {
      const int64_t n = std::min(kTile, first + count - at);
      auto load = [&](const void* p, float* tile) -> float* {
        if (!p) return nullptr;
        const uint16_t* h = static_cast<const uint16_t*>(p) + at;
        for (int64_t i = 0; i < n; ++i) tile[i] = half_to_float(h[i]);
        return tile;
      };
      auto store = [&](void* p, const float* tile) {
        if (!p) return;
        uint16_t* h = static_cast<uint16_t*>(p) + at;
        for (int64_t i = 0; i < n; ++i) h[i] = float_to_half(tile[i]);
      };
      Block b{load(a.gradient, tiles[0]), load(a.values, tiles[1]), tiles[2], load(a.momentum, tiles[3]),
              load(a.velocity, tiles[4]), load(a.maximum_velocity, tiles[5]), load(a.sum_of_squares, tiles[6])};
      loop_(scalars, b, n);
      store(a.result, tiles[2]);
      store(a.momentum, tiles[3]);
      store(a.velocity, tiles[4]);
      store(a.maximum_velocity, tiles[5]);
      store(a.sum_of_squares, tiles[6]);
    }
  }

  Loop loop_;
  DataType type_;
  OptimizerScalars scalars_;  // the configuration's; each step sets the learning rate
};

const Registered<OptimizerPrimitive, CpuOptimizer> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
