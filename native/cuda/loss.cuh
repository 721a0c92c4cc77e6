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

// The device scratch memory loss_gradient needs (one double per image).
size_t loss_gradient_scratch_bytes(const ImageRegion& y);

// MPSNNLossGradient (LossPrimitive::loss_gradient): g = sum over the loss
// values l of source_gradient(l) * dl/dy, or dl/dt with `labels_gradient`.
void loss_gradient(const LossDescriptor& d, const ImageRegion& y, const ImageRegion& t, const ImageRegion& w,
                   const ImageRegion& source_gradient, const ImageRegion& g, bool labels_gradient, void* scratch,
                   cudaStream_t stream);

}  // namespace mpsx::cuda
