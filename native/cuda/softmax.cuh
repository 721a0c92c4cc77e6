// Softmax and log-softmax over the feature channels of each pixel, and their
// gradients, on the device (MPSCNNSoftMax.h).
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// y = softmax(x) (log: log-softmax) over the channels of each pixel, regions
// of equal extents; float16 or float32 values, float arithmetic. In place
// when x is y.
void softmax_forward(bool log, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);
// softmax: dx_k = y_k (dy_k - sum_c dy_c y_c); log-softmax: dx_k = dy_k -
// exp(y_k) sum_c dy_c, from the forward result y.
void softmax_gradient(bool log, const ImageRegion& dy, const ImageRegion& y, const ImageRegion& dx,
                      cudaStream_t stream);

}  // namespace mpsx::cuda
