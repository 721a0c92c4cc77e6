#include "reduction.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per pixel of y.
template <class Index>
__global__ void feature_channels_sum_kernel(Extents<Index> e, Strided<Index> x, Strided<Index> y, Index channels,
                                            float weight, Index count) {
  for (Index p = grid_first<Index>(); p < count; p += grid_step<Index>()) {
    Index image, row, column;
    e.pixel(p, &image, &row, &column);
    const Index first = x.at(image, row, column);
    float sum = 0.0f;
    for (Index c = 0; c < channels; ++c) sum += weight * x.load(first + c * x.c);
    y.store(y.at(image, row, column), sum);
  }
}

}  // namespace

void feature_channels_sum(const ImageRegion& x, const ImageRegion& y, float weight, cudaStream_t stream) {
  const int64_t count = y.n * y.h * y.w;
  if (count == 0) return;
  with_index(narrow_indices(count, {x, y}), [&](auto index) {
    using Index = decltype(index);
    feature_channels_sum_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(
        Extents<Index>(y), Strided<Index>(x), Strided<Index>(y), static_cast<Index>(x.c), weight,
        static_cast<Index>(count));
  });
}

}  // namespace mpsx::cuda
