// MPSNNScaleNode (MPSNNBilinearScaleNode, MPSNNLanczosScaleNode) and the
// MPSImageTransformProvider protocol.
#pragma once

#include <memory>

#include "mpsx/graph.h"
#include "mpsx/kernels/scale.h"

namespace mpsx {

// MPSImageTransformProvider: -transformForSourceImage:handle:, the scale
// transform of the node's kernel at each encode.
class ImageTransformProvider {
 public:
  virtual ~ImageTransformProvider() = default;
  virtual ScaleTransform transform(const std::shared_ptr<Image>& image, const NodeHandle& handle) = 0;
};

// initWithSource:[transformProvider:]outputSize:. The result is
// output_width x output_height with the source's feature channels; the
// provider, if any, gives the transform at each encode (with the source
// batch and the source node's handle), else the source is scaled to fill
// the result. Throws ArgumentError for a size outside 1..kMaxDimension.
// MPS has no gradient node of it: gradient_filters and training_graph
// through it throw TypeMismatchError.
class NNScaleNode final : public FilterNode {
 public:
  NNScaleNode(std::shared_ptr<ImageNode> source, ScaleKind kind, std::shared_ptr<ImageTransformProvider> provider,
              int64_t width, int64_t height, int64_t depth);
  const char* class_name() const override;
  ScaleKind kind() const { return kind_; }
  int64_t output_width() const { return width_; }
  int64_t output_height() const { return height_; }
  int64_t output_depth() const { return depth_; }
  const std::shared_ptr<ImageTransformProvider>& transform_provider() const { return provider_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  ScaleKind kind_;
  std::shared_ptr<ImageTransformProvider> provider_;
  int64_t width_, height_, depth_;
};

}  // namespace mpsx
