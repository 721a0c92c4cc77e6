#include "upsampling.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

__device__ __forceinline__ float weight(const UpsamplingTap& t, int64_t i) {
  return (t.i0 == i ? 1.0f - t.lambda : 0.0f) + (t.i1 == i ? t.lambda : 0.0f);
}

// One thread per element of y.
__global__ void forward_kernel(UpsamplingTables t, Extents<int64_t> e, Strided<int64_t> x, Strided<int64_t> y,
                               int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const UpsamplingTap ty = t.taps_y[row], tx = t.taps_x[column];
    const float top = (1.0f - tx.lambda) * x.load(x.at(image, c, ty.i0, tx.i0)) +
                      tx.lambda * x.load(x.at(image, c, ty.i0, tx.i1));
    const float bottom = (1.0f - tx.lambda) * x.load(x.at(image, c, ty.i1, tx.i0)) +
                         tx.lambda * x.load(x.at(image, c, ty.i1, tx.i1));
    y.store(y.at(image, c, row, column), (1.0f - ty.lambda) * top + ty.lambda * bottom);
  }
}

// One thread per element of dx: gathers from the upsampled pixels that read it.
__global__ void gradient_kernel(UpsamplingTables t, Extents<int64_t> e, Strided<int64_t> dy, Strided<int64_t> dx,
                                int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    float sum = 0.0f;
    for (int64_t Y = t.readers_y[2 * row]; Y < t.readers_y[2 * row + 1]; ++Y) {
      const float wy = weight(t.taps_y[Y], row);
      if (wy == 0.0f) continue;
      for (int64_t X = t.readers_x[2 * column]; X < t.readers_x[2 * column + 1]; ++X) {
        const float w = wy * weight(t.taps_x[X], column);
        if (w != 0.0f) sum += w * dy.load(dy.at(image, c, Y, X));
      }
    }
    dx.store(dx.at(image, c, row, column), sum);
  }
}

}  // namespace

void upsampling_forward(const UpsamplingTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(t, Extents<int64_t>(y), Strided<int64_t>(x),
                                                        Strided<int64_t>(y), count);
}

void upsampling_gradient(const UpsamplingTables& t, const ImageRegion& dy, const ImageRegion& dx,
                         cudaStream_t stream) {
  const int64_t count = dx.element_count();
  if (count == 0) return;
  gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(t, Extents<int64_t>(dx), Strided<int64_t>(dy),
                                                         Strided<int64_t>(dx), count);
}

}  // namespace mpsx::cuda
