// The metal backend: MetalPerformanceShaders over MTLBuffers of shared
// storage and MPSImages. A command queue is an MTLCommandQueue: commit encodes
// the command buffer's commands onto an MTLCommandBuffer, and its completed
// handler finishes the mpsx command buffer. Each kernel family's primitive
// (<family>.mm) holds the MPS kernel objects and encodes them.
#pragma once

#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "mpsx/backend.h"
#include "mpsx/registry.h"
#include "mpsx/buffer.h"
#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"
#include "mpsx/image.h"
#include "mpsx/kernels/neuron.h"

namespace mpsx::metal {

// Where an address mpsx handed out lies: its MTLBuffer and the offset in it.
struct BufferAddress {
  id<MTLBuffer> buffer;
  NSUInteger offset = 0;
};

// An mpsx Image on metal: an MPSImageBatch, one MPSImage per image.
class MetalImageStorage final : public ImageStorage {
 public:
  explicit MetalImageStorage(MPSImageBatch* images) : images(images) {}
  MPSImageBatch* const images;
};

// The MPSImages of images [region.image, region.image + region.n) of a
// region of a metal image: the batch itself, with no new array, when the
// region covers all of it.
MPSImageBatch* images_of(const ImageRegion& region);
// Image `index` of the region.
MPSImage* image_of(const ImageRegion& region, int64_t index = 0);
MPSImageFeatureChannelFormat feature_channel_format(DataType type);
// A descriptor of single-image MPSImages (textures the GPU reads and writes).
MPSImageDescriptor* image_descriptor(DataType type, int64_t width, int64_t height, int64_t channels);
// `count` MPSTemporaryImages of that descriptor, for intermediates that live
// within one command buffer.
NSArray<MPSTemporaryImage*>* temporary_images(id<MTLCommandBuffer> command_buffer, DataType type, int64_t width,
                                              int64_t height, int64_t channels, int64_t count);

// A size or index as the NSUInteger MPS properties and initializers take.
inline NSUInteger ns(int64_t value) { return static_cast<NSUInteger>(value); }

// A region as MPS kernel properties name it.
// The region's first pixel, as offsets name source pixels.
MPSOffset origin_of(const ImageRegion& region);
// The region's pixels as a clipRect; batch encodes address each
// single-image MPSImage at z 0.
MTLRegion clip_rect_of(const ImageRegion& region);
// The region's first channel as a feature channel offset, which MPS wants a
// multiple of 4 (a texture slice); throws ArgumentError otherwise.
NSUInteger feature_channel_offset(const ImageRegion& region);
// The region's channels rounded up to whole slices, for the feature channel
// max counts.
NSUInteger slice_channels(const ImageRegion& region);
// A region's channels exactly, for kernels whose channel count must not be
// rounded up to whole slices (it would read or write channels beyond it).
inline NSUInteger exact_channels(const ImageRegion& region) { return static_cast<NSUInteger>(region.c); }
// What a kernel's feature channel max counts take of a region: whole slices
// (slice_channels) or exactly its channels (exact_channels).
using ChannelsOf = NSUInteger (*)(const ImageRegion& region);
// Points a kernel at the source's channels, read from `offset`, and at the
// destination's pixels and first channel.
void set_regions(MPSCNNKernel* kernel, MPSOffset offset, const ImageRegion& source, const ImageRegion& destination,
                 ChannelsOf channels);
// Points a gradient kernel at the source gradient (primary), the forward
// source (secondary, read from `secondary_offset`) and the destination
// gradient's pixels and first channel.
void set_gradient_regions(MPSCNNGradientKernel* gradient, const ImageRegion& source_gradient,
                          const ImageRegion& source, MPSOffset secondary_offset,
                          const ImageRegion& destination_gradient, ChannelsOf channels);
// The gradient kernel's batch encode, into the destination gradient.
void encode_gradient_batch(MPSCNNGradientKernel* gradient, id<MTLCommandBuffer> command_buffer,
                           MPSImageBatch* source_gradients, MPSImageBatch* sources, MPSStateBatch* states,
                           const ImageRegion& destination_gradient);
// A forward kernel's batch encode of the source into the destination.
void encode_batch(MPSCNNKernel* kernel, id<MTLCommandBuffer> command_buffer, const ImageRegion& source,
                  const ImageRegion& destination);
// The gradient encode of a family whose gradient states its forward kernel
// makes: `forward`, set up as for its pass on the source into the source
// gradient, makes them; the gradient kernel, its own properties set, then
// reads the source gradient and the forward source (from
// `secondary_offset`).
void encode_gradient_with_forward_states(MPSCNNKernel* forward, MPSCNNGradientKernel* gradient,
                                         id<MTLCommandBuffer> command_buffer, const ImageRegion& source_gradient,
                                         const ImageRegion& source, MPSOffset secondary_offset,
                                         const ImageRegion& destination_gradient, ChannelsOf channels);
// The passes of a family whose forward kernel reads `channels` of the source
// from `offset` and whose gradient kernel reads the states the forward kernel
// makes: the forward pass, and the gradient pass, which sets the forward
// kernel up as for its pass on the forward source (the destination
// gradient's region) into the source gradient.
void encode_forward(MPSCNNKernel* forward, id<MTLCommandBuffer> command_buffer, MPSOffset offset,
                    const ImageRegion& source, const ImageRegion& destination, ChannelsOf channels);
void encode_gradient_of_forward(MPSCNNKernel* forward, MPSCNNGradientKernel* gradient,
                                id<MTLCommandBuffer> command_buffer, MPSOffset offset,
                                const ImageRegion& source_gradient, const ImageRegion& destination_gradient,
                                ChannelsOf channels);
// A normalization kernel's alpha, beta and delta (cross-channel, spatial and
// local contrast normalization, forward or gradient) from its parameters.
template <class Kernel, class Parameters>
void set_alpha_beta_delta(Kernel* kernel, const Parameters& p) {
  kernel.alpha = p.alpha;
  kernel.beta = p.beta;
  kernel.delta = p.delta;
}
// The MPSNNNeuronDescriptor of a neuron (neuron.mm); a PReLU one with the
// slopes from `first_slope` on.
MPSNNNeuronDescriptor* neuron_descriptor(const NeuronDescriptor& neuron, size_t first_slope = 0);

// Memory, images and queues of one MTLDevice.
class MetalBackend final : public Backend {
 public:
  explicit MetalBackend(id<MTLDevice> device);
  const char* kind() const override { return "metal"; }
  bool host_addressable() const override { return true; }
  bool writes_in_place() const override { return false; }
  std::string device_name() const override { return "metal"; }
  // Shared storage: on unified memory the buffer's contents pointer is a
  // host address, so host copies are plain memcpy once the GPU is done.
  void* allocate(size_t bytes) override;
  void deallocate(void* data, size_t bytes) override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_from_host(void* device, const void* host, size_t bytes) override;
  void fill_zero(void* device, size_t bytes) override;
  // -[MPSImage readBytes:...] / writeBytes: per image.
  void read_region(const ImageRegion& device, const ImageRegion& host) override;
  void write_region(const ImageRegion& host, const ImageRegion& device) override;
  ImageLayout image_layout(const ImageDescriptor& descriptor) const override;
  // An MPSImageBatch of shared-storage MPSImages.
  std::shared_ptr<ImageStorage> new_image_storage(const ImageDescriptor& descriptor) override;
  std::unique_ptr<Executor> new_executor() override;

  id<MTLDevice> device() const { return device_; }
  // Throws Error for an address no buffer of this device holds.
  BufferAddress address_of(const void* data) const;
  // A zeroed buffer of at least `bytes`, for clearing textures with blits.
  id<MTLBuffer> zeros(NSUInteger bytes);

 private:
  id<MTLDevice> device_;
  mutable std::mutex buffers_mutex_;
  std::map<uintptr_t, id<MTLBuffer>> buffers_;  // by contents address
  std::mutex zeros_mutex_;
  id<MTLBuffer> zeros_;
};

// The registration of a family's implementation I of P on this backend
// (mpsx::Registered, registry.h).
template <class P, class I>
using Registered = mpsx::Registered<P, I, MetalBackend>;

// What commands get while a metal queue encodes them: the MTLCommandBuffer.
class MetalContext final : public ExecutionContext {
 public:
  MetalContext(MetalBackend& backend, id<MTLCommandBuffer> command_buffer)
      : backend_(backend), command_buffer_(command_buffer) {}
  void copy(void* destination, const void* source, size_t bytes) override;
  void fill_zero(void* destination, size_t bytes) override;
  void copy_images(const Image& from, const Image& to, int64_t first) override;
  void fill_zero_image(const Image& image) override;
  // Zeroes the texture slices that hold the region's channels, all pixels of
  // the region's images.
  void fill_zero_slices(const ImageRegion& region);

  MetalBackend& backend() const { return backend_; }
  id<MTLCommandBuffer> command_buffer() const { return command_buffer_; }

 private:
  MetalBackend& backend_;
  id<MTLCommandBuffer> command_buffer_;
};

inline MetalContext& context_of(ExecutionContext& context) { return static_cast<MetalContext&>(context); }

// MPSCNNKernel: "destinationImage may not alias sourceImage". Throws
// ArgumentError naming `kernel` when the regions share an image.
inline void check_distinct(const char* kernel, const ImageRegion& source, const ImageRegion& destination) {
  if (source.storage == destination.storage && source.image < destination.image + destination.n &&
      destination.image < source.image + source.n)
    fail<ArgumentError>(kernel,
                        ": MPS kernels may not write the images they read (in place); write the result elsewhere");
}

// For MPS's normalization kernels, whose weights, statistics and gradients
// are float32 arrays in MTLBuffers (batch, instance and group normalization).

// The bytes of `count` float32.
inline NSUInteger bytes_of(int64_t count) { return static_cast<NSUInteger>(count) * sizeof(float); }

inline BufferAddress address(MetalContext& metal, const float* values) { return metal.backend().address_of(values); }

inline BufferAddress address(MetalContext& metal, const std::shared_ptr<Buffer>& buffer) {
  return address(metal, static_cast<const float*>(buffer->data()));
}

// The MTLBuffer that holds `values` from its start: MPS's normalization
// states (MPSCNNNormalizationGammaAndBetaState, ...MeanAndVarianceState)
// take whole MTLBuffers. Throws Error for an array that starts inside one.
inline id<MTLBuffer> whole_buffer(MetalContext& metal, const float* values, const char* kernel, const char* name) {
  const BufferAddress a = address(metal, values);
  if (a.offset != 0)
    fail<Error>("metal: ", kernel, " reloads ", name, " from a whole MTLBuffer; the ", name, " array starts ",
                a.offset, " bytes into one");
  return a.buffer;
}

// `channels` float32 from `a`, as the one-row matrix MPS's matrix kernels take.
inline MPSMatrix* row(const BufferAddress& a, int64_t channels) {
  MPSMatrixDescriptor* descriptor = [MPSMatrixDescriptor matrixDescriptorWithRows:1
                                                                          columns:static_cast<NSUInteger>(channels)
                                                                         rowBytes:bytes_of(channels)
                                                                         dataType:MPSDataTypeFloat32];
  return [[MPSMatrix alloc] initWithBuffer:a.buffer offset:a.offset descriptor:descriptor];
}

}  // namespace mpsx::metal
