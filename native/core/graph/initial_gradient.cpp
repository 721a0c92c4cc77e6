#include "mpsx/graph/initial_gradient.h"

#include "mpsx/kernels/neuron.h"

namespace mpsx {

NNInitialGradientNode::NNInitialGradientNode(std::shared_ptr<ImageNode> source)
    : FilterNode({std::move(source)}, {}, padding::kDefault) {}

// Ones shaped as the source: the linear neuron 0 * x + 1.
std::unique_ptr<GraphStep> NNInitialGradientNode::compile(const StepSlots& slots) const {
  NeuronDescriptor ones;
  ones.type = NeuronType::Linear;
  ones.a = 0.0f;
  ones.b = 1.0f;
  auto kernel = graph_kernel<CNNNeuron>(slots, ones);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

}  // namespace mpsx
