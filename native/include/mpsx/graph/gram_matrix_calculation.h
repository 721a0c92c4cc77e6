// MPSNNGramMatrixCalculationNode, MPSNNGramMatrixCalculationGradientNode and
// the MPSNNGramMatrixCallback protocol.
#pragma once

#include <memory>

#include "mpsx/graph.h"
#include "mpsx/kernels/gram_matrix_calculation.h"

namespace mpsx {

// MPSNNGramMatrixCallback: -alphaForSourceImage:destinationImage:, the alpha
// of the node's kernel at each encode.
class GramMatrixCallback {
 public:
  virtual ~GramMatrixCallback() = default;
  virtual float alpha(const std::shared_ptr<Image>& source_image, const std::shared_ptr<Image>& destination_image) = 0;
};

// initWithSource:[alpha:]. Throws ArgumentError for a NaN or infinite alpha.
class NNGramMatrixCalculationNode final : public ForwardFilterNode {
 public:
  NNGramMatrixCalculationNode(std::shared_ptr<ImageNode> source, float alpha = 1.0f);
  const char* class_name() const override { return "MPSNNGramMatrixCalculationNode"; }
  float alpha() const { return alpha_; }
  // propertyCallBack: null, or sets the kernel's alpha before each encode
  // (and so the alpha its gradient uses, which comes with the state).
  std::shared_ptr<GramMatrixCallback> property_call_back;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  float alpha_;
};

// initWithSourceGradient:sourceImage:gradientState:[alpha:]. Sources: the
// gradient of the forward result and the forward source; the forward result
// state, which brings the alpha of the forward encode: the node's own alpha
// is its kernel's until then, as MPS's gradient kernel "automatically
// adjusted by the MPSNNGradientState". Throws TypeMismatchError unless the
// state comes from an MPSNNGramMatrixCalculationNode, ArgumentError for a
// NaN or infinite alpha or a source image other than that node's source.
class NNGramMatrixCalculationGradientNode final : public GradientFilterNode {
 public:
  NNGramMatrixCalculationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                      std::shared_ptr<ImageNode> source_image,
                                      std::shared_ptr<StateNode> gradient_state, float alpha = 1.0f);
  const char* class_name() const override { return "MPSNNGramMatrixCalculationGradientNode"; }
  float alpha() const { return alpha_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  float alpha_;
};

}  // namespace mpsx
