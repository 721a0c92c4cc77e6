#include "scale.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per element of y.
__global__ void forward_kernel(ScaleTables t, Extents<int64_t> e, Strided<int64_t> x, Strided<int64_t> y,
                               int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    float sum = 0.0f;
    for (int64_t ky = 0; ky < t.per_output_y; ++ky) {
      const int64_t ty = row * t.per_output_y + ky;
      const float wy = t.weight_y[ty];
      if (wy == 0.0f) continue;
      for (int64_t kx = 0; kx < t.per_output_x; ++kx) {
        const int64_t tx = column * t.per_output_x + kx;
        const float w = wy * t.weight_x[tx];
        if (w != 0.0f) sum += w * x.load(x.at(image, c, t.index_y[ty], t.index_x[tx]));
      }
    }
    y.store(y.at(image, c, row, column), sum);
  }
}

}  // namespace

void scale_forward(const ScaleTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(t, Extents<int64_t>(y), Strided<int64_t>(x),
                                                        Strided<int64_t>(y), count);
}

}  // namespace mpsx::cuda
