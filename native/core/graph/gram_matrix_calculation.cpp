#include "mpsx/graph/gram_matrix_calculation.h"

#include <climits>

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

constexpr size_t kNoSlot = SIZE_MAX;

// The forward step: the node's alpha, or its callback's, called with the
// source and the destination the kernel is about to write (made here, by the
// graph's allocator, as MPS hands it one).
class GramMatrixStep final : public GraphStep {
 public:
  GramMatrixStep(std::shared_ptr<const NNGramMatrixCalculationNode> node, const StepSlots& slots)
      : node_(std::move(node)),
        kernel_(graph_kernel<NNGramMatrixCalculation>(slots, node_->alpha())),
        source_(slots.sources.at(0)),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {
    node_->configure_padding(*kernel_);
  }
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& source = values.images[source_];
    std::shared_ptr<Image> destination;
    if (node_->property_call_back && source) {
      destination = kernel_->destination_image_allocator->image(
          command_buffer, kernel_->destination_image_descriptor(*source), *kernel_);
      kernel_->set_alpha(checked_parameter(node_->property_call_back->alpha(source, destination),
                                           kernel_->class_name(), "alpha (from property_call_back)"));
    } else {
      kernel_->set_alpha(node_->alpha());
    }
    UnaryKernel::Encoded r = kernel_->encode(command_buffer, source, destination, nullptr, state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }

 private:
  std::shared_ptr<const NNGramMatrixCalculationNode> node_;
  std::shared_ptr<NNGramMatrixCalculation> kernel_;
  size_t source_, result_, state_;
};

}  // namespace

NNGramMatrixCalculationNode::NNGramMatrixCalculationNode(std::shared_ptr<ImageNode> source, float alpha)
    : ForwardFilterNode({std::move(source)}), alpha_(checked_parameter(alpha, class_name(), "alpha")) {}

std::unique_ptr<GraphStep> NNGramMatrixCalculationNode::compile(const StepSlots& slots) const {
  return std::make_unique<GramMatrixStep>(
      std::static_pointer_cast<const NNGramMatrixCalculationNode>(shared_from_this()), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNGramMatrixCalculationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<NNGramMatrixCalculationGradientNode>(gradient_images.front(), sources().front(),
                                                                result_states().front(), alpha_)};
}

NNGramMatrixCalculationGradientNode::NNGramMatrixCalculationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                                         std::shared_ptr<ImageNode> source_image,
                                                                         std::shared_ptr<StateNode> gradient_state,
                                                                         float alpha)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      alpha_(checked_parameter(alpha, class_name(), "alpha")) {
  const auto& forward = forward_node_of<NNGramMatrixCalculationNode>(class_name(), "MPSNNGramMatrixCalculationNode",
                                                                     source_states().front());
  if (sources()[1] != forward.sources().front())
    fail<ArgumentError>(class_name(), ": source_image must be the source image of the MPSNNGramMatrixCalculationNode ",
                        "whose state it is given, given another image");
}

std::unique_ptr<GraphStep> NNGramMatrixCalculationGradientNode::compile(const StepSlots& slots) const {
  return gradient_step(graph_kernel<NNGramMatrixCalculationGradient>(slots, alpha_), slots);
}

}  // namespace mpsx
