#include "mpsx/graph/concatenation.h"

#include <string>

#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"
#include "mpsx/kernels/arithmetic.h"
#include "mpsx/kernels/neuron.h"
#include "mpsx/state.h"

namespace mpsx {

namespace {

constexpr size_t kNoSlot = SIZE_MAX;

int64_t round_up_4(int64_t channels) { return (channels + 3) / 4 * 4; }

std::string shape(const ImageDescriptor& d) {
  return std::to_string(d.number_of_images) + "x" + std::to_string(d.feature_channels) + "x" +
         std::to_string(d.height) + "x" + std::to_string(d.width);
}

// What the gradient filters read of a forward encode: where each source's
// channels went and the result's shape.
class ConcatenationState final : public State {
 public:
  using State::State;
  const char* class_name() const override { return "MPSNNGradientState"; }
  std::vector<int64_t> offsets, channels;
  ImageDescriptor result;
};

class ConcatenationStep final : public GraphStep {
 public:
  explicit ConcatenationStep(const StepSlots& slots)
      : device_(slots.device),
        sources_(slots.sources),
        result_(slots.result),
        state_(slots.result_states.empty() ? kNoSlot : slots.result_states[0]),
        allocator_(slots.allocator) {
    for (size_t i = 0; i < sources_.size(); ++i)
      copies_.push_back(graph_kernel<CNNNeuron>(slots, NeuronDescriptor{}));
  }

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const Image& first = *values.images[sources_[0]];
    ImageDescriptor d = first.descriptor();
    std::vector<int64_t> offsets, channels;
    int64_t total = 0;
    bool padded = false;
    for (size_t i = 0; i < sources_.size(); ++i) {
      const Image& s = *values.images[sources_[i]];
      if (s.width() != d.width || s.height() != d.height || s.number_of_images() != d.number_of_images)
        fail<ShapeError>("MPSNNConcatenationNode: every source must have the size and number of images of the "
                         "first, ", d.number_of_images, " images of ", d.height, "x", d.width, "; source ", i,
                         " is ", shape(s.descriptor()), " (NxCxHxW)");
      offsets.push_back(total);
      channels.push_back(s.feature_channels());
      padded = padded || s.feature_channels() % 4 != 0;
      total += round_up_4(s.feature_channels());
    }
    d.feature_channels = total;
    std::shared_ptr<Image> result = allocator_->image(command_buffer, d, *copies_[0]);
    if (padded)  // the channels that round each source up to 4 are zero
      command_buffer.record([result](ExecutionContext& context) { context.fill_zero_image(*result); });
    for (size_t i = 0; i < sources_.size(); ++i) {
      copies_[i]->destination_feature_channel_offset = offsets[i];
      copies_[i]->encode(command_buffer, values.images[sources_[i]], result, nullptr, false);
    }
    values.images[result_] = result;
    if (state_ != kNoSlot) {
      auto state = std::make_shared<ConcatenationState>(device_);
      state->offsets = std::move(offsets);
      state->channels = std::move(channels);
      state->result = d;
      values.states[state_] = std::move(state);
    }
  }

 private:
  std::shared_ptr<Device> device_;
  std::vector<size_t> sources_;
  size_t result_, state_;
  std::shared_ptr<ImageAllocator> allocator_;
  std::vector<std::shared_ptr<CNNNeuron>> copies_;
};

// The slice: gradient + 0 through the primary source's channel offset and
// count, the zeros one value per image broadcast over the rest.
class ConcatenationGradientStep final : public GraphStep {
 public:
  ConcatenationGradientStep(int64_t index, const StepSlots& slots)
      : device_(slots.device),
        index_(index),
        slots_(slots),
        slice_(graph_kernel<CNNArithmetic>(slots, ArithmeticOperation::Add)) {
    slice_->secondary.stride_x = slice_->secondary.stride_y = 0;
    slice_->secondary_stride_in_feature_channels = 0;
  }

  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const auto state = slots_.state_as<const ConcatenationState>(
        values, "MPSNNConcatenationGradientNode: expected the gradient state of a concatenation");
    const std::shared_ptr<Image>& gradient = values.images[slots_.source_gradient];
    if (gradient->descriptor().width != state->result.width || gradient->height() != state->result.height ||
        gradient->feature_channels() != state->result.feature_channels ||
        gradient->number_of_images() != state->result.number_of_images)
      fail<ShapeError>("MPSNNConcatenationGradientNode: expected a source gradient shaped as the concatenation's "
                       "result, ", shape(state->result), " (NxCxHxW), given ", shape(gradient->descriptor()));
    const Image& source = *values.images[slots_.source];
    const int64_t channels = state->channels.at(index_);
    if (source.feature_channels() != channels)
      fail<ShapeError>("MPSNNConcatenationGradientNode: expected the forward source ", index_, " of ", channels,
                       " feature channels, given ", source.feature_channels());
    if (!zeros_ || zeros_->number_of_images() != gradient->number_of_images()) {
      ImageDescriptor z;
      z.number_of_images = gradient->number_of_images();
      zeros_ = std::make_shared<Image>(device_, z);
      zeros_->fill_zero();
    }
    slice_->primary.feature_channel_offset = state->offsets.at(index_);
    slice_->primary.feature_channel_max_count = channels;
    values.images[slots_.result] = slice_->encode(command_buffer, gradient, zeros_, nullptr, nullptr, false).image;
  }

 private:
  std::shared_ptr<Device> device_;
  int64_t index_;
  const GradientSlots slots_;
  std::shared_ptr<CNNArithmetic> slice_;
  std::shared_ptr<Image> zeros_;
};

}  // namespace

NNConcatenationNode::NNConcatenationNode(std::vector<std::shared_ptr<ImageNode>> sources)
    : ForwardFilterNode(std::move(sources)) {
  if (this->sources().empty())
    fail<ArgumentError>("MPSNNConcatenationNode: expected at least one source image, given none");
}

std::unique_ptr<GraphStep> NNConcatenationNode::compile(const StepSlots& slots) const {
  return std::make_unique<ConcatenationStep>(slots);
}

std::vector<std::shared_ptr<FilterNode>> NNConcatenationNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>& gradient_images) {
  std::vector<std::shared_ptr<FilterNode>> filters;
  for (size_t i = 0; i < sources().size(); ++i)
    filters.push_back(std::make_shared<NNConcatenationGradientNode>(gradient_images.front(), sources()[i],
                                                                    result_states().front(), int64_t(i)));
  return filters;
}

NNConcatenationGradientNode::NNConcatenationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                                         std::shared_ptr<ImageNode> source_image,
                                                         std::shared_ptr<StateNode> gradient_state, int64_t index)
    : GradientFilterNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state)),
      index_(index) {
  const auto& forward_sources =
      forward_node_of<NNConcatenationNode>(class_name(), "MPSNNConcatenationNode", source_states().front()).sources();
  if (index_ < 0) {
    for (size_t i = 0; i < forward_sources.size() && index_ < 0; ++i)
      if (forward_sources[i] == sources()[1]) index_ = int64_t(i);
    if (index_ < 0)
      fail<ArgumentError>(class_name(), ": source_image is not a source of the concatenation that made the state");
  } else if (index_ >= int64_t(forward_sources.size()) || forward_sources[index_] != sources()[1]) {
    fail<ArgumentError>(class_name(), ": source_image is not source ", index_, " of the concatenation");
  }
}

std::unique_ptr<GraphStep> NNConcatenationGradientNode::compile(const StepSlots& slots) const {
  return std::make_unique<ConcatenationGradientStep>(index_, slots);
}

}  // namespace mpsx
