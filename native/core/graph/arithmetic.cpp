#include "mpsx/graph/arithmetic.h"

#include "mpsx/errors.h"

namespace mpsx {

namespace {

constexpr size_t kNoSlot = SIZE_MAX;

class BinaryStep final : public GraphStep {
 public:
  BinaryStep(std::shared_ptr<BinaryKernel> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        primary_(slots.sources.at(0)),
        secondary_(slots.sources.at(1)),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    auto r = kernel_->encode(command_buffer, values.images[primary_], values.images[secondary_], nullptr, nullptr,
                             state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }

 private:
  std::shared_ptr<BinaryKernel> kernel_;
  size_t primary_, secondary_, result_, state_;
};

void check_operation(ArithmeticOperation operation) {
  if (static_cast<int32_t>(operation) < 0 || operation > ArithmeticOperation::Compare)
    fail<ArgumentError>("an arithmetic node: unknown operation ", static_cast<int32_t>(operation));
}

}  // namespace

NNBinaryArithmeticNode::NNBinaryArithmeticNode(ArithmeticOperation operation, std::shared_ptr<ImageNode> left,
                                               std::shared_ptr<ImageNode> right)
    : FilterNode({std::move(left), std::move(right)}, {}, padding::kDefault) {
  check_operation(operation);
  parameters.operation = operation;
}

namespace {
const char* forward_node_name(ArithmeticOperation operation) {
  switch (operation) {
    case ArithmeticOperation::Add: return "MPSNNAdditionNode";
    case ArithmeticOperation::Subtract: return "MPSNNSubtractionNode";
    case ArithmeticOperation::Multiply: return "MPSNNMultiplicationNode";
    case ArithmeticOperation::Divide: return "MPSNNDivisionNode";
    case ArithmeticOperation::Compare: return "MPSNNComparisonNode";
  }
  return "MPSNNBinaryArithmeticNode";
}
}  // namespace

const char* NNBinaryArithmeticNode::class_name() const { return forward_node_name(parameters.operation); }

bool NNBinaryArithmeticNode::has_gradient() const {
  return operation() == ArithmeticOperation::Add || operation() == ArithmeticOperation::Subtract ||
         operation() == ArithmeticOperation::Multiply;
}

std::vector<StateNodeKind> NNBinaryArithmeticNode::result_state_kinds() const {
  if (!has_gradient()) return {};
  return {StateNodeKind::BinaryGradient};
}

std::unique_ptr<GraphStep> NNBinaryArithmeticNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<CNNArithmetic>(slots, operation());
  kernel->parameters = parameters;
  kernel->primary.stride_x = primary_stride_in_pixels_x;
  kernel->primary.stride_y = primary_stride_in_pixels_y;
  kernel->secondary.stride_x = secondary_stride_in_pixels_x;
  kernel->secondary.stride_y = secondary_stride_in_pixels_y;
  kernel->primary_stride_in_feature_channels = primary_stride_in_feature_channels;
  kernel->secondary_stride_in_feature_channels = secondary_stride_in_feature_channels;
  kernel->label = label;
  (*slots.kernels)[this] = kernel;
  return std::make_unique<BinaryStep>(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNBinaryArithmeticNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  if (!has_gradient()) fail<TypeMismatchError>(class_name(), " has no gradient filter (MPS has none)");
  std::vector<std::shared_ptr<FilterNode>> filters;
  for (bool secondary : {false, true}) {
    const bool reads_secondary = (operation() == ArithmeticOperation::Multiply) != secondary;
    auto g = std::make_shared<NNArithmeticGradientNode>(operation(), gradient_images.front(),
                                                        sources()[reads_secondary ? 1 : 0], result_states().front(),
                                                        secondary);
    g->primary_scale = parameters.primary_scale;
    g->secondary_scale = parameters.secondary_scale;
    g->bias = parameters.bias;
    g->minimum_value = parameters.minimum;
    g->maximum_value = parameters.maximum;
    // The strides of the forward image the gradient filter reads, as
    // CNNArithmetic's make_gradient_kernels sets them.
    g->secondary_stride_in_pixels_x = reads_secondary ? secondary_stride_in_pixels_x : primary_stride_in_pixels_x;
    g->secondary_stride_in_pixels_y = reads_secondary ? secondary_stride_in_pixels_y : primary_stride_in_pixels_y;
    g->secondary_stride_in_feature_channels =
        reads_secondary ? secondary_stride_in_feature_channels : primary_stride_in_feature_channels;
    filters.push_back(std::move(g));
  }
  return filters;
}

NNArithmeticGradientNode::NNArithmeticGradientNode(ArithmeticOperation operation,
                                                   std::shared_ptr<ImageNode> source_gradient,
                                                   std::shared_ptr<ImageNode> source_image,
                                                   std::shared_ptr<StateNode> gradient_state,
                                                   bool is_secondary_source_filter)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      operation_(operation),
      secondary_(is_secondary_source_filter) {
  if (operation != ArithmeticOperation::Add && operation != ArithmeticOperation::Subtract &&
      operation != ArithmeticOperation::Multiply)
    fail<TypeMismatchError>("an arithmetic gradient node: MPS has gradients of addition, subtraction and "
                            "multiplication only, given operation ", static_cast<int32_t>(operation));
  const std::shared_ptr<StateNode>& state = source_states().front();
  if (state->kind() != StateNodeKind::BinaryGradient)
    fail<TypeMismatchError>(class_name(), ": expected an NNBinaryGradientStateNode, given ", state->class_name());
  auto forward = std::dynamic_pointer_cast<NNBinaryArithmeticNode>(state->producer());
  if (forward && forward->operation() != operation)
    fail<TypeMismatchError>(class_name(), ": expected the gradient state of a ",
                            forward_node_name(operation), ", given the "
                            "state of a ", forward->class_name());
}

const char* NNArithmeticGradientNode::class_name() const {
  switch (operation_) {
    case ArithmeticOperation::Add: return "MPSNNAdditionGradientNode";
    case ArithmeticOperation::Subtract: return "MPSNNSubtractionGradientNode";
    default: return "MPSNNMultiplicationGradientNode";
  }
}

std::unique_ptr<GraphStep> NNArithmeticGradientNode::compile(const StepSlots& slots) const {
  auto forward = std::dynamic_pointer_cast<NNBinaryArithmeticNode>(source_states().front()->producer());
  if (forward) {
    const bool second = reads_secondary_image();
    int64_t x = second ? forward->secondary_stride_in_pixels_x : forward->primary_stride_in_pixels_x;
    int64_t y = second ? forward->secondary_stride_in_pixels_y : forward->primary_stride_in_pixels_y;
    if (secondary_stride_in_pixels_x != x || secondary_stride_in_pixels_y != y)
      fail<ArgumentError>(class_name(), ": secondary_stride_in_pixels_x/y (", secondary_stride_in_pixels_x, ", ",
                          secondary_stride_in_pixels_y, ") must be the forward node's strides of the ",
                          second ? "secondary" : "primary", " image this filter reads (", x, ", ", y, ")");
  }
  auto kernel = graph_kernel<CNNArithmeticGradient>(slots, operation_, secondary_);
  kernel->primary_scale = primary_scale;
  kernel->secondary_scale = secondary_scale;
  kernel->bias = bias;
  kernel->minimum_value = minimum_value;
  kernel->maximum_value = maximum_value;
  kernel->secondary_stride_in_feature_channels = secondary_stride_in_feature_channels;
  kernel->label = label;
  return gradient_step(std::move(kernel), slots);
}

std::shared_ptr<FilterNode> make_addition_node(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right) {
  return std::make_shared<NNBinaryArithmeticNode>(ArithmeticOperation::Add, std::move(left), std::move(right));
}

}  // namespace mpsx
