#include "optimizer.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// The vectors a formula keeps beside the values: momentum (SGD with
// momentum), momentum and velocity (Adam), and the maximum velocity
// (AMSGrad), or the sum of squares (RMSProp).
template <Formula F>
constexpr int kVectors = F == Formula::StochasticGradientDescent ? 0
                         : F == Formula::Adam                    ? 2
                         : F == Formula::AMSGrad                 ? 3
                                                                 : 1;

template <Formula F>
__device__ __forceinline__ void vectors_of(const OptimizerArrays& a, void* (&vectors)[3]) {
  if constexpr (F == Formula::RMSProp) {
    vectors[0] = a.sum_of_squares, vectors[1] = vectors[2] = nullptr;
  } else {
    vectors[0] = a.momentum, vectors[1] = a.velocity, vectors[2] = a.maximum_velocity;
  }
}

// The updated value of x, whose prepared gradient is d; v holds its elements
// of the formula's vectors, updated in place.
template <Formula F>
__device__ __forceinline__ float updated(const OptimizerScalars& s, float x, float d, float (&v)[3]) {
  const float lr = s.learning_rate;
  if constexpr (F == Formula::StochasticGradientDescent) {
    return x - lr * d;
  } else if constexpr (F == Formula::Momentum) {
    v[0] = s.momentum_scale * v[0] + lr * d;
    return x - v[0];
  } else if constexpr (F == Formula::Nesterov) {
    const float mu = s.momentum_scale;
    v[0] = mu * v[0] + d;
    return x - lr * (d + v[0] * mu);
  } else if constexpr (F == Formula::Adam || F == Formula::AMSGrad) {
    v[0] = s.beta1 * v[0] + s.one_minus_beta1 * d;
    v[1] = s.beta2 * v[1] + s.one_minus_beta2 * d * d;
    float vt = v[1];
    if constexpr (F == Formula::AMSGrad) vt = v[2] = maximum(v[2], vt);
    return x - lr * v[0] / (sqrtf(vt) + s.epsilon);
  } else {
    v[0] = s.decay * v[0] + s.one_minus_decay * d * d;
    return x - lr * d / (sqrtf(v[0]) + s.epsilon);
  }
}

// Every array is of type D; float16 values are computed in float32 and
// rounded once when stored, as the cpu does. result may be values. Where
// every array is aligned to a vector, kVectorWidth values go to a load.
template <DataType D, RegularizationType R, bool Clip, Formula F>
__device__ __forceinline__ void update(const OptimizerScalars& s, const OptimizerArrays& a) {
  using T = std::conditional_t<D == DataType::Float32, float, __half>;
  constexpr int V = kVectors<F>, W = kVectorWidth;
  void* vectors[3];
  vectors_of<F>(a, vectors);
  const int64_t count = static_cast<int64_t>(a.count);
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  uintptr_t addresses = reinterpret_cast<uintptr_t>(a.values) | reinterpret_cast<uintptr_t>(a.gradient) |
                        reinterpret_cast<uintptr_t>(a.result);
  for (int n = 0; n < V; ++n) addresses |= reinterpret_cast<uintptr_t>(vectors[n]);
  const int64_t scalar_from = addresses % (sizeof(T) * W) == 0 ? count / W * W : 0;
  for (int64_t offset = first * W; offset < scalar_from; offset += step * W) {
    float x[W], g[W], kept[3][W], out[W];
    load_vector<T, W>(static_cast<const T*>(a.values), offset, x);
    load_vector<T, W>(static_cast<const T*>(a.gradient), offset, g);
#pragma unroll
    for (int n = 0; n < V; ++n) load_vector<T, W>(static_cast<const T*>(vectors[n]), offset, kept[n]);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float v[3];
#pragma unroll
      for (int n = 0; n < V; ++n) v[n] = kept[n][k];
      out[k] = updated<F>(s, x[k], prepared<R, Clip>(g[k], x[k], s), v);
#pragma unroll
      for (int n = 0; n < V; ++n) kept[n][k] = v[n];
    }
#pragma unroll
    for (int n = 0; n < V; ++n) store_vector<T, W>(static_cast<T*>(vectors[n]), offset, kept[n]);
    store_vector<T, W>(static_cast<T*>(a.result), offset, out);
  }
  for (int64_t i = scalar_from + first; i < count; i += step) {
    const float x = load(a.values, i, D), d = prepared<R, Clip>(load(a.gradient, i, D), x, s);
    float v[3];
#pragma unroll
    for (int n = 0; n < V; ++n) v[n] = load(vectors[n], i, D);
    const float out = updated<F>(s, x, d, v);
#pragma unroll
    for (int n = 0; n < V; ++n) store(vectors[n], i, D, v[n]);
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
  update_kernel<D, R, Clip, F>
      <<<blocks_for((static_cast<int64_t>(largest) + kVectorWidth - 1) / kVectorWidth), 256, 0, stream>>>(scalars, list);
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
