// MPSNNReduceFeatureChannelsSum on the device, computing what the cpu backend
// computes.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// y (images x 1 x height x width) = weight * the sum over the channels of x
// (images x channels x height x width).
void feature_channels_sum(const ImageRegion& x, const ImageRegion& y, float weight, cudaStream_t stream);

}  // namespace mpsx::cuda
