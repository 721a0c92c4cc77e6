// MPSCNNBatchNormalization, its statistics and gradients on the device,
// computing what the cpu backend computes. Per-channel sums are
// deterministic: blocks write partial sums that a second kernel folds in a
// fixed order, in double.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mpsx/image.h"
#include "neuron.cuh"

namespace mpsx::cuda {

// The per-channel float32 device arrays a normalization reads, and its epsilon.
struct ChannelParameters {
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* mean = nullptr;
  const float* variance = nullptr;
  float epsilon = 0;
};

// Bytes of device scratch the sums over `x`'s pixels need.
size_t batch_normalization_sums_bytes(const ImageRegion& x);

// Per-channel mean and biased variance over every pixel of x, merged into
// mean and variance, which hold those of `before` values per channel (0:
// none, they are replaced).
void batch_normalization_statistics(const ImageRegion& x, float* mean, float* variance, int64_t before, void* sums,
                                    cudaStream_t stream);

// y = neuron((x - mean) * gamma / sqrt(variance + epsilon) + beta); gamma and
// beta also copied to kept_gamma and kept_beta where those are not null.
void batch_normalization_normalize(const NeuronParameters& neuron, const ImageRegion& x, const ImageRegion& y,
                                   const ChannelParameters& p, float* kept_gamma, float* kept_beta,
                                   cudaStream_t stream);

// gradient_for_beta = sum of dz, gradient_for_gamma = sum of dz * (x - mean)
// / sqrt(variance + epsilon); dz = neuron'(z) * dy, z the normalized x.
// With `accumulate` the sums are added to the values already there.
void batch_normalization_statistics_gradient(const NeuronParameters& neuron, const ImageRegion& dy,
                                             const ImageRegion& x, const ChannelParameters& p,
                                             float* gradient_for_gamma, float* gradient_for_beta, bool accumulate,
                                             void* sums, cudaStream_t stream);

// dx through the statistics of `count` values per channel; dz is zero where
// dy has no data.
void batch_normalization_gradient(const NeuronParameters& neuron, const ImageRegion& dy, const ImageRegion& x,
                                  const ImageRegion& dx, const ChannelParameters& p, const float* gradient_for_gamma,
                                  const float* gradient_for_beta, int64_t count, cudaStream_t stream);

// result = (1 - momentum) * running + momentum * batch, the variance's batch
// term scaled by `bessel`.
void batch_normalization_update_running_statistics(int64_t channels, const float* mean, const float* variance,
                                                   const float* batch_mean, const float* batch_variance,
                                                   float momentum, float bessel, float* result_mean,
                                                   float* result_variance, cudaStream_t stream);

}  // namespace mpsx::cuda
