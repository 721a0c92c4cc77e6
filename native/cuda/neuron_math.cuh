// The neuron functions of MPSCNNNeuron.h as device functions, for the neuron
// kernels and the kernels that fuse a neuron.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "neuron.cuh"

namespace mpsx::cuda {
namespace neuron_detail {

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float z) { return fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))); }

}  // namespace neuron_detail

// f(x) of the neuron of `type` (p.type, or the same known when compiled);
// `channel` indexes the per-channel slopes.
__device__ __forceinline__ float forward_value(NeuronType type, const NeuronParameters& p, float x,
                                               int64_t channel) {
  const float a = p.a, b = p.b, c = p.c;
  switch (type) {
    case NeuronType::None: return x;
    case NeuronType::ReLU: return x >= 0 ? x : a * x;
    case NeuronType::Linear: return a * x + b;
    case NeuronType::Sigmoid: return neuron_detail::sigmoid(x);
    case NeuronType::HardSigmoid: return fminf(fmaxf(a * x + b, 0.0f), 1.0f);
    case NeuronType::TanH: return a * tanhf(b * x);
    case NeuronType::Absolute: return fabsf(x);
    case NeuronType::SoftPlus: return a * neuron_detail::softplus(b * x);
    case NeuronType::SoftSign: return x / (1.0f + fabsf(x));
    case NeuronType::ELU: return x >= 0 ? x : a * expm1f(x);
    case NeuronType::PReLU: return x >= 0 ? x : p.slopes[channel] * x;
    case NeuronType::ReLUN: return fminf(x >= 0 ? x : a * x, b);
    case NeuronType::Power: return powf(a * x + b, c);
    case NeuronType::Exponential: return c == -1.0f ? expf(a * x + b) : powf(c, a * x + b);
    case NeuronType::Logarithm: return logf(a * x + b) * (c == -1.0f ? 1.0f : 1.0f / logf(c));
    case NeuronType::GeLU: return 0.5f * x * (1.0f + erff(x * neuron_detail::kSqrtHalf));
    case NeuronType::Count: break;
  }
  return x;
}

// f'(x), as forward_value.
__device__ __forceinline__ float derivative(NeuronType type, const NeuronParameters& p, float x, int64_t channel) {
  const float a = p.a, b = p.b, c = p.c;
  switch (type) {
    case NeuronType::None: return 1.0f;
    case NeuronType::ReLU: return x >= 0 ? 1.0f : a;
    case NeuronType::Linear: return a;
    case NeuronType::Sigmoid: {
      float s = neuron_detail::sigmoid(x);
      return s * (1.0f - s);
    }
    case NeuronType::HardSigmoid: {
      float z = a * x + b;
      return (z >= 0.0f && z <= 1.0f) ? a : 0.0f;
    }
    case NeuronType::TanH: {
      float t = tanhf(b * x);
      return a * b * (1.0f - t * t);
    }
    case NeuronType::Absolute: return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f);
    case NeuronType::SoftPlus: return a * b * neuron_detail::sigmoid(b * x);
    case NeuronType::SoftSign: {
      float q = 1.0f + fabsf(x);
      return 1.0f / (q * q);
    }
    case NeuronType::ELU: return x >= 0 ? 1.0f : a * expf(x);
    case NeuronType::PReLU: return x >= 0 ? 1.0f : p.slopes[channel];
    case NeuronType::ReLUN: {
      float leaky = x >= 0 ? x : a * x;
      return leaky >= b ? 0.0f : (x >= 0 ? 1.0f : a);
    }
    case NeuronType::Power: return a * c * powf(a * x + b, c - 1.0f);
    case NeuronType::Exponential: return c == -1.0f ? a * expf(a * x + b) : a * logf(c) * powf(c, a * x + b);
    case NeuronType::Logarithm: return a * (c == -1.0f ? 1.0f : 1.0f / logf(c)) / (a * x + b);
    case NeuronType::GeLU: {
      float cdf = 0.5f * (1.0f + erff(x * neuron_detail::kSqrtHalf));
      return cdf + x * neuron_detail::kInvSqrt2Pi * expf(-0.5f * x * x);
    }
    case NeuronType::Count: break;
  }
  return 1.0f;
}

__device__ inline float forward_value(const NeuronParameters& p, float x, int64_t channel) {
  return forward_value(p.type, p, x, channel);
}

__device__ inline float derivative(const NeuronParameters& p, float x, int64_t channel) {
  return derivative(p.type, p, x, channel);
}

// A fused neuron known when the kernel is compiled (None, ReLU: those of
// most networks; the switch folds away), or read at run time (Count: any),
// so that kernels over many values a thread evaluate no switch per value.
template <NeuronType K>
using FusedNeuron = std::integral_constant<NeuronType, K>;

template <NeuronType K>
__device__ __forceinline__ float fused_forward(const NeuronParameters& p, float x, int64_t channel) {
  return forward_value(K == NeuronType::Count ? p.type : K, p, x, channel);
}

template <NeuronType K>
__device__ __forceinline__ float fused_derivative(const NeuronParameters& p, float x, int64_t channel) {
  return derivative(K == NeuronType::Count ? p.type : K, p, x, channel);
}

// Calls f(FusedNeuron<K>{}) with K the type itself where it is None or
// ReLU, Count otherwise.
template <class F>
void with_fused_neuron(NeuronType type, F&& f) {
  if (type == NeuronType::None)
    f(FusedNeuron<NeuronType::None>{});
  else if (type == NeuronType::ReLU)
    f(FusedNeuron<NeuronType::ReLU>{});
  else
    f(FusedNeuron<NeuronType::Count>{});
}

}  // namespace mpsx::cuda
