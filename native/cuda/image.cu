#include "image.cuh"

#include "channels.cuh"
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

// Dense regions of one order: a flat pass, a vector at a time, float32 and
// float16 either way (a convolution's filters converted for cuDNN and back).
template <class From, class To>
__global__ void dense_copy_kernel(const From* from, To* to, int64_t vectors) {
  for (int64_t i = grid_first<int64_t>(); i < vectors; i += grid_step<int64_t>()) {
    float values[kVectorWidth];
    load_vector<From, kVectorWidth>(from, i * kVectorWidth, values);
    store_vector<To, kVectorWidth>(to, i * kVectorWidth, values);
  }
}

bool vector_aligned(const ImageRegion& r) {
  return (r.data_type == DataType::Float32 || r.data_type == DataType::Float16) && dense_nhwc(r) &&
         reinterpret_cast<uintptr_t>(r.data) % (kVectorWidth * size_of(r.data_type)) == 0;
}

// Launches dense_copy_kernel where the regions allow it; false otherwise.
bool copy_dense(const ImageRegion& from, const ImageRegion& to, cudaStream_t stream) {
  const int64_t count = from.element_count();
  if (!same_extents(from, to) || count % kVectorWidth || !vector_aligned(from) || !vector_aligned(to)) return false;
  const int64_t vectors = count / kVectorWidth;
  auto launch = [&](auto source, auto destination) {
    using From = decltype(source);
    using To = decltype(destination);
    dense_copy_kernel<From, To><<<blocks_for(vectors), 256, 0, stream>>>(static_cast<const From*>(from.data),
                                                                         static_cast<To*>(to.data), vectors);
  };
  auto to_type = [&](auto source) {
    if (to.data_type == DataType::Float32) launch(source, float{});
    else launch(source, __half{});
  };
  if (from.data_type == DataType::Float32) to_type(float{});
  else to_type(__half{});
  return true;
}

}  // namespace

void copy_region(const ImageRegion& from, const ImageRegion& to, cudaStream_t stream) {
  const int64_t count = from.element_count();
  if (count == 0 || copy_dense(from, to, stream)) return;
  with_index(narrow_indices(count, {from, to}), [&](auto index) {
    using Index = decltype(index);
    copy_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(Extents<Index>(from), Strided<Index>(from),
                                                              Strided<Index>(to), static_cast<Index>(count));
  });
}

}  // namespace mpsx::cuda
