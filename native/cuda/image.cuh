// Image copies with conversions on the device.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// Copies `from` into `to` (equal extents, device memory) on the stream,
// converting data types; uint8 is unorm8 as in MPS.
void copy_region(const ImageRegion& from, const ImageRegion& to, cudaStream_t stream);

}  // namespace mpsx::cuda
