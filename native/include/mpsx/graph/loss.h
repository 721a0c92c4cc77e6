// MPSCNNLossNode: its result is the gradient of its source (the loss itself
// goes to the labels' loss image); its labels are an MPSNNLabelsNode, which
// the graph takes as a source state. MPSNNForwardLossNode and
// MPSNNLossGradientNode: the separated losses, whose labels (and weights)
// are image nodes.
#pragma once

#include <memory>

#include "mpsx/graph.h"
#include "mpsx/kernels/loss.h"

namespace mpsx {

class CNNLossNode final : public FilterNode {
 public:
  CNNLossNode(std::shared_ptr<ImageNode> source, LossDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNLossNode"; }
  bool result_is_gradient() const override { return true; }
  const LossDescriptor& descriptor() const { return descriptor_; }
  // inputLabels.
  const std::shared_ptr<StateNode>& input_labels() const { return source_states().front(); }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  LossDescriptor descriptor_;
};

// MPSNNLossCallback: -scalarWeightForSourceImage:destinationImage:, the
// weight of the node's kernel at each encode.
class LossCallback {
 public:
  virtual ~LossCallback() = default;
  virtual float scalar_weight(const std::shared_ptr<Image>& source_image,
                              const std::shared_ptr<Image>& destination_image) = 0;
};

// MPSNNForwardLossNode: sources (source, labels[, weights]); its result is
// the loss values (NNForwardLoss); its result state an
// MPSNNGradientStateNode carrying the encode's values to the gradient.
class NNForwardLossNode final : public ForwardFilterNode {
 public:
  NNForwardLossNode(std::shared_ptr<ImageNode> source, std::shared_ptr<ImageNode> labels,
                    std::shared_ptr<ImageNode> weights, LossDescriptor descriptor);
  const char* class_name() const override { return "MPSNNForwardLossNode"; }
  const LossDescriptor& descriptor() const { return descriptor_; }
  std::shared_ptr<ImageNode> weights() const { return sources().size() > 2 ? sources()[2] : nullptr; }
  // propertyCallBack: null, or sets the kernel's weight before each encode.
  std::shared_ptr<LossCallback> property_call_back;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  // The gradient of the source, then of the labels (isLabelsGradientFilter).
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  LossDescriptor descriptor_;
};

// MPSNNLossGradientNode: sources (gradient of the loss values, source,
// labels[, weights]), source state the forward loss node's result state
// (optional); its result is the gradient of the source, or of the labels.
class NNLossGradientNode final : public FilterNode {
 public:
  NNLossGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                     std::shared_ptr<ImageNode> labels, std::shared_ptr<ImageNode> weights,
                     std::shared_ptr<StateNode> gradient_state, LossDescriptor descriptor,
                     bool is_labels_gradient_filter);
  const char* class_name() const override { return "MPSNNLossGradientNode"; }
  bool is_gradient() const override { return true; }
  const LossDescriptor& descriptor() const { return descriptor_; }
  bool is_labels_gradient_filter() const { return labels_; }
  std::shared_ptr<ImageNode> weights() const { return sources().size() > 3 ? sources()[3] : nullptr; }
  // propertyCallBack: null, or sets the kernel's weight before each encode
  // (in place of the forward state's).
  std::shared_ptr<LossCallback> property_call_back;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  LossDescriptor descriptor_;
  bool labels_;
};

}  // namespace mpsx
