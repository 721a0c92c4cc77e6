// What the normalization data sources (batch normalization now; instance
// and group normalization share the gamma, beta and epsilon rules) do with
// values a source does not give, written once: core, the metal adapter and
// the Python side (mpsx/kernels/batch_normalization.pxi) all use these.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpsx/checked.h"
#include "mpsx/data_source.h"
#include "mpsx/errors.h"

namespace mpsx {

// MPS's epsilon for a data source that has none: FLT_MIN.
inline constexpr float kNormalizationDefaultEpsilon = FLT_MIN;

// The per-channel arrays of a normalization data source.
enum class NormalizationArray { Gamma, Beta, Mean, Variance };

inline const char* name_of(NormalizationArray array) {
  switch (array) {
    case NormalizationArray::Gamma: return "gamma";
    case NormalizationArray::Beta: return "beta";
    case NormalizationArray::Mean: return "mean";
    case NormalizationArray::Variance: return "variance";
  }
  return "?";
}

// The value of every channel of an array the source did not give (None):
// the identity normalization, gamma and variance ones, beta and mean zeros.
inline constexpr float normalization_default(NormalizationArray array) {
  return array == NormalizationArray::Gamma || array == NormalizationArray::Variance ? 1.0f : 0.0f;
}

// `given` as `channels` float32 into `out`: the default for an array with no
// data and no owner (None); otherwise it must hold `channels` values, or
// ShapeError naming `kernel`, the array and both counts.
inline void take_normalization_array(const HostArray& given, NormalizationArray array, int64_t channels,
                                     const char* kernel, std::vector<float>& out) {
  if (given.none()) {
    out.assign(static_cast<size_t>(channels), normalization_default(array));
    return;
  }
  if (given.count != static_cast<size_t>(channels))
    fail<ShapeError>(kernel, ": the data source's ", name_of(array), " holds ", given.count, " values; expected ",
                     channels, " (number_of_feature_channels)");
  const float* values = static_cast<const float*>(given.data);
  out.assign(values, values + given.count);
}

// alpha, beta and delta of MPSCNNCrossChannelNormalization and
// MPSCNNSpatialNormalization (same defaults and limits): read-write on the
// kernels, passed at every encode.
struct ResponseNormalizationParameters {
  float alpha = 1.0f;
  float beta = 5.0f;
  float delta = 1.0f;
};

// The properties the forward and gradient kernels of both families have:
// kernel_size (read-only, >= 1), alpha (>= 0), beta and delta (finite). A
// value outside its limits raises ArgumentError and is not kept.
class ResponseNormalizationProperties {
 public:
  ResponseNormalizationProperties(const char* kernel, int64_t kernel_size, const char* size_name = "kernel_size")
      : kernel_(kernel), kernel_size_(kernel_size) {
    check_size(kernel_size, kernel, ": ", size_name);
  }
  int64_t kernel_size() const { return kernel_size_; }
  float alpha() const { return parameters_.alpha; }
  float beta() const { return parameters_.beta; }
  float delta() const { return parameters_.delta; }
  void set_alpha(float value) {
    if (!(value >= 0.0f) || std::isinf(value))
      fail<ArgumentError>(kernel_, ": alpha must be finite and non-negative, given ", value);
    parameters_.alpha = value;
  }
  void set_beta(float value) {
    if (!std::isfinite(value)) fail<ArgumentError>(kernel_, ": beta must be finite, given ", value);
    parameters_.beta = value;
  }
  void set_delta(float value) {
    if (!std::isfinite(value)) fail<ArgumentError>(kernel_, ": delta must be finite, given ", value);
    parameters_.delta = value;
  }
  const ResponseNormalizationParameters& parameters() const { return parameters_; }

 private:
  const char* kernel_;
  int64_t kernel_size_;
  ResponseNormalizationParameters parameters_;
};

}  // namespace mpsx
