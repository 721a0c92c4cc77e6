#include "batch_normalization.cuh"

#include "channels.cuh"
#include "neuron_math.cuh"

namespace mpsx::cuda {
namespace {

// z = x * a + b is the value the fused neuron sees.
__device__ __forceinline__ void pre_activation(const ChannelParameters& p, int64_t c, float* a, float* b) {
  const double scale = p.gamma[c] / sqrt(static_cast<double>(p.variance[c]) + p.epsilon);
  *a = static_cast<float>(scale);
  *b = static_cast<float>(p.beta[c] - p.mean[c] * scale);
}

// Sums of x - shift and its square, the shift being the first pixel's value:
// about it, E[x^2] - E[x]^2 stays well conditioned for large means.
template <class Index>
struct Moments {
  static constexpr int kLoads = 1;
  Strided<Index> x;
  struct Channel {
    Index offset;
    float shift;
  };
  __device__ Channel channel(Index c) const {
    const Index offset = c * x.c;
    return {offset, x.load(offset)};
  }
  __device__ void load(const Channel& k, Index image, Index row, Index column, float (&values)[1]) const {
    values[0] = x.load(x.at(image, row, column) + k.offset);
  }
  __device__ void add(const Channel& k, const float (&values)[1], float (&sums)[2]) const {
    const float d = values[0] - k.shift;
    sums[0] += d;
    sums[1] += d * d;
  }
};

// The statistics of x's `count` values per channel, merged into mean and
// variance, which hold those of `before` earlier values (0: replaced).
template <class Index>
struct Statistics {
  Strided<Index> x;
  double count, before;
  float *mean, *variance;
  __device__ void operator()(int64_t c, const double (&sums)[2]) const {
    const double m = sums[0] / count;
    const double batch_mean = x.load(static_cast<Index>(c) * x.c) + m;
    const double batch_variance = fmax(sums[1] / count - m * m, 0.0);
    if (before == 0) {
      mean[c] = static_cast<float>(batch_mean);
      variance[c] = static_cast<float>(batch_variance);
      return;
    }
    // Chan's parallel formula.
    const double total = before + count, delta = batch_mean - mean[c];
    const double merged_mean = mean[c] + delta * (count / total);
    const double merged_variance =
        (variance[c] * before + batch_variance * count) / total + delta * delta * (before / total) * (count / total);
    mean[c] = static_cast<float>(merged_mean);
    variance[c] = static_cast<float>(merged_variance);
  }
};

// Sums of dz and dz * (x - mean).
template <class Index>
struct Products {
  static constexpr int kLoads = 2;
  NeuronParameters neuron;
  Strided<Index> dy, x;
  ChannelParameters p;
  struct Channel {
    Index c, dy, x;  // the channel and its offsets
    float a, b, mean;
  };
  __device__ Channel channel(Index c) const {
    Channel k{c, c * dy.c, c * x.c, 0.0f, 0.0f, p.mean[c]};
    pre_activation(p, c, &k.a, &k.b);
    return k;
  }
  __device__ void load(const Channel& k, Index image, Index row, Index column, float (&values)[2]) const {
    values[0] = dy.load(dy.at(image, row, column) + k.dy);
    values[1] = x.load(x.at(image, row, column) + k.x);
  }
  __device__ void add(const Channel& k, const float (&values)[2], float (&sums)[2]) const {
    const float v = values[1], dz = values[0] * derivative(neuron, v * k.a + k.b, k.c);
    sums[0] += dz;
    sums[1] += dz * (v - k.mean);
  }
};

// With `accumulate` the sums are added to those already there.
struct GammaAndBetaGradients {
  const float* variance;
  float epsilon;
  float *gradient_for_gamma, *gradient_for_beta;
  bool accumulate;
  __device__ void operator()(int64_t c, const double (&sums)[2]) const {
    double for_beta = sums[0];
    double for_gamma = sums[1] / sqrt(static_cast<double>(variance[c]) + epsilon);
    if (accumulate) {
      for_beta += gradient_for_beta[c];
      for_gamma += gradient_for_gamma[c];
    }
    gradient_for_beta[c] = static_cast<float>(for_beta);
    gradient_for_gamma[c] = static_cast<float>(for_gamma);
  }
};

template <class Index>
__global__ void normalize_kernel(ChannelChunks<Index> chunks, NeuronParameters neuron, Strided<Index> x,
                                 Strided<Index> y, ChannelParameters p, float* kept_gamma, float* kept_beta) {
  const Index c = chunks.channel();
  if (c >= chunks.channels) return;
  if (kept_gamma && blockIdx.x == 0 && threadIdx.y == 0) {
    kept_gamma[c] = p.gamma[c];
    kept_beta[c] = p.beta[c];
  }
  float a, b;
  pre_activation(p, c, &a, &b);
  const Index from = c * x.c, to = c * y.c;
  float v[kPixelBatch];
  chunks.map_pixels([&](int j, Index image, Index row, Index column) { v[j] = x.load(x.at(image, row, column) + from); },
                    [&](int j, Index image, Index row, Index column) {
                      y.store(y.at(image, row, column) + to, forward_value(neuron, v[j] * a + b, c));
                    });
}

// dx = gamma / sigma * (dz - (sum dz + xhat * sum dz xhat) / count) = dz * A + x * B + D.
template <class Index>
__global__ void gradient_kernel(ChannelChunks<Index> chunks, NeuronParameters neuron, Strided<Index> dy,
                                Strided<Index> x, Strided<Index> dx, ChannelParameters p,
                                const float* gradient_for_gamma, const float* gradient_for_beta, double count) {
  const Index c = chunks.channel();
  if (c >= chunks.channels) return;
  const double inverse_sigma = 1.0 / sqrt(static_cast<double>(p.variance[c]) + p.epsilon);
  const double scale = p.gamma[c] * inverse_sigma;
  const double slope = -scale * inverse_sigma * gradient_for_gamma[c] / count;
  const float A = static_cast<float>(scale), B = static_cast<float>(slope);
  const float D = static_cast<float>(-slope * p.mean[c] - scale * gradient_for_beta[c] / count);
  float a, b;
  pre_activation(p, c, &a, &b);
  const Index from = c * x.c, gradient = c * dy.c, to = c * dx.c;
  float v[kPixelBatch], g[kPixelBatch];
  chunks.map_pixels(
      [&](int j, Index image, Index row, Index column) {
        v[j] = x.load(x.at(image, row, column) + from);
        if (dy.data) g[j] = dy.load(dy.at(image, row, column) + gradient);
      },
      [&](int j, Index image, Index row, Index column) {
        float value = v[j] * B + D;
        if (dy.data) {
          const float dz = g[j] * derivative(neuron, v[j] * a + b, c);
          value = dz * A + v[j] * B + D;
        }
        dx.store(dx.at(image, row, column) + to, value);
      });
}

__global__ void running_statistics_kernel(int64_t channels, const float* mean, const float* variance,
                                          const float* batch_mean, const float* batch_variance, float momentum,
                                          float bessel, float* result_mean, float* result_variance) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    result_mean[c] = (1.0f - momentum) * mean[c] + momentum * batch_mean[c];
    result_variance[c] = (1.0f - momentum) * variance[c] + momentum * bessel * batch_variance[c];
  }
}

// The dense forms (channels.cuh) of the above: a thread's W channels,
// loaded as vectors of T.
template <class T>
__device__ __forceinline__ float scalar(const T* data, int64_t i) {
  if constexpr (sizeof(T) == 4)
    return data[i];
  else
    return __half2float(data[i]);
}

template <class T, int W>
struct DenseMoments {
  static constexpr int kConstants = 1, kLoads = 1;
  const T* x;
  __device__ void constants(int64_t c, float (&k)[1]) const { k[0] = scalar(x, c); }  // the shift
  template <class Index>
  __device__ void load(Index offset, float (&values)[1][W]) const {
    load_vector<T, W>(x, offset, values[0]);
  }
  __device__ void add(int64_t, const float (&k)[1][W], const float (&values)[1][W], float (&sums)[W][2]) const {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float d = values[0][w] - k[0][w];
      sums[w][0] += d;
      sums[w][1] += d * d;
    }
  }
};

template <class T, int W, NeuronType kNeuron>
struct DenseProducts {
  static constexpr int kConstants = 3, kLoads = 2;
  NeuronParameters neuron;
  const T *dy, *x;
  ChannelParameters p;
  __device__ void constants(int64_t c, float (&k)[3]) const {
    pre_activation(p, c, &k[0], &k[1]);
    k[2] = p.mean[c];
  }
  template <class Index>
  __device__ void load(Index offset, float (&values)[2][W]) const {
    load_vector<T, W>(dy, offset, values[0]);
    load_vector<T, W>(x, offset, values[1]);
  }
  __device__ void add(int64_t c, const float (&k)[3][W], const float (&values)[2][W], float (&sums)[W][2]) const {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float v = values[1][w], dz = values[0][w] * fused_derivative<kNeuron>(neuron, v * k[0][w] + k[1][w], c + w);
      sums[w][0] += dz;
      sums[w][1] += dz * (v - k[2][w]);
    }
  }
};

template <class T, class Index, NeuronType kNeuron>
__global__ void dense_normalize_kernel(DenseChunks<Index, kVectorWidth> chunks, NeuronParameters neuron,
                                       const T* x, T* y, ChannelParameters p, float* kept_gamma, float* kept_beta) {
  constexpr int W = kVectorWidth;
  float k[2][W];
  tile_constants(chunks,
                 [&](Index c, float (&values)[2]) {
                   if (kept_gamma && blockIdx.x == 0) {
                     kept_gamma[c] = p.gamma[c];
                     kept_beta[c] = p.beta[c];
                   }
                   pre_activation(p, c, &values[0], &values[1]);
                 },
                 k);
  const Index c = chunks.channel();
  if (c >= chunks.channels) return;
  float v[kPixelBatch][W];
  chunks.map_pixels([&](int j, Index offset) { load_vector<T, W>(x, offset, v[j]); },
                    [&](int j, Index offset) {
                      float out[W];
#pragma unroll
                      for (int w = 0; w < W; ++w)
                        out[w] = fused_forward<kNeuron>(neuron, v[j][w] * k[0][w] + k[1][w], c + w);
                      store_vector<T, W>(y, offset, out);
                    });
}

// dx = dz * A + x * B + D, as gradient_kernel.
template <class T, class Index, NeuronType kNeuron>
__global__ void dense_gradient_kernel(DenseChunks<Index, kVectorWidth> chunks, NeuronParameters neuron,
                                      const T* dy, const T* x, T* dx, ChannelParameters p,
                                      const float* gradient_for_gamma, const float* gradient_for_beta,
                                      double count) {
  constexpr int W = kVectorWidth;
  float k[5][W];  // A, B, D, a, b
  tile_constants(chunks,
                 [&](Index c, float (&values)[5]) {
                   const double inverse_sigma = 1.0 / sqrt(static_cast<double>(p.variance[c]) + p.epsilon);
                   const double scale = p.gamma[c] * inverse_sigma;
                   const double slope = -scale * inverse_sigma * gradient_for_gamma[c] / count;
                   values[0] = static_cast<float>(scale);
                   values[1] = static_cast<float>(slope);
                   values[2] = static_cast<float>(-slope * p.mean[c] - scale * gradient_for_beta[c] / count);
                   pre_activation(p, c, &values[3], &values[4]);
                 },
                 k);
  const Index c = chunks.channel();
  if (c >= chunks.channels) return;
  float v[kPixelBatch][W], g[kPixelBatch][W];
  chunks.map_pixels(
      [&](int j, Index offset) {
        load_vector<T, W>(x, offset, v[j]);
        if (dy) load_vector<T, W>(dy, offset, g[j]);
      },
      [&](int j, Index offset) {
        float out[W];
#pragma unroll
        for (int w = 0; w < W; ++w) {
          out[w] = v[j][w] * k[1][w] + k[2][w];
          if (dy) out[w] += g[j][w] * fused_derivative<kNeuron>(neuron, v[j][w] * k[3][w] + k[4][w], c + w) * k[0][w];
        }
        store_vector<T, W>(dx, offset, out);
      });
}

}  // namespace

size_t batch_normalization_sums_bytes(const ImageRegion& x) {
  return channel_partials_bytes(x, 2);
}

void batch_normalization_statistics(const ImageRegion& x, float* mean, float* variance, int64_t before, void* sums,
                                    cudaStream_t stream) {
  if (x.element_count() == 0) return;
  if (with_dense_regions(x, {x}, [&](auto type, auto index, const ChannelTiling& t) {
        using T = decltype(type);
        using Index = decltype(index);
        constexpr int W = kVectorWidth;
        sum_dense_channels<2>(t, DenseChunks<Index, W>(t, x), DenseMoments<T, W>{static_cast<const T*>(x.data)},
                              Statistics<Index>{Strided<Index>(x), static_cast<double>(t.pixels),
                                                static_cast<double>(before), mean, variance},
                              static_cast<double*>(sums), stream);
      }))
    return;
  const ChannelTiling t = channel_tiling(x);
  with_index(narrow_indices(t, {x}), [&](auto index) {
    using Index = decltype(index);
    const Strided<Index> from(x);
    sum_channels<2>(t, ChannelChunks<Index>(t, x), Moments<Index>{from},
                    Statistics<Index>{from, static_cast<double>(t.pixels), static_cast<double>(before), mean, variance}, static_cast<double*>(sums),
                    stream);
  });
}

void batch_normalization_normalize(const NeuronParameters& neuron, const ImageRegion& x, const ImageRegion& y,
                                   const ChannelParameters& p, float* kept_gamma, float* kept_beta,
                                   cudaStream_t stream) {
  if (x.element_count() == 0) return;
  if (with_dense_regions(x, {x, y}, [&](auto type, auto index, const ChannelTiling& t) {
        with_fused_neuron(neuron.type, [&](auto fused) {
          using T = decltype(type);
          using Index = decltype(index);
          dense_normalize_kernel<T, Index, decltype(fused)::value><<<t.grid, t.block, 0, stream>>>(
              DenseChunks<Index, kVectorWidth>(t, x), neuron, static_cast<const T*>(x.data),
              static_cast<T*>(y.data), p, kept_gamma, kept_beta);
        });
      }))
    return;
  const ChannelTiling t = channel_tiling(x);
  with_index(narrow_indices(t, {x, y}), [&](auto index) {
    using Index = decltype(index);
    normalize_kernel<Index><<<t.grid, t.block, 0, stream>>>(ChannelChunks<Index>(t, x), neuron, Strided<Index>(x),
                                                            Strided<Index>(y), p, kept_gamma, kept_beta);
  });
}

void batch_normalization_statistics_gradient(const NeuronParameters& neuron, const ImageRegion& dy,
                                             const ImageRegion& x, const ChannelParameters& p,
                                             float* gradient_for_gamma, float* gradient_for_beta, bool accumulate,
                                             void* sums, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const GammaAndBetaGradients finish{p.variance, p.epsilon, gradient_for_gamma, gradient_for_beta, accumulate};
  if (with_dense_regions(x, {dy, x}, [&](auto type, auto index, const ChannelTiling& t) {
        with_fused_neuron(neuron.type, [&](auto fused) {
          using T = decltype(type);
          using Index = decltype(index);
          constexpr int W = kVectorWidth;
          sum_dense_channels<2>(t, DenseChunks<Index, W>(t, x),
                                DenseProducts<T, W, decltype(fused)::value>{neuron, static_cast<const T*>(dy.data),
                                                                            static_cast<const T*>(x.data), p},
                                finish, static_cast<double*>(sums), stream);
        });
      }))
    return;
  const ChannelTiling t = channel_tiling(x);
  with_index(narrow_indices(t, {dy, x}), [&](auto index) {
    using Index = decltype(index);
    sum_channels<2>(t, ChannelChunks<Index>(t, x), Products<Index>{neuron, Strided<Index>(dy), Strided<Index>(x), p},
                    finish, static_cast<double*>(sums), stream);
  });
}

void batch_normalization_gradient(const NeuronParameters& neuron, const ImageRegion& dy, const ImageRegion& x,
                                  const ImageRegion& dx, const ChannelParameters& p, const float* gradient_for_gamma,
                                  const float* gradient_for_beta, int64_t count, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  if (with_dense_regions(x, {dy, x, dx}, [&](auto type, auto index, const ChannelTiling& t) {
        with_fused_neuron(neuron.type, [&](auto fused) {
          using T = decltype(type);
          using Index = decltype(index);
          dense_gradient_kernel<T, Index, decltype(fused)::value><<<t.grid, t.block, 0, stream>>>(
              DenseChunks<Index, kVectorWidth>(t, x), neuron, static_cast<const T*>(dy.data),
              static_cast<const T*>(x.data), static_cast<T*>(dx.data), p, gradient_for_gamma, gradient_for_beta,
              static_cast<double>(count));
        });
      }))
    return;
  const ChannelTiling t = channel_tiling(x);
  with_index(narrow_indices(t, {dy, x, dx}), [&](auto index) {
    using Index = decltype(index);
    gradient_kernel<Index><<<t.grid, t.block, 0, stream>>>(ChannelChunks<Index>(t, x), neuron, Strided<Index>(dy),
                                                           Strided<Index>(x), Strided<Index>(dx), p, gradient_for_gamma,
                                                           gradient_for_beta, static_cast<double>(count));
  });
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
