// Cross-channel (local response) normalization and its gradient on the
// device (MPSCNNNormalization.h, MPSCNNCrossChannelNormalization).
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// The window of channel k is [k - before, k + after] within [0, channels);
// scale is alpha / N.
struct CrossChannelWindow {
  int64_t before = 0, after = 0;
  float scale = 0.0f, beta = 0.0f, delta = 0.0f;
};

// y_k = x_k / L_k^beta, L_k = delta + scale * sum of x_q^2 over the window of
// k; regions of equal extents, float16 or float32 values, float arithmetic.
// `factors` is scratch of x.n * x.h * x.w * x.c floats. In place when x is y.
void cross_channel_normalization_forward(const CrossChannelWindow& window, const ImageRegion& x,
                                         const ImageRegion& y, float* factors, cudaStream_t stream);
// dx_j = dy_j L_j^-beta - 2 scale beta x_j sum over the k whose window holds
// j of dy_k x_k L_k^(-beta-1). `factors` is scratch of 2 * dy.n * dy.h *
// dy.w * dy.c floats. dx may be dy or x.
void cross_channel_normalization_gradient(const CrossChannelWindow& window, const ImageRegion& dy,
                                          const ImageRegion& x, const ImageRegion& dx, float* factors,
                                          cudaStream_t stream);

}  // namespace mpsx::cuda
