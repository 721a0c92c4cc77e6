#include "initial_gradient.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per element of y.
template <class Index>
__global__ void ones_kernel(Extents<Index> e, Strided<Index> y, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    y.store(y.at(image, c, row, column), 1.0f);
  }
}

}  // namespace

void initial_gradient(const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  with_index(narrow_indices(count, {y}), [&](auto index) {
    using Index = decltype(index);
    ones_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(Extents<Index>(y), Strided<Index>(y),
                                                              static_cast<Index>(count));
  });
}

}  // namespace mpsx::cuda
