// MPSCNNUpsamplingNearest / Bilinear and their gradients on the device,
// computing what the cpu backend computes from the same per-axis tables
// (upsampling_taps / upsampling_readers of kernels/upsampling.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"
#include "mpsx/kernels/upsampling.h"

namespace mpsx::cuda {

// The tables of one pass in device memory: taps per upsampled column / row
// of the region, and per source column / row the [begin, end) of the taps
// that read it (two int64 each).
struct UpsamplingTables {
  const UpsamplingTap* taps_x = nullptr;
  const UpsamplingTap* taps_y = nullptr;
  const int64_t* readers_x = nullptr;
  const int64_t* readers_y = nullptr;
};

// y = the interpolation of x (whole source images) at the taps; y is the region written.
void upsampling_forward(const UpsamplingTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);

// dx (whole source images) = the transpose of the interpolation applied to dy.
void upsampling_gradient(const UpsamplingTables& t, const ImageRegion& dy, const ImageRegion& dx,
                         cudaStream_t stream);

}  // namespace mpsx::cuda
