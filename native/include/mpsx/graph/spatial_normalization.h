// MPSCNNSpatialNormalizationNode and MPSCNNSpatialNormalizationGradientNode.
// Defaults are the header's (alpha 1, beta 5, delta 1, edge mode Zero as the
// kernel's). kernel_width and kernel_height are read-write on both nodes and
// must be equal when the graph compiles (the kernels' rule). The gradient
// node made by gradient_filter copies its forward node's sizes and
// parameters; the graph refuses to compile one whose sizes or parameters
// are not its forward node's (docs/semantics.md, NNGraph).
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/spatial_normalization.h"

namespace mpsx {

// The window and parameters both nodes carry, with the kernels' checks.
class SpatialNormalizationNodeSettings : public ResponseNormalizationSettings {
 public:
  SpatialNormalizationNodeSettings(const char* node, int64_t kernel_width, int64_t kernel_height);
  int64_t kernel_width() const { return kernel_width_; }
  int64_t kernel_height() const { return kernel_height_; }
  void set_kernel_width(int64_t value);
  void set_kernel_height(int64_t value);

 protected:
  // Both kernels of a compiled graph, made with these settings.
  template <class K>
  std::shared_ptr<K> make_kernel(const StepSlots& slots) const;

 private:
  const char* node_;
  int64_t kernel_width_, kernel_height_;
};

class CNNSpatialNormalizationNode final : public ForwardFilterNode, public SpatialNormalizationNodeSettings {
 public:
  // initWithSource:kernelSize: (kernel_width = kernel_height = kernel_size).
  CNNSpatialNormalizationNode(std::shared_ptr<ImageNode> source, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNSpatialNormalizationNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;
};

// Sources: the gradient of the forward result and the forward source; the
// result state of a CNNSpatialNormalizationNode (TypeMismatchError
// otherwise). Made by hand it has the header's defaults.
class CNNSpatialNormalizationGradientNode final : public GradientFilterNode, public SpatialNormalizationNodeSettings {
 public:
  CNNSpatialNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                      std::shared_ptr<ImageNode> source_image,
                                      std::shared_ptr<StateNode> gradient_state, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNSpatialNormalizationGradientNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx
