// MPSCNNPooling{Max,Average,L2Norm}Node, MPSCNNDilatedPoolingMaxNode and
// their gradient nodes. The nodes' edge mode is Clamp, as MPS's pooling
// nodes default to (the kernels default to Zero).
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/pooling.h"

namespace mpsx {

// The window of a pooling node and of its gradient.
struct PoolingNodeWindow {
  PoolingKind kind = PoolingKind::Max;
  int64_t kernel_width = 1, kernel_height = 1, stride_x = 1, stride_y = 1, dilation_x = 1, dilation_y = 1;
};

class CNNPoolingNode final : public ForwardFilterNode {
 public:
  // Throws as the pooling kernels do for a window outside the limits.
  CNNPoolingNode(std::shared_ptr<ImageNode> source, PoolingNodeWindow window);
  const char* class_name() const override;
  const PoolingNodeWindow& window() const { return window_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  PoolingNodeWindow window_;
};

class CNNPoolingGradientNode final : public GradientFilterNode {
 public:
  CNNPoolingGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                         std::shared_ptr<StateNode> gradient_state, PoolingNodeWindow window, uint32_t padding_method);
  const char* class_name() const override;
  const PoolingNodeWindow& window() const { return window_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  PoolingNodeWindow window_;
};

}  // namespace mpsx
