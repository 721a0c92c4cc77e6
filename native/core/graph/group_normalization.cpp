#include "mpsx/graph/group_normalization.h"

#include <cstdint>

#include "mpsx/errors.h"
#include "mpsx/kernels/instance_normalization.h"

namespace mpsx {

namespace {

class GroupNormalizationGradientStep final : public GraphStep {
 public:
  GroupNormalizationGradientStep(std::shared_ptr<GradientKernel> kernel,
                                 std::shared_ptr<GroupNormalizationKernel> forward, TrainingStyle style,
                                 const StepSlots& slots)
      : kernel_(std::move(kernel)),
        forward_(std::move(forward)),
        style_(style),
        slots_(slots) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    auto state = slots_.state_as<GroupNormalizationGradientState>(values, kernel_->class_name(), ": expected an ",
                                                                  forward_->state_class_name());
    values.images[slots_.result] =
        kernel_->encode(command_buffer, values.images[slots_.source_gradient], values.images[slots_.source], state,
                        nullptr);
    if (style_ != TrainingStyle::None) update_or_defer(*this, command_buffer, values, state);
  }

  // GroupNormalizationGradientState's gamma and beta gradients.
  size_t trainable_gradient_bytes() const override {
    if (style_ == TrainingStyle::None) return 0;
    return 2 * static_cast<size_t>(forward_->number_of_feature_channels()) * sizeof(float);
  }

  void encode_update(CommandBuffer& command_buffer, const std::shared_ptr<State>& state) override {
    forward_->encode_gamma_and_beta_update(
        command_buffer, std::static_pointer_cast<GroupNormalizationGradientState>(state), style_ == TrainingStyle::Gpu);
  }

 private:
  std::shared_ptr<GradientKernel> kernel_;
  std::shared_ptr<GroupNormalizationKernel> forward_;
  TrainingStyle style_;
  const GradientSlots slots_;
};

}  // namespace

CNNGroupNormalizationNode::CNNGroupNormalizationNode(std::shared_ptr<ImageNode> source,
                                                     std::shared_ptr<GroupNormalizationDataSource> data_source,
                                                     GroupNormalizationKind kind)
    : ForwardFilterNode({std::move(source)}), data_source_(std::move(data_source)), kind_(kind) {
  if (!data_source_)
    fail<TypeMismatchError>(class_name(), ": expected ",
                            kind_ == GroupNormalizationKind::Instance ? "an instance" : "a group",
                            " normalization data source, given None");
}

std::unique_ptr<GraphStep> CNNGroupNormalizationNode::compile(const StepSlots& slots) const {
  std::shared_ptr<GroupNormalizationKernel> kernel;
  if (kind_ == GroupNormalizationKind::Instance)
    kernel = graph_kernel<CNNInstanceNormalization>(slots, data_source_);
  else
    kernel = graph_kernel<CNNGroupNormalization>(slots, data_source_);
  configure_padding(*kernel);
  (*slots.kernels)[this] = kernel;
  return unary_step(kernel, slots, [kernel] { kernel->reload_gamma_and_beta_from_data_source(); });
}

std::vector<std::shared_ptr<FilterNode>> CNNGroupNormalizationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::shared_ptr<FilterNode>(
      new CNNGroupNormalizationGradientNode(gradient_images.front(), sources().front(), result_states().front(), kind_))};
}

CNNGroupNormalizationGradientNode::CNNGroupNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                                     std::shared_ptr<ImageNode> source_image,
                                                                     std::shared_ptr<StateNode> gradient_state,
                                                                     GroupNormalizationKind kind)
    : TrainableGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      kind_(kind) {
  const char* expected =
      kind_ == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalizationNode" : "MPSCNNGroupNormalizationNode";
  const std::shared_ptr<StateNode>& state = source_states().front();
  if (forward_node_of<CNNGroupNormalizationNode>(class_name(), expected, state).kind() != kind_)
    fail_forward_state(class_name(), expected, state.get());
}

std::unique_ptr<GraphStep> CNNGroupNormalizationGradientNode::compile(const StepSlots& slots) const {
  std::shared_ptr<GroupNormalizationKernel> forward = forward_kernel<GroupNormalizationKernel>(slots, *this);
  GroupNormalizationDataSource& source = *forward->data_source();
  if (training_style == TrainingStyle::Gpu && !source.supports_update_gamma_and_beta_on_command_buffer() &&
      !source.supports_update_gamma_and_beta())
    fail<TypeMismatchError>(class_name(), ": training style GPU updates gamma and beta through the data source, "
                                          "which implements neither update_gamma_and_beta_with_command_buffer nor "
                                          "update_gamma_and_beta_with_*_normalization_state_batch (training style "
                                          "NONE leaves them)");
  if (training_style == TrainingStyle::Cpu && !source.supports_update_gamma_and_beta())
    fail<TypeMismatchError>(class_name(), ": training style CPU calls the data source's host update, "
                                          "update_gamma_and_beta_with_*_normalization_state_batch, which it does "
                                          "not implement");
  std::shared_ptr<GradientKernel> kernel;
  if (kind_ == GroupNormalizationKind::Instance)
    kernel = graph_kernel<CNNInstanceNormalizationGradient>(slots);
  else
    kernel = graph_kernel<CNNGroupNormalizationGradient>(slots);
  return std::make_unique<GroupNormalizationGradientStep>(std::move(kernel), std::move(forward), training_style,
                                                          slots);
}

}  // namespace mpsx
