// MPSCNNUpsampling{Nearest,Bilinear}Node and their gradient nodes.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/upsampling.h"

namespace mpsx {

// What both nodes carry, and their kernels are made with.
class UpsamplingNodeSettings {
 public:
  UpsamplingKind kind() const { return kind_; }
  int64_t scale_factor_x() const { return scale_x_; }
  int64_t scale_factor_y() const { return scale_y_; }
  bool align_corners() const { return align_corners_; }

 protected:
  UpsamplingNodeSettings(UpsamplingKind kind, int64_t scale_x, int64_t scale_y, bool align_corners)
      : kind_(kind), scale_x_(scale_x), scale_y_(scale_y), align_corners_(align_corners) {}
  template <class K>
  std::shared_ptr<K> make_kernel(const StepSlots& slots) const {
    return graph_kernel<K>(slots, kind_, scale_x_, scale_y_, align_corners_);
  }

  UpsamplingKind kind_;
  int64_t scale_x_, scale_y_;
  bool align_corners_;
};

// initWithSource:integerScaleFactorX:integerScaleFactorY:[alignCorners:]
// (alignCorners: bilinear only). Throws ArgumentError as the kernels do for
// a scale factor outside 1..kMaxDimension, and for align_corners on a
// nearest node.
class CNNUpsamplingNode final : public ForwardFilterNode, public UpsamplingNodeSettings {
 public:
  CNNUpsamplingNode(std::shared_ptr<ImageNode> source, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                    bool align_corners = false);
  const char* class_name() const override;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;
};

// initWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:
// (doubles, as MPS's). Sources: the gradient of the forward result and the
// forward source; the forward result state. The scale factors must be the
// forward node's (ArgumentError otherwise), and the corner alignment, which
// MPS's bilinear gradient node does not take, is the forward node's. Throws
// TypeMismatchError unless the state comes from an upsampling node of the
// same kind.
class CNNUpsamplingGradientNode final : public GradientFilterNode, public UpsamplingNodeSettings {
 public:
  CNNUpsamplingGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                            std::shared_ptr<StateNode> gradient_state, UpsamplingKind kind, double scale_x,
                            double scale_y);
  const char* class_name() const override;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx
