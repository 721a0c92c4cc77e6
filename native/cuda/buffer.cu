#include "buffer.cuh"

#include <cstdint>

namespace mpsx::cuda {
namespace {

template <class Unit>
__device__ void copy_units(void* destination, const void* source, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    static_cast<Unit*>(destination)[i] = source ? static_cast<const Unit*>(source)[i] : Unit{};
}

// Grid row y copies copies.*[y], in the widest unit its addresses and size allow.
__global__ void copy_buffers_kernel(BufferCopies copies) {
  const int k = blockIdx.y;
  void* to = copies.destination[k];
  const void* from = copies.source[k];
  const size_t bytes = copies.bytes[k];
  const uintptr_t alignment = reinterpret_cast<uintptr_t>(to) | reinterpret_cast<uintptr_t>(from) | bytes;
  if (alignment % 16 == 0) copy_units<uint4>(to, from, bytes / 16);
  else if (alignment % 4 == 0) copy_units<uint32_t>(to, from, bytes / 4);
  else copy_units<uint8_t>(to, from, bytes);
}

}  // namespace

void copy_buffers(const BufferCopies& copies, cudaStream_t stream) {
  if (copies.count == 0) return;
  size_t largest = 0;
  for (int k = 0; k < copies.count; ++k) largest = copies.bytes[k] > largest ? copies.bytes[k] : largest;
  constexpr unsigned kThreads = 256;
  const size_t blocks = (largest / 16 + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks), copies.count);
  copy_buffers_kernel<<<grid, kThreads, 0, stream>>>(copies);
}

}  // namespace mpsx::cuda
