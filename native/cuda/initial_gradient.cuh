// MPSNNInitialGradient on the device.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// Writes 1 to every element of y.
void initial_gradient(const ImageRegion& y, cudaStream_t stream);

}  // namespace mpsx::cuda
