#include "mpsx/image.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
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

// A copy's extents with the strides of both sides, outermost first by the
// destination's strides, unit extents dropped and dims contiguous in both
// sides merged: dense copies of equal layouts become one run.
struct CopyDims {
  int count = 0;
  int64_t extent[4], from[4], to[4];

  CopyDims(const ImageRegion& f, const ImageRegion& t) {
    const int64_t e[4] = {f.n, f.c, f.h, f.w};
    const int64_t fs[4] = {f.stride.n, f.stride.c, f.stride.h, f.stride.w};
    const int64_t ts[4] = {t.stride.n, t.stride.c, t.stride.h, t.stride.w};
    int order[4] = {0, 1, 2, 3};
    std::stable_sort(order, order + 4, [&](int a, int b) { return ts[a] > ts[b]; });
    for (int d : order) {
      if (e[d] == 1) continue;
      if (count > 0 && from[count - 1] == e[d] * fs[d] && to[count - 1] == e[d] * ts[d]) {
        extent[count - 1] *= e[d];
        from[count - 1] = fs[d];
        to[count - 1] = ts[d];
        continue;
      }
      extent[count] = e[d];
      from[count] = fs[d];
      to[count] = ts[d];
      ++count;
    }
  }
  // Every element in one run of consecutive elements on both sides.
  bool one_run() const { return count == 0 || (count == 1 && from[0] == 1 && to[0] == 1); }
};

// Calls move(from_index, to_index) for every element: the destination's
// innermost dim against the source's, in tiles, so a layout transposition
// reads and writes whole cache lines; the remaining dims are walked outside.
template <class Move>
void for_each_element(const CopyDims& d, Move&& move) {
  constexpr int64_t kTile = 32;
  if (d.count == 0) return move(0, 0);
  const int i = d.count - 1;  // the destination's innermost dim
  int j = i;                  // the source's innermost dim
  for (int k = 0; k < d.count; ++k)
    if (d.from[k] < d.from[j]) j = k;
  int outer[4], outer_count = 0;
  for (int k = 0; k < d.count; ++k)
    if (k != i && k != j) outer[outer_count++] = k;
  int64_t position[4] = {0, 0, 0, 0}, f = 0, t = 0;
  for (;;) {
    if (i == j) {
      for (int64_t a = 0; a < d.extent[i]; ++a) move(f + a * d.from[i], t + a * d.to[i]);
    } else {
      // Within a tile the longer dim runs innermost: few channels make short loops.
      const int p = d.extent[i] >= d.extent[j] ? i : j, q = p == i ? j : i;
      for (int64_t b0 = 0; b0 < d.extent[q]; b0 += kTile)
        for (int64_t a0 = 0; a0 < d.extent[p]; a0 += kTile) {
          const int64_t b1 = std::min(b0 + kTile, d.extent[q]), a1 = std::min(a0 + kTile, d.extent[p]);
          for (int64_t b = b0; b < b1; ++b)
            for (int64_t a = a0; a < a1; ++a)
              move(f + a * d.from[p] + b * d.from[q], t + a * d.to[p] + b * d.to[q]);
        }
    }
    int k = outer_count - 1;
    for (; k >= 0; --k) {
      const int o = outer[k];
      f += d.from[o];
      t += d.to[o];
      if (++position[o] < d.extent[o]) break;
      f -= position[o] * d.from[o];
      t -= position[o] * d.to[o];
      position[o] = 0;
    }
    if (k < 0) return;
  }
}

template <class T>
void copy_same_type(const CopyDims& d, const void* from, void* to) {
  const T* f = static_cast<const T*>(from);
  T* t = static_cast<T*>(to);
  if (d.count > 0 && d.from[d.count - 1] == 1 && d.to[d.count - 1] == 1) {  // runs
    CopyDims rows = d;
    --rows.count;
    const int64_t run = d.extent[d.count - 1];
    for_each_element(rows, [&](int64_t a, int64_t b) { std::copy_n(f + a, run, t + b); });
    return;
  }
  for_each_element(d, [&](int64_t a, int64_t b) { t[b] = f[a]; });
}

}  // namespace

void ImageDescriptor::validate() const {
  check_size(width, "image width");
  check_size(height, "image height");
  check_size(feature_channels, "image feature_channels");
  check_size(number_of_images, "image number_of_images");
  const int64_t count = checked_count({number_of_images, feature_channels, height, width},
                                      "the element count of an image (NxCxHxW)");
  checked_bytes(count, size_of(channel_format), "the byte count of a ", name_of(channel_format), " image of ", count,
                " elements");
}

bool overlap(const ImageRegion& a, const ImageRegion& b) {
  if (a.element_count() == 0 || b.element_count() == 0) return false;
  if (!a.data || !b.data) return a.storage && a.storage == b.storage;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.span() * size_of(b.data_type) && b0 < a0 + a.span() * size_of(a.data_type);
}

bool same_elements(const ImageRegion& a, const ImageRegion& b) {
  return a.data == b.data && a.storage == b.storage && a.data_type == b.data_type && a.n == b.n && a.c == b.c &&
         a.h == b.h && a.w == b.w && a.stride.n == b.stride.n && a.stride.c == b.stride.c &&
         a.stride.h == b.stride.h && a.stride.w == b.stride.w && a.image == b.image && a.channel == b.channel &&
         a.y == b.y && a.x == b.x;
}

ImageLayout nchw_layout(const ImageDescriptor& d) {
  return ImageLayout{d.feature_channels * d.height * d.width, d.height * d.width, d.width, 1};
}

void copy_region(const ImageRegion& from, const ImageRegion& to) {
  if (from.n != to.n || from.c != to.c || from.h != to.h || from.w != to.w)
    fail<ShapeError>("copy between regions of different extents");
  if (from.element_count() == 0) return;
  const CopyDims dims(from, to);
  if (from.data_type == to.data_type) {
    switch (size_of(to.data_type)) {
      case 1: return copy_same_type<uint8_t>(dims, from.data, to.data);
      case 2: return copy_same_type<uint16_t>(dims, from.data, to.data);
      case 4: return copy_same_type<uint32_t>(dims, from.data, to.data);
    }
  }
  for_each_element(dims, [&](int64_t f, int64_t t) {
    store(to.data, t, to.data_type, load(from.data, f, from.data_type));
  });
}

Image::Image(std::shared_ptr<Device> device, const ImageDescriptor& descriptor) : descriptor_(descriptor) {
  descriptor_.validate();
  storage_ = device->backend().new_image_storage(descriptor_);
  if (storage_) {
    layout_ = nchw_layout(descriptor_);
    buffer_ = make_pooled<Buffer>(std::move(device), 0);
    return;
  }
  layout_ = device->backend().image_layout(descriptor_);
  size_t bytes = static_cast<size_t>(descriptor_.element_count()) * size_of(descriptor_.channel_format);
  buffer_ = make_pooled<Buffer>(std::move(device), bytes);
}

Image::Image(std::shared_ptr<Buffer> buffer, const ImageDescriptor& descriptor)
    : buffer_(std::move(buffer)), descriptor_(descriptor) {
  descriptor_.validate();
  layout_ = buffer_->device().backend().image_layout(descriptor_);
  if (byte_length() > buffer_->length())
    fail<ShapeError>("an image of ", descriptor_.number_of_images, "x", descriptor_.feature_channels, "x",
                     descriptor_.height, "x", descriptor_.width, " ", name_of(descriptor_.channel_format), " needs ",
                     byte_length(), " bytes; the buffer has ", buffer_->length());
}

Image::Image(const Image& base, int64_t first, int64_t count)
    : buffer_(base.buffer_),
      storage_(base.storage_),
      first_channel_(base.first_channel_),
      descriptor_(base.descriptor_),
      layout_(base.layout_),
      lifetimes_(base.lifetimes_) {
  if (first < 0 || count <= 0 || count > base.number_of_images() - first)
    fail<ArgumentError>(count, " images from image ", first, " are outside a batch of ", base.number_of_images());
  descriptor_.number_of_images = count;
  if (storage_)
    first_image_ = base.first_image_ + first;
  else
    byte_offset_ = base.byte_offset_ + static_cast<size_t>(first * layout_.n) * size_of(descriptor_.channel_format);
}

Image::Image(const Image& base, FeatureChannelRange range)
    : buffer_(base.buffer_),
      storage_(base.storage_),
      first_image_(base.first_image_),
      first_channel_(base.first_channel_ + range.first),
      byte_offset_(base.byte_offset_),
      descriptor_(base.descriptor_),
      layout_(base.layout_),
      lifetimes_(base.lifetimes_) {
  if (range.first < 0 || range.count <= 0 || range.count > base.feature_channels() - range.first)
    fail<ArgumentError>(range.count, " feature channels from channel ", range.first, " are outside an image of ",
                        base.feature_channels());
  descriptor_.feature_channels = range.count;
  if (!storage_) byte_offset_ += static_cast<size_t>(range.first * layout_.c) * size_of(descriptor_.channel_format);
}

void add_to_key(CommandKey& key, const Image& image) {
  key.add_address(image.data());
  const ImageDescriptor& d = image.descriptor();
  key.add_value(d.channel_format);
  for (int64_t v : {d.width, d.height, d.feature_channels, d.number_of_images, image.layout().n, image.layout().c,
                    image.layout().h, image.layout().w})
    key.add_word(static_cast<uint64_t>(v));
  if (image.storage()) {  // pixels a backend keeps itself: which, and from which image
    key.add_address(image.storage().get());
    key.add_word(static_cast<uint64_t>(image.first_in_allocation()));
  }
}

ImageRegion Image::region(int64_t first_image, int64_t first_channel, int64_t y, int64_t x, int64_t images,
                          int64_t channels, int64_t height, int64_t width) const {
  ImageRegion r;
  r.data_type = descriptor_.channel_format;
  r.n = images;
  r.c = channels;
  r.h = height;
  r.w = width;
  r.stride = layout_;
  if (storage_) {
    r.storage = storage_.get();
    r.image = first_image_ + first_image;
    r.channel = first_channel_ + first_channel;
    r.y = y;
    r.x = x;
    return r;
  }
  int64_t offset = first_image * layout_.n + first_channel * layout_.c + y * layout_.h + x * layout_.w;
  r.data = static_cast<char*>(data()) + offset * static_cast<int64_t>(size_of(descriptor_.channel_format));
  return r;
}

ImageRegion Image::whole() const {
  return region(0, 0, 0, 0, number_of_images(), feature_channels(), height(), width());
}

int64_t Image::first_in_allocation() const {
  if (storage_) return first_image_;
  const size_t image_bytes = static_cast<size_t>(layout_.n) * size_of(data_type());
  const size_t image_start = byte_offset_ - static_cast<size_t>(first_channel_ * layout_.c) * size_of(data_type());
  return image_start % image_bytes == 0 ? static_cast<int64_t>(image_start / image_bytes) : -1;
}

bool Image::overlaps(const ImageBlock& a, const Image& other, const ImageBlock& b) const {
  if (a.empty() || b.empty()) return false;
  const ImageLayout &s = layout_, &t = other.layout_;
  const int64_t first = first_in_allocation(), other_first = other.first_in_allocation();
  // In one allocation laid out alike, a position names one element: compare
  // the blocks by position, counting images from the allocation's first.
  if (buffer_ == other.buffer_ && storage_ == other.storage_ && data_type() == other.data_type() && s.n == t.n &&
      s.c == t.c && s.h == t.h && s.w == t.w && first >= 0 && other_first >= 0) {
    auto meet = [](int64_t a0, int64_t an, int64_t b0, int64_t bn) { return a0 < b0 + bn && b0 < a0 + an; };
    return meet(first + a.image, a.n, other_first + b.image, b.n) &&
           meet(first_channel_ + a.channel, a.c, other.first_channel_ + b.channel, b.c) &&
           meet(a.y, a.h, b.y, b.h) && meet(a.x, a.w, b.x, b.w);
  }
  return overlap(region(a), other.region(b));
}

bool Image::may_share_memory(const Image& other) const {
  if (storage_ || other.storage_) return storage_ == other.storage_;
  const char *a = static_cast<const char*>(data()), *b = static_cast<const char*>(other.data());
  return a < b + other.byte_length() && b < a + byte_length();
}

bool Image::overlaps(const Buffer* buffer) const {
  if (!buffer || storage_ || buffer->length() == 0) return false;
  ImageRegion bytes;
  bytes.data = buffer->data();
  bytes.data_type = DataType::UInt8;
  bytes.n = bytes.c = bytes.h = 1;
  bytes.w = static_cast<int64_t>(buffer->length());
  bytes.stride = ImageLayout{0, 0, 0, 1};
  return overlap(whole(), bytes);
}

uint64_t Image::identity() const {
  if (identity_) return identity_;
  // Storage, position and extent: two views of the same pixels match.
  uint64_t h = buffer_->id() * 0x9E3779B97F4A7C15ull;
  const ImageDescriptor& d = descriptor_;
  for (uint64_t v : {static_cast<uint64_t>(byte_offset_), static_cast<uint64_t>(first_image_),
                     static_cast<uint64_t>(d.number_of_images), static_cast<uint64_t>(d.feature_channels),
                     static_cast<uint64_t>(d.height), static_cast<uint64_t>(d.width)})
    h = (h ^ v) * 0x100000001B3ull;
  return h == 0 ? 1 : h;
}

std::shared_ptr<Image> Image::gather(CommandBuffer& command_buffer,
                                     const std::vector<std::shared_ptr<Image>>& items) {
  if (items.empty()) fail<ArgumentError>("expected at least one image, given an empty list");
  if (!items.front()) fail<TypeMismatchError>("image 0 of the list is None");
  const Image& first = *items.front();
  if (&command_buffer.device() != &first.device())
    fail<DeviceMismatchError>("the command buffer is on device ", command_buffer.device().name(),
                              ", the images on device ", first.device().name());
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
    // Next in the same storage: by image index in an ImageStorage, by
    // address in a Buffer.
    const size_t next_byte_offset =
        first.byte_offset_ + first.layout_.n * size_of(d.channel_format) * static_cast<size_t>(d.number_of_images);
    consecutive = consecutive && item.buffer_ == first.buffer_ &&
                  (first.storage_ ? item.first_image_ == first.first_image_ + d.number_of_images
                                  : item.byte_offset_ == next_byte_offset);
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
    // A command per item, in the command buffer's own memory: no list to
    // allocate per call.
    int64_t at = 0;
    for (const auto& item : items) {
      command_buffer.record(keyed_by(batch, item, at),
                            [batch, item, at](ExecutionContext& context) { context.copy_images(*item, *batch, at); });
      at += item->number_of_images();
    }
    for (const auto& item : items) {
      item->buffer_->will_read(command_buffer);
      // MPSImageBatch.h: a batch's read lowers each distinct image's count once.
      for (const auto& lifetime : item->lifetimes_)
        if (std::find(batch->lifetimes_.begin(), batch->lifetimes_.end(), lifetime) == batch->lifetimes_.end())
          batch->lifetimes_.push_back(lifetime);
    }
    batch->buffer_->will_write(command_buffer);
    batch->identity_ = identity;
  }
  return batch;
}

void Image::make_temporary(const CommandBuffer& command_buffer) {
  lifetimes_.assign(1, std::make_shared<TemporaryLifetime>());
  lifetimes_.front()->make_temporary(command_buffer);
}

std::shared_ptr<Image> Image::temporary(CommandBuffer& command_buffer, const ImageDescriptor& descriptor) {
  command_buffer.check_encodable();
  descriptor.validate();
  std::shared_ptr<Buffer> heap_storage = command_buffer.take_temporary_storage(
      static_cast<size_t>(descriptor.element_count()) * size_of(descriptor.channel_format));
  auto image = heap_storage ? make_pooled<Image>(std::move(heap_storage), descriptor)
                            : make_pooled<Image>(command_buffer.device_ptr(), descriptor);
  image->make_temporary(command_buffer);
  return image;
}

int64_t Image::read_count() const { return lifetimes_.size() == 1 ? lifetimes_.front()->read_count() : 0; }

void Image::set_read_count(int64_t count) {
  if (lifetimes_.size() > 1)
    fail<ArgumentError>("MPSTemporaryImage: a batch gathered from several temporary images has no read_count of its ",
                        "own; set each image's");
  if (lifetimes_.empty()) {
    if (count < 0) fail<ArgumentError>("MPSImage: read_count must be 0 or more, given ", count);
    return;
  }
  lifetimes_.front()->set_read_count(count, "MPSTemporaryImage");
}

void Image::check_usable(const CommandBuffer& command_buffer, const char* kernel) const {
  for (const auto& lifetime : lifetimes_) lifetime->check_usable(command_buffer, kernel, "MPSTemporaryImage");
}

void Image::will_read(CommandBuffer& command_buffer) {
  buffer_->will_read(command_buffer);
  bool last = false;
  for (const auto& lifetime : lifetimes_) last = lifetime->was_read() || last;
  // MPSTemporaryImage.readCount: "When the readCount reaches 0, the underlying texture is automatically made
  // available for reuse to MPS for its own needs and for other MPSTemporaryImages prior to return from the
  // -encode.. function." A batch gathered from several temporary images keeps its own storage.
  if (last && lifetimes_.size() == 1 && !storage_) command_buffer.give_temporary_storage(buffer_);
}

void Image::will_write(CommandBuffer& command_buffer) { buffer_->will_write(command_buffer); }

void Image::check_host_access() const {
  if (!lifetimes_.empty())
    fail<SynchronizationError>("the image is an MPSTemporaryImage, which only kernels read and write (MPS: its ",
                               "storage is private to the GPU); copy it into an mpsx.Image with a kernel to read it");
}

namespace {
void check_host_array(const ImageDescriptor& d, size_t bytes, DataType host_type) {
  const size_t expected = static_cast<size_t>(d.element_count()) * size_of(host_type);
  if (bytes != expected)
    fail<ShapeError>("expected a host array of ", d.number_of_images, "x", d.feature_channels, "x", d.height, "x",
                     d.width, " (NxCxHxW) ", name_of(host_type), " values, ", expected, " bytes; given ", bytes,
                     " bytes");
}
}  // namespace

void Image::read(void* destination, size_t bytes, DataType host_type) const {
  check_host_access();
  check_host_array(descriptor_, bytes, host_type);
  ImageRegion from = whole();
  ImageRegion to = from;
  to.data = destination;
  to.data_type = host_type;
  to.stride = nchw_layout(descriptor_);
  if (!storage_ && host_type == data_type() && CopyDims(from, to).one_run())
    return buffer_->read(destination, byte_offset_, static_cast<size_t>(from.span()) * size_of(data_type()),
                         "the image");
  buffer_->check_host_readable("the image");
  buffer_->device().backend().read_region(from, to);
}

void Image::write(const void* source, size_t bytes, DataType host_type) {
  check_host_access();
  buffer_->check_host_writable("the image");
  check_host_array(descriptor_, bytes, host_type);
  ImageRegion to = whole();
  ImageRegion from = to;
  from.data = const_cast<void*>(source);
  from.data_type = host_type;
  from.stride = nchw_layout(descriptor_);
  if (!storage_ && host_type == data_type() && CopyDims(from, to).one_run())
    return buffer_->write(source, byte_offset_, static_cast<size_t>(to.span()) * size_of(data_type()));
  buffer_->device().backend().write_region(from, to);
}

namespace {
void check_block(const ImageBlock& b, const ImageDescriptor& d) {
  if (b.empty() || b.image < 0 || b.channel < 0 || b.y < 0 || b.x < 0 || b.image + b.n > d.number_of_images ||
      b.channel + b.c > d.feature_channels || b.y + b.h > d.height || b.x + b.w > d.width)
    fail<ArgumentError>("expected a non-empty block within the image's ", d.number_of_images, " images, ",
                        d.feature_channels, " feature channels and ", d.height, "x", d.width, " pixels; given ", b.n,
                        " images from ", b.image, ", ", b.c, " channels from ", b.channel, ", ", b.h, "x", b.w,
                        " pixels from (x=", b.x, ", y=", b.y, ")");
}

ImageRegion host_block(const ImageBlock& b, DataType data_type, void* host, const ImageLayout& stride) {
  ImageRegion r;
  r.data = host;
  r.data_type = data_type;
  r.n = b.n;
  r.c = b.c;
  r.h = b.h;
  r.w = b.w;
  r.stride = stride;
  return r;
}
}  // namespace

void Image::read(const ImageBlock& block, void* host, const ImageLayout& stride) const {
  check_host_access();
  check_block(block, descriptor_);
  buffer_->check_host_readable("the image");
  // cuda copies a host region's whole span from its staging memory, padding
  // included: read densely, then place the elements, keeping the bytes
  // between them.
  ImageDescriptor dense = descriptor_;
  dense.number_of_images = block.n;
  dense.feature_channels = block.c;
  dense.height = block.h;
  dense.width = block.w;
  std::vector<unsigned char> values(static_cast<size_t>(dense.element_count()) * size_of(data_type()));
  const ImageRegion staged = host_block(block, data_type(), values.data(), nchw_layout(dense));
  buffer_->device().backend().read_region(region(block), staged);
  copy_region(staged, host_block(block, data_type(), host, stride));
}

void Image::write(const ImageBlock& block, const void* host, const ImageLayout& stride) {
  check_host_access();
  buffer_->check_host_writable("the image");
  check_block(block, descriptor_);
  buffer_->device().backend().write_region(host_block(block, data_type(), const_cast<void*>(host), stride),
                                           region(block));
}

void Image::fill_zero() {
  if (!storage_) return buffer_->device().backend().fill_zero(data(), byte_length());
  std::vector<float> zeros(static_cast<size_t>(descriptor_.element_count()));
  write(zeros.data(), zeros.size() * sizeof(float), DataType::Float32);
}

void ExecutionContext::copy_images(const Image& from, const Image& to, int64_t first) {
  if (from.storage() || to.storage())
    fail<Error>("copy_images: this backend keeps no images in an ImageStorage");
  const ImageRegion source = from.whole();
  const ImageRegion destination = to.region(first, 0, 0, 0, source.n, source.c, source.h, source.w);
  const size_t element = size_of(source.data_type);
  const size_t pixels = static_cast<size_t>(source.n * source.h * source.w);
  // Views of some feature channels (subImageWithFeatureChannelRange:) keep
  // their allocation's pixel stride: a row of channels per pixel.
  auto channels_per_pixel = [](const ImageRegion& r) {
    return r.stride.c == 1 && r.stride.h == r.w * r.stride.w && r.stride.n == r.h * r.stride.h;
  };
  if (!channels_per_pixel(source) || !channels_per_pixel(destination))
    fail<Error>("copy_images: expected images laid out NHWC, as this backend lays them out");
  if (source.stride.w == source.c && destination.stride.w == source.c)
    copy(destination.data, source.data, pixels * static_cast<size_t>(source.c) * element);
  else
    copy_rows(destination.data, static_cast<size_t>(destination.stride.w) * element, source.data,
              static_cast<size_t>(source.stride.w) * element, static_cast<size_t>(source.c) * element, pixels);
}

void ExecutionContext::copy_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch,
                                 size_t bytes, size_t rows) {
  for (size_t i = 0; i < rows; ++i)
    copy(static_cast<char*>(destination) + i * destination_pitch,
         static_cast<const char*>(source) + i * source_pitch, bytes);
}

void ExecutionContext::fill_zero_image(const Image& image) {
  if (image.storage()) fail<Error>("fill_zero_image: this backend keeps no images in an ImageStorage");
  fill_zero(image.data(), image.byte_length());
}

}  // namespace mpsx
