// MPSCNNConvolutionTransposeNode and MPSCNNConvolutionTransposeGradientNode:
// trainable; the gradient node updates the forward filter's weights as its
// training style says. Not subclasses of the convolution nodes here (MPS's
// are): the transpose node has a source state the convolution node lacks.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/convolution_transpose.h"

namespace mpsx {

class CNNConvolutionTransposeNode final : public ForwardFilterNode {
 public:
  // convolution_gradient_state (may be null): the result state of the
  // convolution this transpose undoes, whose source size the result takes.
  CNNConvolutionTransposeNode(std::shared_ptr<ImageNode> source, std::shared_ptr<StateNode> convolution_gradient_state,
                              std::shared_ptr<ConvolutionDataSource> weights);
  const char* class_name() const override { return "MPSCNNConvolutionTransposeNode"; }
  bool is_trainable() const override { return true; }
  const std::shared_ptr<ConvolutionDataSource>& weights() const { return weights_; }
  AccumulatorPrecision accumulator_precision = AccumulatorPrecision::Float;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  std::shared_ptr<ConvolutionDataSource> weights_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward's convolution transpose gradient state. Weights null take the
// forward's.
class CNNConvolutionTransposeGradientNode final : public TrainableGradientNode {
 public:
  CNNConvolutionTransposeGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                      std::shared_ptr<ImageNode> source_image,
                                      std::shared_ptr<StateNode> gradient_state,
                                      std::shared_ptr<ConvolutionDataSource> weights);
  const char* class_name() const override { return "MPSCNNConvolutionTransposeGradientNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  std::shared_ptr<ConvolutionDataSource> weights_;
};

}  // namespace mpsx
