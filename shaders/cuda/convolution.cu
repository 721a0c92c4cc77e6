#include "convolution.cuh"

#include <algorithm>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

template <bool kAdd>
__global__ void biases_kernel(ImageRegion r, const float* biases, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c;
    int64_t o = offset_of_index(r, i, &c);
    store(r.data, o, r.data_type, kAdd ? load(r.data, o, r.data_type) + biases[c] : biases[c]);
  }
}

template <bool kAdd>
void launch_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  int64_t count = region.element_count();
  if (count == 0) return;
  biases_kernel<kAdd><<<blocks_for(count), 256, 0, stream>>>(region, biases, count);
}

// Channel sums in two passes: blocks of 32 channels (coalesced along NHWC's
// innermost channels) by 8 pixel rows each sum a fixed share of the pixels
// into partials[chunk][channel]; then each channel adds its chunks in order.
constexpr int kSumChannels = 32, kSumRows = 8;
constexpr int64_t kPixelsPerChunk = 256, kMaxChunks = 1024;

int64_t chunks_for(const ImageRegion& r) {
  int64_t pixels = r.n * r.h * r.w;
  return std::min(kMaxChunks, std::max<int64_t>(1, (pixels + kPixelsPerChunk - 1) / kPixelsPerChunk));
}

__global__ void partial_sums_kernel(ImageRegion r, float* partials) {
  __shared__ float rows[kSumRows][kSumChannels + 1];
  const int64_t c = blockIdx.x * int64_t(kSumChannels) + threadIdx.x;
  const int64_t pixels = r.n * r.h * r.w;
  float sum = 0.0f;
  if (c < r.c)
    for (int64_t p = blockIdx.y * int64_t(kSumRows) + threadIdx.y; p < pixels; p += int64_t(gridDim.y) * kSumRows) {
      int64_t x = p % r.w, rest = p / r.w;
      sum += load(r.data, offset_of(r, rest / r.h, c, rest % r.h, x), r.data_type);
    }
  rows[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < r.c) {
    float total = 0.0f;
    for (int i = 0; i < kSumRows; ++i) total += rows[i][threadIdx.x];
    partials[blockIdx.y * r.c + c] = total;
  }
}

__global__ void total_sums_kernel(const float* partials, int64_t chunks, int64_t channels, float* sums) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    float total = 0.0f;
    for (int64_t j = 0; j < chunks; ++j) total += partials[j * channels + c];
    sums[c] = total;
  }
}

}  // namespace

void fill_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  launch_biases<false>(region, biases, stream);
}

void add_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  launch_biases<true>(region, biases, stream);
}

size_t channel_sums_scratch_bytes(const ImageRegion& region) {
  return static_cast<size_t>(chunks_for(region) * region.c) * sizeof(float);
}

void channel_sums(const ImageRegion& region, float* sums, float* partials, cudaStream_t stream) {
  if (region.c == 0) return;
  int64_t chunks = chunks_for(region);
  dim3 grid(static_cast<unsigned>((region.c + kSumChannels - 1) / kSumChannels), static_cast<unsigned>(chunks));
  partial_sums_kernel<<<grid, dim3(kSumChannels, kSumRows), 0, stream>>>(region, partials);
  total_sums_kernel<<<blocks_for(region.c), 256, 0, stream>>>(partials, chunks, region.c, sums);
}

}  // namespace mpsx::cuda
