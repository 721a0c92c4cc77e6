#include "group_normalization.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

constexpr int kThreads = 256;

// The sum of every thread's `value` over the block, returned to all threads.
__device__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Element e of a group's per_group x h x w block: its channel, row and column.
struct Group {
  int64_t first_channel, h, w;
  __device__ void element(int64_t e, int64_t* c, int64_t* row, int64_t* column) const {
    *column = e % w;
    *row = (e / w) % h;
    *c = first_channel + e / (w * h);
  }
};

__global__ void forward_kernel(Strided<int64_t> x, Strided<int64_t> y, int64_t groups, int64_t per_group, int64_t h,
                               int64_t w, const float* gamma, const float* beta, float epsilon, float* means,
                               float* variances) {
  __shared__ double shared[kThreads];
  const int64_t pair = blockIdx.x, n = pair / groups;
  const Group g{(pair % groups) * per_group, h, w};
  const int64_t count = per_group * h * w;
  double sum = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    int64_t c, row, column;
    g.element(e, &c, &row, &column);
    sum += x.load(x.at(n, c, row, column));
  }
  const double mean = block_sum(sum, shared) / count;
  double squares = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    int64_t c, row, column;
    g.element(e, &c, &row, &column);
    const double d = x.load(x.at(n, c, row, column)) - mean;
    squares += d * d;
  }
  const double variance = block_sum(squares, shared) / count;
  const double inverse = rsqrt(variance + static_cast<double>(epsilon));
  if (threadIdx.x == 0) {
    means[pair] = static_cast<float>(mean);
    variances[pair] = static_cast<float>(variance);
  }
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    int64_t c, row, column;
    g.element(e, &c, &row, &column);
    const double value = (x.load(x.at(n, c, row, column)) - mean) * inverse * gamma[c] + beta[c];
    y.store(y.at(n, c, row, column), static_cast<float>(value));
  }
}

// One block per channel: sums over images and pixels.
__global__ void parameters_kernel(Strided<int64_t> dy, Strided<int64_t> x, int64_t images, int64_t groups,
                                  int64_t per_group, int64_t h, int64_t w, float epsilon, const float* means,
                                  const float* variances, float* gradient_for_gamma, float* gradient_for_beta) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, count = images * h * w;
  double dgamma = 0.0, dbeta = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    const int64_t column = e % w, row = (e / w) % h, n = e / (w * h);
    const int64_t pair = n * groups + c / per_group;
    const double inverse = rsqrt(static_cast<double>(variances[pair]) + epsilon);
    const double g = dy.load(dy.at(n, c, row, column));
    dgamma += g * (x.load(x.at(n, c, row, column)) - means[pair]) * inverse;
    dbeta += g;
  }
  dgamma = block_sum(dgamma, shared);
  dbeta = block_sum(dbeta, shared);
  if (threadIdx.x == 0) {
    gradient_for_gamma[c] = static_cast<float>(dgamma);
    gradient_for_beta[c] = static_cast<float>(dbeta);
  }
}

// dx = r (g - mean(g) - x^ mean(g x^)), g = dy gamma, per (image, group).
__global__ void source_kernel(Strided<int64_t> dy, Strided<int64_t> x, Strided<int64_t> dx, int64_t groups,
                              int64_t per_group, int64_t h, int64_t w, const float* gamma, float epsilon,
                              const float* means, const float* variances) {
  __shared__ double shared[kThreads];
  const int64_t pair = blockIdx.x, n = pair / groups;
  const Group grp{(pair % groups) * per_group, h, w};
  const int64_t count = per_group * h * w;
  const double mean = means[pair], inverse = rsqrt(static_cast<double>(variances[pair]) + epsilon);
  double sum = 0.0, products = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    int64_t c, row, column;
    grp.element(e, &c, &row, &column);
    const double g = static_cast<double>(dy.load(dy.at(n, c, row, column))) * gamma[c];
    sum += g;
    products += g * (x.load(x.at(n, c, row, column)) - mean) * inverse;
  }
  const double mean_g = block_sum(sum, shared) / count, mean_gx = block_sum(products, shared) / count;
  for (int64_t e = threadIdx.x; e < count; e += kThreads) {
    int64_t c, row, column;
    grp.element(e, &c, &row, &column);
    const double g = static_cast<double>(dy.load(dy.at(n, c, row, column))) * gamma[c];
    const double xhat = (x.load(x.at(n, c, row, column)) - mean) * inverse;
    dx.store(dx.at(n, c, row, column), static_cast<float>(inverse * (g - mean_g - xhat * mean_gx)));
  }
}

}  // namespace

void group_normalization_forward(const ImageRegion& x, const ImageRegion& y, int64_t groups, const float* gamma,
                                 const float* beta, float epsilon, float* mean, float* variance, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  forward_kernel<<<static_cast<unsigned>(x.n * groups), kThreads, 0, stream>>>(
      Strided<int64_t>(x), Strided<int64_t>(y), groups, x.c / groups, x.h, x.w, gamma, beta, epsilon, mean, variance);
}

void group_normalization_gradient(const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx, int64_t groups,
                                  const float* gamma, float epsilon, const float* mean, const float* variance,
                                  float* gradient_for_gamma, float* gradient_for_beta, cudaStream_t stream) {
  if (x.element_count() == 0) return;
  const int64_t per_group = x.c / groups;
  // gamma and beta first: dx may be dy's memory (the stream orders the two).
  parameters_kernel<<<static_cast<unsigned>(x.c), kThreads, 0, stream>>>(
      Strided<int64_t>(dy), Strided<int64_t>(x), x.n, groups, per_group, x.h, x.w, epsilon, mean, variance,
      gradient_for_gamma, gradient_for_beta);
  source_kernel<<<static_cast<unsigned>(x.n * groups), kThreads, 0, stream>>>(
      Strided<int64_t>(dy), Strided<int64_t>(x), Strided<int64_t>(dx), groups, per_group, x.h, x.w, gamma, epsilon,
      mean, variance);
}

}  // namespace mpsx::cuda
