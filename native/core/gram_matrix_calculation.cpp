#include "mpsx/kernels/gram_matrix_calculation.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

// ---------------------------------------------------------------- forward

NNGramMatrixCalculation::NNGramMatrixCalculation(std::shared_ptr<Device> device, float alpha)
    : UnaryKernel(std::move(device)), alpha_(checked_parameter(alpha, class_name(), "alpha")) {
  primitive_ = make_primitive<GramMatrixPrimitive>(this->device().backend(), GramMatrixDescriptor{});
}

void NNGramMatrixCalculation::set_alpha(float alpha) { alpha_ = checked_parameter(alpha, class_name(), "alpha"); }

void NNGramMatrixCalculation::check_properties() const {
  UnaryKernel::check_properties();
  if (!(offset == Offset{}) || !(clip_rect == kRectNoClip))
    fail<ArgumentError>(class_name(), ": offset and clip_rect must keep their defaults (MPS: the kernel \"does not ",
                        "support non-default offset or cliprect properties\"); given offset (", offset.x, ", ",
                        offset.y, ", ", offset.z, ") and clip_rect (", clip_rect.x, ", ", clip_rect.y, ", ",
                        clip_rect.z, ", ", clip_rect.width, ", ", clip_rect.height, ", ", clip_rect.depth, ")");
}

std::shared_ptr<State> NNGramMatrixCalculation::new_result_state(const Image&) {
  auto state = std::make_shared<GramMatrixGradientState>(device_ptr());
  state->alpha = alpha_;
  return state;
}

void NNGramMatrixCalculation::check_state(const State& state) const {
  if (!dynamic_cast<const GramMatrixGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected a state made by an MPSNNGramMatrixCalculation's result_state, ",
                            "given an ", state.class_name());
}

ImageDescriptor NNGramMatrixCalculation::destination_descriptor(const Image& source, const State*) {
  const int64_t channels = source_channels(source);
  ImageDescriptor d;
  d.width = channels;
  d.height = 1;
  d.feature_channels = channels;
  d = with_source_images(source, d);
  checked_count({d.number_of_images, channels, channels}, class_name(), ": the destination's elements");
  return d;
}

void NNGramMatrixCalculation::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                     const std::shared_ptr<Image>& destination, const Geometry& g,
                                     const std::shared_ptr<State>& state) {
  const int64_t channels = g.source_channels;
  if (destination->width() < channels)
    fail<ShapeError>(class_name(), ": the destination must be at least ", channels, " pixels wide for the ",
                     channels, "x", channels, " matrix of ", channels, " source channels, given ",
                     destination->width());
  const float alpha = alpha_;
  if (auto* s = dynamic_cast<GramMatrixGradientState*>(state.get())) s->alpha = alpha;
  command_buffer.record([primitive = primitive_, source, destination, g, channels, alpha](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, channels),
                       destination->region(g.destination_image, g.destination_channel, 0, 0, g.images, channels, 1,
                                           channels),
                       alpha);
  });
}

std::vector<std::shared_ptr<GradientKernel>> NNGramMatrixCalculation::make_gradient_kernels() const {
  return {std::make_shared<NNGramMatrixCalculationGradient>(device_ptr(), alpha_)};
}

// ---------------------------------------------------------------- gradient

NNGramMatrixCalculationGradient::NNGramMatrixCalculationGradient(std::shared_ptr<Device> device, float alpha)
    : GradientKernel(std::move(device)), alpha_(checked_parameter(alpha, class_name(), "alpha")) {
  primitive_ = make_primitive<GramMatrixPrimitive>(this->device().backend(), GramMatrixDescriptor{});
}

void NNGramMatrixCalculationGradient::set_alpha(float alpha) {
  alpha_ = checked_parameter(alpha, class_name(), "alpha");
}

const GradientState& NNGramMatrixCalculationGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const GramMatrixGradientState*>(&state);
  if (!s)
    fail<TypeMismatchError>(class_name(), ": expected the state of an MPSNNGramMatrixCalculation forward encode, ",
                            "given an ", state.class_name());
  return *s;
}

void NNGramMatrixCalculationGradient::record(CommandBuffer& command_buffer,
                                             const std::shared_ptr<Image>& source_gradient,
                                             const std::shared_ptr<Image>& source_image,
                                             const std::shared_ptr<State>& state,
                                             const std::shared_ptr<Image>& destination_gradient) {
  const auto& forward = static_cast<const GramMatrixGradientState&>(*state);
  const Geometry g = forward.geometry;
  const int64_t channels = g.source_channels;
  const int64_t height = source_image->height(), width = source_image->width();
  alpha_ = forward.alpha;
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  command_buffer.record([primitive = primitive_, source_gradient, source_image, destination_gradient, g, channels,
                         height, width, alpha = alpha_](ExecutionContext& context) {
    primitive->gradient(context,
                        source_gradient->region(g.destination_image, g.destination_channel, 0, 0, g.images, channels,
                                                1, channels),
                        whole_source_region(*source_image, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images, channels,
                                                     height, width),
                        alpha);
  });
}

}  // namespace mpsx
