#include "mpsx/kernels/dropout.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/capture.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"
#include "mpsx/registry.h"

namespace mpsx {

void DropoutDescriptor::validate(const char* kernel) const {
  if (!(keep_probability > 0.0f && keep_probability <= 1.0f))
    fail<ArgumentError>(kernel, ": keep_probability must be in (0, 1], given ", keep_probability);
  for (auto [value, name] : {std::pair{mask_stride_x, "x"}, {mask_stride_y, "y"}, {mask_stride_z, "z"}})
    if (value != 0 && value != 1)
      fail<ArgumentError>(kernel, ": mask_stride_in_pixels.", name, " must be 0 or 1, given ", value);
}

DropoutGenerator dropout_generator(const DropoutDescriptor& d, uint64_t encode) {
  // P(kept) = threshold / 2^32: keep_probability (exact in double) rounded up
  // to a multiple of 2^-32, so any keep_probability > 0 keeps some elements.
  DropoutGenerator g;
  g.seed = d.seed;
  g.encode = encode;
  g.threshold = static_cast<uint64_t>(std::ceil(static_cast<double>(d.keep_probability) * 4294967296.0));
  return g;
}

// ---------------------------------------------------------------- the state

DropoutGradientState::DropoutGradientState(std::shared_ptr<Device> device, const DropoutDescriptor& descriptor,
                                           int64_t images, int64_t channels, int64_t height, int64_t width)
    : GradientState(std::move(device)),
      descriptor_(descriptor),
      images_(images),
      channels_(descriptor.mask_stride_z ? channels : 1),
      height_(descriptor.mask_stride_y ? height : 1),
      width_(descriptor.mask_stride_x ? width : 1) {
  const char* what = "MPSCNNDropoutGradientState: mask size";
  int64_t bytes = checked_mul(checked_mul(checked_mul(images_, channels_, what), height_, what), width_, what);
  mask_ = make_pooled<Buffer>(device_ptr(), static_cast<size_t>(bytes));
}

void DropoutGradientState::check_bindable(const Image& source, const char* kernel) const {
  GradientState::check_bindable(source, kernel);
  if (images_ != source.number_of_images() ||
      channels_ != (descriptor_.mask_stride_z ? source.feature_channels() : 1) ||
      height_ != (descriptor_.mask_stride_y ? source.height() : 1) ||
      width_ != (descriptor_.mask_stride_x ? source.width() : 1))
    fail<ShapeError>(kernel, ": the state's mask is ", images_, "x", channels_, "x", height_, "x", width_,
                     " (NxCxHxW); the source is ", source.number_of_images(), "x", source.feature_channels(), "x",
                     source.height(), "x", source.width());
}

void DropoutGradientState::synchronize(CommandBuffer& command_buffer) { mask_->synchronize(command_buffer); }

void DropoutGradientState::read_mask(void* destination) const {
  mask_->read(destination, 0, mask_->length(), "the dropout mask");
}

// ---------------------------------------------------------------- kernels

CNNDropout::CNNDropout(std::shared_ptr<Device> device, DropoutDescriptor descriptor)
    : InPlaceUnaryKernel(std::move(device)), descriptor_(descriptor) {
  descriptor_.validate(class_name());
  primitive_ = make_primitive<DropoutPrimitive>(this->device().backend(), descriptor_);
}

std::shared_ptr<State> CNNDropout::new_result_state(const Image& source) {
  return make_pooled<DropoutGradientState>(device_ptr(), descriptor_, source.number_of_images(),
                                           source.feature_channels(), source.height(), source.width());
}

void CNNDropout::check_state(const State& state) const {
  auto* s = dynamic_cast<const DropoutGradientState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an MPSCNNDropoutGradientState, given an ", state.class_name());
  if (!(s->descriptor() == descriptor_))
    fail<ArgumentError>(class_name(), ": the MPSCNNDropoutGradientState was made by another MPSCNNDropout (keep ",
                        s->descriptor().keep_probability, ", seed ", s->descriptor().seed, "); this one has keep ",
                        descriptor_.keep_probability, ", seed ", descriptor_.seed);
}

void CNNDropout::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                        const std::shared_ptr<Image>& destination, const Geometry& g,
                        const std::shared_ptr<State>& given) {
  check_reads_inside(*source, g);
  std::shared_ptr<DropoutGradientState> state = std::static_pointer_cast<DropoutGradientState>(given);
  if (!state) state = std::static_pointer_cast<DropoutGradientState>(new_result_state(*source));
  DropoutOrigin origin{g.source_image, g.source_channel, g.source_y, g.source_x};
  check_not_capturing("dropout masks, new at each encode");
  DropoutGenerator generator = dropout_generator(descriptor_, encodes_++);
  command_buffer.record([primitive = primitive_, source, destination, g, origin, generator,
                         state](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    primitive->forward(context, source_region(*source, g, channels), destination_region(*destination, g, channels),
                       origin, generator, *state);
  });
  state->mask()->will_write(command_buffer);
}

CNNDropoutGradient::CNNDropoutGradient(std::shared_ptr<Device> device, DropoutDescriptor descriptor)
    : InPlaceGradientKernel(std::move(device)), descriptor_(descriptor) {
  descriptor_.validate(class_name());
  primitive_ = make_primitive<DropoutPrimitive>(this->device().backend(), descriptor_);
}

const GradientState& CNNDropoutGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const DropoutGradientState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an MPSCNNDropoutGradientState, given an ", state.class_name());
  const DropoutDescriptor& d = s->descriptor();
  if (d.keep_probability != descriptor_.keep_probability || d.mask_stride_x != descriptor_.mask_stride_x ||
      d.mask_stride_y != descriptor_.mask_stride_y || d.mask_stride_z != descriptor_.mask_stride_z)
    fail<ArgumentError>(class_name(), ": the state's mask was made with keep_probability ", d.keep_probability,
                        " and mask_stride_in_pixels (", d.mask_stride_x, ", ", d.mask_stride_y, ", ", d.mask_stride_z,
                        "); this kernel has keep_probability ", descriptor_.keep_probability,
                        " and mask_stride_in_pixels (", descriptor_.mask_stride_x, ", ", descriptor_.mask_stride_y,
                        ", ", descriptor_.mask_stride_z, ")");
  return *s;
}

void CNNDropoutGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                const std::shared_ptr<Image>& destination_gradient) {
  auto dropout_state = std::static_pointer_cast<DropoutGradientState>(state);
  const Geometry& g = dropout_state->geometry;
  record_zeros_outside(command_buffer, destination_gradient, g);
  DropoutOrigin origin{g.source_image, g.source_channel, g.source_y, g.source_x};
  command_buffer.record([primitive = primitive_, source_gradient, source_image, destination_gradient, g, origin,
                         dropout_state](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        source_region(*source_image, g, channels), source_region(*destination_gradient, g, channels),
                        origin, *dropout_state);
  });
  dropout_state->mask()->will_read(command_buffer);
}

std::vector<std::shared_ptr<GradientKernel>> CNNDropout::make_gradient_kernels() const {
  return {std::make_shared<CNNDropoutGradient>(device_ptr(), descriptor_)};
}

}  // namespace mpsx
