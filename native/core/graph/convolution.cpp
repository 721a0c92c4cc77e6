#include "mpsx/graph/convolution.h"

#include "mpsx/errors.h"
#include "weights_gradient_step.h"

namespace mpsx {

CNNConvolutionNode::CNNConvolutionNode(std::shared_ptr<ImageNode> source, std::shared_ptr<ConvolutionDataSource> weights,
                                       bool fully_connected)
    : ForwardFilterNode({std::move(source)}, {}, StateNodeKind::ConvolutionGradient), weights_(std::move(weights)),
      fully_connected_(fully_connected) {
  if (!weights_) fail<TypeMismatchError>(class_name(), ": expected a convolution data source, given None");
}

std::unique_ptr<GraphStep> CNNConvolutionNode::compile(const StepSlots& slots) const {
  std::shared_ptr<CNNConvolution> kernel = fully_connected_
                                               ? graph_kernel<CNNFullyConnected>(slots, weights_)
                                               : graph_kernel<CNNConvolution>(slots, weights_);
  configure_padding(*kernel);
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
    : TrainableGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
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
  return weights_gradient_step(std::move(kernel), std::move(forward), training_style, slots,
                               reads_sources_overlapped());
}

}  // namespace mpsx
