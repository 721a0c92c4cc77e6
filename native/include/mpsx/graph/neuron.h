// MPSCNNNeuronNode and MPSCNNNeuronGradientNode.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/neuron.h"

namespace mpsx {

class CNNNeuronNode final : public FilterNode {
 public:
  CNNNeuronNode(std::shared_ptr<ImageNode> source, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuronNode"; }
  const NeuronDescriptor& descriptor() const { return descriptor_; }
  bool writes_in_place() const override { return true; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<StateNodeKind> result_state_kinds() const override { return {StateNodeKind::Gradient}; }
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  NeuronDescriptor descriptor_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward result state.
class CNNNeuronGradientNode final : public FilterNode {
 public:
  CNNNeuronGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                        std::shared_ptr<StateNode> gradient_state, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuronGradientNode"; }
  bool is_gradient() const override { return true; }
  const NeuronDescriptor& descriptor() const { return descriptor_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  NeuronDescriptor descriptor_;
};

}  // namespace mpsx
