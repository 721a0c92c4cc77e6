#include "mpsx/graph/convolution.h"

#include "mpsx/errors.h"

namespace mpsx {

namespace {

constexpr uint32_t kDefaultPadding = padding::kSizeSame | padding::kAlignCentered | padding::kAddRemainderToTopLeft;

// The gradient of the source and the weights, then the update of the
// forward kernel's weights (the kernel the forward filter compiled to).
class ConvolutionGradientStep final : public GraphStep {
 public:
  ConvolutionGradientStep(std::shared_ptr<CNNConvolutionGradient> kernel, std::shared_ptr<CNNConvolution> forward,
                          TrainingStyle style, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        forward_(std::move(forward)),
        style_(style),
        gradient_(slots.sources.at(0)),
        source_(slots.sources.at(1)),
        state_(slots.source_states.at(0)),
        result_(slots.result) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<State>& state = values.states[state_];
    values.images[result_] = kernel_->encode(command_buffer, values.images[gradient_], values.images[source_], state,
                                             nullptr);
    if (style_ != TrainingStyle::None) update_or_defer(*this, command_buffer, values, state);
  }

  void encode_update(CommandBuffer& command_buffer, const std::shared_ptr<State>& state) override {
    forward_->encode_weights_and_bias_update(command_buffer, std::static_pointer_cast<ConvolutionGradientState>(state),
                                            style_ == TrainingStyle::Gpu);
  }

 private:
  std::shared_ptr<CNNConvolutionGradient> kernel_;
  std::shared_ptr<CNNConvolution> forward_;
  TrainingStyle style_;
  size_t gradient_, source_, state_, result_;
};

}  // namespace

CNNConvolutionNode::CNNConvolutionNode(std::shared_ptr<ImageNode> source, std::shared_ptr<ConvolutionDataSource> weights,
                                       bool fully_connected)
    : FilterNode({std::move(source)}, {}, kDefaultPadding), weights_(std::move(weights)),
      fully_connected_(fully_connected) {
  if (!weights_) fail<TypeMismatchError>(class_name(), ": expected a convolution data source, given None");
}

std::unique_ptr<GraphStep> CNNConvolutionNode::compile(const StepSlots& slots) const {
  std::shared_ptr<CNNConvolution> kernel = fully_connected_
                                               ? graph_kernel<CNNFullyConnected>(slots, weights_)
                                               : graph_kernel<CNNConvolution>(slots, weights_);
  kernel->padding_method = padding_policy;
  kernel->accumulator_precision = accumulator_precision;
  (*slots.kernels)[this] = kernel;
  return unary_step(kernel, slots, [kernel] { kernel->reload_weights_and_biases_from_data_source(); });
}

std::vector<std::shared_ptr<FilterNode>> CNNConvolutionNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNConvolutionGradientNode>(gradient_images.front(), sources().front(),
                                                       result_states().front(), weights_, fully_connected_)};
}

CNNConvolutionGradientNode::CNNConvolutionGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                       std::shared_ptr<ImageNode> source_image,
                                                       std::shared_ptr<StateNode> gradient_state,
                                                       std::shared_ptr<ConvolutionDataSource> weights,
                                                       bool fully_connected)
    : FilterNode({std::move(source_gradient), std::move(source_image)}, {std::move(gradient_state)}, kDefaultPadding),
      weights_(std::move(weights)),
      fully_connected_(fully_connected) {
  if (source_states().front()->kind() != StateNodeKind::ConvolutionGradient)
    fail<TypeMismatchError>(class_name(), ": expected a convolution gradient state node, given ",
                            source_states().front()->class_name());
}

std::unique_ptr<GraphStep> CNNConvolutionGradientNode::compile(const StepSlots& slots) const {
  std::shared_ptr<CNNConvolution> forward = forward_kernel<CNNConvolution>(slots, *this);
  // nil weights take the forward's, as MPS's gradient node does.
  const std::shared_ptr<ConvolutionDataSource>& weights = weights_ ? weights_ : forward->data_source();
  std::shared_ptr<CNNConvolutionGradient> kernel = fully_connected_
                                                       ? graph_kernel<CNNFullyConnectedGradient>(slots, weights)
                                                       : graph_kernel<CNNConvolutionGradient>(slots, weights);
  // Nothing reads the gradient of the source (the first convolution of a
  // model): only the weights' gradients are computed.
  if (!slots.result_needed) kernel->gradient_option = ConvolutionGradientOption::WeightsAndBias;
  return std::make_unique<ConvolutionGradientStep>(std::move(kernel), std::move(forward), training_style, slots);
}

}  // namespace mpsx
