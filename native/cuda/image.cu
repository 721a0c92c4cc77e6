#include "image.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

template <class Index>
__global__ void copy_kernel(Extents<Index> e, Strided<Index> from, Strided<Index> to, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    to.store(to.at(image, c, row, column), from.load(from.at(image, c, row, column)));
  }
}

}  // namespace

void copy_region(const ImageRegion& from, const ImageRegion& to, cudaStream_t stream) {
  const int64_t count = from.element_count();
  if (count == 0) return;
  with_index(narrow_indices(count, {from, to}), [&](auto index) {
    using Index = decltype(index);
    copy_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(Extents<Index>(from), Strided<Index>(from),
                                                              Strided<Index>(to), static_cast<Index>(count));
  });
}

}  // namespace mpsx::cuda
