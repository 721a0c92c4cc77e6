#include "mpsx/graph/loss.h"

#include <climits>

#include "mpsx/checked.h"
#include "mpsx/errors.h"

namespace mpsx {

namespace {

class LossStep final : public GraphStep {
 public:
  LossStep(std::shared_ptr<CNNLoss> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)), source_(slots.sources.at(0)), labels_(slots.source_states.at(0)),
        result_(slots.result) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<State>& state = values.states[labels_];
    if (auto labels = std::dynamic_pointer_cast<CNNLossLabels>(state)) {
      values.images[result_] = kernel_->encode(command_buffer, values.images[source_], labels, nullptr);
    } else if (auto batch = std::dynamic_pointer_cast<CNNLossLabelsBatch>(state)) {
      values.images[result_] = kernel_->encode(command_buffer, values.images[source_], batch->items().data(),
                                               batch->items().size(), nullptr);
    } else {
      fail<TypeMismatchError>("MPSCNNLossNode: expected, for its labels node, one CNNLossLabels holding the batch "
                              "or a list of one CNNLossLabels per image (an MPSCNNLossLabelsBatch), given ",
                              state->class_name());
    }
  }

 private:
  std::shared_ptr<CNNLoss> kernel_;
  size_t source_, labels_, result_;
};

constexpr size_t kNoSlot = SIZE_MAX;

std::vector<std::shared_ptr<ImageNode>> loss_sources(const char* node, std::vector<std::shared_ptr<ImageNode>> sources,
                                                     const std::vector<const char*>& names,
                                                     std::shared_ptr<ImageNode> weights,
                                                     const LossDescriptor& descriptor) {
  for (size_t i = 0; i < sources.size(); ++i)
    if (!sources[i]) fail<TypeMismatchError>(node, ": expected an NNImageNode for ", names[i], ", given None");
  if (weights) sources.push_back(std::move(weights));
  descriptor.validate();
  return sources;
}

// The weight a callback sets, called with the source and the destination
// the kernel is about to write (made here, by the graph's allocator, as MPS
// hands it one).
std::shared_ptr<Image> call_back(CommandBuffer& command_buffer, LossCallback& callback, SeparatedLoss& kernel,
                                 const std::shared_ptr<Image>& source, const ImageDescriptor& destination) {
  auto image = kernel.destination_image_allocator->image(command_buffer, destination, kernel);
  kernel.weight = checked_parameter(callback.scalar_weight(source, image), kernel.class_name(),
                                    "weight (from property_call_back)");
  return image;
}

class ForwardLossStep final : public GraphStep {
 public:
  ForwardLossStep(std::shared_ptr<const NNForwardLossNode> node, const StepSlots& slots)
      : node_(std::move(node)), kernel_(graph_kernel<NNForwardLoss>(slots, node_->descriptor())),
        source_(slots.sources.at(0)), labels_(slots.sources.at(1)),
        weights_(slots.sources.size() > 2 ? slots.sources[2] : kNoSlot), result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& source = values.images[source_];
    std::shared_ptr<Image> destination;
    if (node_->property_call_back && source)
      destination = call_back(command_buffer, *node_->property_call_back, *kernel_, source,
                              kernel_->destination_image_descriptor(*source));
    NNForwardLoss::Encoded r =
        kernel_->encode(command_buffer, source, values.images[labels_],
                        weights_ == kNoSlot ? nullptr : values.images[weights_], destination, nullptr,
                        state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }

 private:
  std::shared_ptr<const NNForwardLossNode> node_;
  std::shared_ptr<NNForwardLoss> kernel_;
  size_t source_, labels_, weights_, result_, state_;
};

class LossGradientStep final : public GraphStep {
 public:
  LossGradientStep(std::shared_ptr<const NNLossGradientNode> node, const StepSlots& slots)
      : node_(std::move(node)), kernel_(graph_kernel<NNLossGradient>(slots, node_->descriptor())),
        gradient_(slots.sources.at(0)), source_(slots.sources.at(1)), labels_(slots.sources.at(2)),
        weights_(slots.sources.size() > 3 ? slots.sources[3] : kNoSlot),
        state_(slots.source_states.empty() ? kNoSlot : slots.source_states[0]), result_(slots.result) {
    kernel_->compute_label_gradients = node_->is_labels_gradient_filter();
  }
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& gradient = values.images[gradient_];
    const std::shared_ptr<Image>& source = values.images[source_];
    std::shared_ptr<Image> destination;
    std::shared_ptr<State> state = state_ == kNoSlot ? nullptr : values.states[state_];
    if (node_->property_call_back && gradient && source) {
      // The callback's weight replaces the forward state's; the other values
      // are the descriptor's, as the forward node's.
      destination = call_back(command_buffer, *node_->property_call_back, *kernel_, source,
                              kernel_->destination_image_descriptor(*gradient, *source));
      state = nullptr;
    }
    values.images[result_] = kernel_->encode(command_buffer, gradient, source, values.images[labels_],
                                             weights_ == kNoSlot ? nullptr : values.images[weights_], state,
                                             destination);
  }

 private:
  std::shared_ptr<const NNLossGradientNode> node_;
  std::shared_ptr<NNLossGradient> kernel_;
  size_t gradient_, source_, labels_, weights_, state_, result_;
};

}  // namespace

NNForwardLossNode::NNForwardLossNode(std::shared_ptr<ImageNode> source, std::shared_ptr<ImageNode> labels,
                                     std::shared_ptr<ImageNode> weights, LossDescriptor descriptor)
    : ForwardFilterNode(loss_sources("MPSNNForwardLossNode", {std::move(source), std::move(labels)},
                                     {"source", "labels"}, std::move(weights), descriptor)),
      descriptor_(descriptor) {}

std::unique_ptr<GraphStep> NNForwardLossNode::compile(const StepSlots& slots) const {
  return std::make_unique<ForwardLossStep>(
      std::static_pointer_cast<const NNForwardLossNode>(shared_from_this()), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNForwardLossNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  if (gradient_images.size() != 1)
    fail<ArgumentError>(class_name(), ": expected one gradient image (of the loss values), given ",
                        gradient_images.size());
  if (gradient_images[0].get() == result_image().get())
    fail<ArgumentError>(class_name(), ": the gradient of the loss values cannot be the loss values; give "
                                      "training_graph a source gradient, or start it at an NNInitialGradientNode "
                                      "on this node's result image");
  const std::shared_ptr<StateNode> state = result_states().front();
  std::vector<std::shared_ptr<FilterNode>> filters;
  for (bool labels : {false, true})
    filters.push_back(std::make_shared<NNLossGradientNode>(gradient_images[0], sources()[0], sources()[1], weights(),
                                                           state, descriptor_, labels));
  return filters;
}

NNLossGradientNode::NNLossGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                       std::shared_ptr<ImageNode> source_image, std::shared_ptr<ImageNode> labels,
                                       std::shared_ptr<ImageNode> weights, std::shared_ptr<StateNode> gradient_state,
                                       LossDescriptor descriptor, bool is_labels_gradient_filter)
    : FilterNode(loss_sources("MPSNNLossGradientNode",
                              {std::move(source_gradient), std::move(source_image), std::move(labels)},
                              {"source_gradient", "source_image", "labels"}, std::move(weights), descriptor),
                 gradient_state ? std::vector<std::shared_ptr<StateNode>>{gradient_state}
                                : std::vector<std::shared_ptr<StateNode>>{},
                 padding::kDefault),
      descriptor_(descriptor), labels_(is_labels_gradient_filter) {
  if (gradient_state)
    forward_node_of<NNForwardLossNode>(class_name(), "MPSNNForwardLossNode", gradient_state);
}

std::unique_ptr<GraphStep> NNLossGradientNode::compile(const StepSlots& slots) const {
  return std::make_unique<LossGradientStep>(
      std::static_pointer_cast<const NNLossGradientNode>(shared_from_this()), slots);
}

CNNLossNode::CNNLossNode(std::shared_ptr<ImageNode> source, LossDescriptor descriptor)
    : FilterNode({std::move(source)}, {std::make_shared<StateNode>(StateNodeKind::Labels)}, padding::kDefault),
      descriptor_(std::move(descriptor)) {
  descriptor_.validate();
}

std::unique_ptr<GraphStep> CNNLossNode::compile(const StepSlots& slots) const {
  return std::make_unique<LossStep>(graph_kernel<CNNLoss>(slots, descriptor_), slots);
}

}  // namespace mpsx
