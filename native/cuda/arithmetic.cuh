// MPSCNNArithmetic and its gradients on the device.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"
#include "mpsx/kernels/arithmetic.h"

namespace mpsx::cuda {

// destination = the arithmetic of primary and secondary; a source of extent 1
// along a dimension the destination spans repeats its value there.
void arithmetic_forward(const ArithmeticParameters& p, const ImageRegion& primary, const ImageRegion& secondary,
                        const ImageRegion& destination, cudaStream_t stream);
// dx = scale * sum over dx's broadcast dimensions of dy (* other, if given).
void arithmetic_gradient(const ImageRegion& dy, const ImageRegion* other, const ImageRegion& dx, float scale,
                         cudaStream_t stream);

}  // namespace mpsx::cuda
