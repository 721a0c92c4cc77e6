#include "mpsx/graph/initial_gradient.h"

#include "mpsx/kernels/initial_gradient.h"

namespace mpsx {

NNInitialGradientNode::NNInitialGradientNode(std::shared_ptr<ImageNode> source)
    : FilterNode({std::move(source)}, {}, padding::kDefault) {}

std::unique_ptr<GraphStep> NNInitialGradientNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<NNInitialGradient>(slots);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

}  // namespace mpsx
