// MPSCNNLocalContrastNormalization and its gradient on the device, computing
// what the cpu backend computes (kernels/local_contrast_normalization.h).
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"
#include "mpsx/kernels/local_contrast_normalization.h"

namespace mpsx::cuda {

// y = the normalization of x: x covers whole source images, y the pixels normalized.
void local_contrast_normalization_forward(const LocalContrastNormalizationDescriptor& d,
                                          const LocalContrastNormalizationPass& pass, const ImageRegion& x,
                                          const ImageRegion& y, cudaStream_t stream);

// dx (whole source images, every pixel written) from dy (the pixels
// normalized) and x (the forward source).
void local_contrast_normalization_gradient(const LocalContrastNormalizationDescriptor& d,
                                           const LocalContrastNormalizationPass& pass, const ImageRegion& dy,
                                           const ImageRegion& x, const ImageRegion& dx, cudaStream_t stream);

}  // namespace mpsx::cuda
