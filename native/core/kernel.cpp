#include "mpsx/kernel.h"

#include <algorithm>
#include <string>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"

namespace mpsx {
namespace {

// One dimension of the MPS padding policy (MPSNeuralNetworkTypes.h, MPSNNPadding):
// returns the destination size and sets *offset to the window centre of the
// first destination pixel.
int64_t pad_dimension(int64_t source, int64_t stride, int64_t extent, uint32_t method, bool remainder_first,
                      int64_t* offset) {
  int64_t style = 0;  // valid -1, same 0, full 1
  switch (method & padding::kSizeMask & ~padding::kCustom) {
    case padding::kSizeValidOnly: style = -1; break;
    case padding::kSizeFull: style = 1; break;
    default: style = 0; break;
  }
  int64_t readable = source + style * (extent - 1);
  int64_t destination = (readable + stride - 1) / stride;
  if (destination <= 0) {
    *offset = 0;
    return destination;
  }
  int64_t read = (destination - 1) * stride + extent;
  int64_t extra = read - source;
  int64_t before = 0;
  switch (method & padding::kAlignMask) {
    case padding::kAlignTopLeft: before = extra; break;
    case padding::kAlignBottomRight: before = 0; break;
    default: before = (extra + (remainder_first ? 1 : 0)) / 2; break;
  }
  *offset = extent / 2 - before;
  return destination;
}

// Where a block lies, for messages: images counted in the allocation of
// `image` when it is a view of one.
std::string text_of(const Image& image, const ImageBlock& b) {
  auto range = [](const char* what, int64_t first, int64_t count) {
    return std::string(what) + " " + std::to_string(first) + "-" + std::to_string(first + count - 1);
  };
  const int64_t first = std::max<int64_t>(image.first_in_allocation(), 0);
  return range("images", first + b.image, b.n) + ", " + range("channels", b.channel, b.c) + ", " +
         range("rows", b.y, b.h) + ", " + range("columns", b.x, b.w);
}

// How two overlapping blocks overlap, for messages.
std::string overlap_of(const Image& destination, const ImageBlock& written, const Image& image,
                       const ImageBlock& read) {
  if (same_elements(destination.whole(), image.whole())) return "the same image";
  if (destination.buffer() == image.buffer() && destination.first_in_allocation() >= 0 &&
      image.first_in_allocation() >= 0)
    return "one allocation: " + text_of(destination, written) + " written, " + text_of(image, read) + " read";
  return "their memory overlaps";
}

}  // namespace

void Window::check(const char* kernel) const {
  check_size(kernel_width, kernel, ": kernel_width");
  check_size(kernel_height, kernel, ": kernel_height");
  check_size(stride_x, kernel, ": stride_in_pixels_x");
  check_size(stride_y, kernel, ": stride_in_pixels_y");
  check_size(dilation_x, kernel, ": dilation_rate_x");
  check_size(dilation_y, kernel, ": dilation_rate_y");
  // Below 2^60 with the sizes checked.
  if (extent_x() > kMaxDimension || extent_y() > kMaxDimension)
    fail<ShapeError>(kernel, ": the window extent (kernel - 1) * dilation_rate + 1 must be at most ", kMaxDimension,
                     ", given ", extent_x(), "x", extent_y(), " (kernel ", kernel_width, "x", kernel_height,
                     ", dilation ", dilation_x, "x", dilation_y, ")");
}

Kernel::Kernel(std::shared_ptr<Device> device) : device_(std::move(device)) {
  if (!device_) fail<TypeMismatchError>("a kernel needs a device, given None");
}

Kernel::~Kernel() = default;

void Kernel::check_command_buffer(const CommandBuffer& command_buffer) const {
  command_buffer.check_encodable();
  if (&command_buffer.device() != device_.get())
    fail<DeviceMismatchError>(class_name(), ": the command buffer is on device ", command_buffer.device().name(),
                              ", the kernel on device ", device_->name());
}

void Kernel::check_device(const Image& image, const char* role) const {
  if (&image.device() != device_.get())
    fail<DeviceMismatchError>(class_name(), ": the ", role, " is on device ", image.device().name(),
                              ", the kernel on device ", device_->name());
}

void Kernel::check_usable(const CommandBuffer& command_buffer, std::initializer_list<const Image*> images) const {
  for (const Image* image : images)
    if (image) image->check_usable(command_buffer, class_name());
}

void Kernel::check_device(const State& state, const char* role) const {
  if (&state.device() != device_.get())
    fail<DeviceMismatchError>(class_name(), ": the ", role, " is on device ", state.device().name(),
                              ", the kernel on device ", device_->name());
}

ImageDescriptor Kernel::apply_padding(const Image& source, const Window& window, int64_t destination_channels) {
  return apply_padding(source, source.width(), source.height(), window, destination_channels);
}

ImageDescriptor Kernel::apply_padding(const Image& source, int64_t width, int64_t height, const Window& window,
                                      int64_t destination_channels) {
  uint32_t remainder = padding_method & padding::kAddRemainderToMask;
  bool remainder_left = remainder == padding::kAddRemainderToTopLeft || remainder == padding::kAddRemainderToBottomLeft;
  bool remainder_top = remainder == padding::kAddRemainderToTopLeft || remainder == padding::kAddRemainderToTopRight;
  ImageDescriptor d;
  d.width = pad_dimension(width, window.stride_x, window.extent_x(), padding_method, remainder_left, &offset.x);
  d.height = pad_dimension(height, window.stride_y, window.extent_y(), padding_method, remainder_top, &offset.y);
  if (d.width <= 0 || d.height <= 0)
    fail<ShapeError>(class_name(), ": a ", width, "x", height, " source image is smaller than the ",
                     window.extent_x(), "x", window.extent_y(), " window; the padding policy leaves no destination");
  if (d.width > kMaxDimension || d.height > kMaxDimension)
    fail<ShapeError>(class_name(), ": the padding policy makes a ", d.width, "x", d.height, " destination of a ", width,
                     "x", height, " source; image sizes must be at most ", kMaxDimension);
  d.feature_channels = destination_channels;
  return with_source_images(source, d);
}

ImageDescriptor Kernel::custom_padding(const std::vector<const Image*>& source_images,
                                      const std::vector<const State*>& source_states,
                                      const ImageDescriptor& suggested) {
  if (!runs_custom_padding(padding_method, padding_policy.get())) return suggested;
  // Held: the method may replace the kernel's policy.
  std::shared_ptr<const PaddingPolicy> policy = padding_policy;
  ImageDescriptor d = policy->destination_image_descriptor(source_images, source_states, *this, suggested);
  try {
    d.validate();
    check_properties();
  } catch (const Error& e) {
    fail<ArgumentError>(class_name(), ": the padding policy ", policy->label(), " (its custom method) ", e.what());
  }
  if (d.channel_format != DataType::Float32 && d.channel_format != DataType::Float16)
    fail<TypeMismatchError>(class_name(), ": the padding policy ", policy->label(),
                            " gave a destination of ", name_of(d.channel_format), "; it must be float32 or float16");
  return d;
}

ImageDescriptor Kernel::with_source_images(const Image& source, ImageDescriptor d) const {
  d.number_of_images = source.number_of_images() - offset.z;
  if (d.number_of_images <= 0)
    fail<ShapeError>(class_name(), ": offset.z ", offset.z, " is past the ", source.number_of_images(),
                     " source images");
  DataType t = source.data_type();
  d.channel_format = (t == DataType::Float16 || t == DataType::Float32) ? t : DataType::Float32;
  return d;
}

const std::shared_ptr<DefaultImageAllocator>& DefaultImageAllocator::for_images() {
  static const auto allocator = std::make_shared<DefaultImageAllocator>(false);
  return allocator;
}

const std::shared_ptr<DefaultImageAllocator>& DefaultImageAllocator::for_temporary_images() {
  static const auto allocator = std::make_shared<DefaultImageAllocator>(true);
  return allocator;
}

std::shared_ptr<Image> DefaultImageAllocator::make(CommandBuffer& command_buffer,
                                                   const ImageDescriptor& descriptor) const {
  if (temporary_) return Image::temporary(command_buffer, descriptor);
  return make_pooled<Image>(command_buffer.device_ptr(), descriptor);
}

std::shared_ptr<Image> Kernel::new_destination(CommandBuffer& command_buffer, const ImageDescriptor& descriptor) const {
  if (!destination_image_allocator) return make_pooled<Image>(device_ptr(), descriptor);
  std::shared_ptr<Image> image = destination_image_allocator->image(command_buffer, descriptor, *this);
  if (!image) fail<TypeMismatchError>(class_name(), ": the destination image allocator gave None, expected an image");
  check_device(*image, "destination image the allocator gave");
  const ImageDescriptor& d = descriptor;
  if (image->width() != d.width || image->height() != d.height || image->feature_channels() != d.feature_channels ||
      image->number_of_images() != d.number_of_images ||
      (image->data_type() != DataType::Float32 && image->data_type() != DataType::Float16))
    fail<ShapeError>(class_name(), ": the destination image allocator gave an image of ", image->number_of_images(),
                     "x", image->feature_channels(), "x", image->height(), "x", image->width(), " ",
                     name_of(image->data_type()), " (NxCxHxW), expected ", d.number_of_images, "x",
                     d.feature_channels, "x", d.height, "x", d.width, " float32 or float16");
  image->check_usable(command_buffer, class_name());
  return image;
}

void Kernel::check_properties() const {
  for (auto [value, name] : {std::pair{offset.x, "offset.x"}, {offset.y, "offset.y"}, {offset.z, "offset.z"},
                             {clip_rect.x, "clip_rect.x"}, {clip_rect.y, "clip_rect.y"}, {clip_rect.z, "clip_rect.z"}})
    check_range(value, -kMaxPosition, kMaxPosition, class_name(), ": ", name);
  // Any size from 0 up: kRectNoClip's are INT64_MAX / 4.
  if (clip_rect.width < 0 || clip_rect.height < 0 || clip_rect.depth < 0)
    fail<ArgumentError>(class_name(), ": clip_rect sizes must be non-negative; given width ", clip_rect.width,
                        ", height ", clip_rect.height, ", depth ", clip_rect.depth);
  for (auto [value, name] : {std::pair{destination_feature_channel_offset, "destination_feature_channel_offset"},
                             {source_feature_channel_offset, "source_feature_channel_offset"}}) {
    if (value < 0 || value % 4 != 0)
      fail<ArgumentError>(class_name(), ": ", name, " must be a non-negative multiple of 4; given ", value);
    if (value > kMaxDimension)
      fail<ArgumentError>(class_name(), ": ", name, " must be at most ", kMaxDimension, ", given ", value);
  }
  if (source_feature_channel_max_count < 1)
    fail<ArgumentError>(class_name(), ": source_feature_channel_max_count must be positive, given ",
                        source_feature_channel_max_count);
  if (edge_mode != EdgeMode::Zero && edge_mode != EdgeMode::Clamp && !extended_edge_modes())
    fail<ArgumentError>(class_name(), ": edge_mode must be ZERO or CLAMP, given ", static_cast<int>(edge_mode),
                        "; MIRROR, MIRROR_WITH_EDGE and CONSTANT are NNPad's alone");
}

int64_t Kernel::source_slice(const Image& source) const {
  return std::min(source_feature_channel_max_count, source.feature_channels() - source_feature_channel_offset);
}

void Kernel::check_source_channels(const Image& source, int64_t source_channels) const {
  // check_properties() passed: the sum is far inside int64_t.
  const int64_t slice = source_slice(source);
  if (source_feature_channel_offset == 0 ? slice != source_channels : slice < source_channels) {
    if (slice < source.feature_channels() - source_feature_channel_offset)
      fail<ShapeError>(class_name(), ": source_feature_channel_max_count ", source_feature_channel_max_count,
                       " leaves ", slice, " feature channels; the kernel reads ", source_channels);
    fail<ShapeError>(class_name(), ": expected a source image of ", source_feature_channel_offset + source_channels,
                     " feature channels, given ", source.feature_channels());
  }
}

void Kernel::check_reads_inside(const Image& source, const Geometry& g) const {
  if (g.source_x < 0 || g.source_y < 0 || g.source_x + g.width > source.width() ||
      g.source_y + g.height > source.height())
    fail<ShapeError>(class_name(), ": offset (", g.source_x, ", ", g.source_y, ") with a ", g.width, "x", g.height,
                     " region reads outside the ", source.width(), "x", source.height(), " source image");
}

void Kernel::check_aliasing(const Image& destination, const char* destination_role, const ImageBlock& written,
                            std::initializer_list<ReadImage> reads) const {
  for (const ReadImage& r : reads) {
    if (!r.image || !destination.may_share_memory(*r.image)) continue;
    const Image& image = *r.image;
    const bool writes_in_place = device_->backend().writes_in_place();
    const InPlace allowed = writes_in_place ? r.in_place : InPlace::None;
    if (allowed == InPlace::Any) continue;
    if (allowed == InPlace::None) {
      if (!destination.overlaps(destination.whole_block(), image, image.whole_block())) continue;
      fail<ArgumentError>(class_name(), ": the ", destination_role, " shares memory with the ", r.role, " (",
                          overlap_of(destination, destination.whole_block(), image, image.whole_block()), "); ",
                          writes_in_place ? "this kernel does not write over what it reads"
                                          : "MPS kernels may not write over what they read",
                          " (MPS: the destination may not alias a source): give another image");
    }
    const ImageBlock& read = r.read.empty() ? image.whole_block() : r.read;
    if (!destination.overlaps(written, image, read) ||
        (!r.at.empty() && same_elements(destination.region(written), image.region(r.at))))
      continue;
    fail<ArgumentError>(class_name(), ": the ", destination_role, " overlaps the ", r.role,
                        " other than exactly in place (", overlap_of(destination, written, image, read), "); ",
                        class_name(), " writes over the ", r.role, " only element for element, each result over ",
                        "the element it is computed from: give the same image, offsets, channels and images for both, ",
                        "or another image");
  }
}

void Kernel::check_aliasing(const Image& destination, const char* destination_role, const State* state) const {
  if (state && state->shares_memory(destination))
    fail<ArgumentError>(class_name(), ": the ", destination_role, " shares memory with a buffer of the ",
                        state->class_name(), " (weights, statistics, a mask or gradients the encode reads or ",
                        "writes): give another image");
}

RegionPass region_pass(bool gradient, const Geometry& g, int64_t channels, const ImageDescriptor& source,
                       const ImageDescriptor& secondary, const ImageDescriptor& destination) {
  RegionPass pass;
  pass.gradient = gradient;
  pass.images = g.images;
  pass.channels = channels;
  pass.height = g.height;
  pass.width = g.width;
  pass.source = source;
  pass.secondary = secondary;
  pass.destination = destination;
  return pass;
}

Region Kernel::clipped_region(const Image& destination) const {
  // check_properties() passed: every sum below is far inside int64_t.
  int64_t x0 = std::max<int64_t>(clip_rect.x, 0), y0 = std::max<int64_t>(clip_rect.y, 0);
  // min(clip_rect.x + clip_rect.width, destination width) for any width.
  int64_t x1 = clip_rect.width < destination.width() - clip_rect.x ? clip_rect.x + clip_rect.width : destination.width();
  int64_t y1 =
      clip_rect.height < destination.height() - clip_rect.y ? clip_rect.y + clip_rect.height : destination.height();
  if (x1 <= x0 || y1 <= y0)
    fail<ShapeError>(class_name(), ": clip_rect (x ", clip_rect.x, ", y ", clip_rect.y, ", width ", clip_rect.width,
                     ", height ", clip_rect.height, ") does not intersect the ", destination.width(), "x",
                     destination.height(), " destination");
  return Region{x0, y0, 0, x1 - x0, y1 - y0, 0};
}

void GradientKernel::record_zeros_outside(CommandBuffer& command_buffer,
                                          const std::shared_ptr<Image>& destination_gradient, const Geometry& g) {
  const Image& d = *destination_gradient;
  bool covers = g.source_x == 0 && g.source_y == 0 && g.width == d.width() && g.height == d.height() &&
                g.source_channel == 0 && g.source_channels == d.feature_channels() && g.source_image == 0 &&
                g.images == d.number_of_images();
  if (covers) return;
  command_buffer.record(keyed_by(destination_gradient), [destination_gradient](ExecutionContext& context) {
    context.fill_zero_image(*destination_gradient);
  });
}

void GradientKernel::record_zeros_outside_slice(CommandBuffer& command_buffer,
                                                const std::shared_ptr<Image>& destination_gradient,
                                                const Image& source_image, const Geometry& g) {
  bool covers = g.source_channel == 0 && g.source_channels == source_image.feature_channels() &&
                g.source_image == 0 && g.images == source_image.number_of_images();
  if (covers) return;
  command_buffer.record(keyed_by(destination_gradient), [destination_gradient](ExecutionContext& context) {
    context.fill_zero_image(*destination_gradient);
  });
}

Geometry Kernel::resolve(const Image& source, const Image& destination, const Window& window,
                         int64_t source_channels, int64_t destination_channels, const Offset& offset) const {
  // check_properties() passed: every sum and product below is far inside int64_t.
  check_source_channels(source, source_channels);
  if (destination_feature_channel_offset + destination_channels > destination.feature_channels())
    fail<ShapeError>(class_name(), ": expected a destination image of at least ",
                     destination_feature_channel_offset + destination_channels, " feature channels, given ",
                     destination.feature_channels());

  Geometry g;
  g.source_channel = source_feature_channel_offset;
  g.source_channels = source_channels;
  g.destination_channel = destination_feature_channel_offset;
  Region clipped = clipped_region(destination);
  g.x = clipped.x;
  g.y = clipped.y;
  g.width = clipped.width;
  g.height = clipped.height;
  g.source_x = offset.x + (g.x - clip_rect.x) * window.stride_x - window.extent_x() / 2;
  g.source_y = offset.y + (g.y - clip_rect.y) * window.stride_y - window.extent_y() / 2;

  g.source_image = offset.z;
  g.destination_image = std::max<int64_t>(clip_rect.z, 0);
  g.images = std::min({clip_rect.depth, destination.number_of_images() - g.destination_image,
                       source.number_of_images() - g.source_image});
  if (g.source_image < 0 || g.images <= 0 || source.number_of_images() - g.source_image != g.images)
    fail<ShapeError>(class_name(), ": expected ", source.number_of_images() - std::max<int64_t>(g.source_image, 0),
                     " destination images for ", source.number_of_images(), " source images (offset.z ", offset.z,
                     ", clip_rect.z ", clip_rect.z, "), given a destination of ", destination.number_of_images());
  return g;
}

ImageBlock UnaryKernel::written_block(const Image& source, const Geometry& g) const {
  return ImageBlock{g.destination_image, g.destination_channel, g.y, g.x, g.images, destination_channels(source),
                    g.height, g.width};
}

ReadImage UnaryKernel::source_read(const Image& source, const Geometry& g) const {
  ReadImage r{&source, "source image", in_place()};
  if (r.in_place != InPlace::Exact) return r;
  // Every row and column of the images and channels read: windows (a
  // spatial normalization's) may reach past the region.
  const Window w = window();
  const int64_t channels = source_channels(source);
  r.read = ImageBlock{g.source_image, g.source_channel, 0, 0, g.images, channels, source.height(), source.width()};
  if (w.stride_x == 1 && w.stride_y == 1 && channels == destination_channels(source))
    r.at = ImageBlock{g.source_image, g.source_channel, g.source_y + w.extent_y() / 2, g.source_x + w.extent_x() / 2,
                      g.images, channels, g.height, g.width};
  return r;
}

bool UnaryKernel::PaddingPlan::repeats(const Kernel& k, const Image& source) const {
  return valid && source.descriptor() == source_descriptor && k.offset.z == offset.z && k.clip_rect == clip_rect &&
         k.padding_method == padding_method &&
         k.destination_feature_channel_offset == destination_feature_channel_offset &&
         k.source_feature_channel_offset == source_feature_channel_offset &&
         k.source_feature_channel_max_count == source_feature_channel_max_count;
}

void UnaryKernel::PaddingPlan::remember(const Kernel& k, const Image& source, const ImageDescriptor& destination_,
                                        const Geometry& geometry_) {
  source_descriptor = source.descriptor();
  clip_rect = k.clip_rect;
  padding_method = k.padding_method;
  destination_feature_channel_offset = k.destination_feature_channel_offset;
  source_feature_channel_offset = k.source_feature_channel_offset;
  source_feature_channel_max_count = k.source_feature_channel_max_count;
  offset = k.offset;
  destination = destination_;
  geometry = geometry_;
  valid = true;
}

ImageDescriptor UnaryKernel::destination_image_descriptor(const Image& source) {
  check_device(source, "source image");
  check_properties();
  check_source(source);
  check_source_channels(source, source_channels(source));
  // The padding policy sets offset for the encode that follows it; a query
  // leaves the kernel as it was.
  Restore<Offset> kept(offset);
  return custom_padding({&source}, {}, destination_descriptor(source, nullptr));
}

std::shared_ptr<State> UnaryKernel::result_state(const Image& source) {
  check_device(source, "source image");
  check_properties();
  check_source(source);
  check_source_channels(source, source_channels(source));
  return new_result_state(source);
}

std::shared_ptr<State> UnaryKernel::new_result_state(const Image&) {
  return std::make_shared<GradientState>(device_ptr());
}

void UnaryKernel::check_source(const Image& source) const {
  if (source.data_type() == DataType::BFloat16)
    fail<TypeMismatchError>(class_name(), ": bfloat16 source images are not supported; use float32 or float16");
  if (source_feature_channel_offset >= source.feature_channels())
    fail<ShapeError>(class_name(), ": source_feature_channel_offset ", source_feature_channel_offset,
                     " is past the source image's ", source.feature_channels(), " feature channels");
}

void UnaryKernel::check_state(const State& state) const {
  if (!dynamic_cast<const GradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected an MPSNNGradientState, given an ", state.class_name());
}

UnaryKernel::Encoded UnaryKernel::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                         const std::shared_ptr<Image>& destination,
                                         const std::shared_ptr<State>& given_state, bool want_state,
                                         const State* source_state) {
  check_command_buffer(command_buffer);
  if (!source) fail<TypeMismatchError>(class_name(), ": expected a source image, given None");
  check_device(*source, "source image");
  check_properties();
  check_source(*source);
  check_usable(command_buffer, {source.get(), destination.get()});
  std::shared_ptr<State> state = given_state;
  if (state) {
    check_device(*state, "state");
    check_state(*state);
    state->check_usable(command_buffer, class_name());
    state->check_bindable(*source, class_name());
  }
  std::shared_ptr<Image> result = destination;
  Geometry geometry;
  if (result) {
    check_device(*result, "destination image");
    if (result->data_type() == DataType::UInt8 || result->data_type() == DataType::BFloat16)
      fail<TypeMismatchError>(class_name(), ": the destination must be float32 or float16, given ",
                              name_of(result->data_type()));
    geometry = resolve(*source, *result, window(), source_channels(*source), destination_channels(*source),
                       source_offset());
  } else if (plan_.repeats(*this, *source)) {
    offset = plan_.offset;
    result = new_destination(command_buffer, plan_.destination);
    geometry = plan_.geometry;
  } else {
    ImageDescriptor d = destination_descriptor(*source, source_state);
    // A custom method may set anything: it runs on every such encode.
    const bool custom = runs_custom_padding(padding_method, padding_policy.get());
    if (custom) {
      std::vector<const State*> states;
      if (source_state) states.push_back(source_state);
      d = custom_padding({source.get()}, states, d);
    }
    result = new_destination(command_buffer, d);
    geometry = resolve(*source, *result, window(), source_channels(*source), destination_channels(*source),
                       source_offset());
    if (reuses_padding() && !custom) plan_.remember(*this, *source, d, geometry);
  }
  // The blocks only where memory may be shared: most destinations lie elsewhere.
  if (result->may_share_memory(*source))
    check_aliasing(*result, "destination image", written_block(*source, geometry), {source_read(*source, geometry)});
  check_aliasing(*result, "destination image", state.get());
  if (!state && want_state) state = new_result_state(*source);
  if (state) state->bind_source(*source);
  if (auto* gradient_state = dynamic_cast<GradientState*>(state.get())) {
    gradient_state->source_descriptor = source->descriptor();
    gradient_state->destination_descriptor = result->descriptor();
    gradient_state->geometry = geometry;
    gradient_state->forward_class = class_name();
    gradient_state->result_identity = result->identity();
    gradient_state->encoded = true;
  }
  record(command_buffer, source, result, geometry, state);
  source->will_read(command_buffer);
  result->will_write(command_buffer);
  return {result, state};
}

void BinaryKernel::check_properties() const {
  Kernel::check_properties();
  for (bool second : {false, true}) {
    const BinarySource& b = second ? secondary : primary;
    const char* which = second ? "secondary" : "primary";
    for (auto [value, name] : {std::pair{b.offset.x, "_offset.x"}, {b.offset.y, "_offset.y"}, {b.offset.z, "_offset.z"}})
      check_range(value, -kMaxPosition, kMaxPosition, class_name(), ": ", which, name);
    for (auto [value, name] : {std::pair{b.stride_x, "_stride_in_pixels_x"}, {b.stride_y, "_stride_in_pixels_y"}})
      check_range(value, 0, kMaxDimension, class_name(), ": ", which, name);
    if (b.feature_channel_offset < 0 || b.feature_channel_offset % 4 != 0 || b.feature_channel_offset > kMaxDimension)
      fail<ArgumentError>(class_name(), ": ", which, "_source_feature_channel_offset must be a multiple of 4 from 0 to ",
                          kMaxDimension, ", given ", b.feature_channel_offset);
    if (b.feature_channel_max_count < 1)
      fail<ArgumentError>(class_name(), ": ", which, "_source_feature_channel_max_count must be positive, given ",
                          b.feature_channel_max_count);
    if (b.edge_mode != EdgeMode::Zero && b.edge_mode != EdgeMode::Clamp)
      fail<ArgumentError>(class_name(), ": ", which, "_edge_mode must be ZERO or CLAMP, given ",
                          static_cast<int>(b.edge_mode));
    Window w;
    w.kernel_width = kernel_width(second);
    w.kernel_height = kernel_height(second);
    w.dilation_x = dilation_rate_x(second);
    w.dilation_y = dilation_rate_y(second);
    w.check(class_name());
  }
}

void BinaryKernel::check_sources(const Image& primary_image, const Image& secondary_image) const {
  for (auto [image, which] : {std::pair{&primary_image, "primary"}, {&secondary_image, "secondary"}})
    if (image->data_type() == DataType::BFloat16)
      fail<TypeMismatchError>(class_name(), ": bfloat16 ", which, " images are not supported; use float32 or float16");
}

void BinaryKernel::check_state(const State& state) const {
  if (!dynamic_cast<const BinaryGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected an MPSNNBinaryGradientState, given an ", state.class_name());
}

std::shared_ptr<BinaryGradientState> BinaryKernel::new_result_state() {
  return std::make_shared<BinaryGradientState>(device_ptr());
}

int64_t BinaryKernel::source_channels(const Image& image, bool second) const {
  const BinarySource& b = second ? secondary : primary;
  // check_properties() passed: the offset is at most kMaxDimension.
  if (b.feature_channel_offset >= image.feature_channels())
    fail<ShapeError>(class_name(), ": ", second ? "secondary" : "primary", "_source_feature_channel_offset ",
                     b.feature_channel_offset, " is past the ", second ? "secondary" : "primary", " image's ",
                     image.feature_channels(), " feature channels");
  return std::min(b.feature_channel_max_count, image.feature_channels() - b.feature_channel_offset);
}

int64_t BinaryKernel::destination_channels(const Image& primary_image, const Image& secondary_image) const {
  int64_t p = source_channels(primary_image, false), s = source_channels(secondary_image, true);
  bool bp = feature_channel_stride(false) == 0, bs = feature_channel_stride(true) == 0;
  if (!bp && !bs && p != s)
    fail<ShapeError>(class_name(), ": the primary image gives ", p, " feature channels and the secondary image ", s,
                     "; they must be equal unless one broadcasts (stride_in_feature_channels 0)");
  return !bp ? p : !bs ? s : 1;
}

void BinaryKernel::check_inputs(const Image& primary_image, const Image& secondary_image) const {
  check_device(primary_image, "primary image");
  check_device(secondary_image, "secondary image");
  check_properties();
  check_sources(primary_image, secondary_image);
  destination_channels(primary_image, secondary_image);
}

ImageDescriptor BinaryKernel::destination_image_descriptor(const Image& primary_image, const Image& secondary_image) {
  return custom_padding({&primary_image, &secondary_image}, {}, padded_descriptor(primary_image, secondary_image));
}

ImageDescriptor BinaryKernel::padded_descriptor(const Image& primary_image, const Image& secondary_image) const {
  check_inputs(primary_image, secondary_image);
  uint32_t remainder = padding_method & padding::kAddRemainderToMask;
  bool remainder_left = remainder == padding::kAddRemainderToTopLeft || remainder == padding::kAddRemainderToBottomLeft;
  bool remainder_top = remainder == padding::kAddRemainderToTopLeft || remainder == padding::kAddRemainderToTopRight;
  ImageDescriptor d;
  // Each dimension from the first source that does not broadcast along it,
  // by the padding policy over that source's window; 1 where both do.
  auto size = [&](bool vertical) -> int64_t {
    for (bool second : {false, true}) {
      const BinarySource& b = second ? secondary : primary;
      const Image& image = second ? secondary_image : primary_image;
      int64_t stride = vertical ? b.stride_y : b.stride_x;
      if (stride == 0) continue;
      int64_t kernel = vertical ? kernel_height(second) : kernel_width(second);
      int64_t dilation = vertical ? dilation_rate_y(second) : dilation_rate_x(second);
      int64_t unused = 0;
      int64_t n = pad_dimension(vertical ? image.height() : image.width(), stride, (kernel - 1) * dilation + 1,
                                padding_method, vertical ? remainder_top : remainder_left, &unused);
      if (n <= 0 || n > kMaxDimension)
        fail<ShapeError>(class_name(), ": the padding policy leaves a destination ", vertical ? "height" : "width",
                         " of ", n, " for the ", second ? "secondary" : "primary", " image's ",
                         vertical ? image.height() : image.width(), " pixels; it must be from 1 to ", kMaxDimension);
      return n;
    }
    return 1;
  };
  d.width = size(false);
  d.height = size(true);
  d.feature_channels = destination_channels(primary_image, secondary_image);
  d.number_of_images = primary_image.number_of_images() - primary.offset.z;
  if (primary.offset.z < 0 || d.number_of_images <= 0)
    fail<ShapeError>(class_name(), ": primary_offset.z ", primary.offset.z, " is outside the ",
                     primary_image.number_of_images(), " primary images");
  DataType t = primary_image.data_type();
  d.channel_format = (t == DataType::Float16 || t == DataType::Float32) ? t : DataType::Float32;
  return d;
}

BinaryGeometry BinaryKernel::resolve(const Image& primary_image, const Image& secondary_image,
                                     const Image& destination) const {
  // check_properties() passed: every sum and product below is far inside int64_t.
  BinaryGeometry g;
  g.channels = destination_channels(primary_image, secondary_image);
  g.destination_channel = destination_feature_channel_offset;
  if (g.destination_channel + g.channels > destination.feature_channels())
    fail<ShapeError>(class_name(), ": expected a destination image of at least ", g.destination_channel + g.channels,
                     " feature channels, given ", destination.feature_channels());
  Region clipped = clipped_region(destination);
  const int64_t x0 = clipped.x, y0 = clipped.y;
  g.x = x0;
  g.y = y0;
  g.width = clipped.width;
  g.height = clipped.height;
  g.destination_image = std::max<int64_t>(clip_rect.z, 0);
  g.images = std::min({clip_rect.depth, destination.number_of_images() - g.destination_image,
                       primary_image.number_of_images() - primary.offset.z,
                       secondary_image.number_of_images() - secondary.offset.z});
  for (bool second : {false, true}) {
    const BinarySource& b = second ? secondary : primary;
    const Image& image = second ? secondary_image : primary_image;
    const char* which = second ? "secondary" : "primary";
    if (b.offset.z < 0 || g.images <= 0 || image.number_of_images() - b.offset.z != g.images)
      fail<ShapeError>(class_name(), ": expected ", image.number_of_images() - std::max<int64_t>(b.offset.z, 0),
                       " destination images for the ", image.number_of_images(), " ", which, " images (", which,
                       "_offset.z ", b.offset.z, ", clip_rect.z ", clip_rect.z, "), given ", g.images,
                       " (destination ", destination.number_of_images(), ", primary ",
                       primary_image.number_of_images(), ", secondary ", secondary_image.number_of_images(), ")");
    BinarySourceGeometry& s = second ? g.secondary : g.primary;
    int64_t extent_x = (kernel_width(second) - 1) * dilation_rate_x(second) + 1;
    int64_t extent_y = (kernel_height(second) - 1) * dilation_rate_y(second) + 1;
    s.image = b.offset.z;
    s.channel = b.feature_channel_offset;
    s.stride_x = b.stride_x;
    s.stride_y = b.stride_y;
    s.broadcast_channels = feature_channel_stride(second) == 0;
    s.x = b.offset.x + (x0 - clip_rect.x) * b.stride_x - extent_x / 2;
    s.y = b.offset.y + (y0 - clip_rect.y) * b.stride_y - extent_y / 2;
    s.read_channels = s.broadcast_channels ? 1 : g.channels;
    s.read_width = b.stride_x == 0 ? 1 : g.width;
    s.read_height = b.stride_y == 0 ? 1 : g.height;
    int64_t last_x = s.x + (s.read_width - 1) * b.stride_x + extent_x - 1;
    int64_t last_y = s.y + (s.read_height - 1) * b.stride_y + extent_y - 1;
    if (s.x < 0 || s.y < 0 || last_x >= image.width() || last_y >= image.height())
      fail<ShapeError>(class_name(), ": ", which, "_offset (", b.offset.x, ", ", b.offset.y, ") with strides (",
                       b.stride_x, ", ", b.stride_y, ") reads pixels x ", s.x, " to ", last_x, ", y ", s.y, " to ",
                       last_y, " for the ", g.width, "x", g.height, " destination region; the ", which, " image is ",
                       image.width(), "x", image.height());
  }
  return g;
}

std::shared_ptr<State> BinaryKernel::result_state(const Image& primary_image, const Image& secondary_image) {
  check_inputs(primary_image, secondary_image);
  return new_result_state();
}

BinaryKernel::Encoded BinaryKernel::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
                                           const std::shared_ptr<Image>& secondary_image,
                                           const std::shared_ptr<Image>& destination,
                                           const std::shared_ptr<State>& given_state, bool want_state) {
  check_command_buffer(command_buffer);
  if (!primary_image) fail<TypeMismatchError>(class_name(), ": expected a primary image, given None");
  if (!secondary_image) fail<TypeMismatchError>(class_name(), ": expected a secondary image, given None");
  check_inputs(*primary_image, *secondary_image);
  check_usable(command_buffer, {primary_image.get(), secondary_image.get(), destination.get()});
  std::shared_ptr<State> state = given_state;
  if (state) {
    check_device(*state, "state");
    check_state(*state);
    state->check_usable(command_buffer, class_name());
    state->check_bindable(*primary_image, class_name());
  }
  std::shared_ptr<Image> result = destination;
  if (result) {
    check_device(*result, "destination image");
    if (result->data_type() != DataType::Float32 && result->data_type() != DataType::Float16)
      fail<TypeMismatchError>(class_name(), ": the destination must be float32 or float16, given ",
                              name_of(result->data_type()));
  }
  ImageDescriptor d;
  if (!result) d = destination_image_descriptor(*primary_image, *secondary_image);
  // Checked against a destination of d's size before one is made.
  BinaryGeometry geometry;
  if (result) {
    geometry = resolve(*primary_image, *secondary_image, *result);
  } else {
    result = new_destination(command_buffer, d);
    geometry = resolve(*primary_image, *secondary_image, *result);
  }
  // The whole destination: no binary forward kernel writes in place.
  check_aliasing(*result, "destination image", result->whole_block(),
                 {ReadImage{primary_image.get(), "primary image", in_place(false)},
                  ReadImage{secondary_image.get(), "secondary image", in_place(true)}});
  check_aliasing(*result, "destination image", state.get());
  if (!state && want_state) state = new_result_state();
  if (state) state->bind_source(*primary_image);
  if (auto* s = dynamic_cast<BinaryGradientState*>(state.get())) {
    s->source_descriptor = primary_image->descriptor();
    s->secondary_descriptor = secondary_image->descriptor();
    s->destination_descriptor = result->descriptor();
    s->binary_geometry = geometry;
    s->geometry.source_image = geometry.primary.image;
    s->geometry.destination_image = geometry.destination_image;
    s->geometry.images = geometry.images;
    s->geometry.source_channel = geometry.primary.channel;
    s->geometry.source_channels = geometry.primary.read_channels;
    s->geometry.destination_channel = geometry.destination_channel;
    s->geometry.x = geometry.x;
    s->geometry.y = geometry.y;
    s->geometry.width = geometry.width;
    s->geometry.height = geometry.height;
    s->geometry.source_x = geometry.primary.x;
    s->geometry.source_y = geometry.primary.y;
    s->forward_class = class_name();
    s->primary_identity = primary_image->identity();
    s->secondary_identity = secondary_image->identity();
    s->result_identity = result->identity();
    s->encoded = true;
  }
  record(command_buffer, primary_image, secondary_image, result, geometry, state);
  primary_image->will_read(command_buffer);
  secondary_image->will_read(command_buffer);
  result->will_write(command_buffer);
  return {result, state};
}

std::vector<std::shared_ptr<GradientKernel>> GradientKernel::make_gradient_kernels() const {
  fail<TypeMismatchError>(class_name(), " is a gradient kernel; gradient kernels have no gradient kernels");
}

void GradientKernel::record(CommandBuffer&, const std::shared_ptr<Image>&, const std::shared_ptr<Image>&,
                            const std::shared_ptr<Image>&, const BinaryGeometry&, const std::shared_ptr<State>&) {
  fail<TypeMismatchError>(class_name(), " encodes with a gradient state: encode(command_buffer, source_gradient, ",
                          "source_image, gradient_state)");
}

namespace {

// The properties a gradient kernel refuses, as messages write them.
std::string text_of(const Offset& o) {
  return "(" + std::to_string(o.x) + ", " + std::to_string(o.y) + ", " + std::to_string(o.z) + ")";
}
std::string text_of(int64_t v) { return std::to_string(v); }
std::string text_of(EdgeMode m) { return m == EdgeMode::Zero ? "ZERO" : m == EdgeMode::Clamp ? "CLAMP" : std::to_string(static_cast<int>(m)); }
std::string text_of(const Region& r) {
  return "(" + std::to_string(r.x) + ", " + std::to_string(r.y) + ", " + std::to_string(r.z) + ", " +
         std::to_string(r.width) + ", " + std::to_string(r.height) + ", " + std::to_string(r.depth) + ")";
}
bool operator!=(const Offset& a, const Offset& b) { return a.x != b.x || a.y != b.y || a.z != b.z; }
bool operator!=(const Region& a, const Region& b) {
  return a.x != b.x || a.y != b.y || a.z != b.z || a.width != b.width || a.height != b.height || a.depth != b.depth;
}

}  // namespace

void GradientKernel::check_properties() const {
  BinaryKernel::check_properties();
  // Runs at every encode: the text of a value is made only for a refused one.
  auto keep = [this](const char* which, const char* property, const auto& given, const auto& initial) {
    if (given != initial)
      fail<ArgumentError>(class_name(), ": ", which, property, " must keep its default ", text_of(initial),
                          ", given ", text_of(given), "; a gradient kernel takes the forward geometry from its ",
                          "gradient state");
  };
  const BinarySource plain;
  for (bool second : {false, true}) {
    const BinarySource& b = second ? secondary : primary;
    const char* which = second ? "secondary" : "primary";
    keep(which, "_offset", b.offset, plain.offset);
    keep(which, "_edge_mode", b.edge_mode, plain.edge_mode);
    keep(which, "_stride_in_pixels_x", b.stride_x, plain.stride_x);
    keep(which, "_stride_in_pixels_y", b.stride_y, plain.stride_y);
    keep(which, "_source_feature_channel_offset", b.feature_channel_offset, plain.feature_channel_offset);
    keep(which, "_source_feature_channel_max_count", b.feature_channel_max_count, plain.feature_channel_max_count);
  }
  keep("", "offset", offset, Offset{});
  keep("", "clip_rect", clip_rect, kRectNoClip);
  keep("", "source_feature_channel_offset", source_feature_channel_offset, int64_t{0});
  keep("", "source_feature_channel_max_count", source_feature_channel_max_count,
       std::numeric_limits<int64_t>::max());
  keep("", "destination_feature_channel_offset", destination_feature_channel_offset, int64_t{0});
  keep("", "kernel_offset_x", kernel_offset_x, int64_t{0});
  keep("", "kernel_offset_y", kernel_offset_y, int64_t{0});
}

std::string_view GradientKernel::forward_class_name() const {
  std::string_view name = class_name();
  constexpr std::string_view suffix = "Gradient";
  if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix)
    name.remove_suffix(suffix.size());
  return name;
}

const GradientState& GradientKernel::gradient_state_of(const State& state) const {
  auto* g = dynamic_cast<const GradientState*>(&state);
  if (!g) fail<TypeMismatchError>(class_name(), ": expected an MPSNNGradientState, given an ", state.class_name());
  return *g;
}

void GradientKernel::check(const Image& source_gradient, const Image& secondary_image,
                           const GradientState& state) const {
  bool result = gradient_secondary() == GradientSecondary::ForwardResult;
  const ImageDescriptor& s = result ? state.destination_descriptor : state.source_descriptor;
  if (secondary_image.width() != s.width || secondary_image.height() != s.height ||
      secondary_image.feature_channels() != s.feature_channels ||
      secondary_image.number_of_images() != s.number_of_images)
    fail<ShapeError>(class_name(), ": expected the forward ", result ? "result" : "source", " image of ",
                     s.number_of_images, "x", s.feature_channels, "x", s.height, "x", s.width, " (NxCxHxW), given ",
                     secondary_image.number_of_images(), "x", secondary_image.feature_channels(), "x",
                     secondary_image.height(), "x", secondary_image.width());
  const ImageDescriptor& d = state.destination_descriptor;
  if (source_gradient.width() != d.width || source_gradient.height() != d.height ||
      source_gradient.feature_channels() != d.feature_channels ||
      source_gradient.number_of_images() != d.number_of_images)
    fail<ShapeError>(class_name(), ": expected a source gradient shaped as the forward result, ", d.number_of_images,
                     "x", d.feature_channels, "x", d.height, "x", d.width, " (NxCxHxW), given ",
                     source_gradient.number_of_images(), "x", source_gradient.feature_channels(), "x",
                     source_gradient.height(), "x", source_gradient.width());
  if (source_gradient.data_type() != DataType::Float32 && source_gradient.data_type() != DataType::Float16)
    fail<TypeMismatchError>(class_name(), ": the source gradient must be float32 or float16, given ",
                            name_of(source_gradient.data_type()));
}

ImageDescriptor GradientKernel::destination_image_descriptor(const Image& source_gradient, const State& state) {
  check_properties();
  ImageDescriptor d = gradient_state_of(state).source_descriptor;
  d.channel_format = source_gradient.data_type();
  return custom_gradient_padding({&source_gradient}, state, d);
}

ImageDescriptor GradientKernel::custom_gradient_padding(const std::vector<const Image*>& sources, const State& state,
                                                        const ImageDescriptor& expected) {
  ImageDescriptor d = custom_padding(sources, {&state}, expected);
  if (d.width != expected.width || d.height != expected.height || d.feature_channels != expected.feature_channels ||
      d.number_of_images != expected.number_of_images)
    fail<ShapeError>(class_name(), ": the padding policy ", padding_policy->label(), " gave a destination gradient of ",
                     d.number_of_images, "x", d.feature_channels, "x", d.height, "x", d.width,
                     " (NxCxHxW); a gradient is shaped as the forward source, ", expected.number_of_images, "x",
                     expected.feature_channels, "x", expected.height, "x", expected.width);
  return d;
}

void GradientKernel::check_arguments(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                     const std::shared_ptr<Image>& source_image,
                                     const std::shared_ptr<State>& state) const {
  check_command_buffer(command_buffer);
  check_properties();
  if (!source_gradient) fail<TypeMismatchError>(class_name(), ": expected a source gradient image, given None");
  if (!source_image) fail<TypeMismatchError>(class_name(), ": expected a source image, given None");
  if (!state) fail<TypeMismatchError>(class_name(), ": expected a gradient state, given None");
  check_device(*source_gradient, "source gradient");
  check_device(*source_image, "source image");
  check_device(*state, "gradient state");
  check_usable(command_buffer, {source_gradient.get(), source_image.get()});
  state->check_usable(command_buffer, class_name());
  const GradientState& g = gradient_state_of(*state);
  if (!g.encoded) fail<StateError>(class_name(), ": the ", state->class_name(), " was not produced by a forward encode");
  if (g.forward_class && forward_class_name() != g.forward_class)
    fail<TypeMismatchError>(class_name(), ": expected the state of an ", forward_class_name(),
                            " forward encode, given one of an ", g.forward_class);
  check_source_image(*state, g, *source_image);
  check(*source_gradient, *source_image, g);
}

void GradientKernel::check_source_image(State& state, const GradientState& forward, const Image& source_image) const {
  if (gradient_secondary() == GradientSecondary::ForwardSource) {
    state.check_source(source_image, class_name());
  } else if (forward.result_identity != source_image.identity()) {
    fail<StateError>(class_name(), ": this ", state.class_name(), " was made for another batch; pass the result ",
                     "images of the forward encode that produced it as the source images");
  }
}

void GradientKernel::check_aliasing(const Image& destination_gradient, const Image& source_gradient,
                                    const Image& source_image, const GradientState& state) const {
  const InPlace primary_in_place = in_place(false), secondary_in_place = in_place(true);
  // For InPlace::Exact: where the forward encode read the whole source and
  // wrote each result at the position it read, the destination gradient's
  // elements are computed from those at the same positions of the source
  // gradient and of the secondary image (otherwise zeros go where the
  // forward pass read nothing, or results land elsewhere).
  ImageBlock at;
  if ((primary_in_place == InPlace::Exact && destination_gradient.may_share_memory(source_gradient)) ||
      (secondary_in_place == InPlace::Exact && destination_gradient.may_share_memory(source_image))) {
    const Geometry& g = state.geometry;
    const ImageDescriptor& s = state.source_descriptor;
    const int64_t centre_x = g.source_x + ((kernel_width(true) - 1) * dilation_rate_x(true) + 1) / 2;
    const int64_t centre_y = g.source_y + ((kernel_height(true) - 1) * dilation_rate_y(true) + 1) / 2;
    if (centre_x == 0 && centre_y == 0 && g.x == 0 && g.y == 0 && g.source_channel == 0 &&
        g.source_channels == s.feature_channels && g.destination_channel == 0 && g.source_image == 0 &&
        g.destination_image == 0 && g.width == s.width && g.height == s.height && g.images == s.number_of_images)
      at = ImageBlock{0, 0, 0, 0, s.number_of_images, s.feature_channels, s.height, s.width};
  }
  const ImageBlock whole = destination_gradient.whole_block();
  Kernel::check_aliasing(destination_gradient, "destination gradient", whole,
                         {ReadImage{&source_gradient, "source gradient", primary_in_place, {}, at},
                          ReadImage{&source_image, "source image", secondary_in_place, {}, at}});
}

std::shared_ptr<Image> GradientKernel::encode(CommandBuffer& command_buffer,
                                              const std::shared_ptr<Image>& source_gradient,
                                              const std::shared_ptr<Image>& source_image,
                                              const std::shared_ptr<State>& state,
                                              const std::shared_ptr<Image>& destination_gradient) {
  check_arguments(command_buffer, source_gradient, source_image, state);
  // check_arguments checked the properties and the state.
  ImageDescriptor expected = gradient_state_of(*state).source_descriptor;
  expected.channel_format = source_gradient->data_type();
  std::shared_ptr<Image> result = destination_gradient;
  if (result) {
    check_device(*result, "destination gradient");
    result->check_usable(command_buffer, class_name());
    if (result->width() != expected.width || result->height() != expected.height ||
        result->feature_channels() != expected.feature_channels ||
        result->number_of_images() != expected.number_of_images)
      fail<ShapeError>(class_name(), ": expected a destination gradient of ", expected.number_of_images, "x",
                       expected.feature_channels, "x", expected.height, "x", expected.width, " (NxCxHxW), given ",
                       result->number_of_images(), "x", result->feature_channels(), "x", result->height(), "x",
                       result->width());
    if (result->data_type() != DataType::Float32 && result->data_type() != DataType::Float16)
      fail<TypeMismatchError>(class_name(), ": the destination gradient must be float32 or float16, given ",
                              name_of(result->data_type()));
  } else {
    if (runs_custom_padding(padding_method, padding_policy.get()))
      expected = custom_gradient_padding({source_gradient.get(), source_image.get()}, *state, expected);
    result = new_destination(command_buffer, expected);
  }
  check_aliasing(*result, *source_gradient, *source_image, gradient_state_of(*state));
  Kernel::check_aliasing(*result, "destination gradient", state.get());
  record(command_buffer, source_gradient, source_image, state, result);
  state->was_read();
  source_gradient->will_read(command_buffer);
  source_image->will_read(command_buffer);
  result->will_write(command_buffer);
  return result;
}

}  // namespace mpsx
