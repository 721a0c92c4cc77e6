// MPSCNNSoftMaxNode, MPSCNNLogSoftMaxNode and their gradient nodes. The
// gradient kernels read the forward *result* (MPSCNNSoftMax.h), so a
// gradient node's sources are the gradient of the forward result and the
// forward result image itself; its state is the forward's result state.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/softmax.h"

namespace mpsx {

// MPSCNNSoftMaxNode (log false) and MPSCNNLogSoftMaxNode (log true).
class CNNSoftMaxNode final : public ForwardFilterNode {
 public:
  CNNSoftMaxNode(std::shared_ptr<ImageNode> source, bool log);
  const char* class_name() const override { return log_ ? "MPSCNNLogSoftMaxNode" : "MPSCNNSoftMaxNode"; }
  bool is_log() const { return log_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  bool log_;
};

// MPSCNNSoftMaxGradientNode / MPSCNNLogSoftMaxGradientNode. Sources: the
// gradient of the forward result and the forward result (`source_image`);
// the forward result state. Throws TypeMismatchError unless the state comes
// from a forward node of the same kind, and ArgumentError unless
// `source_image` is that node's result image.
class CNNSoftMaxGradientNode final : public GradientFilterNode {
 public:
  CNNSoftMaxGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                         std::shared_ptr<StateNode> gradient_state, bool log);
  const char* class_name() const override {
    return log_ ? "MPSCNNLogSoftMaxGradientNode" : "MPSCNNSoftMaxGradientNode";
  }
  bool is_log() const { return log_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  bool log_;
};

}  // namespace mpsx
