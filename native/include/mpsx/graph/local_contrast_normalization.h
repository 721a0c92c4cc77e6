// MPSCNNLocalContrastNormalizationNode and its gradient node. The forward
// node's defaults are the node's in MPSNNGraphNodes.h: alpha 1 (the kernel's
// is 0), beta 0.5, delta 1/1024, p0 1, pm 0, ps 1; the gradient node made by
// hand has the gradient node's header defaults, which are the kernel's
// (alpha 0). The gradient node made by gradient_filter copies its forward
// node's sizes and parameters; the graph refuses to compile one whose sizes
// or parameters are not its forward node's (docs/semantics.md, NNGraph).
// Edge mode Zero, as the kernels default to.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/local_contrast_normalization.h"

namespace mpsx {

class CNNLocalContrastNormalizationNode final : public ForwardFilterNode {
 public:
  // initWithSource:kernelSize: (kernel_width = kernel_height = kernel_size).
  CNNLocalContrastNormalizationNode(std::shared_ptr<ImageNode> source, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNLocalContrastNormalizationNode"; }
  // Read-write, each within 1..the size limit; equal when the graph compiles.
  int64_t kernel_width() const { return kernel_width_; }
  int64_t kernel_height() const { return kernel_height_; }
  void set_kernel_width(int64_t value);
  void set_kernel_height(int64_t value);
  // Any float, as on the kernels.
  LocalContrastNormalizationParameters parameters;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  int64_t kernel_width_, kernel_height_;
};

// Sources: the gradient of the forward result and the forward source; the
// result state of a CNNLocalContrastNormalizationNode (TypeMismatchError
// otherwise). kernel_width and kernel_height are read-only (header).
class CNNLocalContrastNormalizationGradientNode final : public GradientFilterNode {
 public:
  CNNLocalContrastNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                            std::shared_ptr<ImageNode> source_image,
                                            std::shared_ptr<StateNode> gradient_state, int64_t kernel_width,
                                            int64_t kernel_height);
  const char* class_name() const override { return "MPSCNNLocalContrastNormalizationGradientNode"; }
  int64_t kernel_width() const { return kernel_width_; }
  int64_t kernel_height() const { return kernel_height_; }
  LocalContrastNormalizationParameters parameters;  // the kernel's defaults unless copied or set
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  int64_t kernel_width_, kernel_height_;
};

}  // namespace mpsx
