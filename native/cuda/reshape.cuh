// MPSNNPad, MPSNNReshape and their gradients on the device, computing what
// the cpu backend computes from the same per-axis tables (pad_map /
// pad_readers of kernels/reshape.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"
#include "mpsx/kernels/reshape.h"

namespace mpsx::cuda {

// The tables of one pad pass in device memory: per channel, row and column of
// the region written, the source index read (-1: the fill value); per source
// channel, row and column, the [begin[i], begin[i + 1]) of the positions in
// `readers` that read it.
struct PadAxis {
  const int64_t* map = nullptr;
  const int64_t* begin = nullptr;
  const int64_t* readers = nullptr;
};
struct PadTables {
  PadAxis c, y, x;
  bool constant = false;
  float fill_value = 0;
  const float* fill_values = nullptr;  // one per channel written, or null
};

// y = x padded; y is the region written.
void pad_forward(const PadTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);
// dx (the whole source slice) = the sums of dy over the elements that read each.
void pad_gradient(const PadTables& t, const ImageRegion& dy, const ImageRegion& dx, cudaStream_t stream);
// y = x's elements in height x width x channels order.
void reshape_copy(const ImageRegion& x, const ImageRegion& y, cudaStream_t stream);

}  // namespace mpsx::cuda
