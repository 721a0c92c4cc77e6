#include "softmax.cuh"

#include <math.h>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

constexpr unsigned kThreads = 256;  // 8 warps a block, one pixel a warp at a time
constexpr unsigned kWarp = 32;

// v folded over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The calling thread's lane, its warp's first pixel and the step between a
// warp's pixels. All lanes of a warp take the same pixels, so the shuffles
// above always run with the whole warp.
template <class Index>
struct Warps {
  Index lane, first, step;
  __device__ __forceinline__ Warps()
      : lane(static_cast<Index>(threadIdx.x % kWarp)),
        first((static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp),
        step(static_cast<Index>(gridDim.x) * (blockDim.x / kWarp)) {}
};

// Per pixel: the max over the channels, the sum of exp(x - max), then the
// results. Each lane writes only channels it read itself, after both
// reductions, so x may be y.
template <bool Log, class Index>
__global__ void forward_kernel(Extents<Index> e, Strided<Index> x, Strided<Index> y, Index channels, Index pixels) {
  const Warps<Index> w;
  for (Index p = w.first; p < pixels; p += w.step) {
    Index image, row, column;
    e.pixel(p, &image, &row, &column);
    const Index in = x.at(image, row, column), out = y.at(image, row, column);
    float top = -INFINITY;
    for (Index c = w.lane; c < channels; c += kWarp) top = fmaxf(top, x.load(in + c * x.c));
    top = warp_max(top);
    float sum = 0.0f;
    for (Index c = w.lane; c < channels; c += kWarp) sum += expf(x.load(in + c * x.c) - top);
    sum = warp_sum(sum);
    if (Log) {
      // (x - top) is exact; adding top and log(sum) first would round the
      // logarithm away next to a large top.
      const float log_sum = logf(sum);
      for (Index c = w.lane; c < channels; c += kWarp) y.store(out + c * y.c, (x.load(in + c * x.c) - top) - log_sum);
    } else {
      const float scale = 1.0f / sum;
      for (Index c = w.lane; c < channels; c += kWarp) y.store(out + c * y.c, expf(x.load(in + c * x.c) - top) * scale);
    }
  }
}

// Per pixel: softmax: s = sum_c dy_c y_c, dx_k = y_k (dy_k - s); log-softmax:
// s = sum_c dy_c, dx_k = dy_k - exp(y_k) s. dx may be dy.
template <bool Log, class Index>
__global__ void gradient_kernel(Extents<Index> e, Strided<Index> dy, Strided<Index> y, Strided<Index> dx,
                                Index channels, Index pixels) {
  const Warps<Index> w;
  for (Index p = w.first; p < pixels; p += w.step) {
    Index image, row, column;
    e.pixel(p, &image, &row, &column);
    const Index g = dy.at(image, row, column), r = y.at(image, row, column), out = dx.at(image, row, column);
    float sum = 0.0f;
    for (Index c = w.lane; c < channels; c += kWarp)
      sum += Log ? dy.load(g + c * dy.c) : dy.load(g + c * dy.c) * y.load(r + c * y.c);
    sum = warp_sum(sum);
    for (Index c = w.lane; c < channels; c += kWarp) {
      const float gc = dy.load(g + c * dy.c), rc = y.load(r + c * y.c);
      dx.store(out + c * dx.c, Log ? gc - expf(rc) * sum : rc * (gc - sum));
    }
  }
}

// Blocks for one warp per pixel.
unsigned blocks_for_pixels(int64_t pixels) { return blocks_for(pixels * kWarp, kThreads); }

}  // namespace

void softmax_forward(bool log, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t pixels = x.n * x.h * x.w;
  if (pixels == 0 || x.c == 0) return;
  with_index(narrow_indices(pixels, {x, y}), [&](auto index) {
    using Index = decltype(index);
    auto launch = [&](auto kernel) {
      kernel<<<blocks_for_pixels(pixels), kThreads, 0, stream>>>(Extents<Index>(x), Strided<Index>(x),
                                                                  Strided<Index>(y), static_cast<Index>(x.c),
                                                                  static_cast<Index>(pixels));
    };
    if (log)
      launch(forward_kernel<true, Index>);
    else
      launch(forward_kernel<false, Index>);
  });
}

void softmax_gradient(bool log, const ImageRegion& dy, const ImageRegion& y, const ImageRegion& dx,
                      cudaStream_t stream) {
  const int64_t pixels = dy.n * dy.h * dy.w;
  if (pixels == 0 || dy.c == 0) return;
  with_index(narrow_indices(pixels, {dy, y, dx}), [&](auto index) {
    using Index = decltype(index);
    auto launch = [&](auto kernel) {
      kernel<<<blocks_for_pixels(pixels), kThreads, 0, stream>>>(Extents<Index>(dy), Strided<Index>(dy),
                                                                  Strided<Index>(y), Strided<Index>(dx),
                                                                  static_cast<Index>(dy.c), static_cast<Index>(pixels));
    };
    if (log)
      launch(gradient_kernel<true, Index>);
    else
      launch(gradient_kernel<false, Index>);
  });
}

}  // namespace mpsx::cuda
