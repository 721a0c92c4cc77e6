#include "mpsx/graph/cross_channel_normalization.h"

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

constexpr const char* kForward = "MPSCNNCrossChannelNormalizationNode";

}  // namespace

CNNCrossChannelNormalizationNode::CNNCrossChannelNormalizationNode(std::shared_ptr<ImageNode> source,
                                                                   int64_t kernel_size)
    : ForwardFilterNode({std::move(source)}), ResponseNormalizationSettings(kForward), kernel_size_(kernel_size) {
  check_size(kernel_size, kForward, ": kernel_size");
}

void CNNCrossChannelNormalizationNode::set_kernel_size(int64_t value) {
  check_size(value, kForward, ": kernel_size_in_feature_channels");
  kernel_size_ = value;
}

std::unique_ptr<GraphStep> CNNCrossChannelNormalizationNode::compile(const StepSlots& slots) const {
  auto kernel = graph_kernel<CNNCrossChannelNormalization>(slots, kernel_size_);
  kernel->set_parameters(parameters());
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNCrossChannelNormalizationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNCrossChannelNormalizationGradientNode>(gradient_images.front(), sources().front(),
                                                                     result_states().front(), kernel_size_)};
}

CNNCrossChannelNormalizationGradientNode::CNNCrossChannelNormalizationGradientNode(
    std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
    std::shared_ptr<StateNode> gradient_state, int64_t kernel_size)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      kernel_size_(kernel_size),
      parameters_(forward_node_of<CNNCrossChannelNormalizationNode>(class_name(), kForward, source_states().front()).parameters()) {
  check_size(kernel_size, class_name(), ": kernel_size");
}

std::unique_ptr<GraphStep> CNNCrossChannelNormalizationGradientNode::compile(const StepSlots& slots) const {
  const CNNCrossChannelNormalizationNode& forward = forward_node_of<CNNCrossChannelNormalizationNode>(class_name(), kForward, source_states().front());
  check_forward_parameter(class_name(), "kernel_size", static_cast<double>(kernel_size_),
                static_cast<double>(forward.kernel_size()));
  check_forward_alpha_beta_delta(class_name(), parameters_, forward.parameters());
  auto kernel = graph_kernel<CNNCrossChannelNormalizationGradient>(slots, kernel_size_);
  kernel->set_parameters(parameters_);
  return gradient_step(std::move(kernel), slots);
}

}  // namespace mpsx
