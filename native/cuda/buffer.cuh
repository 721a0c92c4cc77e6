// Copies between device buffers, several in one launch: the small copies
// that reloads make in a row (weights and biases, gamma and beta) would
// otherwise cost a launch, or a CUDA graph node, each. A copy from a null
// source fills its destination with zeros (the fills of new states).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace mpsx::cuda {

struct BufferCopies {
  static constexpr int kMax = 64;  // 1.5 KiB of kernel parameters
  int count = 0;
  void* destination[kMax];
  const void* source[kMax];
  size_t bytes[kMax];
};

void copy_buffers(const BufferCopies& copies, cudaStream_t stream);

}  // namespace mpsx::cuda
