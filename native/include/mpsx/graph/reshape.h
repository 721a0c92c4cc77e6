// MPSNNPadNode, MPSNNReshapeNode and their gradient nodes.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/reshape.h"

namespace mpsx {

// initWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode: (the padding
// sizes in x, y and channels size the result). Throws ArgumentError as
// NNPad does for a padding size outside 0..kMaxDimension.
class NNPadNode final : public ForwardFilterNode {
 public:
  NNPadNode(std::shared_ptr<ImageNode> source, ImageCoordinate padding_size_before,
            ImageCoordinate padding_size_after, EdgeMode edge_mode);
  const char* class_name() const override { return "MPSNNPadNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
  const ImageCoordinate& padding_size_before() const { return before_; }
  const ImageCoordinate& padding_size_after() const { return after_; }
  EdgeMode edge_mode() const { return edge_mode_; }
  // MPSNNPadNode.fillValue, read when the graph is made.
  float fill_value = 0;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  ImageCoordinate before_, after_;
  EdgeMode edge_mode_;
};

// initWithSourceGradient:sourceImage:gradientState:. Sources: the gradient
// of the forward result and the forward source; the forward result state.
// Throws TypeMismatchError unless the state comes from an NNPadNode, and
// ArgumentError unless `source_image` is that node's source.
class NNPadGradientNode final : public GradientFilterNode {
 public:
  NNPadGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                    std::shared_ptr<StateNode> gradient_state);
  const char* class_name() const override { return "MPSNNPadGradientNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

// initWithSource:resultWidth:resultHeight:resultFeatureChannels:. Throws
// ArgumentError for a size outside 1..kMaxDimension.
class NNReshapeNode final : public ForwardFilterNode {
 public:
  NNReshapeNode(std::shared_ptr<ImageNode> source, int64_t result_width, int64_t result_height,
                int64_t result_feature_channels);
  const char* class_name() const override { return "MPSNNReshapeNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
  // x width, y height, channel feature channels.
  const ImageCoordinate& result_size() const { return size_; }

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  ImageCoordinate size_;
};

// initWithSourceGradient:sourceImage:gradientState:, as NNPadGradientNode's.
class NNReshapeGradientNode final : public GradientFilterNode {
 public:
  NNReshapeGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                        std::shared_ptr<StateNode> gradient_state);
  const char* class_name() const override { return "MPSNNReshapeGradientNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx
