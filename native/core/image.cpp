#include "mpsx/image.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/half.h"
#include "mpsx/pool.h"

namespace mpsx {
namespace {

inline float load(const void* base, int64_t index, DataType type) {
  switch (type) {
    case DataType::Float32: return static_cast<const float*>(base)[index];
    case DataType::Float16: return half_to_float(static_cast<const uint16_t*>(base)[index]);
    case DataType::BFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DataType::UInt8: return static_cast<const uint8_t*>(base)[index] * (1.0f / 255.0f);
  }
  return 0;
}

inline void store(void* base, int64_t index, DataType type, float value) {
  switch (type) {
    case DataType::Float32: static_cast<float*>(base)[index] = value; return;
    case DataType::Float16: static_cast<uint16_t*>(base)[index] = float_to_half(value); return;
    case DataType::BFloat16: static_cast<uint16_t*>(base)[index] = float_to_bfloat16(value); return;
    case DataType::UInt8:
      static_cast<uint8_t*>(base)[index] =
          static_cast<uint8_t>(std::lround(std::clamp(value, 0.0f, 1.0f) * 255.0f));
      return;
  }
}

// Offset in elements one past the last element a region touches.
int64_t span(const ImageRegion& r) {
  if (r.element_count() == 0) return 0;
  return (r.n - 1) * r.stride.n + (r.c - 1) * r.stride.c + (r.h - 1) * r.stride.h + (r.w - 1) * r.stride.w + 1;
}

}  // namespace

void ImageDescriptor::validate() const {
  if (width <= 0 || height <= 0 || feature_channels <= 0 || number_of_images <= 0)
    fail<ArgumentError>("image sizes must be positive; given width ", width, ", height ", height,
                        ", feature_channels ", feature_channels, ", number_of_images ", number_of_images);
}

ImageLayout nchw_layout(const ImageDescriptor& d) {
  return ImageLayout{d.feature_channels * d.height * d.width, d.height * d.width, d.width, 1};
}

void copy_region(const ImageRegion& from, const ImageRegion& to) {
  if (from.n != to.n || from.c != to.c || from.h != to.h || from.w != to.w)
    fail<ShapeError>("copy between regions of different extents");
  const bool same_type = from.data_type == to.data_type;
  const size_t element = size_of(to.data_type);
  for (int64_t n = 0; n < from.n; ++n)
    for (int64_t c = 0; c < from.c; ++c)
      for (int64_t y = 0; y < from.h; ++y) {
        int64_t f = n * from.stride.n + c * from.stride.c + y * from.stride.h;
        int64_t t = n * to.stride.n + c * to.stride.c + y * to.stride.h;
        if (same_type && from.stride.w == 1 && to.stride.w == 1) {
          std::copy_n(static_cast<const char*>(from.data) + f * element, from.w * element,
                      static_cast<char*>(to.data) + t * element);
          continue;
        }
        for (int64_t x = 0; x < from.w; ++x)
          store(to.data, t + x * to.stride.w, to.data_type, load(from.data, f + x * from.stride.w, from.data_type));
      }
}

Image::Image(std::shared_ptr<Device> device, const ImageDescriptor& descriptor) : descriptor_(descriptor) {
  descriptor_.validate();
  layout_ = device->backend().image_layout(descriptor_);
  size_t bytes = static_cast<size_t>(descriptor_.element_count()) * size_of(descriptor_.channel_format);
  buffer_ = make_pooled<Buffer>(std::move(device), bytes);
}

Image::Image(const Image& base, int64_t first, int64_t count)
    : buffer_(base.buffer_), descriptor_(base.descriptor_), layout_(base.layout_) {
  if (first < 0 || count <= 0 || first + count > base.number_of_images())
    fail<ArgumentError>("images [", first, ", ", first + count, ") are outside a batch of ",
                        base.number_of_images());
  descriptor_.number_of_images = count;
  byte_offset_ = base.byte_offset_ + static_cast<size_t>(first * layout_.n) * size_of(descriptor_.channel_format);
}

ImageRegion Image::region(int64_t first_image, int64_t first_channel, int64_t y, int64_t x, int64_t images,
                          int64_t channels, int64_t height, int64_t width) const {
  ImageRegion r;
  int64_t offset = first_image * layout_.n + first_channel * layout_.c + y * layout_.h + x * layout_.w;
  r.data = static_cast<char*>(data()) + offset * static_cast<int64_t>(size_of(descriptor_.channel_format));
  r.data_type = descriptor_.channel_format;
  r.n = images;
  r.c = channels;
  r.h = height;
  r.w = width;
  r.stride = layout_;
  return r;
}

ImageRegion Image::whole() const {
  return region(0, 0, 0, 0, number_of_images(), feature_channels(), height(), width());
}

uint64_t Image::identity() const {
  if (identity_) return identity_;
  // Storage, position and extent: two views of the same pixels match.
  uint64_t h = buffer_->id() * 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {static_cast<uint64_t>(byte_offset_), static_cast<uint64_t>(descriptor_.number_of_images),
                     static_cast<uint64_t>(descriptor_.feature_channels), static_cast<uint64_t>(descriptor_.height),
                     static_cast<uint64_t>(descriptor_.width)})
    h = (h ^ v) * 0x100000001B3ull;
  return h == 0 ? 1 : h;
}

std::shared_ptr<Image> Image::gather(CommandBuffer& command_buffer,
                                     const std::vector<std::shared_ptr<Image>>& items) {
  if (items.empty()) fail<ArgumentError>("expected at least one image, given an empty list");
  const Image& first = *items.front();
  ImageDescriptor d = first.descriptor();
  d.number_of_images = 0;
  bool consecutive = true;
  uint64_t identity = 0x51ED270B27A9BD39ull;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i]) fail<TypeMismatchError>("image ", i, " of the list is None");
    const Image& item = *items[i];
    if (&item.device() != &first.device())
      fail<DeviceMismatchError>("image ", i, " of the list is on device ", item.device().name(), ", image 0 on ",
                                first.device().name());
    if (item.width() != d.width || item.height() != d.height || item.feature_channels() != d.feature_channels ||
        item.data_type() != d.channel_format)
      fail<ShapeError>("the images of a batch must match: image 0 is ", d.feature_channels, "x", d.height, "x", d.width,
                       " ", name_of(d.channel_format), ", image ", i, " is ", item.feature_channels(), "x",
                       item.height(), "x", item.width(), " ", name_of(item.data_type()));
    consecutive = consecutive && item.buffer_ == first.buffer_ &&
                  item.byte_offset_ == first.byte_offset_ + first.layout_.n * size_of(d.channel_format) *
                                                                static_cast<size_t>(d.number_of_images);
    d.number_of_images += item.number_of_images();
    identity = (identity ^ item.identity()) * 0x100000001B3ull;
  }
  std::shared_ptr<Image> batch;
  if (consecutive) {
    batch = make_pooled<Image>(first, 0, first.number_of_images());
    batch->descriptor_.number_of_images = d.number_of_images;
  } else {
    command_buffer.check_encodable();
    batch = make_pooled<Image>(first.device_ptr(), d);
    std::vector<std::shared_ptr<Image>> sources(items);
    command_buffer.record([batch, sources = std::move(sources)](ExecutionContext& context) {
      char* at = static_cast<char*>(batch->data());
      for (const auto& item : sources) {
        context.copy(at, item->data(), item->byte_length());
        at += item->byte_length();
      }
    });
    batch->buffer_->will_write(command_buffer);
    batch->identity_ = identity;
  }
  return batch;
}

void Image::read(void* destination, DataType host_type) const {
  ImageRegion from = whole();
  size_t bytes = static_cast<size_t>(span(from)) * size_of(data_type());
  std::vector<char> staging(bytes);
  buffer_->read(staging.data(), byte_offset_, bytes, "the image");
  from.data = staging.data();
  ImageRegion to = from;
  to.data = destination;
  to.data_type = host_type;
  to.stride = nchw_layout(descriptor_);
  copy_region(from, to);
}

void Image::write(const void* source, DataType host_type) {
  ImageRegion to = whole();
  size_t bytes = static_cast<size_t>(span(to)) * size_of(data_type());
  std::vector<char> staging(bytes);
  bool dense = to.stride.w == 1 && to.stride.h == width() && to.stride.c == height() * width() &&
               to.stride.n == feature_channels() * height() * width();
  if (!dense) {  // keep what lies between this image's elements (other views)
    buffer_->device().backend().copy_to_host(staging.data(), data(), bytes);
  }
  ImageRegion from = to;
  from.data = const_cast<void*>(source);
  from.data_type = host_type;
  from.stride = nchw_layout(descriptor_);
  to.data = staging.data();
  copy_region(from, to);
  buffer_->write(staging.data(), byte_offset_, bytes);
}

}  // namespace mpsx
