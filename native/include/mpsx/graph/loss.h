// MPSCNNLossNode: its result is the gradient of its source (the loss itself
// goes to the labels' loss image); its labels are an MPSNNLabelsNode, which
// the graph takes as a source state.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/loss.h"

namespace mpsx {

class CNNLossNode final : public FilterNode {
 public:
  CNNLossNode(std::shared_ptr<ImageNode> source, LossDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNLossNode"; }
  bool result_is_gradient() const override { return true; }
  const LossDescriptor& descriptor() const { return descriptor_; }
  // inputLabels.
  const std::shared_ptr<StateNode>& input_labels() const { return source_states().front(); }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  LossDescriptor descriptor_;
};

}  // namespace mpsx
