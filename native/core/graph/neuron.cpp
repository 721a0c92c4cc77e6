#include "mpsx/graph/neuron.h"

#include "mpsx/kernel.h"

namespace mpsx {

CNNNeuronNode::CNNNeuronNode(std::shared_ptr<ImageNode> source, NeuronDescriptor descriptor)
    : FilterNode({std::move(source)}, {}, padding::kDefault), descriptor_(std::move(descriptor)) {
  descriptor_.validate();
}

std::unique_ptr<GraphStep> CNNNeuronNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<CNNNeuron>(slots, descriptor_);
  kernel->padding_method = padding_policy;
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNNeuronNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNNeuronGradientNode>(gradient_images.front(), sources().front(), result_states().front(),
                                                  descriptor_)};
}

CNNNeuronGradientNode::CNNNeuronGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                             std::shared_ptr<ImageNode> source_image,
                                             std::shared_ptr<StateNode> gradient_state, NeuronDescriptor descriptor)
    : FilterNode({std::move(source_gradient), std::move(source_image)}, {std::move(gradient_state)}, padding::kDefault),
      descriptor_(std::move(descriptor)) {
  descriptor_.validate();
}

std::unique_ptr<GraphStep> CNNNeuronGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(graph_kernel<CNNNeuronGradient>(slots, descriptor_), slots);
}

}  // namespace mpsx
