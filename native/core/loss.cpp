#include "mpsx/kernels/loss.h"

#include <limits>
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

// The labels or weights of `images` images for `source`: its width and
// height, and at least its feature channels, of which the loss reads the
// first C (MPS's images hold channels in slices of 4, so labels padded to a
// multiple of 4 are common).
void check_loss_data(const char* kernel, const char* role, const Image& data, const ImageDescriptor& source,
                     int64_t images) {
  const ImageDescriptor& d = data.descriptor();
  if (d.number_of_images != images || d.width != source.width || d.height != source.height ||
      d.feature_channels < source.feature_channels)
    fail<ShapeError>(kernel, ": expected ", role, " of ", images, "x", source.feature_channels, "x", source.height,
                     "x", source.width, " (NxCxHxW; more feature channels are allowed, of which the loss reads the "
                     "first ", source.feature_channels, "), given ", nchw(d));
}

// The first C feature channels of `data`, for a source of C.
ImageRegion loss_region(const Image& data, const ImageDescriptor& source) {
  return data.region(0, 0, 0, 0, data.number_of_images(), source.feature_channels, source.height, source.width);
}

ImageRegion loss_region(const std::shared_ptr<Image>& data, const ImageDescriptor& source) {
  return data ? loss_region(*data, source) : ImageRegion{};
}

}  // namespace

// Field by field: the struct has padding.
static void add_to_key(CommandKey& key, const LossDescriptor& d) {
  key.add_value(d.loss_type);
  key.add_value(d.reduction_type);
  key.add_word(d.reduce_across_batch);
  key.add_value(d.weight);
  key.add_value(d.label_smoothing);
  key.add_word(d.number_of_classes);
  key.add_value(d.epsilon);
  key.add_value(d.delta);
}

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
                             std::shared_ptr<Image> weights, LossImageSize loss_image_size)
    : State(std::move(device)), labels_(std::move(labels)), weights_(std::move(weights)),
      loss_image_size_(loss_image_size) {
  if (!labels_) fail<TypeMismatchError>("MPSCNNLossLabels: expected a labels image, given None");
  for (const Image* image : {labels_.get(), weights_.get()}) {
    if (!image) continue;
    const char* role = image == labels_.get() ? "labels image" : "weights image";
    if (&image->device() != &this->device())
      fail<DeviceMismatchError>("MPSCNNLossLabels: the ", role, " is on device ", image->device().name(),
                                ", the labels on device ", this->device().name());
    check_floating(*image, "MPSCNNLossLabels", role);
  }
  if (weights_ && weights_->number_of_images() != labels_->number_of_images())
    fail<ShapeError>("MPSCNNLossLabels: expected weights of as many images as the labels (",
                     labels_->number_of_images(), "), given ", nchw(weights_->descriptor()));
  const LossImageSize& l = loss_image_size_;
  // MPS's default loss image size is {1, 1, 1}.
  ImageDescriptor loss;
  loss.number_of_images = labels_->number_of_images();
  if (l.given()) {
    for (int64_t v : {l.width, l.height, l.feature_channels})
      if (v < 1 || v > kMaxDimension)
        fail<ArgumentError>("MPSCNNLossLabels: expected a loss image size of 1 to ", kMaxDimension,
                            " per dimension, given ", l.width, "x", l.height, "x", l.feature_channels,
                            " (width x height x feature channels)");
    loss.width = l.width;
    loss.height = l.height;
    loss.feature_channels = l.feature_channels;
  }
  loss_ = std::make_shared<Image>(device_ptr(), loss);
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

std::shared_ptr<State> CNNLossLabels::make_stand_in() const {
  auto like = [&](const std::shared_ptr<Image>& image) {
    return image ? make_pooled<Image>(device_ptr(), image->descriptor()) : nullptr;
  };
  auto stand_in = std::make_shared<CNNLossLabels>(device_ptr(), like(labels_), like(weights_), loss_image_size_);
  stand_in->loss_ = like(loss_);
  return stand_in;
}

bool CNNLossLabels::pair_with_stand_in(State& stand_in, std::vector<ImagePair>& reads,
                                       std::vector<ImagePair>& writes) {
  auto* in = dynamic_cast<CNNLossLabels*>(&stand_in);
  auto same = [](const std::shared_ptr<Image>& a, const std::shared_ptr<Image>& b) {
    return a ? b && a->descriptor() == b->descriptor() : !b;
  };
  if (!in || !same(labels_, in->labels_) || !same(weights_, in->weights_) ||
      !(loss_image_size_ == in->loss_image_size_))
    return false;
  reads.emplace_back(labels_, in->labels_);
  if (weights_) reads.emplace_back(weights_, in->weights_);
  // The size the recorded loss wrote, as a loss encode makes it.
  writes.emplace_back(loss_image_for(in->loss_->descriptor()), in->loss_);
  return true;
}

CNNLossLabelsBatch::CNNLossLabelsBatch(std::shared_ptr<Device> device,
                                       std::vector<std::shared_ptr<CNNLossLabels>> items)
    : State(std::move(device)), items_(std::move(items)) {}

void CNNLossLabelsBatch::synchronize(CommandBuffer& command_buffer) {
  for (const auto& item : items_)
    if (item) item->synchronize(command_buffer);
}

std::shared_ptr<State> CNNLossLabelsBatch::make_stand_in() const {
  std::vector<std::shared_ptr<CNNLossLabels>> items;
  for (const auto& item : items_) {
    if (!item) return nullptr;
    items.push_back(std::static_pointer_cast<CNNLossLabels>(item->make_stand_in()));
  }
  return std::make_shared<CNNLossLabelsBatch>(device_ptr(), std::move(items));
}

bool CNNLossLabelsBatch::pair_with_stand_in(State& stand_in, std::vector<ImagePair>& reads,
                                            std::vector<ImagePair>& writes) {
  auto* in = dynamic_cast<CNNLossLabelsBatch*>(&stand_in);
  if (!in || in->items_.size() != items_.size()) return false;
  const size_t read_count = reads.size(), write_count = writes.size();
  for (size_t i = 0; i < items_.size(); ++i)
    if (!items_[i] || !items_[i]->pair_with_stand_in(*in->items_[i], reads, writes)) {
      reads.resize(read_count);
      writes.resize(write_count);
      return false;
    }
  return true;
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

namespace {

// The loss image of each labels object: one value per image, or the
// source's size for ReductionType::None (number_of_images set per object).
ImageDescriptor loss_image_descriptor(const ImageDescriptor& source, ReductionType reduction) {
  ImageDescriptor loss_size;
  if (reduction == ReductionType::None) {
    loss_size.width = source.width;
    loss_size.height = source.height;
    loss_size.feature_channels = source.feature_channels;
  }
  return loss_size;
}

// Per-image labels are gathered into one batch: those of labels `i` must
// match labels 0's (and their weights likewise) in feature channels and
// data type.
void check_batch_match(const char* kernel, const CNNLossLabels& first_labels, const CNNLossLabels& item, size_t i,
                       bool weighted) {
  for (bool weights : {false, true}) {
    if (weights && !weighted) continue;
    const Image& first = weights ? *first_labels.weights_image() : *first_labels.labels_image();
    const Image& other = weights ? *item.weights_image() : *item.labels_image();
    if (other.feature_channels() != first.feature_channels() || other.data_type() != first.data_type())
      fail<ShapeError>(kernel, ": the ", weights ? "weights" : "labels", " of a batch must match in feature "
                       "channels and data type; those of labels 0 are ", nchw(first.descriptor()), " ",
                       name_of(first.data_type()), ", of labels ", i, " ", nchw(other.descriptor()), " ",
                       name_of(other.data_type()));
  }
}

// A loss image size given to labels `i` must be the one the loss writes.
void check_loss_image_size(const char* kernel, const CNNLossLabels& item, size_t i, const ImageDescriptor& loss_size,
                           ReductionType reduction) {
  const LossImageSize& l = item.loss_image_size();
  const bool per_value = reduction == ReductionType::None;
  if (l.given() && (l.width != loss_size.width || l.height != loss_size.height ||
                    l.feature_channels != loss_size.feature_channels))
    fail<ShapeError>(kernel, ": labels ", i, " were made with a loss image size of ", l.width, "x", l.height, "x",
                     l.feature_channels, " (width x height x feature channels), but ",
                     per_value ? "reduction NONE writes one loss per value: "
                               : "a reduced loss writes one value per image: ",
                     loss_size.width, "x", loss_size.height, "x", loss_size.feature_channels);
}

}  // namespace

bool CNNLoss::check_labels(const ImageDescriptor& s, const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                           const ImageDescriptor& loss_size) const {
  const bool weighted = labels[0] && labels[0]->weights_image();
  int64_t images = 0;
  for (size_t i = 0; i < count; ++i) {
    const CNNLossLabels* item = labels[i].get();
    if (!item)
      fail<TypeMismatchError>(class_name(), ": expected an MPSCNNLossLabels", count > 1 ? " for each image" : "",
                              ", given None", count > 1 ? detail::concat(" at ", i) : std::string());
    check_device(*item, "labels");
    check_loss_data(class_name(), count > 1 ? "per-image labels" : "labels", *item->labels_image(), s,
                    item->number_of_images());
    if (static_cast<bool>(item->weights_image()) != weighted)
      fail<ArgumentError>(class_name(), ": the labels of a batch must all have weights or none; labels 0 ",
                          weighted ? "has" : "has none", ", labels ", i, weighted ? " has none" : " has");
    if (weighted) check_loss_data(class_name(), "weights", *item->weights_image(), s, item->number_of_images());
    if (i > 0) check_batch_match(class_name(), *labels[0], *item, i, weighted);
    check_loss_image_size(class_name(), *item, i, loss_size, descriptor_.reduction_type);
    images += item->number_of_images();
  }
  if (images != s.number_of_images)
    fail<ShapeError>(class_name(), ": expected labels for the ", s.number_of_images, " source images (one "
                     "MPSCNNLossLabels holding them all, or an MPSCNNLossLabelsBatch of one per image), given ",
                     count, " MPSCNNLossLabels holding ", images, " images");
  return weighted;
}

std::shared_ptr<Image> CNNLoss::gradient_destination(CommandBuffer& command_buffer, const Image& source,
                                                     const std::shared_ptr<Image>& destination) {
  if (!destination) return new_destination(command_buffer, apply_padding(source, Window{}, source.feature_channels()));
  check_device(*destination, "destination image");
  check_floating(*destination, class_name(), "destination image");
  return destination;
}

Geometry CNNLoss::whole_source_geometry(const Image& source, const Image& destination) const {
  const ImageDescriptor& s = source.descriptor();
  Geometry g = resolve(source, destination, Window{}, s.feature_channels, s.feature_channels, offset);
  if (g.source_x != 0 || g.source_y != 0 || g.width != s.width || g.height != s.height || g.source_image != 0)
    fail<ShapeError>(class_name(), ": the loss covers whole source images, but offset (", offset.x, ", ", offset.y,
                     ", ", offset.z, ") and clip_rect read a ", g.width, "x", g.height, " region at (", g.source_x,
                     ", ", g.source_y, ") of a ", s.width, "x", s.height, " source from image ", g.source_image);
  return g;
}

void CNNLoss::check_loss_aliasing(const Image& source, const Image& destination,
                                  const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                                  ImageDescriptor loss_size) const {
  check_aliasing(destination, "destination image", destination.whole_block(),
                 {ReadImage{&source, "source image"}});
  for (size_t i = 0; i < count; ++i) {
    loss_size.number_of_images = labels[i]->number_of_images();
    const Image* loss = labels[i]->loss_image_for(loss_size).get();
    check_aliasing(destination, "destination image", destination.whole_block(),
                   {ReadImage{labels[i]->labels_image().get(), "labels image"},
                    ReadImage{labels[i]->weights_image().get(), "weights image"}, ReadImage{loss, "loss image"}});
  }
}

std::shared_ptr<Image> CNNLoss::gather(CommandBuffer& command_buffer, const std::shared_ptr<CNNLossLabels>* labels,
                                       size_t count, bool weights) {
  gathered_.clear();
  for (size_t i = 0; i < count; ++i)
    gathered_.push_back(weights ? labels[i]->weights_image() : labels[i]->labels_image());
  std::shared_ptr<Image> batch = Image::gather(command_buffer, gathered_);
  gathered_.clear();
  return batch;
}

void CNNLoss::record_loss(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                          const std::shared_ptr<Image>& targets, const std::shared_ptr<Image>& weights,
                          const std::shared_ptr<Image>& result, const std::shared_ptr<Image>& loss,
                          const Geometry& g) const {
  command_buffer.record(keyed_by(primitive_, source, targets, weights, result, loss, as_value(g)),
                        [primitive = primitive_, source, targets, weights, result, loss, g](ExecutionContext& context) {
    const ImageDescriptor& d = source->descriptor();
    primitive->loss_and_gradient(context, source->whole(), loss_region(*targets, d), loss_region(weights, d),
                                 result->region(g.destination_image, g.destination_channel, g.y, g.x,
                                                d.number_of_images, d.feature_channels, d.height, d.width),
                                 loss->whole());
  });
  source->will_read(command_buffer);
  targets->will_read(command_buffer);
  if (weights) weights->will_read(command_buffer);
  result->will_write(command_buffer);
  loss->will_write(command_buffer);
}

void CNNLoss::scatter_loss(CommandBuffer& command_buffer, const std::shared_ptr<Image>& loss,
                           const std::shared_ptr<CNNLossLabels>* labels, size_t count) const {
  loss->will_read(command_buffer);
  int64_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    const std::shared_ptr<Image>& output = labels[i]->loss_image();
    output->will_write(command_buffer);
    command_buffer.record(keyed_by(loss, output, at), [loss, output, at](ExecutionContext& context) {
      context.copy_images(Image(*loss, at, output->number_of_images()), *output, 0);
    });
    at += output->number_of_images();
  }
}

std::shared_ptr<Image> CNNLoss::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                       const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                                       const std::shared_ptr<Image>& destination) {
  check_command_buffer(command_buffer);
  if (!source) fail<TypeMismatchError>(class_name(), ": expected a source image, given None");
  if (count == 0)
    fail<ArgumentError>(class_name(), ": expected one MPSCNNLossLabels for the batch or an MPSCNNLossLabelsBatch "
                                      "(one per source image), given an empty list");
  check_device(*source, "source image");
  check_properties();
  check_source(*source);
  check_usable(command_buffer, {source.get(), destination.get()});
  const ImageDescriptor& s = source->descriptor();
  ImageDescriptor loss_size = loss_image_descriptor(s, descriptor_.reduction_type);
  const bool weighted = check_labels(s, labels, count, loss_size);
  std::shared_ptr<Image> result = gradient_destination(command_buffer, *source, destination);
  const Geometry g = whole_source_geometry(*source, *result);
  check_loss_aliasing(*source, *result, labels, count, loss_size);

  // Per-image labels are gathered into one batch (a view where they are
  // consecutive images of one allocation), and the batch's loss scattered
  // back to each object's loss image.
  if (count == 1) {
    record_loss(command_buffer, source, labels[0]->labels_image(), labels[0]->weights_image(), result,
                labels[0]->loss_image(), g);
    return result;
  }
  std::shared_ptr<Image> targets = gather(command_buffer, labels, count, false);
  std::shared_ptr<Image> weights = weighted ? gather(command_buffer, labels, count, true) : nullptr;
  loss_size.number_of_images = s.number_of_images;
  std::shared_ptr<Image> loss = make_pooled<Image>(device_ptr(), loss_size);
  record_loss(command_buffer, source, targets, weights, result, loss, g);
  scatter_loss(command_buffer, loss, labels, count);
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
      source_feature_channel_offset != 0 || source_feature_channel_max_count != std::numeric_limits<int64_t>::max())
    fail<ArgumentError>(class_name(), ": offset, clip_rect and the feature channel offsets must keep their defaults "
                                      "(the loss covers whole images), and so must source_feature_channel_max_count; "
                                      "given offset (", offset.x, ", ", offset.y, ", ",
                        offset.z, "), clip_rect origin (", clip_rect.x, ", ", clip_rect.y, "), source feature channel "
                        "offset ", source_feature_channel_offset, ", destination feature channel offset ",
                        destination_feature_channel_offset, ", source_feature_channel_max_count ",
                        source_feature_channel_max_count);
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
  check_loss_data(class_name(), "labels", *labels, s, s.number_of_images);
  if (weights) {
    check_device(*weights, "weights image");
    check_floating(*weights, class_name(), "weights image");
    check_loss_data(class_name(), "weights", *weights, s, s.number_of_images);
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
  check_usable(command_buffer, {source.get(), labels.get(), weights.get(), destination.get()});
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
  command_buffer.record(keyed_by(primitive_, d, source, labels, weights, result),
                        [primitive = primitive_, d, source, labels, weights, result](ExecutionContext& context) {
    const ImageDescriptor& s = source->descriptor();
    primitive->forward_loss(context, d, source->whole(), loss_region(*labels, s), loss_region(weights, s),
                            result->whole());
  });
  for (const auto* read : {&source, &labels, &weights})
    if (*read) (*read)->will_read(command_buffer);
  result->will_write(command_buffer);
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
  check_usable(command_buffer, {source_gradient.get(), source.get(), labels.get(), weights.get(), destination.get()});
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
  command_buffer.record(keyed_by(primitive_, d, source_gradient, source, labels, weights, result,
                                 compute_label_gradients),
                        [primitive = primitive_, d, source_gradient, source, labels, weights, result,
                         labels_gradient = compute_label_gradients](ExecutionContext& context) {
    const ImageDescriptor& s = source->descriptor();
    primitive->loss_gradient(context, d, source->whole(), loss_region(*labels, s), loss_region(weights, s),
                             source_gradient->whole(), result->whole(), labels_gradient);
  });
  if (state) state->was_read();
  for (const auto* read : {&source_gradient, &source, &labels, &weights})
    if (*read) (*read)->will_read(command_buffer);
  result->will_write(command_buffer);
  return result;
}

}  // namespace mpsx
