#include "mpsx/graph/convolution_transpose.h"

#include "mpsx/errors.h"
#include "weights_gradient_step.h"

namespace mpsx {

namespace {

constexpr size_t kNoSlot = SIZE_MAX;

class TransposeForwardStep final : public GraphStep {
 public:
  TransposeForwardStep(std::shared_ptr<CNNConvolutionTranspose> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        source_(slots.sources.at(0)),
        coupled_(slots.source_states.empty() ? kNoSlot : slots.source_states[0]),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    std::shared_ptr<State> coupled = coupled_ == kNoSlot ? nullptr : values.states[coupled_];
    auto r = kernel_->encode(command_buffer, values.images[source_], coupled, nullptr, nullptr, state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }
  void reload_from_data_source() override { kernel_->reload_weights_and_biases_from_data_source(); }

 private:
  std::shared_ptr<CNNConvolutionTranspose> kernel_;
  size_t source_, coupled_, result_, state_;
};

std::vector<std::shared_ptr<StateNode>> optional_state(std::shared_ptr<StateNode> state) {
  if (!state) return {};
  return {std::move(state)};
}

}  // namespace

CNNConvolutionTransposeNode::CNNConvolutionTransposeNode(std::shared_ptr<ImageNode> source,
                                                         std::shared_ptr<StateNode> convolution_gradient_state,
                                                         std::shared_ptr<ConvolutionDataSource> weights)
    : ForwardFilterNode({std::move(source)}, optional_state(std::move(convolution_gradient_state)),
                        StateNodeKind::ConvolutionTransposeGradient),
      weights_(std::move(weights)) {
  if (!weights_) fail<TypeMismatchError>(class_name(), ": expected a convolution data source, given None");
  if (!source_states().empty() && source_states().front()->kind() != StateNodeKind::ConvolutionGradient)
    fail<TypeMismatchError>(class_name(), ": expected the CNNConvolutionGradientStateNode of a convolution node "
                                          "(or None), given ", source_states().front()->class_name());
}

std::unique_ptr<GraphStep> CNNConvolutionTransposeNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<CNNConvolutionTranspose>(slots, weights_);
  configure_padding(*kernel);
  kernel->accumulator_precision = accumulator_precision;
  kernel->label = label;
  (*slots.kernels)[this] = kernel;
  return std::make_unique<TransposeForwardStep>(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNConvolutionTransposeNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNConvolutionTransposeGradientNode>(gradient_images.front(), sources().front(),
                                                                result_states().front(), weights_)};
}

CNNConvolutionTransposeGradientNode::CNNConvolutionTransposeGradientNode(
    std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
    std::shared_ptr<StateNode> gradient_state, std::shared_ptr<ConvolutionDataSource> weights)
    : TrainableGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      weights_(std::move(weights)) {
  if (source_states().front()->kind() != StateNodeKind::ConvolutionTransposeGradient)
    fail<TypeMismatchError>(class_name(), ": expected a CNNConvolutionTransposeGradientStateNode, given ",
                            source_states().front()->class_name());
}

std::unique_ptr<GraphStep> CNNConvolutionTransposeGradientNode::compile(const StepSlots& slots) const {
  std::shared_ptr<CNNConvolutionTranspose> forward = forward_kernel<CNNConvolutionTranspose>(slots, *this);
  const std::shared_ptr<ConvolutionDataSource>& weights = weights_ ? weights_ : forward->data_source();
  auto kernel = graph_kernel<CNNConvolutionTransposeGradient>(slots, weights);
  kernel->label = label;
  return weights_gradient_step(std::move(kernel), std::move(forward), training_style, slots);
}

}  // namespace mpsx
