#include "mpsx/graph/loss.h"

#include "mpsx/errors.h"

namespace mpsx {

namespace {

constexpr uint32_t kDefaultPadding = padding::kSizeSame | padding::kAlignCentered | padding::kAddRemainderToTopLeft;

class LossStep final : public GraphStep {
 public:
  LossStep(std::shared_ptr<CNNLoss> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)), source_(slots.sources.at(0)), labels_(slots.source_states.at(0)),
        result_(slots.result) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    auto labels = std::dynamic_pointer_cast<CNNLossLabels>(values.states[labels_]);
    if (!labels)
      fail<TypeMismatchError>("MPSCNNLossNode: expected CNNLossLabels for its labels node, given ",
                              values.states[labels_]->class_name());
    values.images[result_] = kernel_->encode(command_buffer, values.images[source_], labels, nullptr);
  }

 private:
  std::shared_ptr<CNNLoss> kernel_;
  size_t source_, labels_, result_;
};

}  // namespace

CNNLossNode::CNNLossNode(std::shared_ptr<ImageNode> source, LossDescriptor descriptor)
    : FilterNode({std::move(source)}, {std::make_shared<StateNode>(StateNodeKind::Labels)}, kDefaultPadding),
      descriptor_(std::move(descriptor)) {}

std::unique_ptr<GraphStep> CNNLossNode::compile(const StepSlots& slots) const {
  return std::make_unique<LossStep>(graph_kernel<CNNLoss>(slots, descriptor_), slots);
}

}  // namespace mpsx
