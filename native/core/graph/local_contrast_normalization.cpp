#include "mpsx/graph/local_contrast_normalization.h"

#include <cmath>

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

constexpr const char* kForward = "MPSCNNLocalContrastNormalizationNode";
constexpr const char* kGradient = "MPSCNNLocalContrastNormalizationGradientNode";

template <class K>
std::shared_ptr<K> make_kernel(const char* node, const StepSlots& slots, int64_t kernel_width,
                               int64_t kernel_height, const LocalContrastNormalizationParameters& parameters) {
  if (kernel_width != kernel_height)
    fail<ArgumentError>(node, ": kernel_width (", kernel_width, ") must equal kernel_height (", kernel_height, ")");
  auto kernel = graph_kernel<K>(slots, kernel_width, kernel_height);
  kernel->parameters = parameters;
  return kernel;
}

}  // namespace

CNNLocalContrastNormalizationNode::CNNLocalContrastNormalizationNode(std::shared_ptr<ImageNode> source,
                                                                     int64_t kernel_size)
    : ForwardFilterNode({std::move(source)}), kernel_width_(kernel_size), kernel_height_(kernel_size) {
  check_size(kernel_size, kForward, ": kernel_size");
  parameters.alpha = 1.0f;  // MPSCNNLocalContrastNormalizationNode's default; the kernel's is 0
}

void CNNLocalContrastNormalizationNode::set_kernel_width(int64_t value) {
  check_size(value, kForward, ": kernel_width");
  kernel_width_ = value;
}

void CNNLocalContrastNormalizationNode::set_kernel_height(int64_t value) {
  check_size(value, kForward, ": kernel_height");
  kernel_height_ = value;
}

std::unique_ptr<GraphStep> CNNLocalContrastNormalizationNode::compile(const StepSlots& slots) const {
  auto kernel =
      make_kernel<CNNLocalContrastNormalization>(kForward, slots, kernel_width_, kernel_height_, parameters);
  configure_padding(*kernel);
  return unary_step(std::move(kernel), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNLocalContrastNormalizationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  auto gradient = std::make_shared<CNNLocalContrastNormalizationGradientNode>(
      gradient_images.front(), sources().front(), result_states().front(), kernel_width_, kernel_height_);
  gradient->parameters = parameters;
  return {gradient};
}

CNNLocalContrastNormalizationGradientNode::CNNLocalContrastNormalizationGradientNode(
    std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
    std::shared_ptr<StateNode> gradient_state, int64_t kernel_width, int64_t kernel_height)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      kernel_width_(kernel_width),
      kernel_height_(kernel_height) {
  check_size(kernel_width, kGradient, ": kernel_width");
  check_size(kernel_height, kGradient, ": kernel_height");
  forward_node_of<CNNLocalContrastNormalizationNode>(kGradient, kForward, source_states().front());
}

std::unique_ptr<GraphStep> CNNLocalContrastNormalizationGradientNode::compile(const StepSlots& slots) const {
  const CNNLocalContrastNormalizationNode& forward = forward_node_of<CNNLocalContrastNormalizationNode>(kGradient, kForward, source_states().front());
  check_forward_parameter(kGradient, "kernel_width", static_cast<double>(kernel_width_), static_cast<double>(forward.kernel_width()));
  check_forward_parameter(kGradient, "kernel_height", static_cast<double>(kernel_height_), static_cast<double>(forward.kernel_height()));
  const LocalContrastNormalizationParameters& f = forward.parameters;
  check_forward_alpha_beta_delta(kGradient, parameters, f);
  check_forward_parameter(kGradient, "p0", parameters.p0, f.p0);
  check_forward_parameter(kGradient, "pm", parameters.pm, f.pm);
  check_forward_parameter(kGradient, "ps", parameters.ps, f.ps);
  return gradient_step(make_kernel<CNNLocalContrastNormalizationGradient>(kGradient, slots, kernel_width_,
                                                                          kernel_height_, parameters),
                       slots);
}

}  // namespace mpsx
