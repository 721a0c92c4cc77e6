// MPSCNNUpsampling{Nearest,Bilinear}Node and their gradient nodes.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/upsampling.h"

namespace mpsx {

// initWithSource:integerScaleFactorX:integerScaleFactorY:[alignCorners:]
// (alignCorners: bilinear only). Throws ArgumentError as the kernels do for
// a scale factor outside 1..kMaxDimension, and for align_corners on a
// nearest node.
class CNNUpsamplingNode final : public ForwardFilterNode {
 public:
  CNNUpsamplingNode(std::shared_ptr<ImageNode> source, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                    bool align_corners = false);
  const char* class_name() const override;
  UpsamplingKind kind() const { return kind_; }
  int64_t scale_factor_x() const { return scale_x_; }
  int64_t scale_factor_y() const { return scale_y_; }
  bool align_corners() const { return align_corners_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  UpsamplingKind kind_;
  int64_t scale_x_, scale_y_;
  bool align_corners_;
};

// initWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:
// (doubles, as MPS's). Sources: the gradient of the forward result and the
// forward source; the forward result state. The scale factors must be the
// forward node's (ArgumentError otherwise), and the corner alignment, which
// MPS's bilinear gradient node does not take, is the forward node's. Throws
// TypeMismatchError unless the state comes from an upsampling node of the
// same kind.
class CNNUpsamplingGradientNode final : public GradientFilterNode {
 public:
  CNNUpsamplingGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                            std::shared_ptr<StateNode> gradient_state, UpsamplingKind kind, double scale_x,
                            double scale_y);
  const char* class_name() const override;
  UpsamplingKind kind() const { return kind_; }
  int64_t scale_factor_x() const { return scale_x_; }
  int64_t scale_factor_y() const { return scale_y_; }
  bool align_corners() const { return align_corners_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  UpsamplingKind kind_;
  int64_t scale_x_ = 1, scale_y_ = 1;
  bool align_corners_ = false;
};

}  // namespace mpsx
