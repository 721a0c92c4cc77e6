// MPSNNBinaryArithmeticNode (MPSNNAdditionNode, MPSNNSubtractionNode,
// MPSNNMultiplicationNode, MPSNNDivisionNode, MPSNNComparisonNode) and
// MPSNNArithmeticGradientNode (Addition, Subtraction, Multiplication).
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/arithmetic.h"

namespace mpsx {

// One class for the five MPS forward classes: the operation decides the
// class name, the kernel and whether there is a gradient (Add, Subtract and
// Multiply only, as the kernels).
class NNBinaryArithmeticNode : public FilterNode {
 public:
  NNBinaryArithmeticNode(ArithmeticOperation operation, std::shared_ptr<ImageNode> left,
                         std::shared_ptr<ImageNode> right);
  const char* class_name() const override;
  ArithmeticOperation operation() const { return parameters.operation; }
  // Scales, bias, clamp and (Compare) comparison type; the operation is fixed.
  ArithmeticParameters parameters;
  int64_t primary_stride_in_pixels_x = 1, primary_stride_in_pixels_y = 1, primary_stride_in_feature_channels = 1;
  int64_t secondary_stride_in_pixels_x = 1, secondary_stride_in_pixels_y = 1,
          secondary_stride_in_feature_channels = 1;
  bool has_gradient() const;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  // An MPSNNBinaryGradientStateNode where there is a gradient; none else.
  std::vector<StateNodeKind> result_state_kinds() const override;
  // The primary filter, then the secondary filter.
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;
};

// MPSNNAdditionNode kept as a name: training_graph sums gradients with it.
using NNAdditionNode = NNBinaryArithmeticNode;

// Sources: the gradient of the forward result and the forward image the
// gradient kernel reads (Add and Subtract: the image whose gradient it
// computes; Multiply: the other one); the forward's binary gradient state.
class NNArithmeticGradientNode final : public GradientFilterNode {
 public:
  NNArithmeticGradientNode(ArithmeticOperation operation, std::shared_ptr<ImageNode> source_gradient,
                           std::shared_ptr<ImageNode> source_image, std::shared_ptr<StateNode> gradient_state,
                           bool is_secondary_source_filter);
  const char* class_name() const override;
  ArithmeticOperation operation() const { return operation_; }
  bool is_secondary_source_filter() const { return secondary_; }
  // Whether source_image is the forward secondary image.
  bool reads_secondary_image() const { return (operation_ == ArithmeticOperation::Multiply) != secondary_; }
  // The forward node's (copied when made from it); the scales set the
  // gradient, bias and clamp are not read (the gradient of the unclamped
  // formula, as the kernel), the strides must be the forward's.
  float primary_scale = 1, secondary_scale = 1, bias = 0;
  float minimum_value = -3.402823466e+38f, maximum_value = 3.402823466e+38f;
  int64_t secondary_stride_in_pixels_x = 1, secondary_stride_in_pixels_y = 1,
          secondary_stride_in_feature_channels = 1;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  ArithmeticOperation operation_;
  bool secondary_;
};

std::shared_ptr<FilterNode> make_addition_node(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right);

}  // namespace mpsx
