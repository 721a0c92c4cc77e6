// The updates of MPSNNOptimizers.h on the device.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/kernels/optimizer.h"

namespace mpsx::cuda {

// Launches the update of every array of the list, in one kernel, on the stream.
using OptimizerUpdate = void (*)(const OptimizerScalars& scalars, const OptimizerArrayList& list, cudaStream_t stream);

// The update for a configuration: one elementwise kernel compiled for its
// data type, regularization, clipping and formula.
OptimizerUpdate optimizer_update(const OptimizerConfiguration& configuration);

}  // namespace mpsx::cuda
