#include "spatial_normalization.cuh"

#include <math.h>

#include "elements.cuh"
#include "window_taps.cuh"

namespace mpsx::cuda {
namespace {

constexpr unsigned kThreads = 256;

// T at source pixel (row, column), channel c of image `image` of the whole
// source x: delta + scale * the sum of x^2 over the window, taps off x read
// as tap() says. Signed 64-bit coordinates: windows reach off the image.
template <class Index>
__device__ __forceinline__ float denominator(const SpatialWindow& w, const Strided<Index>& x, int64_t x_height,
                                             int64_t x_width, Index image, Index c, int64_t row, int64_t column) {
  float sum = 0.0f;
  for (int64_t r = row - w.before; r <= row + w.after; ++r) {
    const int64_t tr = tap(w.clamp, r, x_height);
    if (tr < 0) continue;
    for (int64_t q = column - w.before; q <= column + w.after; ++q) {
      const int64_t tq = tap(w.clamp, q, x_width);
      if (tq < 0) continue;
      const float v = x.load(x.at(image, c, static_cast<Index>(tr), static_cast<Index>(tq)));
      sum += v * v;
    }
  }
  return w.delta + w.scale * sum;
}

// Forward pass 1: factors[i] = T^-beta of element i of the written region
// (NHWC order). Reads x only.
template <class Index>
__global__ void forward_factors(SpatialWindow w, Extents<Index> e, Strided<Index> x, int64_t x_height,
                                int64_t x_width, float* factors, Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    factors[i] = powf(denominator(w, x, x_height, x_width, image, c, int64_t(row) + w.origin_y,
                                  int64_t(column) + w.origin_x),
                      -w.beta);
  }
}

// Forward pass 2: y_i = x_i * factors[i]; each element reads only its own
// source element, so y may lie in x.
template <class Index>
__global__ void forward_apply(SpatialWindow w, Extents<Index> e, Strided<Index> x, Strided<Index> y,
                              const float* factors, Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    const float v = x.load(x.at(image, c, row + static_cast<Index>(w.origin_y), column + static_cast<Index>(w.origin_x)));
    y.store(y.at(image, c, row, column), v * factors[i]);
  }
}

// Gradient pass 1, per element o of the written region: factors[o] =
// dy(o) T(o)^-beta, factors[elements + o] = dy(o) x(o) T(o)^(-beta-1).
template <class Index>
__global__ void gradient_factors(SpatialWindow w, Extents<Index> e, Strided<Index> dy, Strided<Index> x,
                                 int64_t x_height, int64_t x_width, float* factors, Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    const int64_t sr = int64_t(row) + w.origin_y, sc = int64_t(column) + w.origin_x;
    const float t = denominator(w, x, x_height, x_width, image, c, sr, sc);
    const float power = powf(t, -w.beta);
    const float g = dy.load(dy.at(image, c, row, column));
    factors[i] = g * power;
    factors[elements + i] = g * x.load(x.at(image, c, static_cast<Index>(sr), static_cast<Index>(sc))) * power / t;
  }
}

// Gradient pass 2, per element of the whole source (extents of x): the
// gather over the written o of reads(s, o) * factors[elements + o]: the o in
// rows [s - after, s + before] (relative to the written region) once each,
// and with clamp, for s on an edge, any o whose window reaches beyond that
// edge (every written row is a candidate; reads() is 0 for the others).
// Likewise for columns. Reads x at its own element and the factors only, so
// dx may be x or dy. Line for line as pass 2 in native/cpu/spatial_normalization.cpp.
template <class Index>
__global__ void gradient_apply(SpatialWindow w, Extents<Index> source_extents, Strided<Index> x, Strided<Index> dx,
                               int64_t x_height, int64_t x_width, int64_t height, int64_t width, Index channels,
                               const float* factors, Index region_elements, Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = source_extents.element(i, &image, &row, &column);
    const int64_t r = int64_t(row) - w.origin_y, q = int64_t(column) - w.origin_x;
    int64_t top = r - w.after > 0 ? r - w.after : 0;
    int64_t bottom = r + w.before < height - 1 ? r + w.before : height - 1;
    int64_t left = q - w.after > 0 ? q - w.after : 0;
    int64_t right = q + w.before < width - 1 ? q + w.before : width - 1;
    if (w.clamp && int64_t(row) == 0) top = 0;
    if (w.clamp && int64_t(row) == x_height - 1) bottom = height - 1;
    if (w.clamp && int64_t(column) == 0) left = 0;
    if (w.clamp && int64_t(column) == x_width - 1) right = width - 1;
    const int64_t base = int64_t(image) * height * width;
    float sum = 0.0f;
    for (int64_t o_row = top; o_row <= bottom; ++o_row) {
      const int64_t o_source_row = o_row + w.origin_y;
      const int64_t reads_row = reads(w.clamp, row, x_height, o_source_row - w.before, o_source_row + w.after);
      if (reads_row == 0) continue;
      for (int64_t o_column = left; o_column <= right; ++o_column) {
        const int64_t o_source_column = o_column + w.origin_x;
        const int64_t reads_column =
            reads(w.clamp, column, x_width, o_source_column - w.before, o_source_column + w.after);
        sum += static_cast<float>(reads_row * reads_column) *
               factors[region_elements + ((base + o_row * width + o_column) * channels + c)];
      }
    }
    const bool written = r >= 0 && r < height && q >= 0 && q < width;
    const float direct = written ? factors[((base + r * width + q) * channels + c)] : 0.0f;
    dx.store(dx.at(image, c, row, column), direct - 2.0f * w.scale * w.beta * x.load(x.at(image, c, row, column)) * sum);
  }
}

}  // namespace

void spatial_normalization_forward(const SpatialWindow& window, const ImageRegion& x, const ImageRegion& y,
                                   float* factors, cudaStream_t stream) {
  const int64_t elements = y.n * y.h * y.w * y.c;
  if (elements == 0) return;
  with_index(narrow_indices(elements, {x, y}), [&](auto index) {
    using Index = decltype(index);
    const Index count = static_cast<Index>(elements);
    forward_factors<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(y), Strided<Index>(x), x.h, x.w, factors, count);
    forward_apply<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(y), Strided<Index>(x), Strided<Index>(y), factors, count);
  });
}

void spatial_normalization_gradient(const SpatialWindow& window, const ImageRegion& dy, const ImageRegion& x,
                                    const ImageRegion& dx, float* factors, cudaStream_t stream) {
  const int64_t region_elements = dy.n * dy.h * dy.w * dy.c;
  const int64_t elements = x.n * x.h * x.w * x.c;
  if (elements == 0) return;
  with_index(narrow_indices(elements + 2 * region_elements, {dy, x, dx}), [&](auto index) {
    using Index = decltype(index);
    if (region_elements > 0)
      gradient_factors<Index><<<blocks_for(region_elements, kThreads), kThreads, 0, stream>>>(
          window, Extents<Index>(dy), Strided<Index>(dy), Strided<Index>(x), x.h, x.w, factors,
          static_cast<Index>(region_elements));
    gradient_apply<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(x), Strided<Index>(x), Strided<Index>(dx), x.h, x.w, dy.h, dy.w,
        static_cast<Index>(dy.c),
        factors, static_cast<Index>(region_elements), static_cast<Index>(elements));
  });
}

}  // namespace mpsx::cuda
