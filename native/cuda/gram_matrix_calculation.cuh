// MPSNNGramMatrixCalculation and its gradient on the device, computing what
// GramMatrixPrimitive (kernels/gram_matrix_calculation.h) says.
#pragma once

#include <cuda_runtime.h>

#include "mpsx/image.h"

namespace mpsx::cuda {

// y (n, c, 0, f) = alpha * sum_{row, column} x(n, f, row, column) * x(n, c, row, column).
void gram_matrix_forward(const ImageRegion& x, const ImageRegion& y, float alpha, cudaStream_t stream);

// dx (n, f, row, column) = alpha * sum_c (dy(n, c, 0, f) + dy(n, f, 0, c)) * x(n, c, row, column).
void gram_matrix_gradient(const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx, float alpha,
                          cudaStream_t stream);

}  // namespace mpsx::cuda
