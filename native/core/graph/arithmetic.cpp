#include "mpsx/graph/arithmetic.h"

#include "mpsx/kernels/arithmetic.h"

namespace mpsx {

namespace {

constexpr uint32_t kDefaultPadding = padding::kSizeSame | padding::kAlignCentered | padding::kAddRemainderToTopLeft;
constexpr size_t kNoSlot = SIZE_MAX;

class BinaryStep final : public GraphStep {
 public:
  BinaryStep(std::shared_ptr<BinaryKernel> kernel, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        primary_(slots.sources.at(0)),
        secondary_(slots.sources.at(1)),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    auto r = kernel_->encode(command_buffer, values.images[primary_], values.images[secondary_], nullptr, nullptr,
                             state_ != kNoSlot);
    values.images[result_] = std::move(r.image);
    if (state_ != kNoSlot) values.states[state_] = std::move(r.state);
  }

 private:
  std::shared_ptr<BinaryKernel> kernel_;
  size_t primary_, secondary_, result_, state_;
};

}  // namespace

NNAdditionNode::NNAdditionNode(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right)
    : FilterNode({std::move(left), std::move(right)}, {}, kDefaultPadding) {}

std::unique_ptr<GraphStep> NNAdditionNode::compile(const StepSlots& slots) const {
  return std::make_unique<BinaryStep>(std::make_shared<CNNArithmetic>(slots.device, ArithmeticOperation::Add), slots);
}

std::shared_ptr<FilterNode> make_addition_node(std::shared_ptr<ImageNode> left, std::shared_ptr<ImageNode> right) {
  return std::make_shared<NNAdditionNode>(std::move(left), std::move(right));
}

}  // namespace mpsx
