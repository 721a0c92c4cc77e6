#include "mpsx/graph/reshape.h"

#include <string>

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

// The forward node of N whose result state `state` is, checked to read
// `source_image` (the gradient's secondary image is the forward source).
template <class N>
void check_forward(const char* gradient, const char* forward, const std::shared_ptr<StateNode>& state,
                   const std::shared_ptr<ImageNode>& source_image) {
  const N& node = forward_node_of<N>(gradient, forward, state);
  if (source_image != node.sources().front())
    fail<ArgumentError>(gradient, ": source_image must be the source image of the ", forward,
                        " whose state it is given, given another image");
}

}  // namespace

NNPadNode::NNPadNode(std::shared_ptr<ImageNode> source, ImageCoordinate before, ImageCoordinate after,
                     EdgeMode edge_mode)
    : ForwardFilterNode({std::move(source)}), before_(before), after_(after), edge_mode_(edge_mode) {
  for (auto [c, name] : {std::pair{&before_, "padding_size_before"}, {&after_, "padding_size_after"}})
    for (auto [value, axis] : {std::pair{c->x, ".x"}, {c->y, ".y"}, {c->channel, ".channel"}})
      check_range(value, 0, kMaxDimension, class_name(), ": ", name, axis);
  if (static_cast<int>(edge_mode) > static_cast<int>(EdgeMode::Constant))
    fail<ArgumentError>(class_name(), ": edge_mode must be 0 to 4, given ", static_cast<int>(edge_mode));
}

std::unique_ptr<GraphStep> NNPadNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<NNPad>(slots, before_, after_);
  kernel->edge_mode = edge_mode_;
  kernel->fill_value = fill_value;
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNPadNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<NNPadGradientNode>(gradient_images.front(), sources().front(), result_states().front())};
}

NNPadGradientNode::NNPadGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                     std::shared_ptr<ImageNode> source_image,
                                     std::shared_ptr<StateNode> gradient_state)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)) {
  check_forward<NNPadNode>(class_name(), "MPSNNPadNode", source_states().front(), sources()[1]);
}

std::unique_ptr<GraphStep> NNPadGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(graph_kernel<NNPadGradient>(slots), slots);
}

NNReshapeNode::NNReshapeNode(std::shared_ptr<ImageNode> source, int64_t width, int64_t height, int64_t channels)
    : ForwardFilterNode({std::move(source)}), size_{width, height, channels} {
  check_size(width, class_name(), ": result_width");
  check_size(height, class_name(), ": result_height");
  check_size(channels, class_name(), ": result_feature_channels");
}

std::unique_ptr<GraphStep> NNReshapeNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<NNReshape>(slots, size_.x, size_.y, size_.channel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNReshapeNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {
      std::make_shared<NNReshapeGradientNode>(gradient_images.front(), sources().front(), result_states().front())};
}

NNReshapeGradientNode::NNReshapeGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                             std::shared_ptr<ImageNode> source_image,
                                             std::shared_ptr<StateNode> gradient_state)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)) {
  check_forward<NNReshapeNode>(class_name(), "MPSNNReshapeNode", source_states().front(), sources()[1]);
}

std::unique_ptr<GraphStep> NNReshapeGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(graph_kernel<NNReshapeGradient>(slots), slots);
}

}  // namespace mpsx
