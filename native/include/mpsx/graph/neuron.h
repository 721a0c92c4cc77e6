// MPSCNNNeuronNode and MPSCNNNeuronGradientNode.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/neuron.h"

namespace mpsx {

class CNNNeuronGradientNode;

class CNNNeuronNode final : public DescribedForwardNode<CNNNeuron, CNNNeuronGradientNode, NeuronDescriptor> {
 public:
  CNNNeuronNode(std::shared_ptr<ImageNode> source, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuronNode"; }
  bool writes_in_place() const override { return true; }
};

// Sources: the gradient of the forward result and the forward source; the
// forward result state.
class CNNNeuronGradientNode final : public DescribedGradientNode<CNNNeuronGradient, NeuronDescriptor> {
 public:
  CNNNeuronGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                        std::shared_ptr<StateNode> gradient_state, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuronGradientNode"; }
};

}  // namespace mpsx
