// MPSCNNDropout and MPSCNNDropoutGradient on the device, computing what the
// cpu backend computes (the same counter-based mask).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"
#include "mpsx/kernels/dropout.h"

namespace mpsx::cuda {

// Fills the `count` mask bytes of a state from `generator`.
void dropout_mask(const DropoutGenerator& generator, uint8_t* mask, int64_t count, cudaStream_t stream);

// out = in / keep where `mask` (the state's) keeps, else 0 (regions of equal
// extents).
void dropout_apply(const DropoutDescriptor& d, const ImageRegion& in, const ImageRegion& out, const uint8_t* mask,
                   const DropoutGradientState& state, const DropoutOrigin& origin, cudaStream_t stream);

}  // namespace mpsx::cuda
