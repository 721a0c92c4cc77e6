#include "mpsx/graph/upsampling.h"

#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

const char* node_name(UpsamplingKind kind, bool gradient) {
  switch (kind) {
    case UpsamplingKind::Nearest:
      return gradient ? "MPSCNNUpsamplingNearestGradientNode" : "MPSCNNUpsamplingNearestNode";
    case UpsamplingKind::Bilinear:
      return gradient ? "MPSCNNUpsamplingBilinearGradientNode" : "MPSCNNUpsamplingBilinearNode";
  }
  return "MPSCNNUpsamplingNode";
}

}  // namespace

CNNUpsamplingNode::CNNUpsamplingNode(std::shared_ptr<ImageNode> source, UpsamplingKind kind, int64_t scale_x,
                                     int64_t scale_y, bool align_corners)
    : ForwardFilterNode({std::move(source)}), UpsamplingNodeSettings(kind, scale_x, scale_y, align_corners) {
  // Checks the kind and the scale factors now, as the MPS initializers do.
  UpsamplingParameters(kind_, false, scale_x_, scale_y_, align_corners_);
  if (kind_ == UpsamplingKind::Nearest && align_corners_)
    fail<ArgumentError>(class_name(), ": nearest upsampling has no align_corners");
}

const char* CNNUpsamplingNode::class_name() const { return node_name(kind_, false); }

std::unique_ptr<GraphStep> CNNUpsamplingNode::compile(const StepSlots& slots) const {
  auto kernel = make_kernel<CNNUpsampling>(slots);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNUpsamplingNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNUpsamplingGradientNode>(gradient_images.front(), sources().front(),
                                                      result_states().front(), kind_, static_cast<double>(scale_x_),
                                                      static_cast<double>(scale_y_))};
}

CNNUpsamplingGradientNode::CNNUpsamplingGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                     std::shared_ptr<ImageNode> source_image,
                                                     std::shared_ptr<StateNode> gradient_state, UpsamplingKind kind,
                                                     double scale_x, double scale_y)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      UpsamplingNodeSettings(kind, 1, 1, false) {
  if (kind_ != UpsamplingKind::Nearest && kind_ != UpsamplingKind::Bilinear)
    fail<ArgumentError>("an upsampling gradient node: unknown kind ", static_cast<int32_t>(kind_),
                        "; expected 0 (nearest) or 1 (bilinear)");
  const std::shared_ptr<StateNode>& state = source_states().front();
  const CNNUpsamplingNode* forward = &forward_node_of<CNNUpsamplingNode>(class_name(), node_name(kind_, false), state);
  if (forward->kind() != kind_) fail_forward_state(class_name(), node_name(kind_, false), state.get());
  // Compared as doubles, so no value (NaN, huge) is converted first.
  if (!(scale_x == static_cast<double>(forward->scale_factor_x()) &&
        scale_y == static_cast<double>(forward->scale_factor_y())))
    fail<ArgumentError>(class_name(), ": scale_factor_x and scale_factor_y must be the forward node's, ",
                        forward->scale_factor_x(), " and ", forward->scale_factor_y(), "; given ", scale_x, " and ",
                        scale_y);
  if (sources()[1] != forward->sources().front())
    fail<ArgumentError>(class_name(), ": source_image must be the source image of the ", node_name(kind_, false),
                        " whose state it is given, given another image");
  scale_x_ = forward->scale_factor_x();
  scale_y_ = forward->scale_factor_y();
  align_corners_ = forward->align_corners();
}

const char* CNNUpsamplingGradientNode::class_name() const { return node_name(kind_, true); }

std::unique_ptr<GraphStep> CNNUpsamplingGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(make_kernel<CNNUpsamplingGradient>(slots), slots);
}

}  // namespace mpsx
