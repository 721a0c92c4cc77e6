// The gradient step of the filters with weights and biases (convolution,
// fully connected, convolution transpose). Internal to native/core/graph.
#pragma once

#include <memory>
#include <utility>

#include "mpsx/graph.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx {

// The gradient of the source and the weights, then the update of the
// forward kernel's weights (the kernel the forward filter compiled to).
// `weights_overlapped` (a step that updates): the weights gradient runs as
// overlapped work where the update does (FilterNode::reads_sources_overlapped).
template <class Gradient, class Forward>
class WeightsGradientStep final : public GraphStep {
 public:
  WeightsGradientStep(std::shared_ptr<Gradient> kernel, std::shared_ptr<Forward> forward,
                      TrainingStyle style, const StepSlots& slots, bool weights_overlapped)
      : kernel_(std::move(kernel)),
        forward_(std::move(forward)),
        style_(style),
        slots_(slots),
        weights_overlapped_(weights_overlapped) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<State>& state = values.states[slots_.state];
    const std::shared_ptr<Image>& source_gradient = values.images[slots_.source_gradient];
    const std::shared_ptr<Image>& source = values.images[slots_.source];
    values.images[slots_.result] =
        weights_overlapped_ && !values.deferred_updates
            ? kernel_->encode_weights_overlapped(command_buffer, source_gradient, source, state)
            : kernel_->encode(command_buffer, source_gradient, source, state, nullptr);
    if (style_ != TrainingStyle::None) update_or_defer(*this, command_buffer, values, state);
  }

  void encode_update(CommandBuffer& command_buffer, const std::shared_ptr<State>& state) override {
    forward_->encode_weights_and_bias_update(command_buffer, std::static_pointer_cast<ConvolutionGradientState>(state),
                                            style_ == TrainingStyle::Gpu);
  }

  // ConvolutionGradientState's weights and biases gradients.
  size_t trainable_gradient_bytes() const override {
    if (style_ == TrainingStyle::None) return 0;
    const ConvolutionDescriptor& d = forward_->descriptor();
    return (d.weight_count() + static_cast<size_t>(d.output_feature_channels)) * sizeof(float);
  }

 private:
  std::shared_ptr<Gradient> kernel_;
  std::shared_ptr<Forward> forward_;
  TrainingStyle style_;
  const GradientSlots slots_;
  bool weights_overlapped_;
};

template <class Gradient, class Forward>
std::unique_ptr<GraphStep> weights_gradient_step(std::shared_ptr<Gradient> kernel, std::shared_ptr<Forward> forward,
                                                 TrainingStyle style, const StepSlots& slots,
                                                 bool weights_overlapped = false) {
  return std::make_unique<WeightsGradientStep<Gradient, Forward>>(std::move(kernel), std::move(forward), style, slots,
                                                                  weights_overlapped);
}

}  // namespace mpsx
