#include "backend.h"

#include <cstring>
#include <vector>

#include "mpsx/errors.h"

namespace mpsx::metal {

MPSImageBatch* images_of(const ImageRegion& region) {
  MPSImageBatch* batch = static_cast<const MetalImageStorage*>(region.storage)->images;
  if (region.image == 0 && static_cast<NSUInteger>(region.n) == batch.count) return batch;
  return [batch
      subarrayWithRange:NSMakeRange(static_cast<NSUInteger>(region.image), static_cast<NSUInteger>(region.n))];
}

MPSImage* image_of(const ImageRegion& region, int64_t index) {
  return static_cast<const MetalImageStorage*>(region.storage)->images[static_cast<NSUInteger>(region.image + index)];
}

MPSImageDescriptor* image_descriptor(DataType type, int64_t width, int64_t height, int64_t channels) {
  return [MPSImageDescriptor imageDescriptorWithChannelFormat:feature_channel_format(type)
                                                        width:static_cast<NSUInteger>(width)
                                                       height:static_cast<NSUInteger>(height)
                                              featureChannels:static_cast<NSUInteger>(channels)
                                               numberOfImages:1
                                                        usage:MTLTextureUsageShaderRead | MTLTextureUsageShaderWrite];
}

NSArray<MPSTemporaryImage*>* temporary_images(id<MTLCommandBuffer> command_buffer, DataType type, int64_t width,
                                              int64_t height, int64_t channels, int64_t count) {
  MPSImageDescriptor* descriptor = image_descriptor(type, width, height, channels);
  NSMutableArray<MPSTemporaryImage*>* images = [NSMutableArray arrayWithCapacity:static_cast<NSUInteger>(count)];
  for (int64_t i = 0; i < count; ++i)
    [images addObject:[MPSTemporaryImage temporaryImageWithCommandBuffer:command_buffer imageDescriptor:descriptor]];
  return images;
}

MPSOffset origin_of(const ImageRegion& region) {
  return MPSOffset{static_cast<NSInteger>(region.x), static_cast<NSInteger>(region.y), 0};
}

MTLRegion clip_rect_of(const ImageRegion& region) {
  return MTLRegionMake3D(static_cast<NSUInteger>(region.x), static_cast<NSUInteger>(region.y), 0,
                         static_cast<NSUInteger>(region.w), static_cast<NSUInteger>(region.h), 1);
}

NSUInteger feature_channel_offset(const ImageRegion& region) {
  if (region.channel % 4)
    fail<ArgumentError>("metal: MPS feature channel offsets are multiples of 4; given channel ", region.channel);
  return static_cast<NSUInteger>(region.channel);
}

NSUInteger slice_channels(const ImageRegion& region) { return static_cast<NSUInteger>((region.c + 3) / 4 * 4); }

void set_regions(MPSCNNKernel* kernel, MPSOffset offset, const ImageRegion& source, const ImageRegion& destination,
                 ChannelsOf channels) {
  kernel.offset = offset;
  kernel.clipRect = clip_rect_of(destination);
  kernel.sourceFeatureChannelOffset = feature_channel_offset(source);
  kernel.sourceFeatureChannelMaxCount = channels(source);
  kernel.destinationFeatureChannelOffset = feature_channel_offset(destination);
}

void set_gradient_regions(MPSCNNGradientKernel* gradient, const ImageRegion& source_gradient,
                          const ImageRegion& source, MPSOffset secondary_offset,
                          const ImageRegion& destination_gradient, ChannelsOf channels) {
  gradient.primaryOffset = origin_of(source_gradient);
  gradient.secondaryOffset = secondary_offset;
  gradient.clipRect = clip_rect_of(destination_gradient);
  gradient.primarySourceFeatureChannelOffset = feature_channel_offset(source_gradient);
  gradient.primarySourceFeatureChannelMaxCount = channels(source_gradient);
  gradient.secondarySourceFeatureChannelOffset = feature_channel_offset(source);
  gradient.secondarySourceFeatureChannelMaxCount = channels(source);
  gradient.destinationFeatureChannelOffset = feature_channel_offset(destination_gradient);
}

void encode_gradient_batch(MPSCNNGradientKernel* gradient, id<MTLCommandBuffer> command_buffer,
                           MPSImageBatch* source_gradients, MPSImageBatch* sources, MPSStateBatch* states,
                           const ImageRegion& destination_gradient) {
  [gradient encodeBatchToCommandBuffer:command_buffer
                       sourceGradients:source_gradients
                          sourceImages:sources
                        gradientStates:states
                  destinationGradients:images_of(destination_gradient)];
}

void encode_batch(MPSCNNKernel* kernel, id<MTLCommandBuffer> command_buffer, const ImageRegion& source,
                  const ImageRegion& destination) {
  [kernel encodeBatchToCommandBuffer:command_buffer
                        sourceImages:images_of(source)
                   destinationImages:images_of(destination)];
}

void encode_gradient_with_forward_states(MPSCNNKernel* forward, MPSCNNGradientKernel* gradient,
                                         id<MTLCommandBuffer> command_buffer, const ImageRegion& source_gradient,
                                         const ImageRegion& source, MPSOffset secondary_offset,
                                         const ImageRegion& destination_gradient, ChannelsOf channels) {
  MPSImageBatch* sources = images_of(source);
  MPSImageBatch* source_gradients = images_of(source_gradient);
  MPSStateBatch* states = [forward resultStateBatchForSourceImage:sources
                                                     sourceStates:nil
                                                 destinationImage:source_gradients];
  set_gradient_regions(gradient, source_gradient, source, secondary_offset, destination_gradient, channels);
  encode_gradient_batch(gradient, command_buffer, source_gradients, sources, states, destination_gradient);
}

void encode_forward(MPSCNNKernel* forward, id<MTLCommandBuffer> command_buffer, MPSOffset offset,
                    const ImageRegion& source, const ImageRegion& destination, ChannelsOf channels) {
  set_regions(forward, offset, source, destination, channels);
  encode_batch(forward, command_buffer, source, destination);
}

void encode_gradient_of_forward(MPSCNNKernel* forward, MPSCNNGradientKernel* gradient,
                                id<MTLCommandBuffer> command_buffer, MPSOffset offset,
                                const ImageRegion& source_gradient, const ImageRegion& destination_gradient,
                                ChannelsOf channels) {
  // The secondary image is the forward source; the gradient writes it.
  const ImageRegion& source = destination_gradient;
  set_regions(forward, offset, source, source_gradient, channels);
  encode_gradient_with_forward_states(forward, gradient, command_buffer, source_gradient, source, origin_of(source),
                                      destination_gradient, channels);
}

MPSImageFeatureChannelFormat feature_channel_format(DataType type) {
  switch (type) {
    case DataType::Float32: return MPSImageFeatureChannelFormatFloat32;
    case DataType::Float16: return MPSImageFeatureChannelFormatFloat16;
    case DataType::UInt8: return MPSImageFeatureChannelFormatUnorm8;
    case DataType::BFloat16: break;
  }
  fail<ArgumentError>("metal images hold float32, float16 or uint8 channels; given ", name_of(type));
}

MetalBackend::MetalBackend(id<MTLDevice> device) : device_(device) {}

ImageLayout MetalBackend::image_layout(const ImageDescriptor& descriptor) const { return nchw_layout(descriptor); }

std::shared_ptr<ImageStorage> MetalBackend::new_image_storage(const ImageDescriptor& d) {
  MPSImageDescriptor* descriptor = image_descriptor(d.channel_format, d.width, d.height, d.feature_channels);
  // Shared: the host reads and writes the texture where the GPU does.
  descriptor.storageMode = MTLStorageModeShared;
  NSMutableArray<MPSImage*>* images = [NSMutableArray arrayWithCapacity:static_cast<NSUInteger>(d.number_of_images)];
  for (int64_t i = 0; i < d.number_of_images; ++i) {
    MPSImage* image = [[MPSImage alloc] initWithDevice:device_ imageDescriptor:descriptor];
    if (!image.texture)
      fail<OutOfMemoryError>("out of memory: ", device_name(), " could not allocate image ", i, " of ",
                             d.number_of_images, " (", d.feature_channels, "x", d.height, "x", d.width, ")");
    [images addObject:image];
  }
  return std::make_shared<MetalImageStorage>(images);
}

namespace {

// The pixels of image `index` of a metal region, all feature channels, as
// MPSDataLayoutFeatureChannelsxHeightxWidth in the image's own format: the
// form -[MPSImage readBytes:] and writeBytes: move.
struct ImagePlanes {
  ImagePlanes(const ImageRegion& device, int64_t index) : image(image_of(device, index)) {
    const int64_t channels = static_cast<int64_t>(image.featureChannels);
    bytes.resize(static_cast<size_t>(channels * device.h * device.w) * size_of(device.data_type));
    region = MTLRegionMake3D(static_cast<NSUInteger>(device.x), static_cast<NSUInteger>(device.y), 0,
                             static_cast<NSUInteger>(device.w), static_cast<NSUInteger>(device.h), 1);
    bytes_per_row = static_cast<NSUInteger>(device.w) * size_of(device.data_type);
    all = MPSImageReadWriteParams{0, static_cast<NSUInteger>(channels)};
    planes.data_type = device.data_type;
    planes.n = 1;
    planes.c = device.c;
    planes.h = device.h;
    planes.w = device.w;
    planes.stride = ImageLayout{channels * device.h * device.w, device.h * device.w, device.w, 1};
    planes.data = bytes.data() + static_cast<size_t>(device.channel * planes.stride.c) * size_of(device.data_type);
  }
  void read() {
    [image readBytes:bytes.data() dataLayout:MPSDataLayoutFeatureChannelsxHeightxWidth bytesPerRow:bytes_per_row
                region:region featureChannelInfo:all imageIndex:0];
  }
  void write() {
    [image writeBytes:bytes.data() dataLayout:MPSDataLayoutFeatureChannelsxHeightxWidth bytesPerRow:bytes_per_row
               region:region featureChannelInfo:all imageIndex:0];
  }

  MPSImage* image;
  std::vector<char> bytes;
  MTLRegion region;
  NSUInteger bytes_per_row;
  MPSImageReadWriteParams all;
  ImageRegion planes;  // the region's channels within `bytes`
};

// Image n of a host region.
ImageRegion host_image(const ImageRegion& host, int64_t n) {
  ImageRegion one = host;
  one.n = 1;
  one.data = static_cast<char*>(host.data) + static_cast<size_t>(n * host.stride.n) * size_of(host.data_type);
  return one;
}

}  // namespace

void MetalBackend::read_region(const ImageRegion& device, const ImageRegion& host) {
  for (int64_t n = 0; n < device.n; ++n) {
    ImagePlanes image(device, n);
    image.read();
    copy_region(image.planes, host_image(host, n));
  }
}

void MetalBackend::write_region(const ImageRegion& host, const ImageRegion& device) {
  for (int64_t n = 0; n < device.n; ++n) {
    ImagePlanes image(device, n);
    // Feature channels are written four to a texture slice, all at once:
    // keep those outside the region.
    if (device.c != static_cast<int64_t>(image.image.featureChannels)) image.read();
    copy_region(host_image(host, n), image.planes);
    image.write();
  }
}

id<MTLBuffer> MetalBackend::zeros(NSUInteger bytes) {
  std::lock_guard<std::mutex> lock(zeros_mutex_);
  if (!zeros_ || zeros_.length < bytes) {
    zeros_ = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];  // zeroed by Metal
    if (!zeros_) fail<OutOfMemoryError>("out of memory: ", device_name(), " could not allocate ", bytes, " bytes");
  }
  return zeros_;
}

void* MetalBackend::allocate(size_t bytes) {
  id<MTLBuffer> buffer = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];
  if (!buffer) fail<OutOfMemoryError>("out of memory: ", device_name(), " could not allocate ", bytes, " bytes");
  void* data = [buffer contents];
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  buffers_[reinterpret_cast<uintptr_t>(data)] = buffer;
  return data;
}

void MetalBackend::deallocate(void* data, size_t) {
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  buffers_.erase(reinterpret_cast<uintptr_t>(data));  // ARC releases the MTLBuffer
}

void MetalBackend::copy_to_host(void* host, const void* device, size_t bytes) { std::memcpy(host, device, bytes); }

void MetalBackend::copy_from_host(void* device, const void* host, size_t bytes) { std::memcpy(device, host, bytes); }

void MetalBackend::fill_zero(void* device, size_t bytes) { std::memset(device, 0, bytes); }

BufferAddress MetalBackend::address_of(const void* data) const {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  auto it = buffers_.upper_bound(address);
  if (it != buffers_.begin()) {
    --it;
    if (address < it->first + [it->second length]) return {it->second, static_cast<NSUInteger>(address - it->first)};
  }
  fail<Error>("metal: address ", data, " is in no MTLBuffer of ", device_name());
}

void MetalContext::copy(void* destination, const void* source, size_t bytes) {
  const BufferAddress to = backend_.address_of(destination), from = backend_.address_of(source);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  [blit copyFromBuffer:from.buffer sourceOffset:from.offset toBuffer:to.buffer destinationOffset:to.offset size:bytes];
  [blit endEncoding];
}

void MetalContext::fill_zero(void* destination, size_t bytes) {
  const BufferAddress to = backend_.address_of(destination);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  [blit fillBuffer:to.buffer range:NSMakeRange(to.offset, bytes) value:0];
  [blit endEncoding];
}

}  // namespace mpsx::metal

namespace mpsx::metal {

void MetalContext::copy_images(const Image& from, const Image& to, int64_t first) {
  const ImageRegion source = from.whole(), destination = to.region(first, 0, 0, 0, from.number_of_images(), 0, 0, 0);
  // Slices of 4 feature channels: a view of some channels starts on one.
  const NSUInteger slices = static_cast<NSUInteger>((source.c + 3) / 4);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  for (int64_t i = 0; i < source.n; ++i)
    [blit copyFromTexture:image_of(source, i).texture
              sourceSlice:static_cast<NSUInteger>(source.channel / 4)
              sourceLevel:0
                toTexture:image_of(destination, i).texture
         destinationSlice:static_cast<NSUInteger>(destination.channel / 4)
         destinationLevel:0
               sliceCount:slices
               levelCount:1];
  [blit endEncoding];
}

void MetalContext::fill_zero_image(const Image& image) { fill_zero_slices(image.whole()); }

void MetalContext::fill_zero_slices(const ImageRegion& region) {
  MPSImage* first = image_of(region);
  const NSUInteger bytes_per_row = first.pixelSize * first.width, bytes_per_image = bytes_per_row * first.height;
  id<MTLBuffer> zeros = backend_.zeros(bytes_per_image);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  for (int64_t i = 0; i < region.n; ++i)
    for (int64_t slice = region.channel / 4; slice < (region.channel + region.c + 3) / 4; ++slice)
      [blit copyFromBuffer:zeros
               sourceOffset:0
          sourceBytesPerRow:bytes_per_row
        sourceBytesPerImage:bytes_per_image
                 sourceSize:MTLSizeMake(first.width, first.height, 1)
                  toTexture:image_of(region, i).texture
           destinationSlice:static_cast<NSUInteger>(slice)
           destinationLevel:0
          destinationOrigin:MTLOriginMake(0, 0, 0)];
  [blit endEncoding];
}

namespace {
std::vector<std::unique_ptr<Backend>> enumerate() {
  std::vector<std::unique_ptr<Backend>> list;
  // MPS runs on Apple GPUs with unified memory: the host-access rules of
  // shared storage above assume it.
  id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  if (!device)
    report_backend_unavailable("metal", "MTLCreateSystemDefaultDevice found no Metal device");
  else if (!device.hasUnifiedMemory)
    report_backend_unavailable("metal", std::string(device.name.UTF8String) + " has no unified memory");
  else if (!MPSSupportsMTLDevice(device))
    report_backend_unavailable("metal", std::string("MPSSupportsMTLDevice says no for ") + device.name.UTF8String);
  else
    list.push_back(std::make_unique<MetalBackend>(device));
  return list;
}
// Ranks above cuda and the cpu.
const bool registered = (register_backend(20, &enumerate), true);
}  // namespace

}  // namespace mpsx::metal
