// MPSCNNGroupNormalization and the math it shares with
// MPSCNNInstanceNormalization (kernels/instance_normalization.h): instance
// normalization is group normalization with one channel per group, so one
// primitive over (image, group) serves both families, and one kernel base,
// state, data source interface and native weights class hold what they
// share. Each MPS class keeps its own name, state class and data source
// protocol (the Python adapters and the metal backend tell them apart).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/data_source.h"
#include "mpsx/kernel.h"
#include "mpsx/kernels/normalization.h"
#include "mpsx/kernels/normalization.h"
#include "mpsx/kernels/optimizer.h"

namespace mpsx {

class ExecutionContext;
class GroupNormalizationGradientState;
class GroupNormalizationKernel;

// Which MPS class a kernel, state or primitive stands for.
enum class GroupNormalizationKind : uint8_t { Instance, Group };

struct GroupNormalizationDescriptor {
  GroupNormalizationKind kind = GroupNormalizationKind::Group;
};

// What a forward encode leaves for its gradient, per state: float32 mean and
// biased variance of every (image, group) of the region it normalized, image
// major, and whatever the backend keeps besides (metal: MPS's own gradient
// state).
struct GroupNormalizationStatistics {
  std::shared_ptr<Buffer> mean, variance;
  std::shared_ptr<void> backend;
};

// What a backend runs, over regions of images x channels x H x W (float32 or
// float16) whose channels split into `groups` equal groups; gamma, beta and
// the gradients are float32, one per channel of the region.
class GroupNormalizationPrimitive : public PrimitiveInterface<GroupNormalizationDescriptor> {
 public:
  static constexpr const char* family = "group normalization";
  // Per image n and group g: mean and biased variance over the group's
  // channels x H x W into statistics (index n * groups + g), and
  // destination = (x - mean) / sqrt(variance + epsilon) * gamma[c] + beta[c].
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                       int64_t groups, const float* gamma, const float* beta, float epsilon,
                       GroupNormalizationStatistics& statistics) const = 0;
  // The exact gradient for the source through the statistics of each
  // (image, group), and gradient_for_gamma[c] = sum over images and pixels
  // of dy * (x - mean) / sqrt(variance + epsilon), gradient_for_beta[c] =
  // sum of dy (both written, not added to).
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient, int64_t groups, const float* gamma,
                        const float* beta, float epsilon, GroupNormalizationStatistics& statistics,
                        float* gradient_for_gamma, float* gradient_for_beta) const = 0;
};

// MPSCNNGroupNormalizationDataSource and MPSCNNInstanceNormalizationDataSource
// in one interface: number_of_groups is the group normalization's (an
// instance normalization never asks). Native (GroupNormalizationWeights) or
// a Python object (mpsx/_data_sources.h). Gamma or beta with no data and no
// owner is one the source did not give (None): the defaults of
// kernels/normalization.h. The updates receive the batch of states: mpsx
// hands over the one state of each encode, whose gradients are sums over
// its images (docs/semantics.md).
class GroupNormalizationDataSource {
 public:
  using States = std::vector<std::shared_ptr<GroupNormalizationGradientState>>;
  virtual ~GroupNormalizationDataSource() = default;
  virtual bool load() = 0;
  virtual void purge() = 0;
  virtual int64_t number_of_feature_channels() = 0;
  virtual int64_t number_of_groups() { return 1; }
  virtual HostArray gamma() = 0;
  virtual HostArray beta() = 0;
  virtual float epsilon() { return kNormalizationDefaultEpsilon; }
  virtual std::string label() = 0;

  virtual bool supports_update_gamma_and_beta() { return false; }
  virtual bool update_gamma_and_beta(const States& states) { return false; }
  virtual bool supports_update_gamma_and_beta_on_command_buffer() { return false; }
  virtual std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const States& states) {
    return nullptr;
  }
};

// A data source held natively: gamma, beta, the group count (0 for an
// instance normalization's weights, which have none), epsilon and an
// optional optimizer that trains gamma and beta on the device from the
// states' gradients, as BatchNormalizationWeights does. Its host values are
// those of the last update whose command buffer completed without error;
// while a replay rewrites them, a host read waits for it.
class GroupNormalizationWeights : public GroupNormalizationDataSource,
                                  public std::enable_shared_from_this<GroupNormalizationWeights> {
 public:
  GroupNormalizationWeights(std::vector<float> gamma, std::vector<float> beta, int64_t groups, float epsilon,
                            std::string label, std::shared_ptr<NNOptimizer> optimizer = nullptr);
  bool load() override { return true; }
  void purge() override {}
  int64_t number_of_feature_channels() override { return channels_; }
  int64_t number_of_groups() override;
  // Throws ArgumentError unless `groups` divides the channels.
  void set_number_of_groups(int64_t groups);
  HostArray gamma() override { return trained_.copy_of(mutex_, 0); }
  HostArray beta() override { return trained_.copy_of(mutex_, 1); }
  float epsilon() override { return epsilon_; }
  std::string label() override { return label_; }
  // New values in place of the current ones and of every update encoded
  // before (a graph reads them at reload_from_data_sources).
  void set_gamma_and_beta(std::vector<float> gamma, std::vector<float> beta);
  const std::shared_ptr<NNOptimizer>& optimizer() const { return optimizer_; }
  // The optimizer's vectors for gamma and beta (none without an optimizer):
  // read after the last update completed, written before the next.
  KeptOptimizerVectors& optimizer_vectors() { return optimizer_vectors_; }
  bool supports_update_gamma_and_beta_on_command_buffer() override { return optimizer_ != nullptr; }
  std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const States& states) override;

 private:
  std::mutex mutex_;
  int64_t channels_;
  TrainedArrays trained_;  // gamma and beta
  int64_t groups_;
  float epsilon_;
  std::string label_;
  std::shared_ptr<NNOptimizer> optimizer_;
  KeptOptimizerVectors optimizer_vectors_;
};

// Checks `groups` against `channels` for `who`: ArgumentError unless it is
// at least 1 and divides them.
void check_number_of_groups(int64_t groups, int64_t channels, const char* who);

// MPSCNNInstanceNormalizationGradientState / MPSCNNGroupNormalizationGradientState:
// the gamma and beta the forward encode used, the statistics of every image
// and group it normalized, and (after the gradient encode) the gradients of
// gamma and beta, sums over the images of the encode.
class GroupNormalizationGradientState : public GradientState {
 public:
  GroupNormalizationGradientState(std::shared_ptr<const GroupNormalizationKernel> kernel, int64_t images);
  const char* class_name() const override;
  void synchronize(CommandBuffer& command_buffer) override;
  bool shares_memory(const Image& image) const override;
  void append_trainable_gradients(std::vector<std::shared_ptr<Buffer>>& gradients) const override {
    gradients.push_back(gradient_for_gamma_);
    gradients.push_back(gradient_for_beta_);
  }

  const std::shared_ptr<const GroupNormalizationKernel>& kernel() const { return kernel_; }
  GroupNormalizationKind kind() const;
  int64_t channels() const { return channels_; }
  int64_t images() const { return images_; }
  const std::shared_ptr<Buffer>& gamma() const { return gamma_; }
  const std::shared_ptr<Buffer>& beta() const { return beta_; }
  const std::shared_ptr<Buffer>& gradient_for_gamma() const { return gradient_for_gamma_; }
  const std::shared_ptr<Buffer>& gradient_for_beta() const { return gradient_for_beta_; }
  GroupNormalizationStatistics& statistics() { return statistics_; }

  // Set by the forward encode.
  bool forward_encoded = false;
  int64_t groups = 1;
  float epsilon = kNormalizationDefaultEpsilon;
  // Set by the gradient encode.
  bool gradients_encoded = false;

 private:
  std::shared_ptr<const GroupNormalizationKernel> kernel_;
  int64_t channels_, images_;
  std::shared_ptr<Buffer> gamma_, beta_, gradient_for_gamma_, gradient_for_beta_;
  GroupNormalizationStatistics statistics_;
};

// What CNNInstanceNormalization and CNNGroupNormalization share.
// In place: the statistics are taken before any result is written.
class GroupNormalizationKernel : public InPlaceUnaryKernel {
 public:
  GroupNormalizationKernel(std::shared_ptr<Device> device, std::shared_ptr<GroupNormalizationDataSource> data_source,
                           GroupNormalizationKind kind);
  GroupNormalizationKind kind() const { return kind_; }
  // The MPS name of the states this kernel makes.
  const char* state_class_name() const;

  int64_t number_of_feature_channels() const { return channels_; }
  // The groups of the last load: the channels for an instance normalization.
  int64_t number_of_groups() const;
  float epsilon;
  const std::shared_ptr<GroupNormalizationDataSource>& data_source() const { return data_source_; }
  const std::shared_ptr<const GroupNormalizationPrimitive>& primitive() const { return primitive_; }

  // CPU side: load the data source's current gamma, beta (and group count);
  // commands encoded before keep the values they were encoded with.
  void reload_gamma_and_beta_from_data_source();
  // -reloadDataSource: / a new data source of the same channel count.
  void reload_data_source(std::shared_ptr<GroupNormalizationDataSource> data_source);
  // GPU side: copy the state's values in, ordered on the command buffer.
  void reload_gamma_and_beta(CommandBuffer& command_buffer, const NormalizationGammaAndBetaState& state);
  // The update of MPS's training styles for hand-encoded training, as
  // CNNBatchNormalization::encode_gamma_and_beta_update (on_command_buffer
  // too); the data source receives the batch of states [state].
  void encode_gamma_and_beta_update(CommandBuffer& command_buffer,
                                    const std::shared_ptr<GroupNormalizationGradientState>& state,
                                    bool on_command_buffer = true);

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  int64_t source_channels(const Image&) const override { return channels_; }
  void check_source(const Image& source) const override;
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  struct Parameters {
    std::shared_ptr<Buffer> gamma, beta;
    int64_t groups = 1;
  };
  Parameters parameters() const;
  // Returns the data source's epsilon (checked).
  float load(GroupNormalizationDataSource& source, bool first);

  GroupNormalizationKind kind_;
  std::shared_ptr<GroupNormalizationDataSource> data_source_;
  int64_t channels_ = 0;
  std::shared_ptr<const GroupNormalizationPrimitive> primitive_;
  mutable std::mutex parameters_lock_;
  Parameters parameters_;
};

class CNNGroupNormalization final : public GroupNormalizationKernel {
 public:
  CNNGroupNormalization(std::shared_ptr<Device> device, std::shared_ptr<GroupNormalizationDataSource> data_source)
      : GroupNormalizationKernel(std::move(device), std::move(data_source), GroupNormalizationKind::Group) {}
  const char* class_name() const override { return "MPSCNNGroupNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
};

// The gradient kernels of both classes.
// In place: the sums are taken before any result is written.
class GroupNormalizationGradientKernel : public InPlaceGradientKernel {
 public:
  GroupNormalizationGradientKernel(std::shared_ptr<Device> device, GroupNormalizationKind kind);
  // It writes the gamma and beta gradients into the gradient state.
  bool is_state_modified() const override { return true; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  GroupNormalizationKind kind_;
  std::shared_ptr<const GroupNormalizationPrimitive> primitive_;
};

class CNNGroupNormalizationGradient final : public GroupNormalizationGradientKernel {
 public:
  explicit CNNGroupNormalizationGradient(std::shared_ptr<Device> device)
      : GroupNormalizationGradientKernel(std::move(device), GroupNormalizationKind::Group) {}
  const char* class_name() const override { return "MPSCNNGroupNormalizationGradient"; }
};

}  // namespace mpsx
