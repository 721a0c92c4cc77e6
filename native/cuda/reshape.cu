#include "reshape.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per element of y.
__global__ void pad_kernel(PadTables t, Extents<int64_t> e, Strided<int64_t> x, Strided<int64_t> y, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const int64_t sc = t.c.map[c], sy = t.y.map[row], sx = t.x.map[column];
    float value;
    if (sc >= 0 && sy >= 0 && sx >= 0)
      value = x.load(x.at(image, sc, sy, sx));
    else
      value = !t.constant ? 0.0f : t.fill_values ? t.fill_values[c] : t.fill_value;
    y.store(y.at(image, c, row, column), value);
  }
}

// One thread per element of dx: gathers from the padded elements that read it.
__global__ void pad_gradient_kernel(PadTables t, Extents<int64_t> e, Strided<int64_t> dy, Strided<int64_t> dx,
                                    int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    float sum = 0.0f;
    for (int64_t Y = t.y.begin[row]; Y < t.y.begin[row + 1]; ++Y)
      for (int64_t X = t.x.begin[column]; X < t.x.begin[column + 1]; ++X)
        for (int64_t C = t.c.begin[c]; C < t.c.begin[c + 1]; ++C)
          sum += dy.load(dy.at(image, t.c.readers[C], t.y.readers[Y], t.x.readers[X]));
    dx.store(dx.at(image, c, row, column), sum);
  }
}

// One thread per element of y; l counts an image's elements in height x
// width x channels order, in y and in x alike.
__global__ void reshape_kernel(Extents<int64_t> e, int64_t x_channels, int64_t x_width, Strided<int64_t> x,
                               Strided<int64_t> y, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const int64_t l = (row * e.w.divisor + column) * e.c.divisor + c;
    const int64_t p = l / x_channels;
    y.store(y.at(image, c, row, column), x.load(x.at(image, l % x_channels, p / x_width, p % x_width)));
  }
}

}  // namespace

void pad_forward(const PadTables& t, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  pad_kernel<<<blocks_for(count), 256, 0, stream>>>(t, Extents<int64_t>(y), Strided<int64_t>(x), Strided<int64_t>(y),
                                                    count);
}

void pad_gradient(const PadTables& t, const ImageRegion& dy, const ImageRegion& dx, cudaStream_t stream) {
  const int64_t count = dx.element_count();
  if (count == 0) return;
  pad_gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(t, Extents<int64_t>(dx), Strided<int64_t>(dy),
                                                             Strided<int64_t>(dx), count);
}

void reshape_copy(const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  reshape_kernel<<<blocks_for(count), 256, 0, stream>>>(Extents<int64_t>(y), x.c, x.w, Strided<int64_t>(x),
                                                        Strided<int64_t>(y), count);
}

}  // namespace mpsx::cuda
