// The transpose's weights as the filter of the convolution whose data
// gradient it is, on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mpsx::cuda {

struct TransposeFilterShape {
  int64_t input_channels = 0, output_channels = 0, groups = 1, kernel_height = 1, kernel_width = 1;
};

// The transpose's OHWI weights [out][kh][kw][in / groups], rotated by 180
// degrees in space and with in and out exchanged per group: the KRSC filter
// [in][kh][kw][out / groups] of the convolution from the transpose's
// destination to its source.
void filter_of_weights(const float* weights, float* filter, const TransposeFilterShape& shape, cudaStream_t stream);
// The inverse: OHWI weights (gradients) from such a filter.
void weights_of_filter(const float* filter, float* weights, const TransposeFilterShape& shape, cudaStream_t stream);

}  // namespace mpsx::cuda
