// MPSNNUnaryReductionNode's spatial mean and feature channel sum nodes, and
// MPSNNReductionSpatialMeanGradientNode.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/reduction.h"

namespace mpsx {

// initWithSource:. The spatial mean's result state feeds its gradient node;
// the feature channel sum makes none and has no gradient node (MPS has
// none), so training_graph through it throws TypeMismatchError.
class NNUnaryReductionNode final : public ForwardFilterNode {
 public:
  NNUnaryReductionNode(std::shared_ptr<ImageNode> source, ReductionKind kind);
  const char* class_name() const override;
  ReductionKind kind() const { return kind_; }
  // MPSNNUnaryReductionNode.clipRectSource; ArgumentError as
  // check_clip_rect_source says.
  const Region& clip_rect_source() const { return clip_rect_source_; }
  void set_clip_rect_source(const Region& value);
  // MPSNNReductionFeatureChannelsSumNode.weight.
  float weight = 1.0f;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<StateNodeKind> result_state_kinds() const override;
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  ReductionKind kind_;
  Region clip_rect_source_ = kRectNoClip;
};

// initWithSourceGradient:sourceImage:gradientState:. Throws
// TypeMismatchError unless the state is a spatial mean node's, and
// ArgumentError unless source_image is that node's source.
class NNReductionSpatialMeanGradientNode final : public GradientFilterNode {
 public:
  NNReductionSpatialMeanGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                     std::shared_ptr<ImageNode> source_image,
                                     std::shared_ptr<StateNode> gradient_state);
  const char* class_name() const override { return "MPSNNReductionSpatialMeanGradientNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx
