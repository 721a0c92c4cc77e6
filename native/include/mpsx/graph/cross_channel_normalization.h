// MPSCNNCrossChannelNormalizationNode and its gradient node. The node's
// defaults are the header's (alpha 1, beta 5, delta 1); the gradient node
// has no parameters of its own in MPS: it takes its forward node's (the
// producer of its gradient state) when it is made, and the graph refuses to
// compile one whose forward node changed since (docs/semantics.md, NNGraph).
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/cross_channel_normalization.h"

namespace mpsx {

class CNNCrossChannelNormalizationNode final : public ForwardFilterNode, public ResponseNormalizationSettings {
 public:
  // Throws ArgumentError unless 1 <= kernel_size <= the size limit.
  CNNCrossChannelNormalizationNode(std::shared_ptr<ImageNode> source, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNCrossChannelNormalizationNode"; }
  // kernelSizeInFeatureChannels (read-write).
  int64_t kernel_size() const { return kernel_size_; }
  void set_kernel_size(int64_t value);
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  int64_t kernel_size_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward result state, which a CNNCrossChannelNormalizationNode must make
// (TypeMismatchError otherwise): its alpha, beta and delta are copied here.
class CNNCrossChannelNormalizationGradientNode final : public GradientFilterNode {
 public:
  CNNCrossChannelNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                           std::shared_ptr<ImageNode> source_image,
                                           std::shared_ptr<StateNode> gradient_state, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNCrossChannelNormalizationGradientNode"; }
  int64_t kernel_size() const { return kernel_size_; }
  const CrossChannelNormalizationParameters& parameters() const { return parameters_; }
  // Throws ArgumentError where the kernel size or a parameter is no longer
  // the forward node's.
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  int64_t kernel_size_;
  CrossChannelNormalizationParameters parameters_;
};

}  // namespace mpsx
