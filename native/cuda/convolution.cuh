// Device work the convolution families share beside cuDNN and cuBLAS: biases
// written or added over a region and per-channel sums for bias gradients.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "mpsx/image.h"

namespace mpsx::cuda {

// Every pixel of `region` (any data type) set to the biases, one per channel.
void fill_biases(const ImageRegion& region, const float* biases, cudaStream_t stream);
// The biases added to every pixel of `region`.
void add_biases(const ImageRegion& region, const float* biases, cudaStream_t stream);

// The scratch bytes channel_sums needs for `region`.
size_t channel_sums_scratch_bytes(const ImageRegion& region);
// sums[c] = the sum of channel c over the region's images and pixels, in an
// order fixed by the region's extents and the device (deterministic).
// `partials` is scratch of channel_sums_scratch_bytes(region) bytes.
void channel_sums(const ImageRegion& region, float* sums, float* partials, cudaStream_t stream);

}  // namespace mpsx::cuda
