// Group (and instance) normalization kernels: one block per (image, group)
// for the statistics, the forward pass and the source gradient, one block
// per channel for the gamma and beta gradients; float64 block sums.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"

namespace mpsx::cuda {

// mean/variance: n * groups float32 each (image major), device memory.
void group_normalization_forward(const ImageRegion& x, const ImageRegion& y, int64_t groups, const float* gamma,
                                 const float* beta, float epsilon, float* mean, float* variance, cudaStream_t stream);
void group_normalization_gradient(const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx, int64_t groups,
                                  const float* gamma, float epsilon, const float* mean, const float* variance,
                                  float* gradient_for_gamma, float* gradient_for_beta, cudaStream_t stream);

}  // namespace mpsx::cuda
