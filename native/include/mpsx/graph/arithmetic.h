// MPSNNAdditionNode (so far the arithmetic node training_graph needs, to sum
// the gradients of an image that feeds several filters).
#pragma once

#include "mpsx/graph.h"

namespace mpsx {

class NNAdditionNode final : public FilterNode {
 public:
  NNAdditionNode(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right);
  const char* class_name() const override { return "MPSNNAdditionNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

std::shared_ptr<FilterNode> make_addition_node(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right);

}  // namespace mpsx
