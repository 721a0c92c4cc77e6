#include "mpsx/graph/neuron.h"

#include "mpsx/kernel.h"

namespace mpsx {

CNNNeuronNode::CNNNeuronNode(std::shared_ptr<ImageNode> source, NeuronDescriptor descriptor)
    : DescribedForwardNode(std::move(source), std::move(descriptor)) {
  descriptor_.validate();
}

CNNNeuronGradientNode::CNNNeuronGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                             std::shared_ptr<ImageNode> source_image,
                                             std::shared_ptr<StateNode> gradient_state, NeuronDescriptor descriptor)
    : DescribedGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state),
                            std::move(descriptor)) {
  descriptor_.validate();
}

}  // namespace mpsx
