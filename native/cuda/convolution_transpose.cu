#include "convolution_transpose.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// Filter element (k, r, s, c) of group g = k / (in / groups) is weight
// (g * out / groups + c, kh - 1 - r, kw - 1 - s, k % (in / groups)).
__device__ __forceinline__ int64_t weight_index(const TransposeFilterShape& t, int64_t f) {
  const int64_t per_in = t.input_channels / t.groups, per_out = t.output_channels / t.groups;
  int64_t c = f % per_out, rest = f / per_out;
  int64_t s = rest % t.kernel_width;
  rest /= t.kernel_width;
  int64_t r = rest % t.kernel_height, k = rest / t.kernel_height;
  int64_t o = (k / per_in) * per_out + c;
  return ((o * t.kernel_height + t.kernel_height - 1 - r) * t.kernel_width + t.kernel_width - 1 - s) * per_in +
         k % per_in;
}

__global__ void filter_kernel(const float* from, float* to, TransposeFilterShape t, int64_t count, bool to_filter) {
  for (int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; f < count; f += int64_t(gridDim.x) * blockDim.x) {
    int64_t w = weight_index(t, f);
    if (to_filter)
      to[f] = from[w];
    else
      to[w] = from[f];
  }
}

int64_t count_of(const TransposeFilterShape& t) {
  return t.output_channels * t.kernel_height * t.kernel_width * (t.input_channels / t.groups);
}

}  // namespace

void filter_of_weights(const float* weights, float* filter, const TransposeFilterShape& shape, cudaStream_t stream) {
  int64_t count = count_of(shape);
  filter_kernel<<<blocks_for(count), 256, 0, stream>>>(weights, filter, shape, count, true);
}

void weights_of_filter(const float* filter, float* weights, const TransposeFilterShape& shape, cudaStream_t stream) {
  int64_t count = count_of(shape);
  filter_kernel<<<blocks_for(count), 256, 0, stream>>>(filter, weights, shape, count, false);
}

}  // namespace mpsx::cuda
