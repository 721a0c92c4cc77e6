// What MPS's normalizations share: the gamma/beta and mean/variance states,
// and what the normalization data sources (batch normalization now; instance
// and group normalization share the gamma, beta and epsilon rules) do with
// values a source does not give, written once: core, the metal adapter and
// the Python side (mpsx/kernels/batch_normalization.pxi) all use these.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/data_source.h"
#include "mpsx/errors.h"
#include "mpsx/image.h"
#include "mpsx/kernel.h"
#include "mpsx/primitive.h"
#include "mpsx/state.h"

namespace mpsx {

// MPS's epsilon for a data source that has none: FLT_MIN.
inline constexpr float kNormalizationDefaultEpsilon = FLT_MIN;

// The epsilon of batch, instance and group normalization as `owner` is
// given it (`name`: by its data source, its weights class, the kernel's
// setter): finite (checked_parameter) and non-negative, else ArgumentError.
inline float checked_normalization_epsilon(float value, const char* owner, const char* name = "epsilon") {
  checked_parameter(value, owner, name);
  if (value < 0.0f) fail<ArgumentError>(owner, ": ", name, " must be non-negative, given ", value);
  return value;
}

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

class ExecutionContext;

// What a backend runs for a response normalization's descriptor D (both
// families' primitive interfaces), over regions of its extents.
template <class D>
class ResponseNormalizationPasses : public PrimitiveInterface<D> {
 public:
  virtual void forward(ExecutionContext& context, const ResponseNormalizationParameters& p,
                       const ImageRegion& source, const ImageRegion& destination) const = 0;
  virtual void gradient(ExecutionContext& context, const ResponseNormalizationParameters& p,
                        const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient) const = 0;
};

// alpha of both families as `owner` is given it: finite (checked_parameter)
// and non-negative, else ArgumentError.
inline float checked_response_alpha(float value, const char* owner) {
  if (!(value >= 0.0f) || std::isinf(value))
    fail<ArgumentError>(owner, ": alpha must be finite and non-negative, given ", value);
  return value;
}

// alpha (checked_response_alpha), beta and delta (checked_parameter:
// finite) of both families' kernels and graph nodes, as `owner` is given
// them. A value outside its limits raises ArgumentError and is not kept.
class ResponseNormalizationSettings {
 public:
  explicit ResponseNormalizationSettings(const char* owner) : owner_(owner) {}
  float alpha() const { return parameters_.alpha; }
  float beta() const { return parameters_.beta; }
  float delta() const { return parameters_.delta; }
  void set_alpha(float value) { parameters_.alpha = checked_response_alpha(value, owner_); }
  void set_beta(float value) { parameters_.beta = checked_parameter(value, owner_, "beta"); }
  void set_delta(float value) { parameters_.delta = checked_parameter(value, owner_, "delta"); }
  const ResponseNormalizationParameters& parameters() const { return parameters_; }
  // alpha, beta and delta at once (a forward kernel's for its gradient, a
  // graph node's for its kernel).
  void set_parameters(const ResponseNormalizationParameters& p) {
    set_alpha(p.alpha);
    set_beta(p.beta);
    set_delta(p.delta);
  }

 private:
  const char* owner_;
  ResponseNormalizationParameters parameters_;
};

// The properties the forward and gradient kernels of both families have:
// the settings and kernel_size (read-only, >= 1).
class ResponseNormalizationProperties : public ResponseNormalizationSettings {
 public:
  ResponseNormalizationProperties(const char* kernel, int64_t kernel_size, const char* size_name = "kernel_size")
      : ResponseNormalizationSettings(kernel), kernel_size_(kernel_size) {
    check_size(kernel_size, kernel, ": ", size_name);
  }
  int64_t kernel_size() const { return kernel_size_; }

 protected:
  // The region of the forward source (and of its gradient) a pass reads:
  // source_region, or whole_source_region where the window reaches past the
  // written region.
  using Reach = ImageRegion (*)(const Image& image, const Geometry& g, int64_t channels);
  // The commands of both families' encodes: P's pass with these parameters
  // over regions `channels` deep of the forward geometry `g`.
  template <class P>
  void record_forward(CommandBuffer& command_buffer, std::shared_ptr<P> primitive, Reach reach,
                      const std::shared_ptr<Image>& source, const std::shared_ptr<Image>& destination,
                      const Geometry& g, int64_t channels) const {
    command_buffer.record([primitive = std::move(primitive), p = parameters(), reach, source, destination, g,
                           channels](ExecutionContext& context) {
      primitive->forward(context, p, reach(*source, g, channels), destination_region(*destination, g, channels));
    });
  }
  template <class P>
  void record_gradient(CommandBuffer& command_buffer, std::shared_ptr<P> primitive, Reach reach,
                       const std::shared_ptr<Image>& source_gradient, const std::shared_ptr<Image>& source_image,
                       const std::shared_ptr<Image>& destination_gradient, const Geometry& g, int64_t channels) const {
    command_buffer.record([primitive = std::move(primitive), p = parameters(), reach, source_gradient, source_image,
                           destination_gradient, g, channels](ExecutionContext& context) {
      primitive->gradient(context, p, destination_region(*source_gradient, g, channels),
                          reach(*source_image, g, channels), reach(*destination_gradient, g, channels));
    });
  }

 private:
  int64_t kernel_size_;
};

// `channels` float32 zeros, for `owner`, which names the channels in errors.
std::shared_ptr<Buffer> zeroed_per_channel(const std::shared_ptr<Device>& device, int64_t channels, const char* owner);

// What names a NormalizationPairState and its buffers in errors.
struct NormalizationPairNames {
  const char* state;  // the MPS class name
  const char* first;
  const char* second;
};

// A state of two float32 buffers of one value per channel, on one device.
class NormalizationPairState : public State {
 public:
  void synchronize(CommandBuffer& command_buffer) override;
  // Throws ShapeError unless both buffers hold `channels` float32.
  void check_fits(int64_t channels, const char* kernel) const;
  // Records the copy of the first `channels` values of both buffers into
  // `first` and `second`: how a normalization kernel reloads from the state.
  void record_copy_to(CommandBuffer& command_buffer, int64_t channels, const std::shared_ptr<Buffer>& first,
                      const std::shared_ptr<Buffer>& second) const;

 protected:
  // Throws unless both buffers are given, on one device, of one length.
  NormalizationPairState(std::shared_ptr<Buffer> first, std::shared_ptr<Buffer> second,
                         const NormalizationPairNames& names);
  // New zeroed buffers for `channels` channels.
  NormalizationPairState(const std::shared_ptr<Device>& device, int64_t channels, const NormalizationPairNames& names);

  std::shared_ptr<Buffer> first_, second_;

 private:
  const NormalizationPairNames& names_;
};

// The MPS class of such a state named N.
template <const NormalizationPairNames& N>
class NamedNormalizationPairState : public NormalizationPairState {
 public:
  NamedNormalizationPairState(std::shared_ptr<Buffer> first, std::shared_ptr<Buffer> second)
      : NormalizationPairState(std::move(first), std::move(second), N) {}
  NamedNormalizationPairState(const std::shared_ptr<Device>& device, int64_t channels)
      : NormalizationPairState(device, channels, N) {}
  const char* class_name() const override { return N.state; }
};

inline constexpr NormalizationPairNames kGammaAndBetaNames{"MPSCNNNormalizationGammaAndBetaState", "gamma", "beta"};
inline constexpr NormalizationPairNames kMeanAndVarianceNames{"MPSCNNNormalizationMeanAndVarianceState", "mean",
                                                              "variance"};

// MPSCNNNormalizationGammaAndBetaState: float32 gamma and beta, one per channel.
class NormalizationGammaAndBetaState : public NamedNormalizationPairState<kGammaAndBetaNames> {
 public:
  using NamedNormalizationPairState::NamedNormalizationPairState;
  const std::shared_ptr<Buffer>& gamma() const { return first_; }
  const std::shared_ptr<Buffer>& beta() const { return second_; }
};

// MPSCNNNormalizationMeanAndVarianceState: float32 mean and variance, one per channel.
class NormalizationMeanAndVarianceState : public NamedNormalizationPairState<kMeanAndVarianceNames> {
 public:
  using NamedNormalizationPairState::NamedNormalizationPairState;
  const std::shared_ptr<Buffer>& mean() const { return first_; }
  const std::shared_ptr<Buffer>& variance() const { return second_; }
};

// Two per-channel arrays a native data source updates on the device (gamma
// and beta; mean and variance): the host arrays and the device buffers of
// the last update whose command buffer completed without error, not yet read
// into them (none when null). Only that one update is held; each update
// writes new buffers, so later updates in flight never touch it (a replay of
// its own command buffer does: a host read waits for the replay). The owner's
// mutex guards it.
class TrainedArrays {
 public:
  std::vector<float> host[2];
  // A copy of host[which] after reading the completed update in: the caller
  // may keep it while later updates change the values.
  HostArray copy_of(std::mutex& mutex, int which);
  // Makes `first` and `second` the newest values once `command_buffer`
  // completes without error; `owner` keeps this object and `mutex` alive
  // until then.
  void complete_on(CommandBuffer& command_buffer, std::shared_ptr<const void> owner, std::mutex& mutex,
                   std::shared_ptr<Buffer> first, std::shared_ptr<Buffer> second);
  // Makes `first` and `second` the newest values, in place of every update
  // encoded before (replays of its command buffer included). ShapeError
  // names `who` and the arrays unless both have the channels' size.
  void assign(std::mutex& mutex, std::vector<float> first, std::vector<float> second, const char* who,
              const char* first_name, const char* second_name);

 private:
  std::shared_ptr<Buffer> device_[2];
  uint64_t assignments_ = 0;  // an update encoded before the last assign() changes nothing
  std::shared_ptr<const Completion> completion_;
  std::weak_ptr<CommandBuffer> command_buffer_;
};

}  // namespace mpsx
