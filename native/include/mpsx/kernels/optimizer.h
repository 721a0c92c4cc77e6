// MPSNNOptimizer and its kinds (stochastic gradient descent, Adam, RMSProp),
// MPSNNOptimizerDescriptor and MPSNNRegularizationType: updates of trainable
// values encoded on a command buffer, from plain vectors or from the states
// of the convolution family.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/kernel.h"
#include "mpsx/state.h"

namespace mpsx {

class CommandBuffer;
class Device;
class ExecutionContext;

// MPSNNRegularizationType, same values.
enum class RegularizationType : uint32_t { None = 0, L1 = 1, L2 = 2, Count };

// MPSNNOptimizerDescriptor, with MPS's defaults. Clipping is off until
// apply_gradient_clipping; its bounds default to the whole float range.
struct OptimizerDescriptor {
  float learning_rate = 0.001f;
  float gradient_rescale = 1.0f;
  bool apply_gradient_clipping = false;
  float gradient_clip_max = FLT_MAX;
  float gradient_clip_min = -FLT_MAX;
  float regularization_scale = 0.0f;
  RegularizationType regularization_type = RegularizationType::None;

  // Throws ArgumentError for a parameter checked_parameter refuses, an
  // unknown regularization type or clip bounds with gradient_clip_min >
  // gradient_clip_max.
  void validate() const;
  bool operator==(const OptimizerDescriptor& o) const {
    return learning_rate == o.learning_rate && gradient_rescale == o.gradient_rescale &&
           apply_gradient_clipping == o.apply_gradient_clipping && gradient_clip_max == o.gradient_clip_max &&
           gradient_clip_min == o.gradient_clip_min && regularization_scale == o.regularization_scale &&
           regularization_type == o.regularization_type;
  }
};

// The vectors an optimizer keeps for one array of values, updated and
// overwritten by every encode: SGD's momentum (optional), Adam's momentum,
// velocity and, for its AMSGrad variant, maximum velocity, RMSProp's sum of
// squares. Null where not given.
struct OptimizerVectors {
  std::shared_ptr<Vector> momentum, velocity, maximum_velocity, sum_of_squares;
};

// The same for the arrays of a state, MPS's NSArray arguments: item 0 is for
// the weights (gamma), item 1 for the biases (beta); lists of one item update
// the weights alone. Empty where not given.
struct OptimizerVectorLists {
  std::vector<std::shared_ptr<Vector>> momentum, velocity, maximum_velocity, sum_of_squares;
};

enum class OptimizerKind : uint32_t { StochasticGradientDescent, Adam, RMSProp };

// What a backend builds one primitive for: the update's form, fixed per
// optimizer or per the vectors an encode passes, and the values MPS fixes
// when it makes an optimizer (all but the learning rate), as the optimizer
// was given them.
struct OptimizerConfiguration {
  OptimizerKind kind = OptimizerKind::StochasticGradientDescent;
  RegularizationType regularization_type = RegularizationType::None;
  bool gradient_clipping = false;
  bool momentum = false;          // SGD with a momentum vector
  bool nesterov = false;          // SGD's Nesterov form
  bool maximum_velocity = false;  // Adam's AMSGrad form
  DataType data_type = DataType::Float32;
  float gradient_rescale = 1, gradient_clip_min = -FLT_MAX, gradient_clip_max = FLT_MAX;
  float regularization_scale = 0;
  float momentum_scale = 0;             // SGD
  double beta1 = 0, beta2 = 0;          // Adam
  double decay = 0;                     // RMSProp
  float epsilon = 0;                    // Adam, RMSProp

  bool operator==(const OptimizerConfiguration& o) const {
    return kind == o.kind && regularization_type == o.regularization_type &&
           gradient_clipping == o.gradient_clipping && momentum == o.momentum && nesterov == o.nesterov &&
           maximum_velocity == o.maximum_velocity && data_type == o.data_type &&
           gradient_rescale == o.gradient_rescale && gradient_clip_min == o.gradient_clip_min &&
           gradient_clip_max == o.gradient_clip_max && regularization_scale == o.regularization_scale &&
           momentum_scale == o.momentum_scale && beta1 == o.beta1 && beta2 == o.beta2 && decay == o.decay &&
           epsilon == o.epsilon;
  }
};

// What changes from one update to the next, resolved on the encoding thread.
struct OptimizerStep {
  float learning_rate = 0;  // Adam: lr[t], with the bias corrections of its time step
  // For backends whose optimizer applies Adam's bias corrections itself
  // (MPS, from its timeStep): the descriptor's learning rate and this
  // update's time step (1 for the first).
  float base_learning_rate = 0;
  uint64_t time_step = 0;
};

// The scalars the update formulas read: a configuration's values in float,
// with a step's learning rate.
struct OptimizerScalars {
  OptimizerScalars(const OptimizerConfiguration& configuration);
  float learning_rate = 0;
  float gradient_rescale = 1, gradient_clip_min = -FLT_MAX, gradient_clip_max = FLT_MAX;
  float regularization_scale = 0;
  float momentum_scale = 0;  // SGD
  // Adam's betas and RMSProp's decay with their complements, which are
  // rounded to float from the double values (1 - float(0.999) is off by 1e-5).
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float decay = 0, one_minus_decay = 0;
  float epsilon = 0;  // Adam, RMSProp
};

// Device addresses of one array's update, `count` values of the
// configuration's data type each. result may be values (in place); the
// vectors an update does not use are null.
struct OptimizerArrays {
  const void* gradient = nullptr;
  const void* values = nullptr;
  void* result = nullptr;
  void* momentum = nullptr;
  void* velocity = nullptr;
  void* maximum_velocity = nullptr;
  void* sum_of_squares = nullptr;
  size_t count = 0;
};

// The arrays one encode updates with the same scalars: a convolution's
// weights and biases, or gamma and beta.
constexpr size_t kMaxUpdatedArrays = 2;
struct OptimizerArrayList {
  OptimizerArrays arrays[kMaxUpdatedArrays];
  size_t count = 0;
};

// What a backend runs for an optimizer: the update formulas of
// MPSNNOptimizers.h, after the gradient is clipped (when enabled), rescaled
// and given its regularization term.
class OptimizerPrimitive : public PrimitiveInterface<OptimizerConfiguration> {
 public:
  static constexpr const char* family = "optimizer";
  virtual void update(ExecutionContext& context, const OptimizerStep& step,
                      const OptimizerArrayList& list) const = 0;
};

// MPSNNOptimizer: the part every kind shares. Not a CNN kernel: it has no
// images, offsets or padding.
class NNOptimizer {
 public:
  NNOptimizer(std::shared_ptr<Device> device, const OptimizerDescriptor& descriptor);
  virtual ~NNOptimizer();
  NNOptimizer(const NNOptimizer&) = delete;
  NNOptimizer& operator=(const NNOptimizer&) = delete;

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  // The MPS class name, for messages.
  virtual const char* class_name() const = 0;

  // The descriptor's values. The learning rate and clipping switch may change
  // between encodes; an encode uses the values set when it is encoded.
  const OptimizerDescriptor& descriptor() const { return descriptor_; }
  // ArgumentError for a learning rate checked_parameter refuses.
  void set_learning_rate(float learning_rate);
  void set_apply_gradient_clipping(bool apply);
  std::string label;

  // -encodeToCommandBuffer:inputGradientVector:inputValuesVector:...:resultValuesVector:
  // result may be values (in place). Vectors are float32 or float16, all of
  // one type and length.
  void encode(CommandBuffer& command_buffer, const std::shared_ptr<Vector>& gradient,
              const std::shared_ptr<Vector>& values, const OptimizerVectors& vectors,
              const std::shared_ptr<Vector>& result);
  // -encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:...:resultState:
  // Updates the source state's weights (and biases) from the gradient
  // state's into the result state, which may be the source state. The
  // biases are updated when the lists have two items, or, with no list,
  // when the result state has a biases buffer.
  void encode(CommandBuffer& command_buffer, const std::shared_ptr<State>& convolution_gradient_state,
              const std::shared_ptr<State>& convolution_source_state, const OptimizerVectorLists& vectors,
              const std::shared_ptr<State>& result_state);
  // -encodeToCommandBuffer:batchNormalizationGradientState:batchNormalizationSourceState:...:resultState:
  // (and batchNormalizationState:, which passes one state as both): updates
  // the gamma (and beta) the source state's forward used, from the gradient
  // state's gradients, into a gamma-and-beta result state.
  void encode_batch_normalization(CommandBuffer& command_buffer, const std::shared_ptr<State>& gradient_state,
                                  const std::shared_ptr<State>& source_state, const OptimizerVectorLists& vectors,
                                  const std::shared_ptr<State>& result_state);
  // What every normalization's gamma and beta update shares (batch,
  // instance and group normalization): gamma and beta of `channels` float32
  // values updated from their gradients into the result state.
  void encode_gamma_and_beta(CommandBuffer& command_buffer, const std::shared_ptr<Buffer>& gradient_for_gamma,
                             const std::shared_ptr<Buffer>& gradient_for_beta, const std::shared_ptr<Buffer>& gamma,
                             const std::shared_ptr<Buffer>& beta, int64_t channels,
                             const OptimizerVectorLists& vectors, const std::shared_ptr<State>& result_state,
                             const char* gradient_operand = "gradient_state",
                             const char* source_operand = "source_state");

  // Zeroed float32 vectors of the kinds this optimizer keeps, one per array
  // of counts[i] values: what a data source that trains itself holds.
  OptimizerVectorLists new_vector_lists(const std::vector<size_t>& counts) const;

 protected:
  enum class VectorUse : uint8_t { Unused, Optional, Required };
  // How this kind uses the vectors of OptimizerVectors, in that order.
  struct VectorUses {
    VectorUse momentum, velocity, maximum_velocity, sum_of_squares;
  };
  virtual VectorUses vector_uses() const = 0;
  // The vectors new_vector_lists() makes; the required ones by default.
  virtual VectorUses kept_vectors() const;
  virtual OptimizerConfiguration configuration() const = 0;
  // The learning rate of the next encode (Adam advances its time step).
  // Called once per encode, after every check passed.
  virtual OptimizerStep next_step();

 private:
  struct Span {
    std::shared_ptr<Buffer> buffer;
    size_t offset = 0;  // bytes
    // The vector's, where it is an MPSTemporaryVector; checked and counted
    // down by record(), never used after it returns.
    TemporaryLifetime* lifetime = nullptr;
  };
  // One array of values an encode updates.
  struct Parameter {
    Span gradient, values, result, momentum, velocity, maximum_velocity, sum_of_squares;
    size_t count = 0;
    DataType type = DataType::Float32;
  };
  static constexpr size_t kMaxParameters = kMaxUpdatedArrays;
  struct Role;
  static const Role kRoles[4];

  void check_command_buffer(const CommandBuffer& command_buffer) const;
  // Checks a vector against the array it belongs to (`against` names it).
  Span span_of(const std::shared_ptr<Vector>& vector, const char* name, int index, size_t count, DataType type,
               const char* against) const;
  // Fills in the vectors of parameters[0, n) from the lists; returns n: the
  // lists' item count, or without_lists when no list is given.
  size_t assign_lists(const OptimizerVectorLists& lists, Parameter* parameters, const char* const* what,
                      size_t without_lists) const;
  // Throws unless the writes of each parameter leave what it reads intact
  // and touch nothing of the others; `operands` name the gradient, values
  // and result, `what` each parameter when its vectors come in lists (null
  // for a single vector).
  void check_overlaps(const Parameter* parameters, size_t count, const char* const* operands,
                      const char* const* what) const;
  void record(CommandBuffer& command_buffer, const Parameter* parameters, size_t count);

  std::shared_ptr<Device> device_;
  OptimizerDescriptor descriptor_;
  PrimitiveCache<OptimizerConfiguration, OptimizerPrimitive> primitives_;
};

// The kinds of OptimizerVectorLists, in their order.
enum class OptimizerVectorKind : uint32_t { Momentum, Velocity, MaximumVelocity, SumOfSquares, Count };

// The optimizer state a data source that trains itself keeps (ConvolutionWeights
// and the normalization weights): zeroed float32 vectors of the kinds its
// optimizer keeps, one per trained array (weights or gamma first, biases or
// beta second), which every update it encodes overwrites in place. Adam's
// time step lives in the optimizer. The host reads them once every update
// encoded with them has completed (SynchronizationError before) and writes
// them while none is in flight (StateError otherwise): what saving and
// restoring a data source does, so that training resumes exactly.
class KeptOptimizerVectors {
 public:
  KeptOptimizerVectors() = default;  // none: no optimizer
  KeptOptimizerVectors(const NNOptimizer& optimizer, const std::vector<size_t>& counts);
  const OptimizerVectorLists& lists() const { return lists_; }
  // How many vectors of a kind (0 for a kind the optimizer does not keep).
  size_t count(OptimizerVectorKind kind) const;
  size_t length(OptimizerVectorKind kind, size_t index) const;
  // Host copies of vector `index` of `kind`, `count` values; `owner` names
  // the data source in messages. ArgumentError for an index or count that
  // does not fit (ShapeError for the count).
  void read(OptimizerVectorKind kind, size_t index, float* destination, size_t count, const char* owner) const;
  void write(OptimizerVectorKind kind, size_t index, const float* source, size_t count, const char* owner);
  // Encoded after each update: its writes become host readable once the
  // command buffer has completed.
  void synchronize(CommandBuffer& command_buffer) const;

 private:
  const Vector& at(OptimizerVectorKind kind, size_t index, size_t count, const char* owner) const;
  OptimizerVectorLists lists_;
};

// MPSNNOptimizerStochasticGradientDescent:
//   without a momentum vector: variable -= learningRate * g
//   momentum:  m = momentumScale * m + learningRate * g;  variable -= m
//   Nesterov:  m = momentumScale * m + g;  variable -= learningRate * (g + momentumScale * m)
class NNOptimizerStochasticGradientDescent final : public NNOptimizer {
 public:
  NNOptimizerStochasticGradientDescent(std::shared_ptr<Device> device, float momentum_scale,
                                       bool use_nesterov_momentum, const OptimizerDescriptor& descriptor);
  const char* class_name() const override { return "MPSNNOptimizerStochasticGradientDescent"; }
  float momentum_scale() const { return momentum_scale_; }
  bool use_nesterov_momentum() const { return use_nesterov_momentum_; }

 protected:
  VectorUses vector_uses() const override;
  VectorUses kept_vectors() const override;
  OptimizerConfiguration configuration() const override;

 private:
  float momentum_scale_;
  bool use_nesterov_momentum_;
};

// MPSNNOptimizerAdam. Every encode is one update: t = t + 1, then
//   lr[t] = learningRate * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   [maxVel = max(maxVel, v), used for v below: the AMSGrad form]
//   variable -= lr[t] * m / (sqrt(v) + epsilon)
class NNOptimizerAdam final : public NNOptimizer {
 public:
  NNOptimizerAdam(std::shared_ptr<Device> device, double beta1, double beta2, float epsilon, uint64_t time_step,
                  const OptimizerDescriptor& descriptor);
  const char* class_name() const override { return "MPSNNOptimizerAdam"; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  float epsilon() const { return epsilon_; }
  // The number of updates encoded so far (readwrite, as MPS's timeStep).
  uint64_t time_step = 0;

 protected:
  VectorUses vector_uses() const override;
  OptimizerConfiguration configuration() const override;
  OptimizerStep next_step() override;

 private:
  double beta1_, beta2_;
  float epsilon_;
};

// MPSNNOptimizerRMSProp:
//   s = decay * s + (1 - decay) * g^2;  variable -= learningRate * g / (sqrt(s) + epsilon)
class NNOptimizerRMSProp final : public NNOptimizer {
 public:
  NNOptimizerRMSProp(std::shared_ptr<Device> device, double decay, float epsilon,
                     const OptimizerDescriptor& descriptor);
  const char* class_name() const override { return "MPSNNOptimizerRMSProp"; }
  double decay() const { return decay_; }
  float epsilon() const { return epsilon_; }

 protected:
  VectorUses vector_uses() const override;
  OptimizerConfiguration configuration() const override;

 private:
  double decay_;
  float epsilon_;
};

}  // namespace mpsx
