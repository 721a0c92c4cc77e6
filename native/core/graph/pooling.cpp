#include "mpsx/graph/pooling.h"

#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

const char* node_name(PoolingKind kind, bool gradient) {
  switch (kind) {
    case PoolingKind::Max: return gradient ? "MPSCNNPoolingMaxGradientNode" : "MPSCNNPoolingMaxNode";
    case PoolingKind::Average: return gradient ? "MPSCNNPoolingAverageGradientNode" : "MPSCNNPoolingAverageNode";
    case PoolingKind::L2Norm: return gradient ? "MPSCNNPoolingL2NormGradientNode" : "MPSCNNPoolingL2NormNode";
    case PoolingKind::DilatedMax:
      return gradient ? "MPSCNNDilatedPoolingMaxGradientNode" : "MPSCNNDilatedPoolingMaxNode";
  }
  return "MPSCNNPoolingNode";
}

// The kernels check the window (and the kind) as they are made.
template <class K>
std::shared_ptr<K> pooling_kernel(const StepSlots& slots, const PoolingNodeWindow& w, const FilterNode& node) {
  auto kernel = graph_kernel<K>(slots, w.kind, w.kernel_width, w.kernel_height, w.stride_x, w.stride_y,
                                    w.dilation_x, w.dilation_y);
  kernel->edge_mode = EdgeMode::Clamp;  // MPS's pooling nodes clamp
  node.configure_padding(*kernel);
  return kernel;
}

}  // namespace

CNNPoolingNode::CNNPoolingNode(std::shared_ptr<ImageNode> source, PoolingNodeWindow window)
    : ForwardFilterNode({std::move(source)}), window_(window) {
  // Checks the window now, as the MPS initializers do.
  PoolingParameters(window_.kind, false, window_.kernel_width, window_.kernel_height, window_.stride_x,
                    window_.stride_y, window_.dilation_x, window_.dilation_y);
}

const char* CNNPoolingNode::class_name() const { return node_name(window_.kind, false); }

std::unique_ptr<GraphStep> CNNPoolingNode::compile(const StepSlots& slots) const {
  return unary_step(pooling_kernel<CNNPooling>(slots, window_, *this), slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNPoolingNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNPoolingGradientNode>(gradient_images.front(), sources().front(), result_states().front(),
                                                   window_, padding_method)};
}

CNNPoolingGradientNode::CNNPoolingGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                               std::shared_ptr<ImageNode> source_image,
                                               std::shared_ptr<StateNode> gradient_state, PoolingNodeWindow window,
                                               uint32_t padding_method)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state), padding_method),
      window_(window) {
  PoolingParameters(window_.kind, true, window_.kernel_width, window_.kernel_height, window_.stride_x,
                    window_.stride_y, window_.dilation_x, window_.dilation_y);
}

const char* CNNPoolingGradientNode::class_name() const { return node_name(window_.kind, true); }

std::unique_ptr<GraphStep> CNNPoolingGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(pooling_kernel<CNNPoolingGradient>(slots, window_, *this), slots);
}

}  // namespace mpsx
