#include "mpsx/kernels/loss.h"

#include <string>
#include <string_view>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

std::string nchw(const ImageDescriptor& d) {
  return detail::concat(d.number_of_images, "x", d.feature_channels, "x", d.height, "x", d.width, " (NxCxHxW)");
}

bool same_size(const ImageDescriptor& a, const ImageDescriptor& b) {
  return a.number_of_images == b.number_of_images && a.feature_channels == b.feature_channels &&
         a.height == b.height && a.width == b.width;
}

void check_floating(const Image& image, const char* kernel, const char* role) {
  if (image.data_type() != DataType::Float32 && image.data_type() != DataType::Float16)
    fail<TypeMismatchError>(kernel, ": the ", role, " must be float32 or float16, given ", name_of(image.data_type()));
}

}  // namespace

void LossDescriptor::validate() const {
  if (loss_type >= LossType::Count)
    fail<ArgumentError>("unknown loss type ", static_cast<uint32_t>(loss_type), "; expected 0 to ",
                        static_cast<uint32_t>(LossType::Count) - 1);
  if (static_cast<int32_t>(reduction_type) < 0 || reduction_type >= ReductionType::Count)
    fail<ArgumentError>("unknown reduction type ", static_cast<int32_t>(reduction_type), "; expected 0 to ",
                        static_cast<int32_t>(ReductionType::Count) - 1);
  if (number_of_classes == 0) fail<ArgumentError>("number_of_classes must be at least 1; given 0");
  for (auto [value, name] : {std::pair{weight, "weight"}, {label_smoothing, "label_smoothing"}, {epsilon, "epsilon"},
                             {delta, "delta"}})
    checked_parameter(value, "MPSCNNLossDescriptor", name);
}

CNNLossLabels::CNNLossLabels(std::shared_ptr<Device> device, std::shared_ptr<Image> labels,
                             std::shared_ptr<Image> weights)
    : State(std::move(device)), labels_(std::move(labels)), weights_(std::move(weights)) {
  if (!labels_) fail<TypeMismatchError>("MPSCNNLossLabels: expected a labels image, given None");
  for (const Image* image : {labels_.get(), weights_.get()}) {
    if (!image) continue;
    const char* role = image == labels_.get() ? "labels image" : "weights image";
    if (&image->device() != &this->device())
      fail<DeviceMismatchError>("MPSCNNLossLabels: the ", role, " is on device ", image->device().name(),
                                ", the labels on device ", this->device().name());
    check_floating(*image, "MPSCNNLossLabels", role);
  }
  if (weights_ && !same_size(weights_->descriptor(), labels_->descriptor()))
    fail<ShapeError>("MPSCNNLossLabels: expected weights of the labels' size ", nchw(labels_->descriptor()),
                     ", given ", nchw(weights_->descriptor()));
  // MPS's default loss image size is {1, 1, 1}.
  ImageDescriptor scalar;
  scalar.number_of_images = labels_->number_of_images();
  loss_ = std::make_shared<Image>(device_ptr(), scalar);
  loss_->fill_zero();
}

const std::shared_ptr<Image>& CNNLossLabels::loss_image_for(const ImageDescriptor& descriptor) {
  if (loss_->descriptor() != descriptor) loss_ = make_pooled<Image>(device_ptr(), descriptor);
  return loss_;
}

void CNNLossLabels::synchronize(CommandBuffer& command_buffer) {
  loss_->synchronize(command_buffer);
  labels_->synchronize(command_buffer);
  if (weights_) weights_->synchronize(command_buffer);
}

CNNLoss::CNNLoss(std::shared_ptr<Device> device, LossDescriptor descriptor)
    : Kernel(std::move(device)), descriptor_(descriptor) {
  descriptor_.validate();
  primitive_ = make_primitive<LossPrimitive>(this->device().backend(), descriptor_);
}

void CNNLoss::check_source(const Image& source) const { check_floating(source, class_name(), "source image"); }

ImageDescriptor CNNLoss::destination_image_descriptor(const Image& source) {
  check_properties();
  check_source(source);
  Restore<Offset> kept(offset);
  return apply_padding(source, Window{}, source.feature_channels());
}

std::shared_ptr<Image> CNNLoss::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                       const std::shared_ptr<CNNLossLabels>& labels,
                                       const std::shared_ptr<Image>& destination) {
  check_command_buffer(command_buffer);
  if (!source) fail<TypeMismatchError>(class_name(), ": expected a source image, given None");
  if (!labels) fail<TypeMismatchError>(class_name(), ": expected an MPSCNNLossLabels, given None");
  check_device(*source, "source image");
  check_device(*labels, "labels");
  check_properties();
  check_source(*source);
  const ImageDescriptor& s = source->descriptor();
  if (!same_size(labels->labels_image()->descriptor(), s))
    fail<ShapeError>(class_name(), ": expected labels of the source image's size ", nchw(s), ", given ",
                     nchw(labels->labels_image()->descriptor()));

  std::shared_ptr<Image> result = destination;
  if (result) {
    check_device(*result, "destination image");
    check_floating(*result, class_name(), "destination image");
  } else {
    result = new_destination(command_buffer, apply_padding(*source, Window{}, s.feature_channels));
  }
  Geometry g = resolve(*source, *result, Window{}, s.feature_channels, s.feature_channels, offset);
  if (g.source_x != 0 || g.source_y != 0 || g.width != s.width || g.height != s.height || g.source_image != 0)
    fail<ShapeError>(class_name(), ": the loss covers whole source images, but offset (", offset.x, ", ", offset.y,
                     ", ", offset.z, ") and clip_rect read a ", g.width, "x", g.height, " region at (", g.source_x,
                     ", ", g.source_y, ") of a ", s.width, "x", s.height, " source from image ", g.source_image);

  ImageDescriptor loss_size;
  loss_size.number_of_images = s.number_of_images;
  if (descriptor_.reduction_type == ReductionType::None) {
    loss_size.width = s.width;
    loss_size.height = s.height;
    loss_size.feature_channels = s.feature_channels;
  }
  std::shared_ptr<Image> loss = labels->loss_image_for(loss_size);
  check_aliasing(*result, "destination image", result->whole_block(),
                 {ReadImage{source.get(), "source image"}, ReadImage{labels->labels_image().get(), "labels image"},
                  ReadImage{labels->weights_image().get(), "weights image"}, ReadImage{loss.get(), "loss image"}});
  command_buffer.record([primitive = primitive_, source, targets = labels->labels_image(),
                         weights = labels->weights_image(), result, loss, g](ExecutionContext& context) {
    const ImageDescriptor& d = source->descriptor();
    primitive->loss_and_gradient(context, source->whole(), targets->whole(),
                                 weights ? weights->whole() : ImageRegion{},
                                 result->region(g.destination_image, g.destination_channel, g.y, g.x,
                                                d.number_of_images, d.feature_channels, d.height, d.width),
                                 loss->whole());
  });
  source->buffer()->will_read(command_buffer);
  labels->labels_image()->buffer()->will_read(command_buffer);
  if (labels->weights_image()) labels->weights_image()->buffer()->will_read(command_buffer);
  result->buffer()->will_write(command_buffer);
  loss->buffer()->will_write(command_buffer);
  return result;
}

// ---------------------------------------------------------------- separated losses

SeparatedLoss::SeparatedLoss(std::shared_ptr<Device> device, LossDescriptor descriptor)
    : Kernel(std::move(device)), weight(descriptor.weight), label_smoothing(descriptor.label_smoothing),
      epsilon(descriptor.epsilon), delta(descriptor.delta), descriptor_(descriptor) {
  descriptor_.validate();
  primitive_ = make_primitive<LossPrimitive>(this->device().backend(), descriptor_);
}

LossDescriptor SeparatedLoss::loss_descriptor() const {
  LossDescriptor d = descriptor_;
  d.weight = weight;
  d.label_smoothing = label_smoothing;
  d.epsilon = epsilon;
  d.delta = delta;
  return d;
}

void SeparatedLoss::check_properties() const {
  Kernel::check_properties();
  if (!(offset == Offset{}) || !(clip_rect == kRectNoClip) || destination_feature_channel_offset != 0 ||
      source_feature_channel_offset != 0)
    fail<ArgumentError>(class_name(), ": offset, clip_rect and the feature channel offsets must keep their defaults "
                                      "(the loss covers whole images); given offset (", offset.x, ", ", offset.y, ", ",
                        offset.z, "), clip_rect origin (", clip_rect.x, ", ", clip_rect.y, "), source feature channel "
                        "offset ", source_feature_channel_offset, ", destination feature channel offset ",
                        destination_feature_channel_offset);
}

void SeparatedLoss::check_inputs(const std::shared_ptr<Image>& source, const std::shared_ptr<Image>& labels,
                                 const std::shared_ptr<Image>& weights) const {
  if (!source) fail<TypeMismatchError>(class_name(), ": expected source images, given None");
  if (!labels) fail<TypeMismatchError>(class_name(), ": expected labels images, given None");
  check_device(*source, "source image");
  check_device(*labels, "labels image");
  check_floating(*source, class_name(), "source image");
  check_floating(*labels, class_name(), "labels image");
  const ImageDescriptor& s = source->descriptor();
  if (!same_size(labels->descriptor(), s))
    fail<ShapeError>(class_name(), ": expected labels of the source images' size ", nchw(s), ", given ",
                     nchw(labels->descriptor()));
  if (weights) {
    check_device(*weights, "weights image");
    check_floating(*weights, class_name(), "weights image");
    if (!same_size(weights->descriptor(), s))
      fail<ShapeError>(class_name(), ": expected weights of the source images' size ", nchw(s), ", given ",
                       nchw(weights->descriptor()));
  }
}

ImageDescriptor SeparatedLoss::loss_size(const Image& source) const {
  ImageDescriptor d;
  d.channel_format = source.data_type();
  d.number_of_images = source.number_of_images();
  if (descriptor_.reduction_type == ReductionType::None) {
    d.width = source.width();
    d.height = source.height();
    d.feature_channels = source.feature_channels();
  }
  return d;
}

ImageDescriptor NNForwardLoss::destination_image_descriptor(const Image& source) const {
  check_properties();
  check_floating(source, class_name(), "source image");
  return loss_size(source);
}

std::shared_ptr<LossGradientState> NNForwardLoss::result_state(const Image& source) const {
  check_properties();
  check_floating(source, class_name(), "source image");
  auto state = std::make_shared<LossGradientState>(device_ptr());
  state->forward_class = class_name();
  state->source_descriptor = source.descriptor();
  state->destination_descriptor = loss_size(source);
  return state;
}

NNForwardLoss::Encoded NNForwardLoss::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                             const std::shared_ptr<Image>& labels,
                                             const std::shared_ptr<Image>& weights,
                                             const std::shared_ptr<Image>& destination,
                                             const std::shared_ptr<State>& state, bool want_state) {
  check_command_buffer(command_buffer);
  check_properties();
  check_inputs(source, labels, weights);
  const ImageDescriptor expected = loss_size(*source);
  std::shared_ptr<Image> result = destination;
  if (result) {
    check_device(*result, "destination image");
    check_floating(*result, class_name(), "destination image");
    if (!same_size(result->descriptor(), expected))
      fail<ShapeError>(class_name(), ": expected a destination of the loss image's size ", nchw(expected),
                       ", given ", nchw(result->descriptor()));
  }
  std::shared_ptr<LossGradientState> filled;
  if (state) {
    filled = std::dynamic_pointer_cast<LossGradientState>(state);
    if (!filled || !filled->forward_class || std::string_view(filled->forward_class) != class_name())
      fail<TypeMismatchError>(class_name(), ": expected a result state of an MPSNNForwardLoss, given an ",
                              state->class_name());
    check_device(*filled, "destination state");
    filled->check_usable(command_buffer, class_name());
    if (!same_size(filled->source_descriptor, source->descriptor()))
      fail<ShapeError>(class_name(), ": the destination state was made for source images of ",
                       nchw(filled->source_descriptor), ", given ", nchw(source->descriptor()));
    filled->check_bindable(*source, class_name());
  } else if (want_state) {
    filled = result_state(*source);
  }
  if (!result) result = new_destination(command_buffer, expected);
  check_aliasing(*result, "destination image", result->whole_block(),
                 {ReadImage{source.get(), "source image"}, ReadImage{labels.get(), "labels image"},
                  ReadImage{weights.get(), "weights image"}});

  const LossDescriptor d = loss_descriptor();
  if (filled) {
    filled->bind_source(*source);
    filled->weight = d.weight;
    filled->label_smoothing = d.label_smoothing;
    filled->epsilon = d.epsilon;
    filled->delta = d.delta;
    filled->encoded = true;
  }
  command_buffer.record([primitive = primitive_, d, source, labels, weights, result](ExecutionContext& context) {
    primitive->forward_loss(context, d, source->whole(), labels->whole(), weights ? weights->whole() : ImageRegion{},
                            result->whole());
  });
  for (const auto* read : {&source, &labels, &weights})
    if (*read) (*read)->buffer()->will_read(command_buffer);
  result->buffer()->will_write(command_buffer);
  return {result, filled};
}

ImageDescriptor NNLossGradient::destination_image_descriptor(const Image& source_gradient, const Image& source) const {
  check_properties();
  check_floating(source_gradient, class_name(), "source gradient");
  check_floating(source, class_name(), "source image");
  ImageDescriptor d = source.descriptor();
  d.channel_format = source_gradient.data_type();
  return d;
}

std::shared_ptr<Image> NNLossGradient::encode(CommandBuffer& command_buffer,
                                              const std::shared_ptr<Image>& source_gradient,
                                              const std::shared_ptr<Image>& source,
                                              const std::shared_ptr<Image>& labels,
                                              const std::shared_ptr<Image>& weights,
                                              const std::shared_ptr<State>& state,
                                              const std::shared_ptr<Image>& destination) {
  check_command_buffer(command_buffer);
  check_properties();
  if (!source_gradient) fail<TypeMismatchError>(class_name(), ": expected source gradients, given None");
  check_inputs(source, labels, weights);
  check_device(*source_gradient, "source gradient");
  check_floating(*source_gradient, class_name(), "source gradient");
  const ImageDescriptor expected_gradient = loss_size(*source);
  if (!same_size(source_gradient->descriptor(), expected_gradient))
    fail<ShapeError>(class_name(), ": expected source gradients of the loss image's size ", nchw(expected_gradient),
                     descriptor_.reduction_type == ReductionType::None ? " (reduction NONE: one per loss value)"
                                                                       : " (a reduced loss: one value per image)",
                     ", given ", nchw(source_gradient->descriptor()));
  LossDescriptor d = loss_descriptor();
  if (state) {
    auto forward = std::dynamic_pointer_cast<LossGradientState>(state);
    if (!forward || !forward->forward_class || std::string_view(forward->forward_class) != "MPSNNForwardLoss")
      fail<TypeMismatchError>(class_name(), ": expected the result state of an MPSNNForwardLoss, given an ",
                              state->class_name());
    check_device(*forward, "source state");
    forward->check_usable(command_buffer, class_name());
    if (!forward->encoded)
      fail<StateError>(class_name(), ": the source state was not filled by an MPSNNForwardLoss encode");
    if (!same_size(forward->source_descriptor, source->descriptor()))
      fail<ShapeError>(class_name(), ": the source state is of an MPSNNForwardLoss over source images of ",
                       nchw(forward->source_descriptor), ", given source images of ", nchw(source->descriptor()));
    forward->check_source(*source, class_name());
    d.weight = forward->weight;
    d.label_smoothing = forward->label_smoothing;
    d.epsilon = forward->epsilon;
    d.delta = forward->delta;
  }
  const ImageDescriptor expected = destination_image_descriptor(*source_gradient, *source);
  std::shared_ptr<Image> result = destination;
  if (result) {
    check_device(*result, "destination gradient");
    check_floating(*result, class_name(), "destination gradient");
    if (!same_size(result->descriptor(), expected))
      fail<ShapeError>(class_name(), ": expected a destination gradient of the source images' size ", nchw(expected),
                       ", given ", nchw(result->descriptor()));
  } else {
    result = new_destination(command_buffer, expected);
  }
  check_aliasing(*result, "destination gradient", result->whole_block(),
                 {ReadImage{source_gradient.get(), "source gradient"}, ReadImage{source.get(), "source image"},
                  ReadImage{labels.get(), "labels image"}, ReadImage{weights.get(), "weights image"}});
  command_buffer.record([primitive = primitive_, d, source_gradient, source, labels, weights, result,
                         labels_gradient = compute_label_gradients](ExecutionContext& context) {
    primitive->loss_gradient(context, d, source->whole(), labels->whole(), weights ? weights->whole() : ImageRegion{},
                             source_gradient->whole(), result->whole(), labels_gradient);
  });
  if (state) state->was_read();
  for (const auto* read : {&source_gradient, &source, &labels, &weights})
    if (*read) (*read)->buffer()->will_read(command_buffer);
  result->buffer()->will_write(command_buffer);
  return result;
}

}  // namespace mpsx
