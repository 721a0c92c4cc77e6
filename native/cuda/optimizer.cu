#include "optimizer.cuh"

#include <algorithm>
#include <cstdint>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

enum class Formula { StochasticGradientDescent, Momentum, Nesterov, Adam, AMSGrad, RMSProp };

// std::max's and std::min's choices, so that NaNs propagate as on the cpu.
__device__ __forceinline__ float maximum(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float minimum(float a, float b) { return b < a ? b : a; }

// The gradient the update formulas use: clipped (before rescaling, as
// MPSNNOptimizerDescriptor says), rescaled, plus the gradient of the
// regularization loss at the value.
template <RegularizationType R, bool Clip>
__device__ __forceinline__ float prepared(float g, float value, const OptimizerScalars& s) {
  if constexpr (Clip) g = minimum(maximum(g, s.gradient_clip_min), s.gradient_clip_max);
  g *= s.gradient_rescale;
  if constexpr (R == RegularizationType::L1)
    g += s.regularization_scale * static_cast<float>((value > 0.0f) - (value < 0.0f));
  if constexpr (R == RegularizationType::L2) g += s.regularization_scale * value;
  return g;
}

// Every array is of type D; float16 values are computed in float32 and
// rounded once when stored, as the cpu does. result may be values.
template <DataType D, RegularizationType R, bool Clip, Formula F>
__device__ __forceinline__ void update(const OptimizerScalars& s, const OptimizerArrays& a) {
  const int64_t count = static_cast<int64_t>(a.count);
  const float lr = s.learning_rate;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = load(a.values, i, D), d = prepared<R, Clip>(load(a.gradient, i, D), x, s);
    float out;
    if constexpr (F == Formula::StochasticGradientDescent) {
      out = x - lr * d;
    } else if constexpr (F == Formula::Momentum) {
      const float mt = s.momentum_scale * load(a.momentum, i, D) + lr * d;
      store(a.momentum, i, D, mt);
      out = x - mt;
    } else if constexpr (F == Formula::Nesterov) {
      const float mu = s.momentum_scale, mt = mu * load(a.momentum, i, D) + d;
      store(a.momentum, i, D, mt);
      out = x - lr * (d + mt * mu);
    } else if constexpr (F == Formula::Adam || F == Formula::AMSGrad) {
      const float mt = s.beta1 * load(a.momentum, i, D) + s.one_minus_beta1 * d;
      float vt = s.beta2 * load(a.velocity, i, D) + s.one_minus_beta2 * d * d;
      store(a.momentum, i, D, mt);
      store(a.velocity, i, D, vt);
      if constexpr (F == Formula::AMSGrad) {
        vt = maximum(load(a.maximum_velocity, i, D), vt);
        store(a.maximum_velocity, i, D, vt);
      }
      out = x - lr * mt / (sqrtf(vt) + s.epsilon);
    } else {
      const float st = s.decay * load(a.sum_of_squares, i, D) + s.one_minus_decay * d * d;
      store(a.sum_of_squares, i, D, st);
      out = x - lr * d / (sqrtf(st) + s.epsilon);
    }
    store(a.result, i, D, out);
  }
}

template <DataType D, RegularizationType R, bool Clip, Formula F>
__global__ void update_kernel(const __grid_constant__ OptimizerScalars s,
                              const __grid_constant__ OptimizerArrayList list) {
  for (size_t i = 0; i < list.count; ++i) update<D, R, Clip, F>(s, list.arrays[i]);
}

template <DataType D, RegularizationType R, bool Clip, Formula F>
void launch(const OptimizerScalars& scalars, const OptimizerArrayList& list, cudaStream_t stream) {
  size_t largest = 0;
  for (size_t i = 0; i < list.count; ++i) largest = std::max(largest, list.arrays[i].count);
  if (largest == 0) return;
  update_kernel<D, R, Clip, F><<<blocks_for(static_cast<int64_t>(largest)), 256, 0, stream>>>(scalars, list);
}

template <DataType D, RegularizationType R, bool Clip>
OptimizerUpdate update_of(Formula f) {
  switch (f) {
    case Formula::StochasticGradientDescent: return &launch<D, R, Clip, Formula::StochasticGradientDescent>;
    case Formula::Momentum: return &launch<D, R, Clip, Formula::Momentum>;
    case Formula::Nesterov: return &launch<D, R, Clip, Formula::Nesterov>;
    case Formula::Adam: return &launch<D, R, Clip, Formula::Adam>;
    case Formula::AMSGrad: return &launch<D, R, Clip, Formula::AMSGrad>;
    case Formula::RMSProp: return &launch<D, R, Clip, Formula::RMSProp>;
  }
  return nullptr;
}

template <DataType D, RegularizationType R>
OptimizerUpdate update_of(bool clip, Formula f) {
  return clip ? update_of<D, R, true>(f) : update_of<D, R, false>(f);
}

template <DataType D>
OptimizerUpdate update_of(RegularizationType r, bool clip, Formula f) {
  switch (r) {
    case RegularizationType::L1: return update_of<D, RegularizationType::L1>(clip, f);
    case RegularizationType::L2: return update_of<D, RegularizationType::L2>(clip, f);
    default: return update_of<D, RegularizationType::None>(clip, f);
  }
}

Formula formula_of(const OptimizerConfiguration& c) {
  switch (c.kind) {
    case OptimizerKind::StochasticGradientDescent:
      if (!c.momentum) return Formula::StochasticGradientDescent;
      return c.nesterov ? Formula::Nesterov : Formula::Momentum;
    case OptimizerKind::Adam: return c.maximum_velocity ? Formula::AMSGrad : Formula::Adam;
    case OptimizerKind::RMSProp: return Formula::RMSProp;
  }
  return Formula::StochasticGradientDescent;
}

}  // namespace

OptimizerUpdate optimizer_update(const OptimizerConfiguration& c) {
  const Formula f = formula_of(c);
  return c.data_type == DataType::Float16 ? update_of<DataType::Float16>(c.regularization_type, c.gradient_clipping, f)
                                          : update_of<DataType::Float32>(c.regularization_type, c.gradient_clipping, f);
}

}  // namespace mpsx::cuda
