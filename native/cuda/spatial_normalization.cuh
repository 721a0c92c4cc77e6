// Spatial normalization and its gradient on the device (MPSCNNNormalization.h,
// MPSCNNSpatialNormalization).
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// A k x k window: rows (and columns) [i - before, i + after]; the written
// region's pixel (0, 0) is pixel (origin_x, origin_y) of the source; scale is
// alpha / (k * k). Taps off the source read 0, or with clamp the nearest
// source pixel (edge_mode CLAMP).
struct SpatialWindow {
  int64_t before = 0, after = 0, origin_x = 0, origin_y = 0;
  float scale = 0.0f, beta = 0.0f, delta = 0.0f;
  bool clamp = false;
};

// y = x / T^beta over the written region y (x: whole source images, reads off
// them as window.clamp says), float16 or float32 values, float arithmetic. `factors` is
// scratch of y.n * y.h * y.w * y.c floats. In place when y lies in x.
void spatial_normalization_forward(const SpatialWindow& window, const ImageRegion& x, const ImageRegion& y,
                                   float* factors, cudaStream_t stream);
// dx (whole source images, as x) from dy (the written region): dx(p) =
// [p written] dy(p) T(p)^-beta - 2 scale beta x(p) * the sum over the written
// o of reads(p, o) dy(o) x(o) T(o)^(-beta-1), reads(p, o) the number of taps
// of o's window that read p (with clamp an edge pixel is read by the taps
// beyond its edge too). `factors` is scratch
// of 2 * dy.n * dy.h * dy.w * dy.c floats. dx may be x or dy.
void spatial_normalization_gradient(const SpatialWindow& window, const ImageRegion& dy, const ImageRegion& x,
                                    const ImageRegion& dx, float* factors, cudaStream_t stream);

}  // namespace mpsx::cuda
