// The losses of MPSCNNLoss.h and their gradients on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "mpsx/image.h"
#include "mpsx/kernels/loss.h"

namespace mpsx::cuda {

// The device scratch memory loss_and_gradient needs for a source of `y`'s
// extents (0: none).
size_t loss_scratch_bytes(const LossDescriptor& d, const ImageRegion& y);

// Writes the gradient g of y with labels t and weights w (w.data null
// without), and the loss: per value into `loss` (y's extents) for
// ReductionType::None, otherwise one value per image (1x1x1 images).
void loss_and_gradient(const LossDescriptor& d, const ImageRegion& y, const ImageRegion& t, const ImageRegion& w,
                       const ImageRegion& g, const ImageRegion& loss, void* scratch, cudaStream_t stream);

}  // namespace mpsx::cuda
