#include "mpsx/graph/spatial_normalization.h"

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

constexpr const char* kForward = "MPSCNNSpatialNormalizationNode";
constexpr const char* kGradient = "MPSCNNSpatialNormalizationGradientNode";

}  // namespace

SpatialNormalizationNodeSettings::SpatialNormalizationNodeSettings(const char* node, int64_t kernel_width,
                                                                   int64_t kernel_height)
    : ResponseNormalizationSettings(node), node_(node), kernel_width_(kernel_width), kernel_height_(kernel_height) {
  check_size(kernel_width, node, ": kernel_width");
  check_size(kernel_height, node, ": kernel_height");
}

void SpatialNormalizationNodeSettings::set_kernel_width(int64_t value) {
  check_size(value, node_, ": kernel_width");
  kernel_width_ = value;
}

void SpatialNormalizationNodeSettings::set_kernel_height(int64_t value) {
  check_size(value, node_, ": kernel_height");
  kernel_height_ = value;
}

template <class K>
std::shared_ptr<K> SpatialNormalizationNodeSettings::make_kernel(const StepSlots& slots) const {
  if (kernel_width_ != kernel_height_)
    fail<ArgumentError>(node_, ": kernel_width (", kernel_width_, ") must equal kernel_height (", kernel_height_,
                        ")");
  auto kernel = graph_kernel<K>(slots, kernel_width_, kernel_height_);
  kernel->set_parameters(parameters());
  return kernel;
}

CNNSpatialNormalizationNode::CNNSpatialNormalizationNode(std::shared_ptr<ImageNode> source, int64_t kernel_size)
    : ForwardFilterNode({std::move(source)}),
      SpatialNormalizationNodeSettings(kForward, kernel_size, kernel_size) {}

std::unique_ptr<GraphStep> CNNSpatialNormalizationNode::compile(const StepSlots& slots) const {
  auto kernel = make_kernel<CNNSpatialNormalization>(slots);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNSpatialNormalizationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  auto gradient = std::make_shared<CNNSpatialNormalizationGradientNode>(gradient_images.front(), sources().front(),
                                                                        result_states().front(), kernel_width());
  gradient->set_kernel_height(kernel_height());
  gradient->set_parameters(parameters());
  return {gradient};
}

CNNSpatialNormalizationGradientNode::CNNSpatialNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                                         std::shared_ptr<ImageNode> source_image,
                                                                         std::shared_ptr<StateNode> gradient_state,
                                                                         int64_t kernel_size)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      SpatialNormalizationNodeSettings(kGradient, kernel_size, kernel_size) {
  forward_node_of<CNNSpatialNormalizationNode>(kGradient, kForward, source_states().front());
}

std::unique_ptr<GraphStep> CNNSpatialNormalizationGradientNode::compile(const StepSlots& slots) const {
  const CNNSpatialNormalizationNode& forward = forward_node_of<CNNSpatialNormalizationNode>(kGradient, kForward, source_states().front());
  check_forward_parameter(kGradient, "kernel_width", static_cast<double>(kernel_width()),
                static_cast<double>(forward.kernel_width()));
  check_forward_parameter(kGradient, "kernel_height", static_cast<double>(kernel_height()),
                static_cast<double>(forward.kernel_height()));
  check_forward_alpha_beta_delta(kGradient, parameters(), forward.parameters());
  return gradient_step(make_kernel<CNNSpatialNormalizationGradient>(slots), slots);
}

}  // namespace mpsx
