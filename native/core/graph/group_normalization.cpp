#include "mpsx/graph/group_normalization.h"

#include <cstdint>

#include "mpsx/data_source.h"
#include "mpsx/errors.h"
#include "mpsx/kernels/instance_normalization.h"

namespace mpsx {

namespace {

constexpr uint32_t kDefaultPadding = padding::kSizeSame | padding::kAlignCentered | padding::kAddRemainderToTopLeft;

class GroupNormalizationStep final : public GraphStep {
 public:
  GroupNormalizationStep(std::shared_ptr<GroupNormalizationKernel> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)), step_(unary_step(kernel_, slots)) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override { step_->encode(command_buffer, values); }
  void reload_from_data_source() override { kernel_->reload_gamma_and_beta_from_data_source(); }

 private:
  std::shared_ptr<GroupNormalizationKernel> kernel_;
  std::unique_ptr<GraphStep> step_;
};

enum class Update : uint8_t { None, Kernel, Host };

class GroupNormalizationGradientStep final : public GraphStep {
 public:
  GroupNormalizationGradientStep(std::shared_ptr<GradientKernel> kernel,
                                 std::shared_ptr<GroupNormalizationKernel> forward, Update update,
                                 const StepSlots& slots)
      : kernel_(std::move(kernel)),
        forward_(std::move(forward)),
        update_(update),
        source_gradient_(slots.sources.at(0)),
        source_(slots.sources.at(1)),
        state_(slots.source_states.at(0)),
        result_(slots.result) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    auto state = std::dynamic_pointer_cast<GroupNormalizationGradientState>(values.states[state_]);
    if (!state)
      fail<TypeMismatchError>(kernel_->class_name(), ": expected an ", forward_->state_class_name(), ", given ",
                              values.states[state_] ? values.states[state_]->class_name() : "None");
    values.images[result_] =
        kernel_->encode(command_buffer, values.images[source_gradient_], values.images[source_], state, nullptr);
    if (update_ == Update::Kernel) {
      forward_->encode_gamma_and_beta_update(command_buffer, state);
    } else if (update_ == Update::Host) {
      const std::shared_ptr<GroupNormalizationKernel>& forward = forward_;
      GroupNormalizationDataSource::States states{state};
      encode_update(
          command_buffer, forward->class_name(),
          forward->kind() == GroupNormalizationKind::Instance
              ? "update_gamma_and_beta_with_instance_normalization_state_batch"
              : "update_gamma_and_beta_with_group_normalization_state_batch",
          false, true, *state, [] { return std::shared_ptr<NormalizationGammaAndBetaState>(); },
          [](const NormalizationGammaAndBetaState&) {},
          [forward, states] {
            if (forward->data_source()->update_gamma_and_beta(states)) forward->reload_gamma_and_beta_from_data_source();
          });
    }
  }

 private:
  std::shared_ptr<GradientKernel> kernel_;
  std::shared_ptr<GroupNormalizationKernel> forward_;
  Update update_;
  size_t source_gradient_, source_, state_, result_;
};

}  // namespace

CNNGroupNormalizationNode::CNNGroupNormalizationNode(std::shared_ptr<ImageNode> source,
                                                     std::shared_ptr<GroupNormalizationDataSource> data_source,
                                                     GroupNormalizationKind kind)
    : FilterNode({std::move(source)}, {}, kDefaultPadding), data_source_(std::move(data_source)), kind_(kind) {
  if (!data_source_)
    fail<TypeMismatchError>(class_name(), ": expected ",
                            kind_ == GroupNormalizationKind::Instance ? "an instance" : "a group",
                            " normalization data source, given None");
}

std::unique_ptr<GraphStep> CNNGroupNormalizationNode::compile(const StepSlots& slots) const {
  std::shared_ptr<GroupNormalizationKernel> kernel;
  if (kind_ == GroupNormalizationKind::Instance)
    kernel = std::make_shared<CNNInstanceNormalization>(slots.device, data_source_);
  else
    kernel = std::make_shared<CNNGroupNormalization>(slots.device, data_source_);
  kernel->padding_method = padding_policy;
  (*slots.kernels)[this] = kernel;
  return std::make_unique<GroupNormalizationStep>(std::move(kernel), slots);
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
    : FilterNode({std::move(source_gradient), std::move(source_image)}, {std::move(gradient_state)},
                 kDefaultPadding),
      kind_(kind) {
  std::shared_ptr<FilterNode> producer = source_states().front()->producer();
  auto forward = std::dynamic_pointer_cast<CNNGroupNormalizationNode>(producer);
  if (!forward || forward->kind() != kind_) {
    const char* expected =
        kind_ == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalizationNode" : "MPSCNNGroupNormalizationNode";
    fail<TypeMismatchError>(class_name(), ": expected the result state of an ", expected, ", given ",
                            producer ? std::string("the result state of an ") + producer->class_name()
                                     : std::string("an ") + source_states().front()->class_name());
  }
}

std::unique_ptr<GraphStep> CNNGroupNormalizationGradientNode::compile(const StepSlots& slots) const {
  const std::shared_ptr<FilterNode> producer = source_states().front()->producer();
  auto found = slots.kernels->find(producer.get());
  auto forward =
      found == slots.kernels->end() ? nullptr : std::dynamic_pointer_cast<GroupNormalizationKernel>(found->second);
  if (!forward) fail<ArgumentError>(class_name(), ": its forward normalization is not in the graph");
  GroupNormalizationDataSource& source = *forward->data_source();
  Update update = Update::None;
  if (training_style == TrainingStyle::Gpu) {
    if (source.supports_update_gamma_and_beta_on_command_buffer() || source.supports_update_gamma_and_beta())
      update = Update::Kernel;
    else
      fail<TypeMismatchError>(class_name(), ": training style GPU updates gamma and beta through the data source, "
                                            "which implements neither update_gamma_and_beta nor "
                                            "update_gamma_and_beta_on_command_buffer (training style NONE leaves "
                                            "them)");
  } else if (training_style == TrainingStyle::Cpu) {
    if (source.supports_update_gamma_and_beta())
      update = Update::Host;
    else
      fail<TypeMismatchError>(class_name(), ": training style CPU calls the data source's host update_gamma_and_beta, "
                                            "which it does not implement");
  }
  std::shared_ptr<GradientKernel> kernel;
  if (kind_ == GroupNormalizationKind::Instance)
    kernel = std::make_shared<CNNInstanceNormalizationGradient>(slots.device);
  else
    kernel = std::make_shared<CNNGroupNormalizationGradient>(slots.device);
  return std::make_unique<GroupNormalizationGradientStep>(std::move(kernel), std::move(forward), update, slots);
}

}  // namespace mpsx
