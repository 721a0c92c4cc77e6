// MPSCNNDropout and MPSCNNDropoutGradient on the device, computing what the
// cpu backend computes (the same counter-based mask).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"
#include "mpsx/kernels/dropout.h"

namespace mpsx::cuda {

// Fills the state's mask_channels x mask_height x mask_width mask bytes.
void dropout_mask(const DropoutGenerator& generator, uint8_t* mask, int64_t channels, int64_t height, int64_t width,
                  cudaStream_t stream);

// out = in / keep where the mask keeps, else 0 (regions of equal extents).
void dropout_apply(const DropoutDescriptor& d, const ImageRegion& in, const ImageRegion& out, const uint8_t* mask,
                   int64_t mask_height, int64_t mask_width, const DropoutOrigin& origin, cudaStream_t stream);

}  // namespace mpsx::cuda
