#include "mpsx/kernels/neuron.h"
#include "mpsx/registry.h"

#include <cmath>

#include "backend.h"

namespace mpsx::cpu {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float z) { return std::max(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))); }

// f(x) of MPSCNNNeuron.h over `pixels` x `channels` values, channels
// innermost; `slopes` are PReLU's per-channel a (from the first channel).
MPSX_CPU_LOOP
void forward_values(const NeuronDescriptor& d, const float* slopes, const float* x, float* y, int64_t pixels,
                    int64_t channels) {
  const float a = d.a, b = d.b, c = d.c;
  const int64_t n = pixels * channels;
  switch (d.type) {
    case NeuronType::None:
      if (x != y) for (int64_t i = 0; i < n; ++i) y[i] = x[i];
      return;
    case NeuronType::ReLU:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : a * x[i];
      return;
    case NeuronType::Linear:
      for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + b;
      return;
    case NeuronType::Sigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
      return;
    case NeuronType::HardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(a * x[i] + b, 0.0f), 1.0f);
      return;
    case NeuronType::TanH:
      for (int64_t i = 0; i < n; ++i) y[i] = a * std::tanh(b * x[i]);
      return;
    case NeuronType::Absolute:
      for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
      return;
    case NeuronType::SoftPlus:
      for (int64_t i = 0; i < n; ++i) y[i] = a * softplus(b * x[i]);
      return;
    case NeuronType::SoftSign:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::fabs(x[i]));
      return;
    case NeuronType::ELU:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : a * std::expm1(x[i]);
      return;
    case NeuronType::PReLU:
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t k = 0; k < channels; ++k) {
          float v = x[p * channels + k];
          y[p * channels + k] = v >= 0 ? v : slopes[k] * v;
        }
      return;
    case NeuronType::ReLUN:
      for (int64_t i = 0; i < n; ++i) y[i] = std::min(x[i] >= 0 ? x[i] : a * x[i], b);
      return;
    case NeuronType::Power:
      for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a * x[i] + b, c);
      return;
    case NeuronType::Exponential:
      if (c == -1.0f)
        for (int64_t i = 0; i < n; ++i) y[i] = std::exp(a * x[i] + b);
      else
        for (int64_t i = 0; i < n; ++i) y[i] = std::pow(c, a * x[i] + b);
      return;
    case NeuronType::Logarithm: {
      const float scale = c == -1.0f ? 1.0f : 1.0f / std::log(c);
      for (int64_t i = 0; i < n; ++i) y[i] = std::log(a * x[i] + b) * scale;
      return;
    }
    case NeuronType::GeLU:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kSqrtHalf));
      return;
    case NeuronType::Count: return;
  }
}

// dx = f'(x) * dy.
MPSX_CPU_LOOP
void gradient_values(const NeuronDescriptor& d, const float* slopes, const float* dy, const float* x, float* dx,
                     int64_t pixels, int64_t channels) {
  const float a = d.a, b = d.b, c = d.c;
  const int64_t n = pixels * channels;
  switch (d.type) {
    case NeuronType::None:
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i];
      return;
    case NeuronType::ReLU:
      for (int64_t i = 0; i < n; ++i) dx[i] = x[i] >= 0 ? dy[i] : a * dy[i];
      return;
    case NeuronType::Linear:
      for (int64_t i = 0; i < n; ++i) dx[i] = a * dy[i];
      return;
    case NeuronType::Sigmoid:
      for (int64_t i = 0; i < n; ++i) {
        float s = sigmoid(x[i]);
        dx[i] = s * (1.0f - s) * dy[i];
      }
      return;
    case NeuronType::HardSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        float z = a * x[i] + b;
        dx[i] = (z >= 0.0f && z <= 1.0f) ? a * dy[i] : 0.0f;
      }
      return;
    case NeuronType::TanH:
      for (int64_t i = 0; i < n; ++i) {
        float t = std::tanh(b * x[i]);
        dx[i] = a * b * (1.0f - t * t) * dy[i];
      }
      return;
    case NeuronType::Absolute:
      for (int64_t i = 0; i < n; ++i) dx[i] = (x[i] > 0 ? 1.0f : x[i] < 0 ? -1.0f : 0.0f) * dy[i];
      return;
    case NeuronType::SoftPlus:
      for (int64_t i = 0; i < n; ++i) dx[i] = a * b * sigmoid(b * x[i]) * dy[i];
      return;
    case NeuronType::SoftSign:
      for (int64_t i = 0; i < n; ++i) {
        float q = 1.0f + std::fabs(x[i]);
        dx[i] = dy[i] / (q * q);
      }
      return;
    case NeuronType::ELU:
      for (int64_t i = 0; i < n; ++i) dx[i] = x[i] >= 0 ? dy[i] : a * std::exp(x[i]) * dy[i];
      return;
    case NeuronType::PReLU:
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t k = 0; k < channels; ++k) {
          int64_t i = p * channels + k;
          dx[i] = x[i] >= 0 ? dy[i] : slopes[k] * dy[i];
        }
      return;
    case NeuronType::ReLUN:
      for (int64_t i = 0; i < n; ++i) {
        float leaky = x[i] >= 0 ? x[i] : a * x[i];
        dx[i] = leaky >= b ? 0.0f : (x[i] >= 0 ? dy[i] : a * dy[i]);
      }
      return;
    case NeuronType::Power:
      for (int64_t i = 0; i < n; ++i) dx[i] = a * c * std::pow(a * x[i] + b, c - 1.0f) * dy[i];
      return;
    case NeuronType::Exponential:
      if (c == -1.0f)
        for (int64_t i = 0; i < n; ++i) dx[i] = a * std::exp(a * x[i] + b) * dy[i];
      else {
        const float log_c = std::log(c);
        for (int64_t i = 0; i < n; ++i) dx[i] = a * log_c * std::pow(c, a * x[i] + b) * dy[i];
      }
      return;
    case NeuronType::Logarithm: {
      const float scale = c == -1.0f ? 1.0f : 1.0f / std::log(c);
      for (int64_t i = 0; i < n; ++i) dx[i] = a * scale / (a * x[i] + b) * dy[i];
      return;
    }
    case NeuronType::GeLU:
      for (int64_t i = 0; i < n; ++i) {
        float cdf = 0.5f * (1.0f + std::erf(x[i] * kSqrtHalf));
        float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
        dx[i] = (cdf + x[i] * pdf) * dy[i];
      }
      return;
    case NeuronType::Count: return;
  }
}

class CpuNeuron final : public NeuronPrimitive {
 public:
  explicit CpuNeuron(NeuronDescriptor d) : d_(std::move(d)) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               int64_t first_channel) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    apply_neuron(d_, x.region(), y.region(), first_channel);
    y.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t first_channel) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region x(cpu, source, 1, true);
    Float32Region dx(cpu, destination_gradient, 2, false);
    apply_neuron_gradient(d_, dy.region(), x.region(), dx.region(), first_channel);
    dx.store();
  }

 private:
  NeuronDescriptor d_;
};

}  // namespace

void apply_neuron(const NeuronDescriptor& d, const ImageRegion& x, const ImageRegion& y, int64_t first_channel) {
  const float* slopes = d.a_per_channel.empty() ? nullptr : d.a_per_channel.data() + first_channel;
  for_each_channel_run(x, y, [&](const float* in, float* out, int64_t pixels) {
    Cloned<forward_values>::run(d, slopes, in, out, pixels, x.c);
  });
}

void apply_neuron_gradient(const NeuronDescriptor& d, const ImageRegion& dy, const ImageRegion& x,
                           const ImageRegion& dx, int64_t first_channel) {
  const float* slopes = d.a_per_channel.empty() ? nullptr : d.a_per_channel.data() + first_channel;
  for_each_channel_run(dy, x, dx, [&](const float* g, const float* in, float* out, int64_t pixels) {
    Cloned<gradient_values>::run(d, slopes, g, in, out, pixels, x.c);
  });
}

namespace {

const Registered<NeuronPrimitive, CpuNeuron> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu
