// MPSCNNBatchNormalization and its relatives: the data source protocol, the
// native BatchNormalizationWeights, the batch normalization state,
// statistics, and the gradient kernels. The gamma/beta and mean/variance
// states, which every normalization shares, are in normalization.h.
#pragma once

#include <cfloat>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/data_source.h"
#include "mpsx/kernel.h"
#include "mpsx/kernels/neuron.h"
#include "mpsx/kernels/normalization.h"
#include "mpsx/kernels/optimizer.h"
#include "mpsx/pool.h"

namespace mpsx {

class BatchNormalizationState;
class CNNBatchNormalization;
class ExecutionContext;

// MPSCNNBatchNormalizationDataSource. Native (BatchNormalizationWeights) or a
// Python object (mpsx/_data_sources.h). An array with no data and no owner is
// one the source did not give (None); it takes the defaults of
// mpsx/kernels/normalization.h. The update methods are the optional part
// of the protocol; supports_*() says whether the source implements them.
class BatchNormalizationDataSource {
 public:
  virtual ~BatchNormalizationDataSource() = default;
  virtual bool load() = 0;
  virtual void purge() = 0;
  virtual int64_t number_of_feature_channels() = 0;
  virtual HostArray gamma() = 0;
  virtual HostArray beta() = 0;
  virtual HostArray mean() = 0;
  virtual HostArray variance() = 0;
  // MPS's default when the source has none.
  virtual float epsilon() { return kNormalizationDefaultEpsilon; }
  virtual std::string label() = 0;

  // CPU-side updates from the synchronized state; true if the values changed.
  virtual bool supports_update_gamma_and_beta() { return false; }
  virtual bool update_gamma_and_beta(const std::shared_ptr<BatchNormalizationState>& state) { return false; }
  virtual bool supports_update_mean_and_variance() { return false; }
  virtual bool update_mean_and_variance(const std::shared_ptr<BatchNormalizationState>& state) { return false; }
  // GPU-side updates encoded on the command buffer; the returned state holds
  // the new values (null: no update).
  virtual bool supports_update_gamma_and_beta_on_command_buffer() { return false; }
  virtual std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) {
    return nullptr;
  }
  virtual bool supports_update_mean_and_variance_on_command_buffer() { return false; }
  virtual std::shared_ptr<NormalizationMeanAndVarianceState> update_mean_and_variance_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) {
    return nullptr;
  }
};

// What a batch normalization loads from its data source, checked against
// number_of_feature_channels; the parts not asked for stay empty.
struct BatchNormalizationParameters {
  int64_t channels = 0;
  std::vector<float> gamma, beta, mean, variance;
  float epsilon = kNormalizationDefaultEpsilon;
  std::string label;
};
// Calls load, the getters asked for and purge. Throws ShapeError for arrays
// of the wrong size.
BatchNormalizationParameters load_batch_normalization_parameters(BatchNormalizationDataSource& source,
                                                                 const char* kernel, bool gamma_and_beta,
                                                                 bool mean_and_variance);

// A data source held natively: BatchNormalizationWeights(gamma, beta, mean,
// variance, epsilon, momentum, optimizer). Its GPU-side mean and variance
// update folds the state's batch statistics into the running statistics of
// the state's kernel as PyTorch does: running = (1 - momentum) * running +
// momentum * batch, the running variance taking the unbiased batch variance
// (n / (n - 1) times the biased one, n the values per channel; n = 1 takes it
// as is). With an optimizer it also trains gamma and beta on the device: its
// GPU-side gamma and beta update encodes the optimizer from the state's
// gradients, with vectors (momentum, ...) it keeps on the device. Its host
// values are those of the last update whose command buffer completed without
// error, read from the device when the host asks for them; while a replay
// rewrites them, a host read waits for it.
class BatchNormalizationWeights : public BatchNormalizationDataSource,
                                  public std::enable_shared_from_this<BatchNormalizationWeights> {
 public:
  BatchNormalizationWeights(std::vector<float> gamma, std::vector<float> beta, std::vector<float> mean,
                            std::vector<float> variance, float epsilon, float momentum, std::string label,
                            std::shared_ptr<NNOptimizer> optimizer = nullptr);
  bool load() override { return true; }
  void purge() override {}
  int64_t number_of_feature_channels() override { return static_cast<int64_t>(trained_.host[0].size()); }
  HostArray gamma() override { return trained_.copy_of(mutex_, 0); }
  HostArray beta() override { return trained_.copy_of(mutex_, 1); }
  HostArray mean() override { return statistics_.copy_of(mutex_, 0); }
  HostArray variance() override { return statistics_.copy_of(mutex_, 1); }
  float epsilon() override { return epsilon_; }
  float momentum() const { return momentum_; }
  std::string label() override { return label_; }
  // New values in place of the current ones and of every update encoded
  // before (a graph reads them at reload_from_data_sources).
  void set_gamma_and_beta(std::vector<float> gamma, std::vector<float> beta);
  void set_mean_and_variance(std::vector<float> mean, std::vector<float> variance);
  bool supports_update_mean_and_variance_on_command_buffer() override { return true; }
  std::shared_ptr<NormalizationMeanAndVarianceState> update_mean_and_variance_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) override;
  const std::shared_ptr<NNOptimizer>& optimizer() const { return optimizer_; }
  // The optimizer's vectors for gamma and beta (none without an optimizer):
  // read after the last update completed, written before the next.
  KeptOptimizerVectors& optimizer_vectors() { return optimizer_vectors_; }
  bool supports_update_gamma_and_beta_on_command_buffer() override { return optimizer_ != nullptr; }
  std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) override;

 private:
  std::mutex mutex_;
  TrainedArrays trained_, statistics_;  // gamma and beta; mean and variance
  float epsilon_, momentum_;
  std::string label_;
  std::shared_ptr<NNOptimizer> optimizer_;
  KeptOptimizerVectors optimizer_vectors_;
};

// The per-batch data of an MPSCNNBatchNormalizationState, made by the
// backend's batch normalization primitive: float32 per-channel device
// buffers of the batch statistics, the gamma and beta the forward pass used
// and the gradients for gamma and beta, which the host reads after
// synchronize. cpu and cuda compute in these buffers; metal derives from it
// to hold the MPS state its kernels accumulate into.
class BatchNormalizationBatch {
 public:
  // Zeroed buffers for `channels` channels (within kMaxDimension).
  BatchNormalizationBatch(const std::shared_ptr<Device>& device, int64_t channels);
  virtual ~BatchNormalizationBatch() = default;
  BatchNormalizationBatch(const BatchNormalizationBatch&) = delete;
  BatchNormalizationBatch& operator=(const BatchNormalizationBatch&) = delete;

  int64_t channels() const { return channels_; }
  const std::shared_ptr<Buffer>& gamma() const { return gamma_; }
  const std::shared_ptr<Buffer>& beta() const { return beta_; }
  const std::shared_ptr<Buffer>& mean() const { return mean_; }
  const std::shared_ptr<Buffer>& variance() const { return variance_; }
  const std::shared_ptr<Buffer>& gradient_for_gamma() const { return gradient_for_gamma_; }
  const std::shared_ptr<Buffer>& gradient_for_beta() const { return gradient_for_beta_; }

 private:
  int64_t channels_;
  std::shared_ptr<Buffer> gamma_, beta_, mean_, variance_, gradient_for_gamma_, gradient_for_beta_;
};

// MPSCNNBatchNormalizationState: the statistics of one batch, accumulated
// over the sub-batches its statistics encodes covered, and the gradients of
// gamma and beta, plus the gamma and beta its forward encode used; the data
// lives in the backend's BatchNormalizationBatch. The flags and counts
// record, in encode order, which passes were encoded with it; core checks
// the order: statistics (one or more sub-batches), then forward encodes of
// those sub-batches, statistics gradients, gradients.
class BatchNormalizationState : public GradientState {
 public:
  explicit BatchNormalizationState(std::shared_ptr<const CNNBatchNormalization> kernel);
  const char* class_name() const override { return "MPSCNNBatchNormalizationState"; }
  void synchronize(CommandBuffer& command_buffer) override;
  bool shares_memory(const Image& image) const override;
  void append_trainable_gradients(std::vector<std::shared_ptr<Buffer>>& gradients) const override {
    gradients.push_back(gradient_for_gamma());
    gradients.push_back(gradient_for_beta());
  }
  // MPS -reset: zeroes the statistics and gradients and forgets the
  // sub-batches and passes encoded. Throws StateError while a pending
  // command buffer writes them.
  void reset();

  // A state serves every sub-batch its statistics covered: encodes bind
  // each, and a gradient encode selects the forward encode of its source
  // images (the geometry and descriptors it checks and uses).
  void check_bindable(const Image& source, const char* kernel) const override;
  void bind_source(const Image& source) override;
  void check_source(const Image& source, const char* kernel) override;
  // Called by the forward encode once the GradientState fields describe it.
  void remember_forward();
  // Throws StateError unless statistics may still be accumulated: not after
  // a forward, statistics gradient or gradient used the state.
  void check_statistics_open(const char* kernel) const;

  const std::shared_ptr<const CNNBatchNormalization>& batch_normalization() const { return kernel_; }
  int64_t channels() const { return batch_->channels(); }
  BatchNormalizationBatch& batch() const { return *batch_; }
  const std::shared_ptr<Buffer>& gamma() const { return batch_->gamma(); }
  const std::shared_ptr<Buffer>& beta() const { return batch_->beta(); }
  const std::shared_ptr<Buffer>& mean() const { return batch_->mean(); }
  const std::shared_ptr<Buffer>& variance() const { return batch_->variance(); }
  const std::shared_ptr<Buffer>& gradient_for_gamma() const { return batch_->gradient_for_gamma(); }
  const std::shared_ptr<Buffer>& gradient_for_beta() const { return batch_->gradient_for_beta(); }

  // Set by the statistics encodes: the values per channel they cover, all
  // sub-batches together, and the first feature channel they read.
  bool statistics_encoded = false;
  int64_t statistics_count = 0;
  int64_t statistics_channel = 0;
  // Set by the forward encode.
  float epsilon = kNormalizationDefaultEpsilon;
  // Set by the statistics gradient encodes.
  bool gradients_encoded = false;
  // Set by the gradient encodes.
  bool gradient_encoded = false;

 private:
  // One sub-batch: its source images and, once encoded, its forward pass.
  struct SubBatch {
    uint64_t source = 0;
    bool forward = false;
    ImageDescriptor source_descriptor, destination_descriptor;
    Geometry geometry;
    uint64_t result_identity = 0;
  };
  const SubBatch* find(uint64_t source) const;

  std::shared_ptr<const CNNBatchNormalization> kernel_;
  std::shared_ptr<BatchNormalizationBatch> batch_;
  std::vector<SubBatch> sub_batches_;
  uint64_t bound_ = 0;  // the source images of the encode under way
};

// Configuration of a batch normalization primitive.
struct BatchNormalizationDescriptor {
  NeuronDescriptor fused_neuron;
};

// What a backend runs for batch normalization, over regions of one batch's
// channels (float32 or float16) and float32 per-channel device arrays. z is
// the normalized value before the fused neuron: (x - mean) * gamma /
// sqrt(variance + epsilon) + beta; dz the gradient at z (the fused neuron's
// gradient applied to the incoming one). The training passes read and write
// the per-batch data of a BatchNormalizationBatch the primitive made.
class BatchNormalizationPrimitive : public PrimitiveInterface<BatchNormalizationDescriptor> {
 public:
  static constexpr const char* family = "batch normalization";
  // The per-batch data of a new state: by default the plain buffers.
  virtual std::shared_ptr<BatchNormalizationBatch> make_batch(const std::shared_ptr<Device>& device,
                                                              int64_t channels) const {
    return std::make_shared<BatchNormalizationBatch>(device, channels);
  }
  // Merges the per-channel mean and biased variance over every pixel of
  // `source` into the batch's, which cover `before` values per channel
  // (0: none, they are replaced): the statistics of all the values together.
  virtual void statistics(ExecutionContext& context, const ImageRegion& source, BatchNormalizationBatch& batch,
                          int64_t before) const = 0;
  // destination = neuron(z), with the running statistics (inference).
  virtual void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                         const float* gamma, const float* beta, const float* mean, const float* variance,
                         float epsilon) const = 0;
  // destination = neuron(z) with the batch's statistics (training); gamma
  // and beta are also copied into the batch: the values its gradients use.
  virtual void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                         const float* gamma, const float* beta, float epsilon, BatchNormalizationBatch& batch) const = 0;
  // The batch's gradient_for_gamma = sum of dz * (x - mean) / sqrt(variance
  // + epsilon), gradient_for_beta = sum of dz; added to the sums there with
  // `accumulate` (a later sub-batch), replacing them otherwise.
  virtual void statistics_gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                                   const ImageRegion& source, float epsilon, BatchNormalizationBatch& batch,
                                   bool accumulate) const = 0;
  // The gradient for the source through the batch statistics of `count`
  // values per channel, from the sums statistics_gradient left in the
  // batch. Without a source gradient (data null) dz is zero: pixels the
  // statistics covered but the forward pass did not normalize.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient, float epsilon, BatchNormalizationBatch& batch,
                        int64_t count) const = 0;
  // result = (1 - momentum) * running + momentum * batch, the variance's
  // batch term scaled by `bessel`.
  virtual void update_running_statistics(ExecutionContext& context, int64_t channels, const float* mean,
                                         const float* variance, const float* batch_mean,
                                         const float* batch_variance, float momentum, float bessel,
                                         float* result_mean, float* result_variance) const = 0;
};

// In place: pointwise (the statistics come from the state or the running values).
class CNNBatchNormalization : public InPlaceUnaryKernel {
 public:
  CNNBatchNormalization(std::shared_ptr<Device> device, std::shared_ptr<BatchNormalizationDataSource> data_source,
                        NeuronDescriptor fused_neuron);
  const char* class_name() const override { return "MPSCNNBatchNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  int64_t number_of_feature_channels() const { return channels_; }
  float epsilon;
  const NeuronDescriptor& fused_neuron() const { return fused_neuron_; }
  const std::shared_ptr<BatchNormalizationDataSource>& data_source() const { return data_source_; }
  const std::shared_ptr<const BatchNormalizationPrimitive>& primitive() const { return primitive_; }

  // CPU side: load the data source's current values; commands encoded
  // before keep the values they were encoded with.
  void reload_gamma_and_beta_from_data_source();
  void reload_mean_and_variance_from_data_source();
  // -reloadDataSource: a new data source of the same channel count: its
  // gamma, beta, mean, variance and epsilon.
  void reload_data_source(std::shared_ptr<BatchNormalizationDataSource> data_source);
  // GPU side: copy the state's values in, ordered on the command buffer.
  void reload_gamma_and_beta(CommandBuffer& command_buffer, const NormalizationGammaAndBetaState& state);
  void reload_mean_and_variance(CommandBuffer& command_buffer, const NormalizationMeanAndVarianceState& state);
  // The current running mean and variance, as a state sharing the kernel's buffers.
  std::shared_ptr<NormalizationMeanAndVarianceState> current_mean_and_variance() const;
  // The updates of MPS's training styles, for hand-encoded training, as
  // CNNConvolution::encode_weights_and_bias_update: a data source with the
  // *_on_command_buffer update encodes it now and the kernel reloads the
  // state it returns, on the command buffer; otherwise the CPU-side update
  // runs once the command buffer has completed, with the synchronized state,
  // and the kernel then reloads from the data source. An update that throws
  // fails the command buffer and leaves the values as they were. Without
  // `on_command_buffer` (the graph's training style CPU) the CPU-side update
  // runs even where the data source has the other.
  void encode_gamma_and_beta_update(CommandBuffer& command_buffer,
                                    const std::shared_ptr<BatchNormalizationState>& state,
                                    bool on_command_buffer = true);
  void encode_mean_and_variance_update(CommandBuffer& command_buffer,
                                       const std::shared_ptr<BatchNormalizationState>& state,
                                       bool on_command_buffer = true);

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  int64_t source_channels(const Image&) const override { return channels_; }
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  struct Parameters {
    std::shared_ptr<Buffer> gamma, beta, mean, variance;
  };
  // Reloads may swap the buffers on a command buffer's thread while another
  // thread encodes.
  Parameters parameters() const;
  // Loads `source`'s values into the kernel; returns them.
  BatchNormalizationParameters load(BatchNormalizationDataSource& source, bool gamma_and_beta, bool mean_and_variance);
  // Throws unless `state` is one of this kernel's, through its statistics
  // (and its statistics gradient when `gradients`).
  void check_update_state(const std::shared_ptr<BatchNormalizationState>& state, bool gradients) const;

  std::shared_ptr<BatchNormalizationDataSource> data_source_;
  int64_t channels_ = 0;
  NeuronDescriptor fused_neuron_;
  std::shared_ptr<const BatchNormalizationPrimitive> primitive_;
  mutable detail::SpinLock parameters_lock_;
  Parameters parameters_;
};

// MPSCNNBatchNormalizationStatistics: the batch mean and (biased) variance
// of each channel over every pixel of every source image, into the state.
class CNNBatchNormalizationStatistics : public Kernel {
 public:
  explicit CNNBatchNormalizationStatistics(std::shared_ptr<Device> device);
  const char* class_name() const override { return "MPSCNNBatchNormalizationStatistics"; }
  bool append_batch_barrier() const override { return true; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
  void encode_batch(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                    const std::shared_ptr<State>& state);

 private:
  std::shared_ptr<const BatchNormalizationPrimitive> primitive_;
};

// The gradient kernels share the state's checks and their neuron.
class BatchNormalizationGradientKernel : public GradientKernel {
 public:
  BatchNormalizationGradientKernel(std::shared_ptr<Device> device, NeuronDescriptor fused_neuron);
  // Both write the batch normalization state: the gamma and beta gradient
  // sums, and that the gradient was encoded.
  bool is_state_modified() const override { return true; }
  const NeuronDescriptor& fused_neuron() const { return fused_neuron_; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  // Both consume the state of the batch normalization's forward encode.
  std::string_view forward_class_name() const override { return "MPSCNNBatchNormalization"; }

  NeuronDescriptor fused_neuron_;
  std::shared_ptr<const BatchNormalizationPrimitive> primitive_;
};

// MPSCNNBatchNormalizationStatisticsGradient: gradient_for_gamma and
// gradient_for_beta of the state, batch sums. It writes no image: MPS has
// only its encode_batch, which records with no destination gradient.
class CNNBatchNormalizationStatisticsGradient : public BatchNormalizationGradientKernel {
 public:
  using BatchNormalizationGradientKernel::BatchNormalizationGradientKernel;
  const char* class_name() const override { return "MPSCNNBatchNormalizationStatisticsGradient"; }
  bool append_batch_barrier() const override { return true; }
  void encode_batch(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                    const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state);

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;
};

// MPSCNNBatchNormalizationGradient: the gradient for the source, through the
// batch statistics, from the sums the statistics gradient left in the state.
class CNNBatchNormalizationGradient : public BatchNormalizationGradientKernel {
 public:
  using BatchNormalizationGradientKernel::BatchNormalizationGradientKernel;
  const char* class_name() const override { return "MPSCNNBatchNormalizationGradient"; }

 protected:
  void check(const Image& source_gradient, const Image& source_image, const GradientState& state) const override;
  // Pointwise: the sums come from the statistics gradient's encode.
  InPlace in_place(bool) const override { return InPlace::Exact; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;
};

}  // namespace mpsx
