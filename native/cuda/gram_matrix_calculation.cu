#include "gram_matrix_calculation.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per matrix element (n, f, c), f the column of y.
__global__ void forward_kernel(Strided<int64_t> x, Strided<int64_t> y, int64_t channels, int64_t height,
                               int64_t width, float alpha, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    const int64_t c = i % channels, f = (i / channels) % channels, n = i / (channels * channels);
    float sum = 0.0f;
    for (int64_t row = 0; row < height; ++row)
      for (int64_t column = 0; column < width; ++column)
        sum += x.load(x.at(n, f, row, column)) * x.load(x.at(n, c, row, column));
    y.store(y.at(n, c, 0, f), alpha * sum);
  }
}

// One thread per element (n, f, row, column) of dx.
__global__ void gradient_kernel(Strided<int64_t> dy, Strided<int64_t> x, Strided<int64_t> dx, int64_t channels,
                                int64_t height, int64_t width, float alpha, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    const int64_t column = i % width, row = (i / width) % height, f = (i / (width * height)) % channels,
                  n = i / (width * height * channels);
    float sum = 0.0f;
    for (int64_t c = 0; c < channels; ++c)
      sum += (dy.load(dy.at(n, c, 0, f)) + dy.load(dy.at(n, f, 0, c))) * x.load(x.at(n, c, row, column));
    dx.store(dx.at(n, f, row, column), alpha * sum);
  }
}

}  // namespace

void gram_matrix_forward(const ImageRegion& x, const ImageRegion& y, float alpha, cudaStream_t stream) {
  const int64_t count = x.n * x.c * x.c;
  if (count == 0) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(Strided<int64_t>(x), Strided<int64_t>(y), x.c, x.h, x.w,
                                                        alpha, count);
}

void gram_matrix_gradient(const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx, float alpha,
                          cudaStream_t stream) {
  const int64_t count = dx.element_count();
  if (count == 0) return;
  gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(Strided<int64_t>(dy), Strided<int64_t>(x),
                                                         Strided<int64_t>(dx), x.c, x.h, x.w, alpha, count);
}

}  // namespace mpsx::cuda
