#include "cross_channel_normalization.cuh"

#include <math.h>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

constexpr unsigned kThreads = 256;

// L_k of element (image, row, column, channel k): delta + scale * the sum of
// x_q^2 over q in [k - before, k + after] within [0, channels).
template <class Index>
__device__ __forceinline__ float denominator(const CrossChannelWindow& w, const Strided<Index>& x, Index pixel,
                                             Index k, Index channels) {
  const Index first = k > static_cast<Index>(w.before) ? k - static_cast<Index>(w.before) : Index(0);
  const Index last = k + static_cast<Index>(w.after) < channels ? k + static_cast<Index>(w.after) : channels - 1;
  float sum = 0.0f;
  for (Index q = first; q <= last; ++q) {
    const float v = x.load(pixel + q * x.c);
    sum += v * v;
  }
  return w.delta + w.scale * sum;
}

// Pass 1 of the forward: factors[i] = L^-beta of element i (NHWC order of
// the region). Reads x only.
template <class Index>
__global__ void forward_factors(CrossChannelWindow w, Extents<Index> e, Strided<Index> x, float* factors,
                                Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index k = e.element(i, &image, &row, &column);
    factors[i] = powf(denominator(w, x, x.at(image, row, column), k, e.c.divisor), -w.beta);
  }
}

// Pass 2 of the forward: y_i = x_i * factors[i]. Each element reads only
// itself, so y may be x.
template <class Index>
__global__ void forward_apply(Extents<Index> e, Strided<Index> x, Strided<Index> y, const float* factors,
                              Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index k = e.element(i, &image, &row, &column);
    y.store(y.at(image, k, row, column), x.load(x.at(image, k, row, column)) * factors[i]);
  }
}

// Pass 1 of the gradient: factors[i] = L_i^-beta and
// factors[elements + i] = dy_i x_i L_i^(-beta-1). Reads dy and x only.
template <class Index>
__global__ void gradient_factors(CrossChannelWindow w, Extents<Index> e, Strided<Index> dy, Strided<Index> x,
                                 float* factors, Index elements) {
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index k = e.element(i, &image, &row, &column);
    const float l = denominator(w, x, x.at(image, row, column), k, e.c.divisor);
    const float power = powf(l, -w.beta);
    factors[i] = power;
    factors[elements + i] = dy.load(dy.at(image, k, row, column)) * x.load(x.at(image, k, row, column)) * power / l;
  }
}

// Pass 2 of the gradient: dx_j = dy_j factors[j] - 2 scale beta x_j * the sum
// of factors[elements + k] over k in [j - after, j + before]. Each element
// reads only itself of dy and x, so dx may be either.
template <class Index>
__global__ void gradient_apply(CrossChannelWindow w, Extents<Index> e, Strided<Index> dy, Strided<Index> x,
                               Strided<Index> dx, const float* factors, Index elements) {
  const Index channels = e.c.divisor;
  for (Index i = grid_first<Index>(); i < elements; i += grid_step<Index>()) {
    Index image, row, column;
    const Index j = e.element(i, &image, &row, &column);
    const Index first = j > static_cast<Index>(w.after) ? j - static_cast<Index>(w.after) : Index(0);
    const Index last = j + static_cast<Index>(w.before) < channels ? j + static_cast<Index>(w.before) : channels - 1;
    const Index pixel_first = i - j;  // element index of channel 0 of this pixel
    float sum = 0.0f;
    for (Index k = first; k <= last; ++k) sum += factors[elements + pixel_first + k];
    const float value = dy.load(dy.at(image, j, row, column)) * factors[i] -
                        2.0f * w.scale * w.beta * x.load(x.at(image, j, row, column)) * sum;
    dx.store(dx.at(image, j, row, column), value);
  }
}

}  // namespace

void cross_channel_normalization_forward(const CrossChannelWindow& window, const ImageRegion& x,
                                         const ImageRegion& y, float* factors, cudaStream_t stream) {
  const int64_t elements = x.n * x.h * x.w * x.c;
  if (elements == 0) return;
  with_index(narrow_indices(elements, {x, y}), [&](auto index) {
    using Index = decltype(index);
    const Index count = static_cast<Index>(elements);
    forward_factors<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(x), Strided<Index>(x), factors, count);
    forward_apply<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        Extents<Index>(x), Strided<Index>(x), Strided<Index>(y), factors, count);
  });
}

void cross_channel_normalization_gradient(const CrossChannelWindow& window, const ImageRegion& dy,
                                          const ImageRegion& x, const ImageRegion& dx, float* factors,
                                          cudaStream_t stream) {
  const int64_t elements = dy.n * dy.h * dy.w * dy.c;
  if (elements == 0) return;
  // The second half of factors is indexed up to 2 * elements.
  with_index(narrow_indices(2 * elements, {dy, x, dx}), [&](auto index) {
    using Index = decltype(index);
    const Index count = static_cast<Index>(elements);
    gradient_factors<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(dy), Strided<Index>(dy), Strided<Index>(x), factors, count);
    gradient_apply<Index><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(
        window, Extents<Index>(dy), Strided<Index>(dy), Strided<Index>(x), Strided<Index>(dx), factors, count);
  });
}

}  // namespace mpsx::cuda
