#include "mpsx/kernels/loss.h"

#include <string>
#include <utility>

#include "mpsx/backend.h"
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
  command_buffer.record([primitive = primitive_, source, targets = labels->labels_image(),
                         weights = labels->weights_image(), result, loss, g](ExecutionContext& context) {
    const ImageDescriptor& d = source->descriptor();
    primitive->loss_and_gradient(context, source->whole(), targets->whole(),
                                 weights ? weights->whole() : ImageRegion{},
                                 result->region(g.destination_image, g.destination_channel, g.y, g.x,
                                                d.number_of_images, d.feature_channels, d.height, d.width),
                                 loss->whole());
  });
  result->buffer()->will_write(command_buffer);
  loss->buffer()->will_write(command_buffer);
  return result;
}

}  // namespace mpsx
