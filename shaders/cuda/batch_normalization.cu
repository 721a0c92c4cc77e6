#include "batch_normalization.cuh"

#include "elements.cuh"
#include "neuron_math.cuh"

namespace mpsx::cuda {
namespace {

// Pixels each thread sums in float before the block folds the sums in
// double: few enough for float's precision about the shift.
constexpr int64_t kPixelsPerThread = 32;
constexpr unsigned kThreads = 256;

// Blocks of kThreads threads: threadIdx.x picks a channel of a tile of
// adjacent channels (coalesced: channels are innermost), threadIdx.y a
// pixel of a chunk; grid x runs over pixel chunks, grid y over channel tiles.
struct Tiling {
  dim3 grid, block;
  int64_t chunk_pixels, chunks;
};

Tiling tiling_of(const ImageRegion& r) {
  unsigned width = 1;
  while (width < 32 && width < r.c) width *= 2;
  const unsigned rows = kThreads / width;
  const int64_t pixels = r.n * r.h * r.w;
  Tiling t;
  t.block = dim3(width, rows);
  t.chunk_pixels = rows * kPixelsPerThread;
  t.chunks = (pixels + t.chunk_pixels - 1) / t.chunk_pixels;
  t.grid = dim3(static_cast<unsigned>(t.chunks), static_cast<unsigned>((r.c + width - 1) / width));
  return t;
}

// The element offset of pixel p's channel 0, pixels counted in (n, y, x) order.
__device__ __forceinline__ int64_t pixel_offset(const ImageRegion& r, int64_t p) {
  const int64_t x = p % r.w;
  const int64_t rest = p / r.w;
  return (rest / r.h) * r.stride.n + (rest % r.h) * r.stride.h + x * r.stride.w;
}

// The thread's channel; the first of its pixels in its block's chunk, and the chunk's end.
__device__ __forceinline__ int64_t tile_channel() { return int64_t(blockIdx.y) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ void chunk_of(const ImageRegion& r, int64_t chunk_pixels, int64_t* first, int64_t* end) {
  *first = int64_t(blockIdx.x) * chunk_pixels + threadIdx.y;
  *end = min(r.n * r.h * r.w, (int64_t(blockIdx.x) + 1) * chunk_pixels);
}

// Folds the threads' float sums of each channel of the block in double and
// writes them as the chunk's partial sums: sums[chunk][0 or 1][channel].
__device__ void write_block_sums(float first, float second, int64_t channel, int64_t channels, double* sums) {
  __shared__ double folded[2][kThreads];
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  folded[0][t] = first;
  folded[1][t] = second;
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      folded[0][t] += folded[0][t + half * blockDim.x];
      folded[1][t] += folded[1][t + half * blockDim.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && channel < channels) {
    double* chunk = sums + int64_t(blockIdx.x) * 2 * channels;
    chunk[channel] = folded[0][t];
    chunk[channels + channel] = folded[1][t];
  }
}

// The totals of a channel's partial sums over the chunks, on thread 0 of a
// block of kThreads threads (one block per channel).
__device__ void fold_chunks(const double* sums, int64_t chunks, int64_t channels, int64_t channel, double* first,
                            double* second) {
  __shared__ double folded[2][kThreads];
  double a = 0.0, b = 0.0;
  for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) {
    a += sums[k * 2 * channels + channel];
    b += sums[(k * 2 + 1) * channels + channel];
  }
  folded[0][threadIdx.x] = a;
  folded[1][threadIdx.x] = b;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      folded[0][threadIdx.x] += folded[0][threadIdx.x + half];
      folded[1][threadIdx.x] += folded[1][threadIdx.x + half];
    }
    __syncthreads();
  }
  *first = folded[0][0];
  *second = folded[1][0];
}

// z = x * a + b is the value the fused neuron sees.
__device__ __forceinline__ void pre_activation(const ChannelParameters& p, int64_t c, float* a, float* b) {
  const double scale = p.gamma[c] / sqrt(static_cast<double>(p.variance[c]) + p.epsilon);
  *a = static_cast<float>(scale);
  *b = static_cast<float>(p.beta[c] - p.mean[c] * scale);
}

// Sums of x - shift and its square, the shift being the first pixel's value:
// about it, E[x^2] - E[x]^2 stays well conditioned for large means.
__global__ void moments_kernel(ImageRegion x, int64_t chunk_pixels, double* sums) {
  const int64_t c = tile_channel();
  float s = 0.0f, q = 0.0f;
  if (c < x.c) {
    const int64_t channel = c * x.stride.c;
    const float shift = load(x.data, channel, x.data_type);
    int64_t i, end;
    chunk_of(x, chunk_pixels, &i, &end);
    for (; i < end; i += blockDim.y) {
      const float d = load(x.data, pixel_offset(x, i) + channel, x.data_type) - shift;
      s += d;
      q += d * d;
    }
  }
  write_block_sums(s, q, c, x.c, sums);
}

__global__ void statistics_kernel(ImageRegion x, const double* sums, int64_t chunks, float* mean, float* variance) {
  const int64_t c = blockIdx.x;
  double sum, squares;
  fold_chunks(sums, chunks, x.c, c, &sum, &squares);
  if (threadIdx.x != 0) return;
  const double count = static_cast<double>(x.n * x.h * x.w);
  const double m = sum / count;
  mean[c] = static_cast<float>(load(x.data, c * x.stride.c, x.data_type) + m);
  variance[c] = static_cast<float>(fmax(squares / count - m * m, 0.0));
}

__global__ void normalize_kernel(NeuronParameters neuron, ImageRegion x, ImageRegion y, ChannelParameters p,
                                 int64_t chunk_pixels) {
  const int64_t c = tile_channel();
  if (c >= x.c) return;
  float a, b;
  pre_activation(p, c, &a, &b);
  int64_t i, end;
  chunk_of(x, chunk_pixels, &i, &end);
  for (; i < end; i += blockDim.y) {
    const float z = load(x.data, pixel_offset(x, i) + c * x.stride.c, x.data_type) * a + b;
    store(y.data, pixel_offset(y, i) + c * y.stride.c, y.data_type, forward_value(neuron, z, c));
  }
}

// Sums of dz and dz * (x - mean).
__global__ void products_kernel(NeuronParameters neuron, ImageRegion dy, ImageRegion x, ChannelParameters p,
                                int64_t chunk_pixels, double* sums) {
  const int64_t c = tile_channel();
  float s = 0.0f, q = 0.0f;
  if (c < x.c) {
    float a, b;
    pre_activation(p, c, &a, &b);
    const float mean = p.mean[c];
    int64_t i, end;
    chunk_of(x, chunk_pixels, &i, &end);
    for (; i < end; i += blockDim.y) {
      const float v = load(x.data, pixel_offset(x, i) + c * x.stride.c, x.data_type);
      const float dz = load(dy.data, pixel_offset(dy, i) + c * dy.stride.c, dy.data_type) * derivative(neuron, v * a + b, c);
      s += dz;
      q += dz * (v - mean);
    }
  }
  write_block_sums(s, q, c, x.c, sums);
}

__global__ void gamma_and_beta_gradient_kernel(const double* sums, int64_t chunks, int64_t channels,
                                               const float* variance, float epsilon, float* gradient_for_gamma,
                                               float* gradient_for_beta) {
  const int64_t c = blockIdx.x;
  double sum, products;
  fold_chunks(sums, chunks, channels, c, &sum, &products);
  if (threadIdx.x != 0) return;
  gradient_for_beta[c] = static_cast<float>(sum);
  gradient_for_gamma[c] = static_cast<float>(products / sqrt(static_cast<double>(variance[c]) + epsilon));
}

// dx = gamma / sigma * (dz - (sum dz + xhat * sum dz xhat) / count) = dz * A + x * B + D.
__global__ void gradient_kernel(NeuronParameters neuron, ImageRegion dy, ImageRegion x, ImageRegion dx,
                                ChannelParameters p, const float* gradient_for_gamma, const float* gradient_for_beta,
                                double count, int64_t chunk_pixels) {
  const int64_t c = tile_channel();
  if (c >= x.c) return;
  const double inverse_sigma = 1.0 / sqrt(static_cast<double>(p.variance[c]) + p.epsilon);
  const double scale = p.gamma[c] * inverse_sigma;
  const double slope = -scale * inverse_sigma * gradient_for_gamma[c] / count;
  const float A = static_cast<float>(scale), B = static_cast<float>(slope);
  const float D = static_cast<float>(-slope * p.mean[c] - scale * gradient_for_beta[c] / count);
  float a, b;
  pre_activation(p, c, &a, &b);
  int64_t i, end;
  chunk_of(x, chunk_pixels, &i, &end);
  for (; i < end; i += blockDim.y) {
    const float v = load(x.data, pixel_offset(x, i) + c * x.stride.c, x.data_type);
    float value = v * B + D;
    if (dy.data) {
      const float dz = load(dy.data, pixel_offset(dy, i) + c * dy.stride.c, dy.data_type) * derivative(neuron, v * a + b, c);
      value = dz * A + v * B + D;
    }
    store(dx.data, pixel_offset(dx, i) + c * dx.stride.c, dx.data_type, value);
  }
}

__global__ void running_statistics_kernel(int64_t channels, const float* mean, const float* variance,
                                          const float* batch_mean, const float* batch_variance, float momentum,
                                          float bessel, float* result_mean, float* result_variance) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    result_mean[c] = (1.0f - momentum) * mean[c] + momentum * batch_mean[c];
    result_variance[c] = (1.0f - momentum) * variance[c] + momentum * bessel * batch_variance[c];
  }
}

}  // namespace

size_t batch_normalization_sums_bytes(const ImageRegion& x) {
  return static_cast<size_t>(tiling_of(x).chunks * 2 * x.c) * sizeof(double);
}

void batch_normalization_statistics(const ImageRegion& x, float* mean, float* variance, void* sums,
                                    cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const Tiling t = tiling_of(x);
  double* partial = static_cast<double*>(sums);
  moments_kernel<<<t.grid, t.block, 0, stream>>>(x, t.chunk_pixels, partial);
  statistics_kernel<<<static_cast<unsigned>(x.c), kThreads, 0, stream>>>(x, partial, t.chunks, mean, variance);
}

void batch_normalization_normalize(const NeuronParameters& neuron, const ImageRegion& x, const ImageRegion& y,
                                   const ChannelParameters& p, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const Tiling t = tiling_of(x);
  normalize_kernel<<<t.grid, t.block, 0, stream>>>(neuron, x, y, p, t.chunk_pixels);
}

void batch_normalization_statistics_gradient(const NeuronParameters& neuron, const ImageRegion& dy,
                                             const ImageRegion& x, const ChannelParameters& p,
                                             float* gradient_for_gamma, float* gradient_for_beta, void* sums,
                                             cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const Tiling t = tiling_of(x);
  double* partial = static_cast<double*>(sums);
  products_kernel<<<t.grid, t.block, 0, stream>>>(neuron, dy, x, p, t.chunk_pixels, partial);
  gamma_and_beta_gradient_kernel<<<static_cast<unsigned>(x.c), kThreads, 0, stream>>>(
      partial, t.chunks, x.c, p.variance, p.epsilon, gradient_for_gamma, gradient_for_beta);
}

void batch_normalization_gradient(const NeuronParameters& neuron, const ImageRegion& dy, const ImageRegion& x,
                                  const ImageRegion& dx, const ChannelParameters& p, const float* gradient_for_gamma,
                                  const float* gradient_for_beta, int64_t count, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const Tiling t = tiling_of(x);
  gradient_kernel<<<t.grid, t.block, 0, stream>>>(neuron, dy, x, dx, p, gradient_for_gamma, gradient_for_beta,
                                                  static_cast<double>(count), t.chunk_pixels);
}

void batch_normalization_update_running_statistics(int64_t channels, const float* mean, const float* variance,
                                                   const float* batch_mean, const float* batch_variance,
                                                   float momentum, float bessel, float* result_mean,
                                                   float* result_variance, cudaStream_t stream) {
  if (channels == 0) return;
  running_statistics_kernel<<<blocks_for(channels), 256, 0, stream>>>(
      channels, mean, variance, batch_mean, batch_variance, momentum, bessel, result_mean, result_variance);
}

}  // namespace mpsx::cuda
