#include "mpsx/kernels/batch_normalization.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

constexpr const char* kStateName = "MPSCNNBatchNormalizationState";

// Contents undefined: for buffers a command writes whole before anything
// reads them. `channels` is a kernel's or a state's, within kMaxDimension.
std::shared_ptr<Buffer> per_channel(const std::shared_ptr<Device>& device, int64_t channels) {
  return make_pooled<Buffer>(device, static_cast<size_t>(channels) * sizeof(float));
}

std::shared_ptr<Buffer> upload(const std::shared_ptr<Device>& device, const std::vector<float>& values) {
  auto buffer = make_pooled<Buffer>(device, values.size() * sizeof(float));
  buffer->write(values.data(), 0, values.size() * sizeof(float));
  return buffer;
}

float* values_of(const std::shared_ptr<Buffer>& buffer) { return static_cast<float*>(buffer->data()); }

}  // namespace

// What a command reads and writes of a batch's statistics and gradients.
static void add_to_key(CommandKey& key, const BatchNormalizationBatch& batch) {
  key.add_word(static_cast<uint64_t>(batch.channels()));
  for (const auto* buffer : {&batch.gamma(), &batch.beta(), &batch.mean(), &batch.variance(),
                             &batch.gradient_for_gamma(), &batch.gradient_for_beta()})
    add_to_key(key, *buffer);
}

// ---------------------------------------------------------------- data sources

BatchNormalizationParameters load_batch_normalization_parameters(BatchNormalizationDataSource& source,
                                                                 const char* kernel, bool gamma_and_beta,
                                                                 bool mean_and_variance) {
  Loaded<BatchNormalizationDataSource> loaded(source, kernel);
  BatchNormalizationParameters p;
  p.channels = source.number_of_feature_channels();
  check_size(p.channels, kernel, ": the data source's number_of_feature_channels");
  if (gamma_and_beta) {
    take_normalization_array(source.gamma(), NormalizationArray::Gamma, p.channels, kernel, p.gamma);
    take_normalization_array(source.beta(), NormalizationArray::Beta, p.channels, kernel, p.beta);
  }
  if (mean_and_variance) {
    take_normalization_array(source.mean(), NormalizationArray::Mean, p.channels, kernel, p.mean);
    take_normalization_array(source.variance(), NormalizationArray::Variance, p.channels, kernel, p.variance);
  }
  p.epsilon = checked_normalization_epsilon(source.epsilon(), kernel, "the data source's epsilon");
  p.label = source.label();
  return p;
}

BatchNormalizationWeights::BatchNormalizationWeights(std::vector<float> gamma, std::vector<float> beta,
                                                     std::vector<float> mean, std::vector<float> variance,
                                                     float epsilon, float momentum, std::string label,
                                                     std::shared_ptr<NNOptimizer> optimizer)
    : epsilon_(checked_normalization_epsilon(epsilon, "BatchNormalizationWeights")),
      momentum_(momentum),
      label_(std::move(label)),
      optimizer_(std::move(optimizer)) {
  trained_.host[0] = std::move(gamma);
  trained_.host[1] = std::move(beta);
  statistics_.host[0] = std::move(mean);
  statistics_.host[1] = std::move(variance);
  const size_t channels = trained_.host[0].size();
  if (channels == 0) fail<ShapeError>("BatchNormalizationWeights: expected one gamma per feature channel, given none");
  const std::pair<const char*, const std::vector<float>*> others[] = {
      {"beta", &trained_.host[1]}, {"mean", &statistics_.host[0]}, {"variance", &statistics_.host[1]}};
  for (const auto& [name, values] : others)
    if (values->size() != channels)
      fail<ShapeError>("BatchNormalizationWeights: expected ", channels, " ", name, " values (as gamma), given ",
                       values->size());
  if (!(momentum_ >= 0.0f && momentum_ <= 1.0f))
    fail<ArgumentError>("BatchNormalizationWeights: momentum must be in [0, 1], given ", momentum_);
  if (optimizer_) optimizer_vectors_ = KeptOptimizerVectors(*optimizer_, {channels, channels});
}

void BatchNormalizationWeights::set_gamma_and_beta(std::vector<float> gamma, std::vector<float> beta) {
  trained_.assign(mutex_, std::move(gamma), std::move(beta), "BatchNormalizationWeights", "gamma", "beta");
}

void BatchNormalizationWeights::set_mean_and_variance(std::vector<float> mean, std::vector<float> variance) {
  statistics_.assign(mutex_, std::move(mean), std::move(variance), "BatchNormalizationWeights", "mean", "variance");
}

std::shared_ptr<NormalizationMeanAndVarianceState> BatchNormalizationWeights::update_mean_and_variance_on_command_buffer(
    CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) {
  command_buffer.check_encodable();
  if (!state) fail<TypeMismatchError>("BatchNormalizationWeights: expected a batch normalization state, given None");
  if (&command_buffer.device() != &state->device())
    fail<DeviceMismatchError>("BatchNormalizationWeights: the command buffer is on device ",
                              command_buffer.device().name(), ", the state on device ", state->device().name());
  if (!state->statistics_encoded)
    fail<StateError>("BatchNormalizationWeights: the ", kStateName,
                     " has no batch statistics; encode MPSCNNBatchNormalizationStatistics with it first");
  const int64_t channels = state->channels();
  if (channels != number_of_feature_channels())
    fail<ShapeError>("BatchNormalizationWeights: the state has ", channels, " feature channels, the weights ",
                     number_of_feature_channels());
  const CNNBatchNormalization& kernel = *state->batch_normalization();
  auto running = kernel.current_mean_and_variance();
  auto result = make_pooled<NormalizationMeanAndVarianceState>(per_channel(state->device_ptr(), channels),
                                                               per_channel(state->device_ptr(), channels));
  const int64_t n = state->statistics_count;
  const float bessel = n > 1 ? static_cast<float>(static_cast<double>(n) / static_cast<double>(n - 1)) : 1.0f;
  command_buffer.record(keyed_by(kernel.primitive(), running->mean(), running->variance(), state->mean(),
                                 state->variance(), result->mean(), result->variance(), channels, momentum_, bessel),
                        [primitive = kernel.primitive(), running, state, result, channels, momentum = momentum_,
                         bessel](ExecutionContext& context) {
    primitive->update_running_statistics(context, channels, values_of(running->mean()), values_of(running->variance()),
                                         values_of(state->mean()), values_of(state->variance()), momentum, bessel,
                                         values_of(result->mean()), values_of(result->variance()));
  });
  result->mean()->will_write(command_buffer);
  result->variance()->will_write(command_buffer);
  result->synchronize(command_buffer);  // the host reads them once the command buffer has completed
  statistics_.complete_on(command_buffer, shared_from_this(), mutex_, result->mean(), result->variance());
  return result;
}

std::shared_ptr<NormalizationGammaAndBetaState> BatchNormalizationWeights::update_gamma_and_beta_on_command_buffer(
    CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) {
  command_buffer.check_encodable();
  if (!state) fail<TypeMismatchError>("BatchNormalizationWeights: expected a batch normalization state, given None");
  if (state->channels() != number_of_feature_channels())
    fail<ShapeError>("BatchNormalizationWeights: the state has ", state->channels(), " feature channels, the weights ",
                     number_of_feature_channels());
  // New buffers each update, so the last completed values outlive later updates in flight.
  auto trained = make_pooled<NormalizationGammaAndBetaState>(per_channel(optimizer_->device_ptr(), state->channels()),
                                                             per_channel(optimizer_->device_ptr(), state->channels()));
  optimizer_->encode_batch_normalization(command_buffer, state, state, optimizer_vectors_.lists(), trained);
  trained->synchronize(command_buffer);  // the host reads them once the command buffer has completed
  optimizer_vectors_.synchronize(command_buffer);
  trained_.complete_on(command_buffer, shared_from_this(), mutex_, trained->gamma(), trained->beta());
  return trained;
}

// ---------------------------------------------------------------- the batch normalization state

BatchNormalizationBatch::BatchNormalizationBatch(const std::shared_ptr<Device>& device, int64_t channels)
    : channels_(channels) {
  for (auto* buffer : {&gamma_, &beta_, &mean_, &variance_, &gradient_for_gamma_, &gradient_for_beta_})
    *buffer = zeroed_per_channel(device, channels, kStateName);
}

BatchNormalizationState::BatchNormalizationState(std::shared_ptr<const CNNBatchNormalization> kernel)
    : GradientState(kernel->device_ptr()),
      kernel_(std::move(kernel)),
      batch_(kernel_->primitive()->make_batch(device_ptr(), kernel_->number_of_feature_channels())) {}

namespace {
template <class F>
void for_each_buffer(const BatchNormalizationBatch& batch, F&& f) {
  for (const auto* buffer : {&batch.gamma(), &batch.beta(), &batch.mean(), &batch.variance(),
                             &batch.gradient_for_gamma(), &batch.gradient_for_beta()})
    f(**buffer);
}
}  // namespace

void BatchNormalizationState::synchronize(CommandBuffer& command_buffer) {
  for_each_buffer(*batch_, [&](Buffer& buffer) { buffer.synchronize(command_buffer); });
}

bool BatchNormalizationState::shares_memory(const Image& image) const {
  bool shares = false;
  for_each_buffer(*batch_, [&](const Buffer& buffer) { shares = shares || image.overlaps(&buffer); });
  return shares;
}

void BatchNormalizationState::reset() {
  for_each_buffer(*batch_, [&](Buffer& buffer) {
    if (buffer.written_by_pending_command_buffer())
      fail<StateError>(kStateName, ": reset while a command buffer that writes the state is pending; "
                       "wait until it has completed");
  });
  for (const auto* buffer : {&mean(), &variance(), &gradient_for_gamma(), &gradient_for_beta()})
    (*buffer)->fill_zero();
  statistics_encoded = gradients_encoded = gradient_encoded = encoded = false;
  statistics_count = 0;
  statistics_channel = 0;
  sub_batches_.clear();
  bound_ = 0;
}

const BatchNormalizationState::SubBatch* BatchNormalizationState::find(uint64_t source) const {
  for (const SubBatch& s : sub_batches_)
    if (s.source == source) return &s;
  return nullptr;
}

void BatchNormalizationState::check_bindable(const Image& source, const char* kernel) const {
  if (!find(source.identity()))
    fail<StateError>(kernel, ": this ", class_name(), " belongs to another batch: its statistics cover ",
                     sub_batches_.size(), " sub-batch(es) of source images, not these; encode "
                     "MPSCNNBatchNormalizationStatistics with them first (before any forward encode)");
}

void BatchNormalizationState::bind_source(const Image& source) {
  State::bind_source(source);
  bound_ = source.identity();
  if (!find(bound_)) {
    SubBatch added;
    added.source = bound_;
    sub_batches_.push_back(added);
  }
}

void BatchNormalizationState::remember_forward() {
  for (SubBatch& s : sub_batches_)
    if (s.source == bound_) {
      s.forward = true;
      s.source_descriptor = source_descriptor;
      s.destination_descriptor = destination_descriptor;
      s.geometry = geometry;
      s.result_identity = result_identity;
    }
}

void BatchNormalizationState::check_source(const Image& source, const char* kernel) {
  const SubBatch* s = find(source.identity());
  if (!s || !s->forward)
    fail<StateError>(kernel, ": this ", class_name(), " was made for another batch of source images; pass the "
                     "source images of one of its forward encodes");
  source_descriptor = s->source_descriptor;
  destination_descriptor = s->destination_descriptor;
  geometry = s->geometry;
  result_identity = s->result_identity;
}

void BatchNormalizationState::check_statistics_open(const char* kernel) const {
  const char* used = gradient_encoded    ? "MPSCNNBatchNormalizationGradient"
                     : gradients_encoded ? "MPSCNNBatchNormalizationStatisticsGradient"
                     : encoded           ? "MPSCNNBatchNormalization"
                                         : nullptr;
  if (used)
    fail<StateError>(kernel, ": the ", class_name(), " was already used by ", used,
                     "; statistics accumulate only before any forward or gradient encode: reset() the state or make "
                     "a new one for another batch");
}

// ---------------------------------------------------------------- CNNBatchNormalization

CNNBatchNormalization::CNNBatchNormalization(std::shared_ptr<Device> device,
                                             std::shared_ptr<BatchNormalizationDataSource> data_source,
                                             NeuronDescriptor fused_neuron)
    : InPlaceUnaryKernel(std::move(device)), data_source_(std::move(data_source)), fused_neuron_(std::move(fused_neuron)) {
  if (!data_source_) fail<TypeMismatchError>(class_name(), ": expected a data source, given None");
  fused_neuron_.validate();
  BatchNormalizationParameters p = load_batch_normalization_parameters(*data_source_, class_name(), true, true);
  channels_ = p.channels;
  const int64_t limit = this->device().backend().limits().summed_feature_channels;
  if (channels_ > limit)
    fail<ShapeError>(class_name(), ": the data source has ", channels_, " feature channels; batch normalization on "
                     "device ", this->device().name(), " takes at most ", limit);
  epsilon = p.epsilon;
  label = p.label;
  if (fused_neuron_.type == NeuronType::PReLU && static_cast<int64_t>(fused_neuron_.a_per_channel.size()) != channels_)
    fail<ArgumentError>(class_name(), ": the fused PReLU neuron has ", fused_neuron_.a_per_channel.size(),
                        " slopes; the kernel has ", channels_, " feature channels");
  primitive_ = make_primitive<BatchNormalizationPrimitive>(this->device().backend(), BatchNormalizationDescriptor{fused_neuron_});
  parameters_ = {upload(device_ptr(), p.gamma), upload(device_ptr(), p.beta), upload(device_ptr(), p.mean),
                 upload(device_ptr(), p.variance)};
}

CNNBatchNormalization::Parameters CNNBatchNormalization::parameters() const {
  parameters_lock_.lock();
  Parameters p = parameters_;
  parameters_lock_.unlock();
  return p;
}

BatchNormalizationParameters CNNBatchNormalization::load(BatchNormalizationDataSource& source, bool gamma_and_beta,
                                                        bool mean_and_variance) {
  BatchNormalizationParameters p =
      load_batch_normalization_parameters(source, class_name(), gamma_and_beta, mean_and_variance);
  if (p.channels != channels_)
    fail<ShapeError>(class_name(), ": the data source now has ", p.channels,
                     " feature channels; the kernel was made for ", channels_);
  std::shared_ptr<Buffer> gamma, beta, mean, variance;
  if (gamma_and_beta) {
    gamma = upload(device_ptr(), p.gamma);
    beta = upload(device_ptr(), p.beta);
  }
  if (mean_and_variance) {
    mean = upload(device_ptr(), p.mean);
    variance = upload(device_ptr(), p.variance);
  }
  parameters_lock_.lock();
  if (gamma_and_beta) {
    parameters_.gamma.swap(gamma);
    parameters_.beta.swap(beta);
  }
  if (mean_and_variance) {
    parameters_.mean.swap(mean);
    parameters_.variance.swap(variance);
  }
  parameters_lock_.unlock();
  return p;
}

void CNNBatchNormalization::reload_gamma_and_beta_from_data_source() { load(*data_source_, true, false); }

void CNNBatchNormalization::reload_mean_and_variance_from_data_source() { load(*data_source_, false, true); }

void CNNBatchNormalization::reload_data_source(std::shared_ptr<BatchNormalizationDataSource> data_source) {
  if (!data_source) fail<TypeMismatchError>(class_name(), ": expected a data source, given None");
  epsilon = load(*data_source, true, true).epsilon;
  data_source_ = std::move(data_source);
}

void CNNBatchNormalization::reload_gamma_and_beta(CommandBuffer& command_buffer,
                                                  const NormalizationGammaAndBetaState& state) {
  check_command_buffer(command_buffer);
  check_device(state, "gamma and beta state");
  state.check_fits(channels_, class_name());
  Parameters p = parameters();
  state.record_copy_to(command_buffer, channels_, p.gamma, p.beta);
}

void CNNBatchNormalization::reload_mean_and_variance(CommandBuffer& command_buffer,
                                                     const NormalizationMeanAndVarianceState& state) {
  check_command_buffer(command_buffer);
  check_device(state, "mean and variance state");
  state.check_fits(channels_, class_name());
  Parameters p = parameters();
  state.record_copy_to(command_buffer, channels_, p.mean, p.variance);
}

std::shared_ptr<NormalizationMeanAndVarianceState> CNNBatchNormalization::current_mean_and_variance() const {
  Parameters p = parameters();
  return make_pooled<NormalizationMeanAndVarianceState>(p.mean, p.variance);
}

void CNNBatchNormalization::check_update_state(const std::shared_ptr<BatchNormalizationState>& state,
                                               bool gradients) const {
  if (!state) fail<TypeMismatchError>(class_name(), ": expected an ", kStateName, ", given None");
  check_device(*state, "state");
  if (state->batch_normalization().get() != this)
    fail<StateError>(class_name(), ": the ", kStateName, " was made by another batch normalization");
  if (!state->statistics_encoded)
    fail<StateError>(class_name(), ": the ", kStateName,
                     " has no batch statistics; encode MPSCNNBatchNormalizationStatistics with it first");
  if (gradients && !state->gradients_encoded)
    fail<StateError>(class_name(), ": the ", kStateName,
                     " has no gradients for gamma and beta; encode MPSCNNBatchNormalizationStatisticsGradient with "
                     "it first");
}

void CNNBatchNormalization::encode_gamma_and_beta_update(CommandBuffer& command_buffer,
                                                         const std::shared_ptr<BatchNormalizationState>& state,
                                                         bool on_command_buffer) {
  check_command_buffer(command_buffer);
  check_update_state(state, true);
  auto self = std::static_pointer_cast<CNNBatchNormalization>(shared_from_this());
  encode_update(
      command_buffer, class_name(),
      "update_gamma_and_beta_with_command_buffer nor update_gamma_and_beta_with_batch_normalization_state",
      on_command_buffer && data_source_->supports_update_gamma_and_beta_on_command_buffer(),
      data_source_->supports_update_gamma_and_beta(),
      *state, [&] { return data_source_->update_gamma_and_beta_on_command_buffer(command_buffer, state); },
      [&](const NormalizationGammaAndBetaState& updated) { reload_gamma_and_beta(command_buffer, updated); },
      [self, state] {
        if (self->data_source_->update_gamma_and_beta(state)) self->reload_gamma_and_beta_from_data_source();
      });
}

void CNNBatchNormalization::encode_mean_and_variance_update(CommandBuffer& command_buffer,
                                                            const std::shared_ptr<BatchNormalizationState>& state,
                                                            bool on_command_buffer) {
  check_command_buffer(command_buffer);
  check_update_state(state, false);
  auto self = std::static_pointer_cast<CNNBatchNormalization>(shared_from_this());
  encode_update(
      command_buffer, class_name(),
      "update_mean_and_variance_with_command_buffer nor update_mean_and_variance_with_batch_normalization_state",
      on_command_buffer && data_source_->supports_update_mean_and_variance_on_command_buffer(),
      data_source_->supports_update_mean_and_variance(), *state,
      [&] { return data_source_->update_mean_and_variance_on_command_buffer(command_buffer, state); },
      [&](const NormalizationMeanAndVarianceState& updated) { reload_mean_and_variance(command_buffer, updated); },
      [self, state] {
        if (self->data_source_->update_mean_and_variance(state)) self->reload_mean_and_variance_from_data_source();
      });
}

std::shared_ptr<State> CNNBatchNormalization::new_result_state(const Image&) {
  return make_pooled<BatchNormalizationState>(
      std::static_pointer_cast<const CNNBatchNormalization>(shared_from_this()));
}

void CNNBatchNormalization::check_state(const State& state) const {
  auto* s = dynamic_cast<const BatchNormalizationState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an ", kStateName, ", given an ", state.class_name());
  if (s->batch_normalization().get() != this)
    fail<StateError>(class_name(), ": the ", kStateName, " was made by another batch normalization");
  if (!s->statistics_encoded)
    fail<StateError>(class_name(), ": the ", kStateName,
                     " has no batch statistics; encode MPSCNNBatchNormalizationStatistics with it first");
  if (s->statistics_channel != source_feature_channel_offset)
    fail<ShapeError>(class_name(), ": the state's statistics start at feature channel ", s->statistics_channel,
                     ", this encode at source_feature_channel_offset ", source_feature_channel_offset);
}

void CNNBatchNormalization::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                   const std::shared_ptr<Image>& destination, const Geometry& g,
                                   const std::shared_ptr<State>& state) {
  check_reads_inside(*source, g);
  Parameters p = parameters();
  auto regions = [source, destination, g, channels = channels_] {
    return std::make_pair(source_region(*source, g, channels), destination_region(*destination, g, channels));
  };
  auto bn = std::static_pointer_cast<BatchNormalizationState>(state);
  if (!bn) {  // inference: the running statistics
    command_buffer.record(keyed_by(primitive_, source, destination, as_value(g), channels_, p.gamma, p.beta, p.mean,
                                   p.variance, epsilon),
                          [primitive = primitive_, regions, p, epsilon = epsilon](ExecutionContext& context) {
      auto [from, to] = regions();
      primitive->normalize(context, from, to, values_of(p.gamma), values_of(p.beta), values_of(p.mean),
                           values_of(p.variance), epsilon);
    });
    return;
  }
  bn->epsilon = epsilon;
  bn->remember_forward();
  command_buffer.record(
      keyed_by(primitive_, source, destination, as_value(g), channels_, p.gamma, p.beta, bn->batch(), epsilon),
      [primitive = primitive_, regions, gamma = p.gamma, beta = p.beta, bn, epsilon = epsilon](ExecutionContext& context) {
        // The state keeps the gamma and beta its gradients belong to.
        auto [from, to] = regions();
        primitive->normalize(context, from, to, values_of(gamma), values_of(beta), epsilon, bn->batch());
      });
  bn->gamma()->will_write(command_buffer);
  bn->beta()->will_write(command_buffer);
}

// ---------------------------------------------------------------- CNNBatchNormalizationStatistics

CNNBatchNormalizationStatistics::CNNBatchNormalizationStatistics(std::shared_ptr<Device> device)
    : Kernel(std::move(device)),
      primitive_(make_primitive<BatchNormalizationPrimitive>(this->device().backend(), BatchNormalizationDescriptor{})) {}

void CNNBatchNormalizationStatistics::encode_batch(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                                   const std::shared_ptr<State>& state) {
  check_command_buffer(command_buffer);
  if (!source) fail<TypeMismatchError>(class_name(), ": expected source images, given None");
  if (!state) fail<TypeMismatchError>(class_name(), ": expected an ", kStateName, ", given None");
  check_device(*source, "source images");
  check_usable(command_buffer, {source.get()});
  check_device(*state, "state");
  auto bn = std::dynamic_pointer_cast<BatchNormalizationState>(state);
  if (!bn) fail<TypeMismatchError>(class_name(), ": expected an ", kStateName, ", given an ", state->class_name());
  bn->check_usable(command_buffer, class_name());
  if (source->data_type() == DataType::BFloat16)
    fail<TypeMismatchError>(class_name(), ": bfloat16 source images are not supported; use float32 or float16");
  check_properties();
  const int64_t first = source_feature_channel_offset, channels = bn->channels();
  if (source_slice(*source) < source->feature_channels() - first)
    check_source_channels(*source, channels);  // its message names the max count
  else if (first == 0 ? source->feature_channels() != channels : first + channels > source->feature_channels())
    fail<ShapeError>(class_name(), ": expected source images of ", first + channels, " feature channels (the state's ",
                     channels, " from feature channel ", first, "), given ", source->feature_channels());
  bn->check_statistics_open(class_name());
  const int64_t before = bn->statistics_count;
  if (before > 0 && first != bn->statistics_channel)
    fail<ShapeError>(class_name(), ": the state's statistics start at feature channel ", bn->statistics_channel,
                     ", this encode at source_feature_channel_offset ", first);
  const int64_t count = checked_count({source->number_of_images(), source->height(), source->width()}, class_name(),
                                      ": the values per channel");
  if (before > kMaxCount - count)
    fail<ShapeError>(class_name(), ": the values per channel of all sub-batches overflow: ", before, " + ", count,
                     " is above ", kMaxCount);
  bn->bind_source(*source);
  bn->statistics_encoded = true;
  bn->statistics_count = before + count;
  bn->statistics_channel = first;
  command_buffer.record(keyed_by(primitive_, source, bn->batch(), first, channels, before),
                        [primitive = primitive_, source, bn, first, channels, before](ExecutionContext& context) {
    primitive->statistics(context,
                          source->region(0, first, 0, 0, source->number_of_images(), channels, source->height(),
                                         source->width()),
                          bn->batch(), before);
  });
  source->will_read(command_buffer);
  bn->mean()->will_write(command_buffer);
  bn->variance()->will_write(command_buffer);
}

// ---------------------------------------------------------------- gradients

BatchNormalizationGradientKernel::BatchNormalizationGradientKernel(std::shared_ptr<Device> device,
                                                                   NeuronDescriptor fused_neuron)
    : GradientKernel(std::move(device)), fused_neuron_(std::move(fused_neuron)) {
  fused_neuron_.validate();
  primitive_ = make_primitive<BatchNormalizationPrimitive>(this->device().backend(), BatchNormalizationDescriptor{fused_neuron_});
}

const GradientState& BatchNormalizationGradientKernel::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const BatchNormalizationState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an ", kStateName, ", given an ", state.class_name());
  const NeuronDescriptor& forward = s->batch_normalization()->fused_neuron();
  if (!(forward == fused_neuron_))
    fail<ArgumentError>(class_name(), ": the state's batch normalization fuses neuron type ",
                        static_cast<int>(forward.type), " (a ", forward.a, ", b ", forward.b, ", c ", forward.c,
                        "); this gradient was made for type ", static_cast<int>(fused_neuron_.type), " (a ",
                        fused_neuron_.a, ", b ", fused_neuron_.b, ", c ", fused_neuron_.c, ")");
  return *s;
}

void CNNBatchNormalizationStatisticsGradient::encode_batch(CommandBuffer& command_buffer,
                                                           const std::shared_ptr<Image>& source_gradient,
                                                           const std::shared_ptr<Image>& source_image,
                                                           const std::shared_ptr<State>& state) {
  check_arguments(command_buffer, source_gradient, source_image, state);
  if (static_cast<const BatchNormalizationState&>(*state).gradient_encoded)
    fail<StateError>(class_name(), ": the ", kStateName, " was already used by MPSCNNBatchNormalizationGradient, "
                     "which read the sums of gamma's and beta's gradients; encode every sub-batch's statistics "
                     "gradient before the gradients");
  record(command_buffer, source_gradient, source_image, state, nullptr);
  state->was_read();
}

void CNNBatchNormalizationStatisticsGradient::record(CommandBuffer& command_buffer,
                                                     const std::shared_ptr<Image>& source_gradient,
                                                     const std::shared_ptr<Image>& source_image,
                                                     const std::shared_ptr<State>& state,
                                                     const std::shared_ptr<Image>&) {
  auto bn = std::static_pointer_cast<BatchNormalizationState>(state);
  const Geometry g = bn->geometry;
  const int64_t channels = bn->channels();
  const bool accumulate = bn->gradients_encoded;  // a later sub-batch adds to the sums
  command_buffer.record(keyed_by(primitive_, source_gradient, source_image, bn->batch(), as_value(g), channels,
                                 accumulate, bn->epsilon),
                        [primitive = primitive_, source_gradient, source_image, bn, g, channels, accumulate,
                         epsilon = bn->epsilon](ExecutionContext& context) {
    primitive->statistics_gradient(context, destination_region(*source_gradient, g, channels),
                                   source_region(*source_image, g, channels), epsilon, bn->batch(), accumulate);
  });
  bn->gradients_encoded = true;
  source_gradient->will_read(command_buffer);
  source_image->will_read(command_buffer);
  bn->gradient_for_gamma()->will_write(command_buffer);
  bn->gradient_for_beta()->will_write(command_buffer);
}

void CNNBatchNormalizationGradient::check(const Image& source_gradient, const Image& source_image,
                                          const GradientState& state) const {
  GradientKernel::check(source_gradient, source_image, state);
  if (!static_cast<const BatchNormalizationState&>(state).gradients_encoded)
    fail<StateError>(class_name(), ": the ", kStateName,
                     " has no gradients for gamma and beta; encode MPSCNNBatchNormalizationStatisticsGradient with it "
                     "first");
}

void CNNBatchNormalizationGradient::record(CommandBuffer& command_buffer,
                                           const std::shared_ptr<Image>& source_gradient,
                                           const std::shared_ptr<Image>& source_image,
                                           const std::shared_ptr<State>& state,
                                           const std::shared_ptr<Image>& destination_gradient) {
  auto bn = std::static_pointer_cast<BatchNormalizationState>(state);
  const Geometry g = bn->geometry;
  const int64_t channels = bn->channels();
  const bool covers = g.source_x == 0 && g.source_y == 0 && g.width == source_image->width() &&
                      g.height == source_image->height() && g.source_image == 0 &&
                      g.images == source_image->number_of_images();
  const bool all_channels = g.source_channel == 0 && channels == source_image->feature_channels();
  bn->gradient_encoded = true;
  command_buffer.record(keyed_by(primitive_, source_gradient, source_image, destination_gradient, bn->batch(),
                                 as_value(g), channels, covers, all_channels, bn->epsilon, bn->statistics_count),
                        [primitive = primitive_, source_gradient, source_image, destination_gradient, bn, g, channels,
                         covers, all_channels, epsilon = bn->epsilon,
                         count = bn->statistics_count](ExecutionContext& context) {
    auto gradient = [&](const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx) {
      primitive->gradient(context, dy, x, dx, epsilon, bn->batch(), count);
    };
    if (!all_channels)  // channels outside the normalization get no gradient
      context.fill_zero_image(*destination_gradient);
    if (!covers) {
      // Pixels the statistics covered but the forward pass did not write
      // still moved the mean and variance.
      const int64_t n = source_image->number_of_images(), h = source_image->height(), w = source_image->width();
      gradient(ImageRegion{}, source_image->region(0, g.source_channel, 0, 0, n, channels, h, w),
               destination_gradient->region(0, g.source_channel, 0, 0, n, channels, h, w));
    }
    gradient(destination_region(*source_gradient, g, channels), source_region(*source_image, g, channels),
             source_region(*destination_gradient, g, channels));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNBatchNormalization::make_gradient_kernels() const {
  return {std::make_shared<CNNBatchNormalizationGradient>(device_ptr(), fused_neuron())};
}

// With no fused neuron: the statistics kernel has none. The gradient of a
// batch normalization with one needs a statistics gradient made with it.
std::vector<std::shared_ptr<GradientKernel>> CNNBatchNormalizationStatistics::make_gradient_kernels() const {
  return {std::make_shared<CNNBatchNormalizationStatisticsGradient>(device_ptr(), NeuronDescriptor{})};
}

}  // namespace mpsx
