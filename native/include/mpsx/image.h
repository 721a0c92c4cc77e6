// MPSImage / MPSImageBatch: N images of C feature channels, H x W pixels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/temporary.h"
#include "mpsx/types.h"

namespace mpsx {

class CommandBuffer;

// MPSImageDescriptor.
struct ImageDescriptor {
  DataType channel_format = DataType::Float32;
  int64_t width = 1;
  int64_t height = 1;
  int64_t feature_channels = 1;
  int64_t number_of_images = 1;

  bool operator==(const ImageDescriptor& o) const {
    return channel_format == o.channel_format && width == o.width && height == o.height &&
           feature_channels == o.feature_channels && number_of_images == o.number_of_images;
  }
  bool operator!=(const ImageDescriptor& o) const { return !(*this == o); }
  // Fits int64_t, as its bytes do, once validate() passed.
  int64_t element_count() const {
    return width * height * feature_channels * number_of_images;
  }
  // Throws ArgumentError unless every size is positive and at most
  // kMaxDimension, ShapeError unless the element and byte counts fit.
  void validate() const;
};

// Element strides of an image in its storage. Each backend picks the layout
// it runs fastest; kernels read the strides instead of assuming one.
struct ImageLayout {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

// Pixels a backend keeps in objects of its own rather than in a Buffer
// (metal: the MPSImages of an MPSImageBatch, textures of 4 channels a slice).
class ImageStorage {
 public:
  virtual ~ImageStorage() = default;
};

// A block of an image resolved for a primitive. In a Buffer (cpu, cuda, host
// arrays), element (n, c, y, x) of the block is at
// data + n*stride.n + c*stride.c + y*stride.h + x*stride.w. In an
// ImageStorage (metal; data is null) it is image `image + n`, feature
// channel `channel + c`, pixel (x + x', y + y') of `storage`.
struct ImageRegion {
  void* data = nullptr;
  DataType data_type = DataType::Float32;
  int64_t n = 0, c = 0, h = 0, w = 0;
  ImageLayout stride;
  const ImageStorage* storage = nullptr;
  int64_t image = 0, channel = 0, y = 0, x = 0;
  int64_t element_count() const { return n * c * h * w; }
  // Elements from `data` to one past the last element of the region.
  int64_t span() const {
    if (element_count() == 0) return 0;
    return (n - 1) * stride.n + (c - 1) * stride.c + (h - 1) * stride.h + (w - 1) * stride.w + 1;
  }
};

// Whether the memory of two regions may overlap: their bytes from data to
// the last element do, or, for regions a backend keeps itself (no data),
// they are of one storage.
bool overlap(const ImageRegion& a, const ImageRegion& b);
// Whether two regions are the same elements in the same order: one address
// (or storage position), one layout, one extent.
bool same_elements(const ImageRegion& a, const ImageRegion& b);

// A block of an image in its own coordinates: `n` images from `image`, `c`
// feature channels from `channel`, `h` rows from `y`, `w` columns from `x`.
struct ImageBlock {
  int64_t image = 0, channel = 0, y = 0, x = 0;
  int64_t n = 0, c = 0, h = 0, w = 0;
  bool empty() const { return n <= 0 || c <= 0 || h <= 0 || w <= 0; }
};

// Copies `from` into `to`, both in host memory with equal extents,
// converting data types; uint8 is unorm8 (value / 255) as in MPS.
void copy_region(const ImageRegion& from, const ImageRegion& to);

// The dense (N, C, H, W) layout of host arrays.
ImageLayout nchw_layout(const ImageDescriptor& descriptor);

// Shares itself with the calls it hands itself to (a padding policy's).
class Image : public std::enable_shared_from_this<Image> {
 public:
  // New storage on `device`: the backend's ImageStorage where it has one,
  // else a Buffer laid out as the backend prefers.
  Image(std::shared_ptr<Device> device, const ImageDescriptor& descriptor);
  // A view of images [first, first + count) of `base`, sharing its storage.
  Image(const Image& base, int64_t first, int64_t count);
  // -[MPSImage subImageWithFeatureChannelRange:]: a view of feature
  // channels [range.first, range.first + range.count) of each of `base`'s
  // images, sharing its storage (its layout keeps the base's strides).
  struct FeatureChannelRange {
    int64_t first = 0, count = 0;
  };
  Image(const Image& base, FeatureChannelRange range);
  // The pixels in `buffer` (another library's memory, DLPack), laid out as
  // the backend lays out new images.
  Image(std::shared_ptr<Buffer> buffer, const ImageDescriptor& descriptor);

  const ImageDescriptor& descriptor() const { return descriptor_; }
  int64_t width() const { return descriptor_.width; }
  int64_t height() const { return descriptor_.height; }
  int64_t feature_channels() const { return descriptor_.feature_channels; }
  int64_t number_of_images() const { return descriptor_.number_of_images; }
  DataType data_type() const { return descriptor_.channel_format; }
  Device& device() const { return buffer_->device(); }
  const std::shared_ptr<Device>& device_ptr() const { return buffer_->device_ptr(); }
  // The memory of the pixels, or, for images in an ImageStorage, a Buffer of
  // no pixels that keeps the host-access bookkeeping.
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  // Null unless the backend keeps the pixels itself (metal).
  const std::shared_ptr<ImageStorage>& storage() const { return storage_; }
  const ImageLayout& layout() const { return layout_; }
  // Byte offset of image 0, channel 0, pixel (0, 0) within buffer().
  size_t byte_offset() const { return byte_offset_; }
  void* data() const { return static_cast<char*>(buffer_->data()) + byte_offset_; }
  // Bytes from data() to the end of the last image (of the allocation's
  // images, for a view of some feature channels: a bound, not an extent).
  size_t byte_length() const {
    return static_cast<size_t>(descriptor_.number_of_images * layout_.n) * size_of(descriptor_.channel_format);
  }
  ImageRegion region(int64_t first_image, int64_t first_channel, int64_t y, int64_t x,
                     int64_t images, int64_t channels, int64_t height, int64_t width) const;
  ImageRegion whole() const;
  ImageRegion region(const ImageBlock& b) const { return region(b.image, b.channel, b.y, b.x, b.n, b.c, b.h, b.w); }
  ImageBlock whole_block() const {
    return ImageBlock{0, 0, 0, 0, number_of_images(), feature_channels(), height(), width()};
  }
  // The index of this image's first image among those of its allocation
  // (views of a batch), or -1 where it does not start on an image of it.
  int64_t first_in_allocation() const;
  // Whether this image and `other` may share memory: a quick test of their
  // spans (of one storage, where a backend keeps the pixels).
  bool may_share_memory(const Image& other) const;
  // Whether `block` of this image and `other_block` of `other` may share an
  // element: exactly for images of one allocation laid out alike (views of
  // one batch), by their memory spans otherwise.
  bool overlaps(const ImageBlock& block, const Image& other, const ImageBlock& other_block) const;
  // Whether the image's memory overlaps `buffer`'s (null: no).
  bool overlaps(const Buffer* buffer) const;
  // Identity of the pixels this image covers, for binding states to batches.
  uint64_t identity() const;

  // Host access with (N, C, H, W) arrays of `host_type` (float32, float16 or
  // uint8 matching the image) of `bytes` bytes, which must be the whole
  // image's. read checks synchronization first.
  void read(void* destination, size_t bytes, DataType host_type) const;
  void write(const void* source, size_t bytes, DataType host_type);
  // Host access to `block` of the image with host memory of the image's data
  // type whose element (n, c, y, x) of the block is at `host` +
  // n*stride.n + c*stride.c + y*stride.h + x*stride.w (elements); only the
  // block's elements are read or written (MPS readBytes:/writeBytes: with a
  // region). Throws ArgumentError for a block outside the image.
  void read(const ImageBlock& block, void* host, const ImageLayout& stride) const;
  void write(const ImageBlock& block, const void* host, const ImageLayout& stride);
  // A host write of zeros that is part of the image's creation.
  void fill_zero();
  // One batch of the images of `items` (equal sizes and formats): a view when
  // they are consecutive images of one allocation, otherwise a new image
  // filled by a copy recorded on `command_buffer` whose identity derives from
  // the items', so a state binds to the same list given twice.
  static std::shared_ptr<Image> gather(CommandBuffer& command_buffer,
                                       const std::vector<std::shared_ptr<Image>>& items);

  // MPS -synchronizeOnCommandBuffer:.
  void synchronize(CommandBuffer& command_buffer) { buffer_->synchronize(command_buffer); }

  // MPSTemporaryImage (MPSImage.h): an image made temporary is valid only on
  // its command buffer while its read count (1 at first) is above 0, and each
  // encode that reads it lowers the count by 1. Views of it, and batches
  // gathered from it, count against it too. The host never reads or writes
  // it ("strictly read and written by the GPU").
  void make_temporary(const CommandBuffer& command_buffer);
  // +[MPSTemporaryImage temporaryImageWithCommandBuffer:imageDescriptor:]: a
  // new temporary image on the command buffer's device, for that command
  // buffer, which must not be committed yet.
  static std::shared_ptr<Image> temporary(CommandBuffer& command_buffer, const ImageDescriptor& descriptor);
  bool is_temporary() const { return !lifetimes_.empty(); }
  // Of the image made temporary; 0 for other images.
  int64_t read_count() const;
  void set_read_count(int64_t count);
  // Throws StateError unless `kernel` may read or write the image on
  // `command_buffer`.
  void check_usable(const CommandBuffer& command_buffer, const char* kernel) const;
  // What a kernel that recorded a read of the image, or a write into it, on
  // `command_buffer` tells it: the buffer's host-access bookkeeping, and a
  // read lowers a temporary image's read count.
  void will_read(CommandBuffer& command_buffer);
  void will_write(CommandBuffer& command_buffer);
  // Throws SynchronizationError for a temporary image: the host (reads,
  // writes, DLPack) never touches one.
  void check_host_access() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  std::shared_ptr<ImageStorage> storage_;
  int64_t first_image_ = 0;  // of storage_, for views
  int64_t first_channel_ = 0;  // of the allocation's images, for views of some feature channels
  size_t byte_offset_ = 0;
  ImageDescriptor descriptor_;
  ImageLayout layout_;
  uint64_t identity_ = 0;  // set by gather
  // The temporary images this one is, is a view of, or was gathered from.
  std::vector<std::shared_ptr<TemporaryLifetime>> lifetimes_;
};

}  // namespace mpsx
