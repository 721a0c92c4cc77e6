#include "mpsx/kernels/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/capture.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"
#include "mpsx/kernels/batch_normalization.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx {

void OptimizerDescriptor::validate() const {
  for (auto [value, name] : {std::pair{learning_rate, "learning_rate"}, {gradient_rescale, "gradient_rescale"},
                             {gradient_clip_max, "gradient_clip_max"}, {gradient_clip_min, "gradient_clip_min"},
                             {regularization_scale, "regularization_scale"}})
    checked_parameter(value, "MPSNNOptimizerDescriptor", name);
  if (regularization_type >= RegularizationType::Count)
    fail<ArgumentError>("unknown regularization type ", static_cast<uint32_t>(regularization_type), "; expected 0 to ",
                        static_cast<uint32_t>(RegularizationType::Count) - 1);
  if (gradient_clip_min > gradient_clip_max)
    fail<ArgumentError>("gradient_clip_min (", gradient_clip_min, ") is above gradient_clip_max (", gradient_clip_max,
                        ")");
}

// A kind of vector an optimizer keeps, as the single and list arguments name it.
struct NNOptimizer::Role {
  std::shared_ptr<Vector> OptimizerVectors::*vector;
  std::vector<std::shared_ptr<Vector>> OptimizerVectorLists::*list;
  Span Parameter::*span;
  VectorUse VectorUses::*use;
  const char* name;  // the list argument adds "s"
};

const NNOptimizer::Role NNOptimizer::kRoles[4] = {
    {&OptimizerVectors::momentum, &OptimizerVectorLists::momentum, &Parameter::momentum, &VectorUses::momentum,
     "input_momentum_vector"},
    {&OptimizerVectors::velocity, &OptimizerVectorLists::velocity, &Parameter::velocity, &VectorUses::velocity,
     "input_velocity_vector"},
    {&OptimizerVectors::maximum_velocity, &OptimizerVectorLists::maximum_velocity, &Parameter::maximum_velocity,
     &VectorUses::maximum_velocity, "maximum_velocity_vector"},
    {&OptimizerVectors::sum_of_squares, &OptimizerVectorLists::sum_of_squares, &Parameter::sum_of_squares,
     &VectorUses::sum_of_squares, "input_sum_of_squares_vector"},
};

namespace {

std::string item_name(const char* name, int index) {
  return index < 0 ? std::string(name) : detail::concat(name, "s[", index, "]");
}

template <class S>
S& state_of(const char* optimizer, const std::shared_ptr<State>& state, const char* name, const char* expected,
            const Device& device) {
  if (!state) fail<TypeMismatchError>(optimizer, ": expected an ", expected, " as ", name, ", given None");
  auto* s = dynamic_cast<S*>(state.get());
  if (!s)
    fail<TypeMismatchError>(optimizer, ": expected an ", expected, " as ", name, ", given an ", state->class_name());
  if (&s->device() != &device)
    fail<DeviceMismatchError>(optimizer, ": ", name, " is on device ", s->device().name(), ", the optimizer on device ",
                              device.name());
  return *s;
}

}  // namespace

NNOptimizer::NNOptimizer(std::shared_ptr<Device> device, const OptimizerDescriptor& descriptor)
    : device_(std::move(device)), descriptor_(descriptor) {
  if (!device_) fail<TypeMismatchError>("an optimizer needs a device, given None");
  primitive_maker<OptimizerPrimitive>(device_->backend());  // a family the backend lacks fails here
  descriptor_.validate();
}

NNOptimizer::~NNOptimizer() = default;

void NNOptimizer::set_learning_rate(float learning_rate) {
  descriptor_.learning_rate = checked_parameter(learning_rate, class_name(), "learning_rate");
  invalidate_captures();
}

void NNOptimizer::set_apply_gradient_clipping(bool apply) {
  descriptor_.apply_gradient_clipping = apply;
  invalidate_captures();
}

NNOptimizer::VectorUses NNOptimizer::kept_vectors() const {
  VectorUses uses = vector_uses();
  for (const Role& role : kRoles)
    if (uses.*role.use == VectorUse::Optional) uses.*role.use = VectorUse::Unused;
  return uses;
}

OptimizerScalars::OptimizerScalars(const OptimizerConfiguration& c)
    : gradient_rescale(c.gradient_rescale),
      gradient_clip_min(c.gradient_clip_min),
      gradient_clip_max(c.gradient_clip_max),
      regularization_scale(c.regularization_scale),
      momentum_scale(c.momentum_scale),
      beta1(static_cast<float>(c.beta1)),
      one_minus_beta1(static_cast<float>(1.0 - c.beta1)),
      beta2(static_cast<float>(c.beta2)),
      one_minus_beta2(static_cast<float>(1.0 - c.beta2)),
      decay(static_cast<float>(c.decay)),
      one_minus_decay(static_cast<float>(1.0 - c.decay)),
      epsilon(c.epsilon) {}

OptimizerStep NNOptimizer::next_step() {
  OptimizerStep s;
  s.learning_rate = s.base_learning_rate = descriptor_.learning_rate;
  return s;
}

void NNOptimizer::check_command_buffer(const CommandBuffer& command_buffer) const {
  command_buffer.check_encodable();
  if (&command_buffer.device() != device_.get())
    fail<DeviceMismatchError>(class_name(), ": the command buffer is on device ", command_buffer.device().name(),
                              ", the optimizer on device ", device_->name());
}

NNOptimizer::Span NNOptimizer::span_of(const std::shared_ptr<Vector>& vector, const char* name, int index,
                                       size_t count, DataType type, const char* against) const {
  if (!vector) fail<TypeMismatchError>(class_name(), ": expected ", item_name(name, index), ", given None");
  if (&vector->device() != device_.get())
    fail<DeviceMismatchError>(class_name(), ": ", item_name(name, index), " is on device ", vector->device().name(),
                              ", the optimizer on device ", device_->name());
  if (vector->data_type() != type)
    fail<TypeMismatchError>(class_name(), ": ", item_name(name, index), " is ", name_of(vector->data_type()),
                            "; expected ", name_of(type), ", as ", against);
  if (vector->length() != count)
    fail<ShapeError>(class_name(), ": ", item_name(name, index), " has ", vector->length(), " values; expected ", count,
                     ", as ", against);
  if (vector->vectors() != 1)
    fail<ShapeError>(class_name(), ": ", item_name(name, index), " holds ", vector->vectors(),
                     " vectors; an optimizer updates one vector of values each");
  return Span{vector->buffer(), vector->offset(), vector->is_temporary() ? &vector->lifetime() : nullptr};
}

size_t NNOptimizer::assign_lists(const OptimizerVectorLists& lists, Parameter* parameters, const char* const* what,
                                 size_t without_lists) const {
  const VectorUses uses = vector_uses();
  size_t count = 0;
  const char* first = nullptr;
  for (const Role& role : kRoles) {
    const auto& list = lists.*role.list;
    if (list.empty()) {
      if (uses.*role.use == VectorUse::Required)
        fail<TypeMismatchError>(class_name(), ": expected ", role.name, "s, given None");
      continue;
    }
    if (uses.*role.use == VectorUse::Unused) fail<ArgumentError>(class_name(), " does not use ", role.name, "s");
    if (list.size() > kMaxParameters)
      fail<ArgumentError>(class_name(), ": ", role.name, "s has ", list.size(), " vectors; expected 1 (for ", what[0],
                          ") or 2 (for ", what[0], " and ", what[1], ")");
    if (!first) {
      first = role.name;
      count = list.size();
    } else if (list.size() != count) {
      fail<ArgumentError>(class_name(), ": ", role.name, "s has ", list.size(), " vector(s), ", first, "s ", count,
                          "; give each as many");
    }
    for (size_t i = 0; i < list.size(); ++i)
      parameters[i].*role.span =
          span_of(list[i], role.name, static_cast<int>(i), parameters[i].count, parameters[i].type, what[i]);
  }
  return first ? count : without_lists;
}

void NNOptimizer::check_overlaps(const Parameter* parameters, size_t count, const char* const* operands,
                                 const char* const* what) const {
  auto name = [&](size_t i) {
    return i < 3 ? std::string(operands[i]) : detail::concat(kRoles[i - 3].name, what ? "s" : "");
  };
  // Gradient and values are read; the rest is written.
  constexpr size_t kRead = 2;
  for (size_t pi = 0; pi < count; ++pi)
    for (size_t pj = pi; pj < count; ++pj) {
      const Parameter &p = parameters[pi], &q = parameters[pj];
      const Span* ps[] = {&p.gradient, &p.values, &p.result, &p.momentum, &p.velocity, &p.maximum_velocity,
                          &p.sum_of_squares};
      const Span* qs[] = {&q.gradient, &q.values, &q.result, &q.momentum, &q.velocity, &q.maximum_velocity,
                          &q.sum_of_squares};
      const size_t p_bytes = p.count * size_of(p.type), q_bytes = q.count * size_of(q.type);
      for (size_t i = 0; i < 7; ++i)
        for (size_t j = pi == pj ? i + 1 : 0; j < 7; ++j) {
          const Span &a = *ps[i], &b = *qs[j];
          if (!a.buffer || a.buffer != b.buffer || a.offset >= b.offset + q_bytes || b.offset >= a.offset + p_bytes)
            continue;
          if (pi != pj) {
            // One launch updates them all, in no order.
            if (i < kRead && j < kRead) continue;
            fail<ArgumentError>(class_name(), ": ", name(i), " for ", what[pi], " and ", name(j), " for ", what[pj],
                                " share memory; the arrays one encode updates need memory of their own");
          }
          // Gradient and values are only read. Updates are elementwise: the
          // result may lie exactly over the values (in place); the gradient and
          // the optimizer's own vectors need memory of their own.
          if (j < kRead || (i == 1 && j == kRead && a.offset == b.offset)) continue;
          fail<ArgumentError>(class_name(), ": ", name(i), " and ", name(j),
                              " share memory; only the result may be the values themselves (in place)");
        }
    }
}

namespace {
// The arrays an update reads and writes, as its command's key names them.
template <class Parameter>
struct ParameterList {
  const Parameter* parameters;
  size_t count;
};

template <class Parameter>
void add_to_key(CommandKey& key, const ParameterList<Parameter>& list) {
  for (size_t i = 0; i < list.count; ++i) {
    const Parameter& p = list.parameters[i];
    for (const auto* s : {&p.gradient, &p.values, &p.result, &p.momentum, &p.velocity, &p.maximum_velocity,
                          &p.sum_of_squares}) {
      add_to_key(key, s->buffer);
      key.add_word(s->offset);
    }
    key.add_word(p.count);
    key.add_value(p.type);
  }
}
}  // namespace

void NNOptimizer::record(CommandBuffer& command_buffer, const Parameter* parameters, size_t count) {
  // MPSTemporaryVector: each encode that reads one lowers its read count by 1.
  std::array<TemporaryLifetime*, kMaxParameters * 7> temporaries{};
  size_t temporary_count = 0;
  for (size_t i = 0; i < count; ++i) {
    const Parameter& p = parameters[i];
    for (const Span* s : {&p.gradient, &p.values, &p.result, &p.momentum, &p.velocity, &p.maximum_velocity,
                          &p.sum_of_squares})
      if (s->lifetime) {
        s->lifetime->check_usable(command_buffer, class_name(), "MPSTemporaryVector");
        if (s != &p.result && std::find(temporaries.begin(), temporaries.begin() + temporary_count, s->lifetime) ==
                                  temporaries.begin() + temporary_count)
          temporaries[temporary_count++] = s->lifetime;
      }
  }
  OptimizerConfiguration c = configuration();
  c.regularization_type = descriptor_.regularization_type;
  c.gradient_clipping = descriptor_.apply_gradient_clipping;
  c.momentum = parameters[0].momentum.buffer != nullptr;
  c.maximum_velocity = parameters[0].maximum_velocity.buffer != nullptr;
  c.data_type = parameters[0].type;
  c.gradient_rescale = descriptor_.gradient_rescale;
  c.gradient_clip_min = descriptor_.gradient_clip_min;
  c.gradient_clip_max = descriptor_.gradient_clip_max;
  c.regularization_scale = descriptor_.regularization_scale;
  const auto& primitive = cached_primitive(primitives_, device_->backend(), c);
  const OptimizerStep step = next_step();
  std::array<Parameter, kMaxParameters> updated;
  for (size_t i = 0; i < count; ++i) updated[i] = parameters[i];
  command_buffer.record(keyed_by(primitive, as_value(step), ParameterList<Parameter>{updated.data(), count}),
                        [primitive, step, updated, count](ExecutionContext& context) {
    auto at = [](const Span& s) -> void* {
      return s.buffer ? static_cast<char*>(s.buffer->data()) + s.offset : nullptr;
    };
    OptimizerArrayList list;
    list.count = count;
    for (size_t i = 0; i < count; ++i) {
      const Parameter& p = updated[i];
      OptimizerArrays& a = list.arrays[i];
      a.gradient = at(p.gradient);
      a.values = at(p.values);
      a.result = at(p.result);
      a.momentum = at(p.momentum);
      a.velocity = at(p.velocity);
      a.maximum_velocity = at(p.maximum_velocity);
      a.sum_of_squares = at(p.sum_of_squares);
      a.count = p.count;
    }
    primitive->update(context, step, list);
  });
  for (size_t i = 0; i < count; ++i) {
    const Parameter& p = parameters[i];
    for (const Span* read : {&p.gradient, &p.values})
      if (read->buffer) read->buffer->will_read(command_buffer);
    for (const Span* written : {&p.result, &p.momentum, &p.velocity, &p.maximum_velocity, &p.sum_of_squares})
      if (written->buffer) written->buffer->will_write(command_buffer);
  }
  for (size_t i = 0; i < temporary_count; ++i) temporaries[i]->was_read();
}

void NNOptimizer::encode(CommandBuffer& command_buffer, const std::shared_ptr<Vector>& gradient,
                         const std::shared_ptr<Vector>& values, const OptimizerVectors& vectors,
                         const std::shared_ptr<Vector>& result) {
  check_command_buffer(command_buffer);
  if (!gradient) fail<TypeMismatchError>(class_name(), ": expected input_gradient_vector, given None");
  if (!values) fail<TypeMismatchError>(class_name(), ": expected input_values_vector, given None");
  Parameter p;
  p.count = values->length();
  p.type = values->data_type();
  if (p.type != DataType::Float32 && p.type != DataType::Float16)
    fail<TypeMismatchError>(class_name(), ": input_values_vector is ", name_of(p.type),
                            "; optimizers update float32 or float16 values");
  const char* against = "input_values_vector";
  p.values = span_of(values, against, -1, p.count, p.type, against);
  p.gradient = span_of(gradient, "input_gradient_vector", -1, p.count, p.type, against);
  p.result = span_of(result, "result_values_vector", -1, p.count, p.type, against);
  const VectorUses uses = vector_uses();
  for (const Role& role : kRoles) {
    const std::shared_ptr<Vector>& v = vectors.*role.vector;
    if (!v) {
      if (uses.*role.use == VectorUse::Required)
        fail<TypeMismatchError>(class_name(), ": expected ", role.name, ", given None");
      continue;
    }
    if (uses.*role.use == VectorUse::Unused) fail<ArgumentError>(class_name(), " does not use ", role.name);
    p.*role.span = span_of(v, role.name, -1, p.count, p.type, against);
  }
  static const char* const operands[] = {"input_gradient_vector", "input_values_vector", "result_values_vector"};
  check_overlaps(&p, 1, operands, nullptr);
  record(command_buffer, &p, 1);
}

void NNOptimizer::encode(CommandBuffer& command_buffer, const std::shared_ptr<State>& convolution_gradient_state,
                         const std::shared_ptr<State>& convolution_source_state, const OptimizerVectorLists& vectors,
                         const std::shared_ptr<State>& result_state) {
  check_command_buffer(command_buffer);
  const char* weights_state = "MPSCNNConvolutionWeightsAndBiasesState";
  auto& gradient = state_of<ConvolutionGradientState>(class_name(), convolution_gradient_state,
                                                      "convolution_gradient_state", "MPSCNNConvolutionGradientState",
                                                      *device_);
  auto& source = state_of<ConvolutionWeightsAndBiasesState>(class_name(), convolution_source_state,
                                                            "convolution_source_state", weights_state, *device_);
  auto& result = state_of<ConvolutionWeightsAndBiasesState>(class_name(), result_state, "result_state",
                                                            weights_state, *device_);
  if (!gradient.encoded)
    fail<StateError>(class_name(), ": the convolution_gradient_state was not produced by a forward encode");
  const ConvolutionDescriptor& d = gradient.convolution()->descriptor();
  source.check_fits(d, class_name());
  result.check_fits(d, class_name());

  Parameter p[kMaxParameters];
  p[0].gradient = {gradient.gradient_for_weights(), 0};
  p[0].values = {source.weights(), source.weights_offset()};
  p[0].result = {result.weights(), result.weights_offset()};
  p[0].count = d.weight_count();
  p[1].gradient = {gradient.gradient_for_biases(), 0};
  p[1].values = {source.biases(), source.biases_offset()};
  p[1].result = {result.biases(), result.biases_offset()};
  p[1].count = static_cast<size_t>(d.output_feature_channels);
  static const char* const what[] = {"the weights", "the biases"};
  size_t count = assign_lists(vectors, p, what, result.biases() ? 2 : 1);
  if (count == 2 && !(source.biases() && result.biases()))
    fail<ShapeError>(class_name(), ": ", source.biases() ? "result_state" : "convolution_source_state",
                     " has no biases buffer, but the biases are to be updated (lists of two vectors, or a "
                     "result_state with biases)");
  static const char* const operands[] = {"convolution_gradient_state", "convolution_source_state", "result_state"};
  check_overlaps(p, count, operands, what);
  record(command_buffer, p, count);
}

void NNOptimizer::encode_batch_normalization(CommandBuffer& command_buffer,
                                             const std::shared_ptr<State>& gradient_state,
                                             const std::shared_ptr<State>& source_state,
                                             const OptimizerVectorLists& vectors,
                                             const std::shared_ptr<State>& result_state) {
  check_command_buffer(command_buffer);
  const char* state_name = "MPSCNNBatchNormalizationState";
  auto& gradient = state_of<BatchNormalizationState>(class_name(), gradient_state, "batch_normalization_gradient_state",
                                                     state_name, *device_);
  auto& source = state_of<BatchNormalizationState>(class_name(), source_state, "batch_normalization_source_state",
                                                   state_name, *device_);
  (void)state_of<NormalizationGammaAndBetaState>(class_name(), result_state, "result_state",
                                                          "MPSCNNNormalizationGammaAndBetaState", *device_);
  if (!gradient.gradients_encoded)
    fail<StateError>(class_name(), ": the batch normalization gradient state has no gradients; encode ",
                     "MPSCNNBatchNormalizationStatisticsGradient with it first");
  const int64_t channels = gradient.channels();
  if (source.channels() != channels)
    fail<ShapeError>(class_name(), ": the source state has ", source.channels(), " feature channels, the gradient state ",
                     channels);
  encode_gamma_and_beta(command_buffer, gradient.gradient_for_gamma(), gradient.gradient_for_beta(), source.gamma(),
                        source.beta(), channels, vectors, result_state, "batch_normalization_gradient_state",
                        "batch_normalization_source_state");
}

void NNOptimizer::encode_gamma_and_beta(CommandBuffer& command_buffer, const std::shared_ptr<Buffer>& gradient_for_gamma,
                                        const std::shared_ptr<Buffer>& gradient_for_beta,
                                        const std::shared_ptr<Buffer>& gamma, const std::shared_ptr<Buffer>& beta,
                                        int64_t channels, const OptimizerVectorLists& vectors,
                                        const std::shared_ptr<State>& result_state, const char* gradient_operand,
                                        const char* source_operand) {
  check_command_buffer(command_buffer);
  auto& result = state_of<NormalizationGammaAndBetaState>(class_name(), result_state, "result_state",
                                                          "MPSCNNNormalizationGammaAndBetaState", *device_);
  result.check_fits(channels, class_name());

  Parameter p[kMaxParameters];
  p[0].gradient = {gradient_for_gamma, 0};
  p[0].values = {gamma, 0};
  p[0].result = {result.gamma(), 0};
  p[1].gradient = {gradient_for_beta, 0};
  p[1].values = {beta, 0};
  p[1].result = {result.beta(), 0};
  p[0].count = p[1].count = static_cast<size_t>(channels);
  static const char* const what[] = {"gamma", "beta"};
  size_t count = assign_lists(vectors, p, what, 2);
  const char* const operands[] = {gradient_operand, source_operand, "result_state"};
  check_overlaps(p, count, operands, what);
  record(command_buffer, p, count);
}

OptimizerVectorLists NNOptimizer::new_vector_lists(const std::vector<size_t>& counts) const {
  OptimizerVectorLists lists;
  const VectorUses kept = kept_vectors();
  for (const Role& role : kRoles) {
    if (kept.*role.use == VectorUse::Unused) continue;
    for (size_t count : counts) {
      auto vector = std::make_shared<Vector>(device_, count, DataType::Float32);
      vector->buffer()->fill_zero();
      (lists.*role.list).push_back(std::move(vector));
    }
  }
  return lists;
}

// ---------------------------------------------------------------- kept vectors

namespace {
const char* const kVectorKindNames[] = {"momentum", "velocity", "maximum velocity", "sum of squares"};

std::vector<std::shared_ptr<Vector>> OptimizerVectorLists::*list_of(OptimizerVectorKind kind) {
  static constexpr std::vector<std::shared_ptr<Vector>> OptimizerVectorLists::*kLists[] = {
      &OptimizerVectorLists::momentum, &OptimizerVectorLists::velocity, &OptimizerVectorLists::maximum_velocity,
      &OptimizerVectorLists::sum_of_squares};
  if (kind >= OptimizerVectorKind::Count)
    fail<ArgumentError>("unknown optimizer vector kind ", static_cast<uint32_t>(kind), "; expected 0 to ",
                        static_cast<uint32_t>(OptimizerVectorKind::Count) - 1);
  return kLists[static_cast<uint32_t>(kind)];
}
}  // namespace

KeptOptimizerVectors::KeptOptimizerVectors(const NNOptimizer& optimizer, const std::vector<size_t>& counts)
    : lists_(optimizer.new_vector_lists(counts)) {}

size_t KeptOptimizerVectors::count(OptimizerVectorKind kind) const { return (lists_.*list_of(kind)).size(); }

size_t KeptOptimizerVectors::length(OptimizerVectorKind kind, size_t index) const {
  const auto& list = lists_.*list_of(kind);
  return index < list.size() ? list[index]->length() : 0;
}

const Vector& KeptOptimizerVectors::at(OptimizerVectorKind kind, size_t index, size_t count,
                                       const char* owner) const {
  const auto& list = lists_.*list_of(kind);
  const char* name = kVectorKindNames[static_cast<uint32_t>(kind)];
  if (index >= list.size())
    fail<ArgumentError>(owner, ": its optimizer keeps ", list.size(), " ", name, " vector(s), given index ", index);
  const Vector& vector = *list[index];
  if (count != vector.length())
    fail<ShapeError>(owner, ": ", name, " vector ", index, " of its optimizer holds ", vector.length(),
                     " values, given ", count);
  return vector;
}

void KeptOptimizerVectors::read(OptimizerVectorKind kind, size_t index, float* destination, size_t count,
                                const char* owner) const {
  const Vector& vector = at(kind, index, count, owner);
  const std::string what = detail::concat("the ", kVectorKindNames[static_cast<uint32_t>(kind)], " vector ", index,
                                          " of the optimizer of a ", owner);
  vector.buffer()->read(destination, 0, count * sizeof(float), what.c_str());
}

void KeptOptimizerVectors::write(OptimizerVectorKind kind, size_t index, const float* source, size_t count,
                                 const char* owner) {
  const Vector& vector = at(kind, index, count, owner);
  if (vector.buffer()->written_by_pending_command_buffer())
    fail<StateError>(owner, ": an update of its optimizer's ", kVectorKindNames[static_cast<uint32_t>(kind)],
                     " vectors is in flight; wait until its command buffer has completed before setting them");
  vector.buffer()->write(source, 0, count * sizeof(float));
}

void KeptOptimizerVectors::synchronize(CommandBuffer& command_buffer) const {
  for (auto list : {&OptimizerVectorLists::momentum, &OptimizerVectorLists::velocity,
                    &OptimizerVectorLists::maximum_velocity, &OptimizerVectorLists::sum_of_squares})
    for (const auto& vector : lists_.*list) vector->buffer()->synchronize(command_buffer);
}

// ---------------------------------------------------------------- SGD

NNOptimizerStochasticGradientDescent::NNOptimizerStochasticGradientDescent(std::shared_ptr<Device> device,
                                                                           float momentum_scale,
                                                                           bool use_nesterov_momentum,
                                                                           const OptimizerDescriptor& descriptor)
    : NNOptimizer(std::move(device), descriptor),
      momentum_scale_(checked_parameter(momentum_scale, class_name(), "momentum_scale")),
      use_nesterov_momentum_(use_nesterov_momentum) {}

NNOptimizer::VectorUses NNOptimizerStochasticGradientDescent::vector_uses() const {
  return {VectorUse::Optional, VectorUse::Unused, VectorUse::Unused, VectorUse::Unused};
}

NNOptimizer::VectorUses NNOptimizerStochasticGradientDescent::kept_vectors() const {
  // Without a momentum scale the momentum update is the plain one.
  return {momentum_scale_ != 0 ? VectorUse::Required : VectorUse::Unused, VectorUse::Unused, VectorUse::Unused,
          VectorUse::Unused};
}

OptimizerConfiguration NNOptimizerStochasticGradientDescent::configuration() const {
  OptimizerConfiguration c;
  c.kind = OptimizerKind::StochasticGradientDescent;
  c.nesterov = use_nesterov_momentum_;
  c.momentum_scale = momentum_scale_;
  return c;
}

// ---------------------------------------------------------------- Adam

NNOptimizerAdam::NNOptimizerAdam(std::shared_ptr<Device> device, double beta1, double beta2, float epsilon,
                                 uint64_t time_step, const OptimizerDescriptor& descriptor)
    : NNOptimizer(std::move(device), descriptor), time_step(time_step), beta1_(beta1), beta2_(beta2),
      epsilon_(checked_parameter(epsilon, class_name(), "epsilon")) {
  // 1 - beta^t divides the learning rate.
  for (auto [beta, name] : {std::pair{beta1, "beta1"}, {beta2, "beta2"}})
    if (!(beta >= 0 && beta < 1)) fail<ArgumentError>(class_name(), ": ", name, " must lie in [0, 1), given ", beta);
}

NNOptimizer::VectorUses NNOptimizerAdam::vector_uses() const {
  return {VectorUse::Required, VectorUse::Required, VectorUse::Optional, VectorUse::Unused};
}

OptimizerConfiguration NNOptimizerAdam::configuration() const {
  OptimizerConfiguration c;
  c.kind = OptimizerKind::Adam;
  c.beta1 = beta1_;
  c.beta2 = beta2_;
  c.epsilon = epsilon_;
  return c;
}

OptimizerStep NNOptimizerAdam::next_step() {
  check_not_capturing("Adam's time step, advanced at each encode");
  OptimizerStep s = NNOptimizer::next_step();
  s.time_step = ++time_step;
  const double t = static_cast<double>(time_step);
  s.learning_rate = static_cast<float>(descriptor().learning_rate * std::sqrt(1.0 - std::pow(beta2_, t)) /
                                       (1.0 - std::pow(beta1_, t)));
  return s;
}

// ---------------------------------------------------------------- RMSProp

NNOptimizerRMSProp::NNOptimizerRMSProp(std::shared_ptr<Device> device, double decay, float epsilon,
                                       const OptimizerDescriptor& descriptor)
    : NNOptimizer(std::move(device), descriptor),
      decay_(decay),
      epsilon_(checked_parameter(epsilon, class_name(), "epsilon")) {
  if (!(decay >= 0 && decay <= 1)) fail<ArgumentError>(class_name(), ": decay must lie in [0, 1]; given ", decay);
}

NNOptimizer::VectorUses NNOptimizerRMSProp::vector_uses() const {
  return {VectorUse::Unused, VectorUse::Unused, VectorUse::Unused, VectorUse::Required};
}

OptimizerConfiguration NNOptimizerRMSProp::configuration() const {
  OptimizerConfiguration c;
  c.kind = OptimizerKind::RMSProp;
  c.decay = decay_;
  c.epsilon = epsilon_;
  return c;
}

}  // namespace mpsx
