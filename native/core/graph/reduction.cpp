#include "mpsx/graph/reduction.h"

#include "mpsx/errors.h"

namespace mpsx {

namespace {

constexpr const char* kSpatialMeanNode = "MPSNNReductionSpatialMeanNode";

}  // namespace

NNUnaryReductionNode::NNUnaryReductionNode(std::shared_ptr<ImageNode> source, ReductionKind kind)
    : ForwardFilterNode({std::move(source)}), kind_(kind) {
  if (kind_ != ReductionKind::SpatialMean && kind_ != ReductionKind::FeatureChannelsSum)
    fail<ArgumentError>("a reduction node: unknown kind ", static_cast<int32_t>(kind_),
                        "; expected 0 (spatial mean) or 1 (feature channels sum)");
}

const char* NNUnaryReductionNode::class_name() const {
  return kind_ == ReductionKind::SpatialMean ? kSpatialMeanNode : "MPSNNReductionFeatureChannelsSumNode";
}

void NNUnaryReductionNode::set_clip_rect_source(const Region& value) {
  check_clip_rect_source(value, class_name());
  clip_rect_source_ = value;
}

std::unique_ptr<GraphStep> NNUnaryReductionNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<NNReduceUnary>(slots, kind_);
  configure_padding(*kernel);
  kernel->clip_rect_source = clip_rect_source_;
  kernel->weight = weight;
  return unary_step(std::move(kernel), slots);
}

std::vector<StateNodeKind> NNUnaryReductionNode::result_state_kinds() const {
  if (kind_ == ReductionKind::SpatialMean) return ForwardFilterNode::result_state_kinds();
  return {};
}

std::vector<std::shared_ptr<FilterNode>> NNUnaryReductionNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  if (kind_ != ReductionKind::SpatialMean) return FilterNode::make_gradient_filters(gradient_images);
  return {std::make_shared<NNReductionSpatialMeanGradientNode>(gradient_images.front(), sources().front(),
                                                               result_states().front())};
}

NNReductionSpatialMeanGradientNode::NNReductionSpatialMeanGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                                       std::shared_ptr<ImageNode> source_image,
                                                                       std::shared_ptr<StateNode> gradient_state)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)) {
  const std::shared_ptr<StateNode>& state = source_states().front();
  const auto& forward = forward_node_of<NNUnaryReductionNode>(class_name(), kSpatialMeanNode, state);
  if (forward.kind() != ReductionKind::SpatialMean) fail_forward_state(class_name(), kSpatialMeanNode, state.get());
  if (sources()[1] != forward.sources().front())
    fail<ArgumentError>(class_name(), ": source_image must be the source image of the ", kSpatialMeanNode,
                        " whose state it is given, given another image");
}

std::unique_ptr<GraphStep> NNReductionSpatialMeanGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(graph_kernel<NNReduceSpatialMeanGradient>(slots), slots);
}

}  // namespace mpsx
