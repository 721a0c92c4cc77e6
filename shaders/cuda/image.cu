#include "image.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

__global__ void copy_kernel(ImageRegion from, ImageRegion to, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c;
    int64_t f = offset_of_index(from, i, &c);
    int64_t t = offset_of_index(to, i, &c);
    store(to.data, t, to.data_type, load(from.data, f, from.data_type));
  }
}

}  // namespace

void copy_region(const ImageRegion& from, const ImageRegion& to, cudaStream_t stream) {
  int64_t count = from.element_count();
  if (count == 0) return;
  copy_kernel<<<blocks_for(count), 256, 0, stream>>>(from, to, count);
}

}  // namespace mpsx::cuda
