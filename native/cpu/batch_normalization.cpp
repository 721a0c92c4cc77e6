#include "mpsx/kernels/batch_normalization.h"
#include "mpsx/registry.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend.h"
#include "normalization.h"

namespace mpsx::cpu {
namespace {

// Scratch slots: 0-2 hold float32 copies of float16 regions, 3 the per-thread
// sums, 4 the per-thread values of the fused neuron, 5 per-channel coefficients.
constexpr size_t kSumsSlot = 3, kNeuronSlot = 4, kCoefficientSlot = 5;
// Values the fused neuron works on at a time, so they stay in L1.
constexpr int64_t kNeuronValues = 4096;

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A dense run of `pixels` pixels of `channels` values, as a region.
ImageRegion run_region(const float* data, int64_t pixels, int64_t channels) {
  ImageRegion r;
  r.data = const_cast<float*>(data);
  r.n = r.h = 1;
  r.w = pixels;
  r.c = channels;
  r.stride = ImageLayout{pixels * channels, 1, pixels * channels, channels};
  return r;
}

// s += dz, q += dz * (x - mean) per channel, folded as add_moments. With
// `relu`, dz is the leaky ReLU's gradient at z = x * a + b applied to `g`;
// otherwise g is dz.
MPSX_CPU_LOOP
void add_products(const float* __restrict g, const float* __restrict x, int64_t pixels, int64_t channels,
                  const float* __restrict mean, const float* __restrict a, const float* __restrict b, bool relu,
                  float slope, float* __restrict s, float* __restrict q, double* __restrict sum,
                  double* __restrict products) {
  for (int64_t first = 0; first < pixels; first += kMomentBlock) {
    const int64_t end = std::min(pixels, first + kMomentBlock);
    for (int64_t c = 0; c < channels; ++c) s[c] = q[c] = 0.0f;
    for (int64_t p = first; p < end; ++p) {
      const float* gp = g + p * channels;
      const float* v = x + p * channels;
      for (int64_t c = 0; c < channels; ++c) {
        float dz = gp[c];
        if (relu) dz = v[c] * a[c] + b[c] >= 0.0f ? dz : slope * dz;
        s[c] += dz;
        q[c] += dz * (v[c] - mean[c]);
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      sum[c] += s[c];
      products[c] += q[c];
    }
  }
}

// y = x * a + b per channel, through the leaky ReLU of `slope` with `relu`.
// x and y may be the same values.
MPSX_CPU_LOOP
void scale_shift(const float* x, float* y, int64_t pixels, int64_t channels, const float* __restrict a,
                 const float* __restrict b, bool relu, float slope) {
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < channels; ++c) {
      const float z = x[p * channels + c] * a[c] + b[c];
      y[p * channels + c] = relu && z < 0.0f ? slope * z : z;
    }
}

// dx = dz * A + x * B + D per channel; dz as in add_products.
MPSX_CPU_LOOP
void affine_gradient(const float* __restrict g, const float* __restrict x, float* __restrict dx, int64_t pixels,
                     int64_t channels, const float* __restrict a, const float* __restrict b, bool relu, float slope,
                     const float* __restrict A, const float* __restrict B, const float* __restrict D) {
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = p * channels + c;
      float dz = g[i];
      if (relu) dz = x[i] * a[c] + b[c] >= 0.0f ? dz : slope * dz;
      dx[i] = dz * A[c] + x[i] * B[c] + D[c];
    }
}

// Per-thread partial sums of two per-channel quantities: double totals and
// the float block sums that feed them.
class ChannelSums {
 public:
  ChannelSums(CpuContext& cpu, int64_t channels)
      : channels_(channels),
        stride_(round_up(channels * (2 * sizeof(double) + 2 * sizeof(float)), 64)),  // no false sharing
        threads_(omp_get_max_threads()),
        data_(static_cast<char*>(cpu.scratch(kSumsSlot, static_cast<size_t>(threads_ * stride_)))) {
    std::fill_n(data_, threads_ * stride_, 0);
  }
  // The calling thread's sums: first, second (double) and their block sums (float).
  double* first() const { return reinterpret_cast<double*>(mine()); }
  double* second() const { return first() + channels_; }
  float* block_first() const { return reinterpret_cast<float*>(second() + channels_); }
  float* block_second() const { return block_first() + channels_; }
  // Totals of every thread's sums for channel c.
  void total(int64_t c, double* first, double* second) const {
    *first = *second = 0.0;
    for (int t = 0; t < threads_; ++t) {
      const double* sums = reinterpret_cast<const double*>(data_ + t * stride_);
      *first += sums[c];
      *second += sums[channels_ + c];
    }
  }

 private:
  char* mine() const { return data_ + omp_get_thread_num() * stride_; }
  int64_t channels_, stride_;
  int threads_;
  char* data_;
};

float* values_of(const std::shared_ptr<Buffer>& buffer) { return static_cast<float*>(buffer->data()); }

class CpuBatchNormalization final : public BatchNormalizationPrimitive {
 public:
  explicit CpuBatchNormalization(const BatchNormalizationDescriptor& d)
      : neuron_(d.fused_neuron),
        relu_(d.fused_neuron.type == NeuronType::ReLU),
        other_(!d.fused_neuron.is_identity() && !relu_) {}

  void statistics(ExecutionContext& context, const ImageRegion& source, BatchNormalizationBatch& batch,
                  int64_t before) const override {
    float* mean = values_of(batch.mean());
    float* variance = values_of(batch.variance());
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    const int64_t channels = source.c;
    // Sums about the first pixel's values keep E[x^2] - E[x]^2 well conditioned.
    float* shift = coefficients(cpu, channels, 1);
    std::copy_n(x.data(), channels, shift);
    ChannelSums sums(cpu, channels);
    const ImageRegion* const regions[1] = {&x.region()};
    detail::for_each_run<1>(regions, [&](const int64_t* o, int64_t pixels) {
      add_moments(x.data() + o[0], pixels, channels, shift, sums.block_first(), sums.block_second(), sums.first(),
                  sums.second());
    });
    const double count = static_cast<double>(source.n * source.h * source.w);
    for (int64_t c = 0; c < channels; ++c) {
      double sum, squares;
      sums.total(c, &sum, &squares);
      const double m = sum / count;
      const double batch_mean = shift[c] + m, batch_variance = std::max(squares / count - m * m, 0.0);
      if (before == 0) {
        mean[c] = static_cast<float>(batch_mean);
        variance[c] = static_cast<float>(batch_variance);
        continue;
      }
      // Chan's parallel formula: merge with the `before` values already in.
      const double n = static_cast<double>(before), total = n + count, delta = batch_mean - mean[c];
      mean[c] = static_cast<float>(mean[c] + delta * (count / total));
      variance[c] = static_cast<float>((variance[c] * n + batch_variance * count) / total +
                                       delta * delta * (n / total) * (count / total));
    }
  }

  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, float epsilon, BatchNormalizationBatch& batch) const override {
    normalize(context, source, destination, gamma, beta, values_of(batch.mean()), values_of(batch.variance()),
              epsilon);
    std::copy_n(gamma, source.c, values_of(batch.gamma()));
    std::copy_n(beta, source.c, values_of(batch.beta()));
  }

  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, const float* mean, const float* variance,
                 float epsilon) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    const int64_t channels = source.c;
    float* a = coefficients(cpu, channels, 2);
    float* b = a + channels;
    pre_activation(gamma, beta, mean, variance, epsilon, channels, a, b);
    const int64_t chunk = chunk_pixels(channels);
    for_each_channel_run(x.region(), y.region(), [&](const float* in, float* out, int64_t pixels) {
      if (!other_) return Cloned<scale_shift>::run(in, out, pixels, channels, a, b, relu_, neuron_.a);
      for (int64_t p = 0; p < pixels; p += chunk) {
        const int64_t n = std::min(chunk, pixels - p);
        float* z = out + p * channels;
        Cloned<scale_shift>::run(in + p * channels, z, n, channels, a, b, false, 0.0f);
        ImageRegion values = run_region(z, n, channels);
        apply_neuron(neuron_, values, values, 0);
      }
    });
    y.store();
  }

  void statistics_gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                           float epsilon, BatchNormalizationBatch& batch, bool accumulate) const override {
    const float *gamma = values_of(batch.gamma()), *beta = values_of(batch.beta());
    const float *mean = values_of(batch.mean()), *variance = values_of(batch.variance());
    float* gradient_for_gamma = values_of(batch.gradient_for_gamma());
    float* gradient_for_beta = values_of(batch.gradient_for_beta());
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region x(cpu, source, 1, true);
    const int64_t channels = source.c;
    float* centre = coefficients(cpu, channels, 3);
    float* a = centre + channels;
    float* b = a + channels;
    std::copy_n(mean, channels, centre);
    pre_activation(gamma, beta, mean, variance, epsilon, channels, a, b);
    ChannelSums sums(cpu, channels);
    const int64_t chunk = chunk_pixels(channels);
    float* neuron_values = other_ ? neuron_scratch(cpu, channels) : nullptr;
    const ImageRegion* const regions[2] = {&dy.region(), &x.region()};
    detail::for_each_run<2>(regions, [&](const int64_t* o, int64_t pixels) {
      const float* g = dy.data() + o[0];
      const float* in = x.data() + o[1];
      if (!other_)
        return Cloned<add_products>::run(g, in, pixels, channels, centre, a, b, relu_, neuron_.a, sums.block_first(),
                            sums.block_second(), sums.first(), sums.second());
      float* dz = mine(neuron_values, channels);
      for (int64_t p = 0; p < pixels; p += chunk) {
        const int64_t n = std::min(chunk, pixels - p);
        neuron_gradient(g + p * channels, in + p * channels, dz, n, channels, a, b);
        Cloned<add_products>::run(dz, in + p * channels, n, channels, centre, a, b, false, 0.0f, sums.block_first(),
                     sums.block_second(), sums.first(), sums.second());
      }
    });
    for (int64_t c = 0; c < channels; ++c) {
      double sum, products;
      sums.total(c, &sum, &products);
      const double for_gamma = products / std::sqrt(static_cast<double>(variance[c]) + epsilon);
      gradient_for_beta[c] = static_cast<float>(accumulate ? gradient_for_beta[c] + sum : sum);
      gradient_for_gamma[c] = static_cast<float>(accumulate ? gradient_for_gamma[c] + for_gamma : for_gamma);
    }
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float epsilon, BatchNormalizationBatch& batch,
                int64_t count) const override {
    const float *gamma = values_of(batch.gamma()), *beta = values_of(batch.beta());
    const float *mean = values_of(batch.mean()), *variance = values_of(batch.variance());
    const float* gradient_for_gamma = values_of(batch.gradient_for_gamma());
    const float* gradient_for_beta = values_of(batch.gradient_for_beta());
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 1, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    const int64_t channels = source.c;
    // dx = gamma / sigma * (dz - (sum dz + xhat * sum dz xhat) / count) = dz * A + x * B + D.
    float* A = coefficients(cpu, channels, 5);
    float* B = A + channels;
    float* D = B + channels;
    float* a = D + channels;
    float* b = a + channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double inverse_sigma = 1.0 / std::sqrt(static_cast<double>(variance[c]) + epsilon);
      const double scale = gamma[c] * inverse_sigma;
      const double slope = -scale * inverse_sigma * gradient_for_gamma[c] / count;
      A[c] = static_cast<float>(scale);
      B[c] = static_cast<float>(slope);
      D[c] = static_cast<float>(-slope * mean[c] - scale * gradient_for_beta[c] / count);
    }
    if (!source_gradient.data) {  // dz = 0
      for_each_channel_run(x.region(), dx.region(),
                           [&](const float* in, float* out, int64_t pixels) { Cloned<scale_shift>::run(in, out, pixels, channels, B, D, false, 0.0f); });
      dx.store();
      return;
    }
    Float32Region dy(cpu, source_gradient, 0, true);
    pre_activation(gamma, beta, mean, variance, epsilon, channels, a, b);
    const int64_t chunk = chunk_pixels(channels);
    float* neuron_values = other_ ? neuron_scratch(cpu, channels) : nullptr;
    for_each_channel_run(dy.region(), x.region(), dx.region(),
                         [&](const float* g, const float* in, float* out, int64_t pixels) {
                           if (!other_)
                             return Cloned<affine_gradient>::run(g, in, out, pixels, channels, a, b, relu_, neuron_.a, A, B, D);
                           float* dz = mine(neuron_values, channels);
                           for (int64_t p = 0; p < pixels; p += chunk) {
                             const int64_t n = std::min(chunk, pixels - p);
                             const int64_t at = p * channels;
                             neuron_gradient(g + at, in + at, dz, n, channels, a, b);
                             Cloned<affine_gradient>::run(dz, in + at, out + at, n, channels, a, b, false, 0.0f, A, B, D);
                           }
                         });
    dx.store();
  }

  void update_running_statistics(ExecutionContext&, int64_t channels, const float* mean, const float* variance,
                                 const float* batch_mean, const float* batch_variance, float momentum, float bessel,
                                 float* result_mean, float* result_variance) const override {
    for (int64_t c = 0; c < channels; ++c) {
      result_mean[c] = (1.0f - momentum) * mean[c] + momentum * batch_mean[c];
      result_variance[c] = (1.0f - momentum) * variance[c] + momentum * bessel * batch_variance[c];
    }
  }

 private:
  static float* coefficients(CpuContext& cpu, int64_t channels, int64_t arrays) {
    return static_cast<float*>(cpu.scratch(kCoefficientSlot, static_cast<size_t>(arrays * channels) * sizeof(float)));
  }

  static int64_t chunk_pixels(int64_t channels) { return std::max<int64_t>(1, kNeuronValues / channels); }

  // One thread's share of the neuron scratch: chunk_pixels pixels.
  static int64_t neuron_stride(int64_t channels) {
    return round_up(chunk_pixels(channels) * channels, 16);
  }
  static float* neuron_scratch(CpuContext& cpu, int64_t channels) {
    return static_cast<float*>(cpu.scratch(
        kNeuronSlot, static_cast<size_t>(omp_get_max_threads() * neuron_stride(channels)) * sizeof(float)));
  }
  static float* mine(float* neuron_values, int64_t channels) {
    return neuron_values + omp_get_thread_num() * neuron_stride(channels);
  }

  // z = x * a + b, the value the fused neuron saw.
  static void pre_activation(const float* gamma, const float* beta, const float* mean, const float* variance,
                             float epsilon, int64_t channels, float* a, float* b) {
    for (int64_t c = 0; c < channels; ++c) {
      const double scale = gamma[c] / std::sqrt(static_cast<double>(variance[c]) + epsilon);
      a[c] = static_cast<float>(scale);
      b[c] = static_cast<float>(beta[c] - mean[c] * scale);
    }
  }

  // dz = neuron'(z) * dy over n pixels, z recomputed from x.
  void neuron_gradient(const float* dy, const float* x, float* dz, int64_t n, int64_t channels, const float* a,
                       const float* b) const {
    Cloned<scale_shift>::run(x, dz, n, channels, a, b, false, 0.0f);
    ImageRegion values = run_region(dz, n, channels);
    apply_neuron_gradient(neuron_, run_region(dy, n, channels), values, values, 0);
  }

  NeuronDescriptor neuron_;
  // ReLU, the common case, runs inside the loops; other neurons over chunks
  // through apply_neuron.
  bool relu_, other_;
};

const Registered<BatchNormalizationPrimitive, CpuBatchNormalization> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
