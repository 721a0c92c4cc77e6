#include "mpsx/kernels/group_normalization.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/kernels/instance_normalization.h"
#include "mpsx/pool.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

// Contents undefined: for buffers a command writes whole before anything reads them.
std::shared_ptr<Buffer> floats(const std::shared_ptr<Device>& device, int64_t count) {
  return make_pooled<Buffer>(device, checked_bytes(count, sizeof(float), "a normalization buffer"));
}

std::shared_ptr<Buffer> upload(const std::shared_ptr<Device>& device, const std::vector<float>& values) {
  auto buffer = make_pooled<Buffer>(device, values.size() * sizeof(float));
  buffer->write(values.data(), 0, values.size() * sizeof(float));
  return buffer;
}

float* values_of(const std::shared_ptr<Buffer>& buffer) { return static_cast<float*>(buffer->data()); }

const char* forward_name(GroupNormalizationKind kind) {
  return kind == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalization" : "MPSCNNGroupNormalization";
}

const char* state_name(GroupNormalizationKind kind) {
  return kind == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalizationGradientState"
                                                  : "MPSCNNGroupNormalizationGradientState";
}

}  // namespace

void check_number_of_groups(int64_t groups, int64_t channels, const char* who) {
  if (groups < 1 || groups > channels || channels % groups != 0)
    fail<ArgumentError>(who, ": number_of_groups must divide the ", channels, " feature channels, given ", groups);
}

// ---------------------------------------------------------------- GroupNormalizationWeights

GroupNormalizationWeights::GroupNormalizationWeights(std::vector<float> gamma, std::vector<float> beta,
                                                     int64_t groups, float epsilon, std::string label,
                                                     std::shared_ptr<NNOptimizer> optimizer)
    : channels_(static_cast<int64_t>(gamma.size())),
      groups_(groups),
      epsilon_(epsilon),
      label_(std::move(label)),
      optimizer_(std::move(optimizer)) {
  const char* who = groups == 0 ? "InstanceNormalizationWeights" : "GroupNormalizationWeights";
  if (channels_ == 0) fail<ShapeError>(who, ": expected one gamma per feature channel, given none");
  check_size(channels_, who, ": the number of gamma values");
  if (static_cast<int64_t>(beta.size()) != channels_)
    fail<ShapeError>(who, ": expected ", channels_, " beta values (as gamma), given ", beta.size());
  if (groups != 0) check_number_of_groups(groups, channels_, who);
  checked_normalization_epsilon(epsilon_, who);
  trained_.host[0] = std::move(gamma);
  trained_.host[1] = std::move(beta);
  const size_t count = static_cast<size_t>(channels_);
  if (optimizer_) optimizer_vectors_ = KeptOptimizerVectors(*optimizer_, {count, count});
}

void GroupNormalizationWeights::set_gamma_and_beta(std::vector<float> gamma, std::vector<float> beta) {
  trained_.assign(mutex_, std::move(gamma), std::move(beta),
                  groups_ == 0 ? "InstanceNormalizationWeights" : "GroupNormalizationWeights", "gamma", "beta");
}

int64_t GroupNormalizationWeights::number_of_groups() {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_ == 0 ? channels_ : groups_;
}

void GroupNormalizationWeights::set_number_of_groups(int64_t groups) {
  check_number_of_groups(groups, channels_, "GroupNormalizationWeights");
  std::lock_guard<std::mutex> lock(mutex_);
  groups_ = groups;
}

std::shared_ptr<NormalizationGammaAndBetaState> GroupNormalizationWeights::update_gamma_and_beta_on_command_buffer(
    CommandBuffer& command_buffer, const States& states) {
  const char* who = groups_ == 0 ? "InstanceNormalizationWeights" : "GroupNormalizationWeights";
  command_buffer.check_encodable();
  if (!optimizer_) fail<TypeMismatchError>(who, ": no optimizer to update gamma and beta with");
  if (states.size() != 1 || !states[0])
    fail<ArgumentError>(who, ": expected the batch of one encode's state (one state), given ", states.size());
  const auto& state = states[0];
  if (state->channels() != channels_)
    fail<ShapeError>(who, ": the state has ", state->channels(), " feature channels, the weights ", channels_);
  if (!state->gradients_encoded)
    fail<StateError>(who, ": the ", state->class_name(), " has no gradients; encode its gradient kernel with it first");
  // New buffers each update, so the last completed values outlive later updates in flight.
  auto trained = make_pooled<NormalizationGammaAndBetaState>(floats(optimizer_->device_ptr(), channels_),
                                                             floats(optimizer_->device_ptr(), channels_));
  optimizer_->encode_gamma_and_beta(command_buffer, state->gradient_for_gamma(), state->gradient_for_beta(),
                                    state->gamma(), state->beta(), channels_, optimizer_vectors_.lists(), trained);
  trained->synchronize(command_buffer);
  optimizer_vectors_.synchronize(command_buffer);
  trained_.complete_on(command_buffer, shared_from_this(), mutex_, trained->gamma(), trained->beta());
  return trained;
}

// ---------------------------------------------------------------- the gradient state

GroupNormalizationGradientState::GroupNormalizationGradientState(std::shared_ptr<const GroupNormalizationKernel> kernel,
                                                                 int64_t images)
    : GradientState(kernel->device_ptr()),
      kernel_(std::move(kernel)),
      channels_(kernel_->number_of_feature_channels()),
      images_(images) {
  const auto& device = device_ptr();
  for (auto* buffer : {&gamma_, &beta_, &gradient_for_gamma_, &gradient_for_beta_}) {
    *buffer = floats(device, channels_);
    (*buffer)->fill_zero();
  }
  // At most one group per channel.
  const int64_t pairs = checked_mul(images_, channels_, kernel_->class_name(), ": images x feature channels");
  statistics_.mean = floats(device, pairs);
  statistics_.variance = floats(device, pairs);
}

const char* GroupNormalizationGradientState::class_name() const { return state_name(kernel_->kind()); }

GroupNormalizationKind GroupNormalizationGradientState::kind() const { return kernel_->kind(); }

void GroupNormalizationGradientState::synchronize(CommandBuffer& command_buffer) {
  for (const auto* buffer : {&gamma_, &beta_, &gradient_for_gamma_, &gradient_for_beta_})
    (*buffer)->synchronize(command_buffer);
}

bool GroupNormalizationGradientState::shares_memory(const Image& image) const {
  for (const auto* buffer :
       {&gamma_, &beta_, &gradient_for_gamma_, &gradient_for_beta_, &statistics_.mean, &statistics_.variance})
    if (image.overlaps(buffer->get())) return true;
  return false;
}

// ---------------------------------------------------------------- the forward kernels

GroupNormalizationKernel::GroupNormalizationKernel(std::shared_ptr<Device> device,
                                                   std::shared_ptr<GroupNormalizationDataSource> data_source,
                                                   GroupNormalizationKind kind)
    : InPlaceUnaryKernel(std::move(device)), kind_(kind), data_source_(std::move(data_source)) {
  if (!data_source_) fail<TypeMismatchError>(forward_name(kind_), ": expected a data source, given None");
  primitive_ = make_primitive<GroupNormalizationPrimitive>(this->device().backend(), GroupNormalizationDescriptor{kind_});
  load(*data_source_, true);
}

const char* GroupNormalizationKernel::state_class_name() const { return state_name(kind_); }

int64_t GroupNormalizationKernel::number_of_groups() const { return parameters().groups; }

GroupNormalizationKernel::Parameters GroupNormalizationKernel::parameters() const {
  std::lock_guard<std::mutex> lock(parameters_lock_);
  return parameters_;
}

float GroupNormalizationKernel::load(GroupNormalizationDataSource& source, bool first) {
  const char* kernel = forward_name(kind_);
  std::vector<float> gamma, beta;
  float eps;
  std::string name;
  int64_t channels, groups;
  {
    Loaded<GroupNormalizationDataSource> loaded(source, kernel);
    channels = source.number_of_feature_channels();
    check_size(channels, kernel, ": the data source's number_of_feature_channels");
    if (!first && channels != channels_)
      fail<ShapeError>(kernel, ": the data source now has ", channels, " feature channels; the kernel was made for ",
                       channels_);
    groups = channels;
    if (kind_ == GroupNormalizationKind::Group) {
      groups = source.number_of_groups();
      if (groups < 1 || channels % groups != 0)
        fail<ArgumentError>(kernel, ": the data source's number_of_groups must divide its ", channels,
                            " feature channels, given ", groups);
    }
    take_normalization_array(source.gamma(), NormalizationArray::Gamma, channels, kernel, gamma);
    take_normalization_array(source.beta(), NormalizationArray::Beta, channels, kernel, beta);
    eps = checked_normalization_epsilon(source.epsilon(), kernel, "the data source's epsilon");
    name = source.label();
  }
  Parameters p{upload(device_ptr(), gamma), upload(device_ptr(), beta), groups};
  if (first) {
    channels_ = channels;
    epsilon = eps;
    label = name;
  }
  std::lock_guard<std::mutex> lock(parameters_lock_);
  parameters_ = std::move(p);
  return eps;
}

void GroupNormalizationKernel::reload_gamma_and_beta_from_data_source() { load(*data_source_, false); }

void GroupNormalizationKernel::reload_data_source(std::shared_ptr<GroupNormalizationDataSource> data_source) {
  if (!data_source) fail<TypeMismatchError>(class_name(), ": expected a data source, given None");
  epsilon = load(*data_source, false);
  data_source_ = std::move(data_source);
}

void GroupNormalizationKernel::reload_gamma_and_beta(CommandBuffer& command_buffer,
                                                     const NormalizationGammaAndBetaState& state) {
  check_command_buffer(command_buffer);
  check_device(state, "gamma and beta state");
  state.check_fits(channels_, class_name());
  Parameters p = parameters();
  state.record_copy_to(command_buffer, channels_, p.gamma, p.beta);
}

void GroupNormalizationKernel::encode_gamma_and_beta_update(
    CommandBuffer& command_buffer, const std::shared_ptr<GroupNormalizationGradientState>& state,
    bool on_command_buffer) {
  check_command_buffer(command_buffer);
  if (!state) fail<TypeMismatchError>(class_name(), ": expected an ", state_class_name(), ", given None");
  check_device(*state, "state");
  if (state->kernel().get() != this)
    fail<StateError>(class_name(), ": the ", state_class_name(), " was made by another ", class_name());
  if (!state->gradients_encoded)
    fail<StateError>(class_name(), ": the ", state_class_name(), " has no gradients for gamma and beta; encode ",
                     class_name(), "Gradient with it first");
  auto self = std::static_pointer_cast<GroupNormalizationKernel>(shared_from_this());
  GroupNormalizationDataSource::States states{state};
  encode_update(
      command_buffer, class_name(),
      kind_ == GroupNormalizationKind::Instance
          ? "update_gamma_and_beta_with_command_buffer nor "
            "update_gamma_and_beta_with_instance_normalization_state_batch"
          : "update_gamma_and_beta_with_command_buffer nor update_gamma_and_beta_with_group_normalization_state_batch",
      on_command_buffer && data_source_->supports_update_gamma_and_beta_on_command_buffer(),
      data_source_->supports_update_gamma_and_beta(), *state,
      [&] { return data_source_->update_gamma_and_beta_on_command_buffer(command_buffer, states); },
      [&](const NormalizationGammaAndBetaState& updated) { reload_gamma_and_beta(command_buffer, updated); },
      [self, states] {
        if (self->data_source_->update_gamma_and_beta(states)) self->reload_gamma_and_beta_from_data_source();
      });
}

std::shared_ptr<State> GroupNormalizationKernel::new_result_state(const Image& source) {
  return make_pooled<GroupNormalizationGradientState>(
      std::static_pointer_cast<const GroupNormalizationKernel>(shared_from_this()), source.number_of_images());
}

void GroupNormalizationKernel::check_source(const Image& source) const {
  UnaryKernel::check_source(source);
  if (source_feature_channel_offset + channels_ > source.feature_channels())
    fail<ShapeError>(class_name(), ": expected source images of at least ", source_feature_channel_offset + channels_,
                     " feature channels (the kernel's ", channels_, " from source_feature_channel_offset ",
                     source_feature_channel_offset, "), given ", source.feature_channels());
}

void GroupNormalizationKernel::check_state(const State& state) const {
  auto* s = dynamic_cast<const GroupNormalizationGradientState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an ", state_class_name(), ", given an ", state.class_name());
  if (s->kernel().get() != this)
    fail<StateError>(class_name(), ": the ", state_class_name(), " was made by another ", class_name());
}

void GroupNormalizationKernel::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                      const std::shared_ptr<Image>& destination, const Geometry& g,
                                      const std::shared_ptr<State>& state) {
  check_reads_inside(*source, g);
  Parameters p = parameters();
  auto s = std::static_pointer_cast<GroupNormalizationGradientState>(state);
  if (s && g.images > s->images())
    fail<ShapeError>(class_name(), ": the ", state_class_name(), " was made for ", s->images(),
                     " images; this encode normalizes ", g.images);
  // Inference keeps its statistics in a state of its own, from the pool.
  if (!s)
    s = make_pooled<GroupNormalizationGradientState>(
        std::static_pointer_cast<const GroupNormalizationKernel>(shared_from_this()), g.images);
  s->groups = p.groups;
  s->epsilon = epsilon;
  s->forward_encoded = true;
  command_buffer.record([primitive = primitive_, source, destination, g, p, s, channels = channels_,
                         eps = epsilon](ExecutionContext& context) {
    // The state keeps the gamma and beta its gradients belong to.
    const size_t bytes = static_cast<size_t>(channels) * sizeof(float);
    context.copy(s->gamma()->data(), p.gamma->data(), bytes);
    context.copy(s->beta()->data(), p.beta->data(), bytes);
    primitive->forward(context, source_region(*source, g, channels), destination_region(*destination, g, channels),
                       p.groups, values_of(p.gamma), values_of(p.beta), eps, s->statistics());
  });
  s->gamma()->will_write(command_buffer);
  s->beta()->will_write(command_buffer);
}

std::vector<std::shared_ptr<GradientKernel>> CNNGroupNormalization::make_gradient_kernels() const {
  return {std::make_shared<CNNGroupNormalizationGradient>(device_ptr())};
}

std::vector<std::shared_ptr<GradientKernel>> CNNInstanceNormalization::make_gradient_kernels() const {
  return {std::make_shared<CNNInstanceNormalizationGradient>(device_ptr())};
}

// ---------------------------------------------------------------- gradients

GroupNormalizationGradientKernel::GroupNormalizationGradientKernel(std::shared_ptr<Device> device,
                                                                   GroupNormalizationKind kind)
    : InPlaceGradientKernel(std::move(device)), kind_(kind) {
  primitive_ = make_primitive<GroupNormalizationPrimitive>(this->device().backend(), GroupNormalizationDescriptor{kind_});
}

const GradientState& GroupNormalizationGradientKernel::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const GroupNormalizationGradientState*>(&state);
  if (!s || s->kind() != kind_)
    fail<TypeMismatchError>(class_name(), ": expected an ", state_name(kind_), ", given an ", state.class_name());
  return *s;
}

void GroupNormalizationGradientKernel::record(CommandBuffer& command_buffer,
                                              const std::shared_ptr<Image>& source_gradient,
                                              const std::shared_ptr<Image>& source_image,
                                              const std::shared_ptr<State>& state,
                                              const std::shared_ptr<Image>& destination_gradient) {
  auto s = std::static_pointer_cast<GroupNormalizationGradientState>(state);
  const Geometry g = s->geometry;
  const int64_t channels = s->channels();
  record_zeros_outside(command_buffer, destination_gradient, g);
  command_buffer.record([primitive = primitive_, source_gradient, source_image, destination_gradient, s, g,
                         channels](ExecutionContext& context) {
    if (g.source_channel != 0 || channels != destination_gradient->feature_channels())
      context.fill_zero_image(*destination_gradient);  // channels outside the normalization get no gradient
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        source_region(*source_image, g, channels), source_region(*destination_gradient, g, channels),
                        s->groups, values_of(s->gamma()), values_of(s->beta()), s->epsilon, s->statistics(),
                        values_of(s->gradient_for_gamma()), values_of(s->gradient_for_beta()));
  });
  s->gradients_encoded = true;
  s->gradient_for_gamma()->will_write(command_buffer);
  s->gradient_for_beta()->will_write(command_buffer);
}

}  // namespace mpsx
