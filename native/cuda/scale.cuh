// MPSImageBilinearScale / MPSImageLanczosScale on the device, computing what
// the cpu backend computes from the same per-axis taps (scale_taps of
// kernels/scale.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"

namespace mpsx::cuda {

// The taps of one pass in device memory: per destination column (row) of
// the region, per_output_x (per_output_y) source indices and weights.
struct ScaleTables {
  int64_t per_output_x = 0, per_output_y = 0;
  const int64_t* index_x = nullptr;
  const int64_t* index_y = nullptr;
  const float* weight_x = nullptr;
  const float* weight_y = nullptr;
};

// y = the resampling of x (whole source images) at the taps; y is the region written.
void scale_forward(const ScaleTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);

}  // namespace mpsx::cuda
