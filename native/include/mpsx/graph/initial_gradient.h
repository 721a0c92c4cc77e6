// MPSNNInitialGradientNode: seeds training_graph at an arbitrary output with
// a gradient of ones shaped as its source (the source's own gradient is its
// result, as a loss node's is).
#pragma once

#include "mpsx/graph.h"

namespace mpsx {

class NNInitialGradientNode final : public FilterNode {
 public:
  explicit NNInitialGradientNode(std::shared_ptr<ImageNode> source);
  const char* class_name() const override { return "MPSNNInitialGradientNode"; }
  bool result_is_gradient() const override { return true; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx
