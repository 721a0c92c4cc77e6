#include "mpsx/graph/softmax.h"

#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

CNNSoftMaxNode::CNNSoftMaxNode(std::shared_ptr<ImageNode> source, bool log)
    : ForwardFilterNode({std::move(source)}), log_(log) {}

std::unique_ptr<GraphStep> CNNSoftMaxNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<CNNSoftMax>(slots, log_);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNSoftMaxNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  // The secondary source is the forward result, not the forward source.
  return {std::make_shared<CNNSoftMaxGradientNode>(gradient_images.front(), result_image(), result_states().front(),
                                                   log_)};
}

CNNSoftMaxGradientNode::CNNSoftMaxGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                               std::shared_ptr<ImageNode> source_image,
                                               std::shared_ptr<StateNode> gradient_state, bool log)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      log_(log) {
  const std::shared_ptr<StateNode>& state = source_states().front();
  const char* expected = log_ ? "MPSCNNLogSoftMaxNode" : "MPSCNNSoftMaxNode";
  if (forward_node_of<CNNSoftMaxNode>(class_name(), expected, state).is_log() != log_)
    fail_forward_state(class_name(), expected, state.get());
  if (sources()[1] != state->producer()->result_image())
    fail<ArgumentError>(class_name(), ": source_image must be the result image of the ", expected,
                        " whose state it is given (the gradient reads the forward result), given another image");
}

std::unique_ptr<GraphStep> CNNSoftMaxGradientNode::compile(const StepSlots& slots) const {
  // gradient_step passes sources[1], the forward result, as the secondary image.
  return gradient_step(graph_kernel<CNNSoftMaxGradient>(slots, log_), slots);
}

}  // namespace mpsx
