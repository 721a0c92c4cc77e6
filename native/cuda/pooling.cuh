// MPSCNNPooling and MPSCNNPoolingGradient (max, average, L2 norm, dilated
// max) on the device, computing what the cpu backend computes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "mpsx/image.h"
#include "mpsx/kernels/pooling.h"

namespace mpsx::cuda {

// y = pool(x): x covers the pooled source images, y the pixels pooled into.
void pooling_forward(const PoolingDescriptor& d, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);

// Bytes of device scratch pooling_gradient needs for `dy`'s values.
size_t pooling_gradient_scratch_bytes(const PoolingDescriptor& d, const ImageRegion& dy);

// dx = the sum over the windows that read each pixel of d out / d in * dy,
// zero where no window reads; every pixel of dx is written. x is the
// forward source (unread by average pooling).
void pooling_gradient(const PoolingDescriptor& d, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                      void* scratch, cudaStream_t stream);

}  // namespace mpsx::cuda
