#include "mpsx/graph/batch_normalization.h"

#include <cstdint>

#include "mpsx/errors.h"

namespace mpsx {

namespace {

constexpr size_t kNoSlot = SIZE_MAX;

// The neuron fused after the normalization (identity if none).
NeuronDescriptor neuron_of(const StepSlots& slots) {
  return slots.fused_neuron ? *slots.fused_neuron : NeuronDescriptor{};
}

// Training: a new state, the statistics of the whole batch into it, and the
// normalization with them. Inference: the running statistics, no state.
class BatchNormalizationStep final : public GraphStep {
 public:
  BatchNormalizationStep(std::shared_ptr<CNNBatchNormalization> kernel,
                         std::shared_ptr<CNNBatchNormalizationStatistics> statistics, const StepSlots& slots)
      : kernel_(std::move(kernel)),
        statistics_(std::move(statistics)),
        source_(slots.sources.at(0)),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& source = values.images[source_];
    if (!statistics_) {
      values.images[result_] = kernel_->encode(command_buffer, source, nullptr, nullptr, false).image;
      return;
    }
    std::shared_ptr<State> state = kernel_->result_state(*source);
    statistics_->encode_batch(command_buffer, source, state);
    values.images[result_] = kernel_->encode(command_buffer, source, nullptr, state, true).image;
    if (state_ != kNoSlot) values.states[state_] = std::move(state);
  }

  void reload_from_data_source() override {
    kernel_->reload_gamma_and_beta_from_data_source();
    kernel_->reload_mean_and_variance_from_data_source();
  }

 private:
  std::shared_ptr<CNNBatchNormalization> kernel_;
  std::shared_ptr<CNNBatchNormalizationStatistics> statistics_;
  size_t source_, result_, state_;
};

// Which of the forward kernel's updates a gradient step encodes, and in
// which style: on the command buffer where the data source can (GPU), or its
// host updates only (CPU).
struct Updates {
  bool gamma_and_beta = false, mean_and_variance = false, on_command_buffer = true;
};

class BatchNormalizationGradientStep final : public GraphStep {
 public:
  BatchNormalizationGradientStep(std::shared_ptr<CNNBatchNormalization> forward, Updates updates,
                                 const StepSlots& slots)
      : forward_(std::move(forward)),
        statistics_gradient_(graph_kernel<CNNBatchNormalizationStatisticsGradient>(slots, neuron_of(slots))),
        gradient_(graph_kernel<CNNBatchNormalizationGradient>(slots, neuron_of(slots))),
        updates_(updates),
        slots_(slots) {}

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& gradient = values.images[slots_.source_gradient];
    const std::shared_ptr<Image>& source = values.images[slots_.source];
    auto state = slots_.state_as<BatchNormalizationState>(
        values, "MPSCNNBatchNormalizationGradientNode: expected an MPSCNNBatchNormalizationState");
    // The statistics gradient over the whole batch, then the gradient.
    statistics_gradient_->encode_batch(command_buffer, gradient, source, state);
    values.images[slots_.result] = gradient_->encode(command_buffer, gradient, source, state, nullptr);
    if (updates_.gamma_and_beta || updates_.mean_and_variance) update_or_defer(*this, command_buffer, values, state);
  }

  // BatchNormalizationState's gamma and beta gradients.
  size_t trainable_gradient_bytes() const override {
    if (!updates_.gamma_and_beta && !updates_.mean_and_variance) return 0;
    return 2 * static_cast<size_t>(forward_->number_of_feature_channels()) * sizeof(float);
  }

  void encode_update(CommandBuffer& command_buffer, const std::shared_ptr<State>& generic) override {
    auto state = std::static_pointer_cast<BatchNormalizationState>(generic);
    if (updates_.gamma_and_beta)
      forward_->encode_gamma_and_beta_update(command_buffer, state, updates_.on_command_buffer);
    if (updates_.mean_and_variance)
      forward_->encode_mean_and_variance_update(command_buffer, state, updates_.on_command_buffer);
  }

 private:
  std::shared_ptr<CNNBatchNormalization> forward_;
  std::shared_ptr<CNNBatchNormalizationStatisticsGradient> statistics_gradient_;
  std::shared_ptr<CNNBatchNormalizationGradient> gradient_;
  Updates updates_;
  const GradientSlots slots_;
};

}  // namespace

CNNBatchNormalizationNode::CNNBatchNormalizationNode(std::shared_ptr<ImageNode> source,
                                                     std::shared_ptr<BatchNormalizationDataSource> data_source)
    : ForwardFilterNode({std::move(source)}), data_source_(std::move(data_source)) {
  if (!data_source_) fail<TypeMismatchError>(class_name(), ": expected a batch normalization data source, given None");
}

std::unique_ptr<GraphStep> CNNBatchNormalizationNode::compile(const StepSlots& slots) const {
  const bool state_used = !slots.result_states.empty() && slots.result_states[0] != kNoSlot;
  if (flags == BatchNormalizationFlags::CalculateStatisticsNever && state_used)
    fail<ArgumentError>(class_name(), ": the graph uses its result state (a gradient filter reads it, or it is "
                                      "exported), but flags CalculateStatisticsNever compute no batch statistics "
                                      "for it");
  auto kernel = graph_kernel<CNNBatchNormalization>(slots, data_source_, neuron_of(slots));
  configure_padding(*kernel);
  (*slots.kernels)[this] = kernel;
  const bool statistics = flags == BatchNormalizationFlags::CalculateStatisticsAlways ||
                          (flags == BatchNormalizationFlags::CalculateStatisticsAutomatic && state_used);
  return std::make_unique<BatchNormalizationStep>(
      std::move(kernel), statistics ? graph_kernel<CNNBatchNormalizationStatistics>(slots) : nullptr, slots);
}

std::vector<std::shared_ptr<FilterNode>> CNNBatchNormalizationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  return {std::make_shared<CNNBatchNormalizationGradientNode>(gradient_images.front(), sources().front(),
                                                              result_states().front())};
}

CNNBatchNormalizationGradientNode::CNNBatchNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                                     std::shared_ptr<ImageNode> source_image,
                                                                     std::shared_ptr<StateNode> gradient_state)
    : TrainableGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)) {
  forward_node_of<CNNBatchNormalizationNode>(class_name(), "MPSCNNBatchNormalizationNode", source_states().front());
}

std::unique_ptr<GraphStep> CNNBatchNormalizationGradientNode::compile(const StepSlots& slots) const {
  std::shared_ptr<CNNBatchNormalization> forward = forward_kernel<CNNBatchNormalization>(slots, *this);
  BatchNormalizationDataSource& source = *forward->data_source();
  Updates updates;
  if (training_style == TrainingStyle::Gpu) {
    // The kernel's updates take the data source's command buffer update
    // where it has one, else its host update.
    updates.gamma_and_beta =
        source.supports_update_gamma_and_beta_on_command_buffer() || source.supports_update_gamma_and_beta();
    updates.mean_and_variance =
        source.supports_update_mean_and_variance_on_command_buffer() || source.supports_update_mean_and_variance();
    if (!updates.gamma_and_beta && !updates.mean_and_variance)
      fail<TypeMismatchError>(class_name(), ": training style GPU updates through the data source, which implements "
                                            "none of update_gamma_and_beta_with_command_buffer, "
                                            "update_mean_and_variance_with_command_buffer and their "
                                            "_with_batch_normalization_state forms (training style NONE leaves the "
                                            "values)");
  } else if (training_style == TrainingStyle::Cpu) {
    updates.gamma_and_beta = source.supports_update_gamma_and_beta();
    updates.mean_and_variance = source.supports_update_mean_and_variance();
    updates.on_command_buffer = false;
    if (!updates.gamma_and_beta && !updates.mean_and_variance)
      fail<TypeMismatchError>(class_name(), ": training style CPU calls the data source's host updates, "
                                            "update_gamma_and_beta_with_batch_normalization_state and "
                                            "update_mean_and_variance_with_batch_normalization_state, which it "
                                            "implements neither of");
  }
  return std::make_unique<BatchNormalizationGradientStep>(std::move(forward), updates, slots);
}

}  // namespace mpsx
