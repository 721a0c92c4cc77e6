// MPSCNNKernel and MPSCNNGradientKernel: the properties every kernel has, the
// padding policy, and the encode sequence shared by all families.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpsx/image.h"
#include "mpsx/padding.h"
#include "mpsx/primitive.h"
#include "mpsx/state.h"
#include "mpsx/types.h"

namespace mpsx {

class CommandBuffer;
class Device;
class GradientKernel;
class Kernel;

// The footprint of a kernel's window in the source image.
struct Window {
  int64_t kernel_width = 1, kernel_height = 1;
  int64_t stride_x = 1, stride_y = 1;
  int64_t dilation_x = 1, dilation_y = 1;
  // Each at most kMaxDimension once check() passed.
  int64_t extent_x() const { return (kernel_width - 1) * dilation_x + 1; }
  int64_t extent_y() const { return (kernel_height - 1) * dilation_y + 1; }
  // Throws ArgumentError for a kernel size, stride or dilation rate outside
  // 1..kMaxDimension and ShapeError for an extent above kMaxDimension.
  void check(const char* kernel) const;
};

// Puts a property back as it was when the scope ends, for queries that run
// code which sets it.
template <class T>
class Restore {
 public:
  explicit Restore(T& slot) : slot_(slot), kept_(slot) {}
  ~Restore() { slot_ = kept_; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& slot_;
  T kept_;
};

// Backend primitives of one kernel, built once per configuration (shape,
// geometry) and reused by every later encode with it. Used on the encoding
// thread only; commands hold their primitive by shared_ptr.
template <class Key, class Primitive>
class PrimitiveCache {
 public:
  template <class Make>
  const std::shared_ptr<Primitive>& get(const Key& key, Make&& make) {
    if (last_ < entries_.size() && entries_[last_].first == key) return entries_[last_].second;
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].first == key) {
        last_ = i;
        return entries_[i].second;
      }
    std::shared_ptr<Primitive> made = make();
    entries_.emplace_back(key, std::move(made));
    last_ = entries_.size() - 1;
    return entries_.back().second;
  }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<Key, std::shared_ptr<Primitive>>> entries_;
  size_t last_ = 0;
};

// Which overlaps of a destination with an image an encode reads give the
// out-of-place result on cpu and cuda. On metal every overlap is refused, as
// MPS refuses it ("destinationImage may not alias sourceImage").
enum class InPlace {
  None,   // the destination may share no memory with the image
  Exact,  // or lie exactly over the elements it is computed from, in order
  Any,    // any overlap: the backends read the image before they write
};

// One image an encode reads, for Kernel::check_aliasing.
struct ReadImage {
  ReadImage(const Image* image, const char* role, InPlace in_place = InPlace::None, ImageBlock read = {},
            ImageBlock at = {})
      : image(image), role(role), in_place(in_place), read(read), at(at) {}
  const Image* image;  // skipped when null
  const char* role;    // "source image", "source gradient", ...
  InPlace in_place;
  // What the encode reads of it (InPlace::Exact; empty: all of it).
  ImageBlock read;
  // The elements read for the written block's, in its order (InPlace::Exact);
  // empty where no element is computed from the one it overwrites.
  ImageBlock at;
};

// Regions of `image` for a pass of geometry `g`, `channels` deep: the
// written region's size at the source's position (the read of a kernel that
// reads one source pixel per written pixel) or at the destination's, and
// every row and column from the source's image and channel (the read of a
// kernel whose window reaches around the region).
inline ImageRegion source_region(const Image& image, const Geometry& g, int64_t channels) {
  return image.region(g.source_image, g.source_channel, g.source_y, g.source_x, g.images, channels, g.height, g.width);
}
inline ImageRegion destination_region(const Image& image, const Geometry& g, int64_t channels) {
  return image.region(g.destination_image, g.destination_channel, g.y, g.x, g.images, channels, g.height, g.width);
}
inline ImageRegion whole_source_region(const Image& image, const Geometry& g, int64_t channels) {
  return image.region(g.source_image, g.source_channel, 0, 0, g.images, channels, image.height(), image.width());
}

// One pass over fixed images and region extents (softmax, the response
// normalizations): the part of the key a kernel caches its primitive under
// that these families share, and what a backend builds it from.
struct RegionPass {
  bool gradient = false;  // built for the gradient pass, else the forward pass
  // The region every image is read or written in: images x channels x
  // height x width.
  int64_t images = 0, channels = 0, height = 0, width = 0;
  // Forward: source (x) and destination (y). Gradient: source (the source
  // gradient dy), secondary (the forward image the gradient reads) and
  // destination (the destination gradient dx).
  ImageDescriptor source, secondary, destination;

  bool operator==(const RegionPass& o) const {
    return gradient == o.gradient && images == o.images && channels == o.channels && height == o.height &&
           width == o.width && source == o.source && secondary == o.secondary && destination == o.destination;
  }
};
// The pass over the region of `g`, `channels` deep.
RegionPass region_pass(bool gradient, const Geometry& g, int64_t channels, const ImageDescriptor& source,
                       const ImageDescriptor& secondary, const ImageDescriptor& destination);

// MPSImageAllocator: makes the destination of an encode that returns an
// image. Without one a kernel makes a new image of the descriptor.
class ImageAllocator {
 public:
  virtual ~ImageAllocator() = default;
  // An image of `descriptor`'s size, float32 or float16, for `kernel`.
  virtual std::shared_ptr<Image> image(CommandBuffer& command_buffer, const ImageDescriptor& descriptor,
                                       const Kernel& kernel) = 0;
};

// +[MPSImage defaultAllocator] (new images) and +[MPSTemporaryImage
// defaultAllocator] (temporary images of the command buffer, read count 1).
class DefaultImageAllocator final : public ImageAllocator {
 public:
  static const std::shared_ptr<DefaultImageAllocator>& for_images();
  static const std::shared_ptr<DefaultImageAllocator>& for_temporary_images();
  bool temporary() const { return temporary_; }
  // The allocator's image; the kernel is not needed (the header: "the MPS
  // implementations of this protocol don't need this field").
  std::shared_ptr<Image> make(CommandBuffer& command_buffer, const ImageDescriptor& descriptor) const;
  std::shared_ptr<Image> image(CommandBuffer& command_buffer, const ImageDescriptor& descriptor,
                               const Kernel&) override {
    return make(command_buffer, descriptor);
  }
  explicit DefaultImageAllocator(bool temporary) : temporary_(temporary) {}

 private:
  bool temporary_;
};

class Kernel : public std::enable_shared_from_this<Kernel> {
 public:
  explicit Kernel(std::shared_ptr<Device> device);
  virtual ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  // The MPS class name, for messages.
  virtual const char* class_name() const = 0;

  // MPSCNNKernel properties.
  Offset offset;
  Region clip_rect = kRectNoClip;
  EdgeMode edge_mode = EdgeMode::Zero;
  int64_t destination_feature_channel_offset = 0;
  int64_t source_feature_channel_offset = 0;
  // MPS's ULONG_MAX: every channel from source_feature_channel_offset on.
  int64_t source_feature_channel_max_count = std::numeric_limits<int64_t>::max();
  uint32_t padding_method = padding::kDefault;
  // The MPSNNPadding object padding_method came from, or null (bits alone);
  // its custom method runs where padding_method has the Custom bit.
  std::shared_ptr<const PaddingPolicy> padding_policy;
  std::string label;
  // MPSKernelOptions bits, kept and applied to nothing (docs/semantics.md).
  uint32_t options = 0;
  // MPSKernel's destinationImageAllocator (native only; the graph gives its
  // kernels its own).
  std::shared_ptr<ImageAllocator> destination_image_allocator;

  // Throws unless commands may be encoded onto `command_buffer`, a command
  // buffer of this kernel's device: every call that encodes checks it first.
  void check_command_buffer(const CommandBuffer& command_buffer) const;
  // Throws DeviceMismatchError unless `image` lives on this kernel's device.
  void check_device(const Image& image, const char* role) const;
  void check_device(const State& state, const char* role) const;
  // Throws StateError unless each image given (null: none) may be read or
  // written on `command_buffer`: temporary images only on theirs, while their
  // read count is above 0.
  void check_usable(const CommandBuffer& command_buffer, std::initializer_list<const Image*> images) const;

  // The gradient kernels of this forward kernel, one per source image it
  // reads (a binary kernel's primary, then its secondary), made with its
  // parameters and data source: how the graph makes gradient nodes. Empty
  // where MPS has no gradient (comparison, loss, which makes its own);
  // gradient kernels throw TypeMismatchError.
  virtual std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const { return {}; }

  // Whether edge_mode may be MIRROR, MIRROR_WITH_EDGE or CONSTANT: "The only
  // filter that currently supports this mode is MPSNNPad" (MPSCoreTypes.h).
  virtual bool extended_edge_modes() const { return false; }
  // MPSCNNKernel isBackwards: the strides are in the destination's frame, the
  // filter enlarging what a forward filter reduced (gradient kernels,
  // convolution transpose).
  virtual bool is_backwards() const { return false; }
  // MPSCNNKernel isStateModified: the encode writes the state it accepts. A
  // forward kernel fills its result state; a gradient kernel only reads its
  // gradient state unless it writes the gradients of trainable values there.
  virtual bool is_state_modified() const { return true; }
  // MPSCNNKernel appendBatchBarrier: the result is complete only once the
  // whole batch was encoded (batch statistics).
  virtual bool append_batch_barrier() const { return false; }

 protected:
  // The MPS padding policy: sets `offset` for `window` over `source` and
  // returns the size of the destination it implies.
  ImageDescriptor apply_padding(const Image& source, const Window& window,
                                int64_t destination_channels);
  // The same over a source of width x height pixels standing for `source`
  // (reverse filters pad their expanded source).
  ImageDescriptor apply_padding(const Image& source, int64_t width, int64_t height, const Window& window,
                                int64_t destination_channels);
  // The padding policy's last step: its custom method's descriptor for
  // `suggested` where it has one (runs_custom_padding), else `suggested`.
  // Checks the descriptor and the properties the method may have set.
  ImageDescriptor custom_padding(const std::vector<const Image*>& source_images,
                                 const std::vector<const State*>& source_states,
                                 const ImageDescriptor& suggested);
  // `d`, a destination's width, height and feature channels, for the source
  // images from offset.z on, in the source's float format (else float32);
  // ShapeError where offset.z is past them.
  ImageDescriptor with_source_images(const Image& source, ImageDescriptor d) const;
  // Throws ArgumentError for a property outside its limits (offset,
  // clip_rect, feature channel offsets): every encode, destination
  // descriptor query and result state calls it first, so the arithmetic of
  // the padding policy and of resolve() stays within int64_t.
  virtual void check_properties() const;
  // The destination of an encode given none: destination_image_allocator's,
  // or a new image of `descriptor`. Throws where an allocator's image is
  // not of `descriptor`'s size and a float format, or on another device.
  std::shared_ptr<Image> new_destination(CommandBuffer& command_buffer, const ImageDescriptor& descriptor) const;
  // The feature channels of `source` from source_feature_channel_offset on,
  // at most source_feature_channel_max_count ("if the value is too large, it
  // is truncated to be the remaining size in the image"); the offset lies
  // inside the source (UnaryKernel::check_source).
  int64_t source_slice(const Image& source) const;
  // Throws ShapeError unless the slice of `source` has the channels the
  // kernel reads: exactly that many where the offset is 0, at least that
  // many after a nonzero offset.
  void check_source_channels(const Image& source, int64_t source_channels) const;
  // Throws ShapeError unless the source pixels `g` maps its region to lie
  // in `source`: kernels that read one source pixel per result pixel have
  // nothing for edge_mode to pad.
  void check_reads_inside(const Image& source, const Geometry& g) const;
  // Throws ArgumentError, before anything is encoded, where `written` of
  // `destination` overlaps an image of `reads` in a way its InPlace does not
  // allow on this device.
  void check_aliasing(const Image& destination, const char* destination_role, const ImageBlock& written,
                      std::initializer_list<ReadImage> reads) const;
  // Throws ArgumentError where `destination` shares memory with a buffer of
  // `state` (null: none), which the encode reads or writes too.
  void check_aliasing(const Image& destination, const char* destination_role, const State* state) const;
  // The part of clip_rect inside `destination` (x, y, width, height);
  // throws ShapeError when they do not intersect.
  Region clipped_region(const Image& destination) const;
  // Resolves offset, clipRect and channel offsets against the images;
  // throws ShapeError when they do not fit.
  Geometry resolve(const Image& source, const Image& destination, const Window& window,
                   int64_t source_channels, int64_t destination_channels, const Offset& offset) const;

 private:
  std::shared_ptr<Device> device_;
};

// A forward kernel of one source image.
class UnaryKernel : public Kernel {
 public:
  using Kernel::Kernel;

  struct Encoded {
    std::shared_ptr<Image> image;
    std::shared_ptr<State> state;
  };

  // -encodeToCommandBuffer:sourceImage:[destinationState:]... Without a
  // destination the padding policy sizes a new one and sets offset (the
  // MPS encode that returns an image); with one, offset is used as set.
  // With a state (or want_state) the result state for the gradient is
  // returned too. `source_state` sizes the destination where the family
  // takes one (destination_descriptor).
  Encoded encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                 const std::shared_ptr<Image>& destination, const std::shared_ptr<State>& state,
                 bool want_state, const State* source_state = nullptr);

  // -destinationImageDescriptorForSourceImages:sourceStates:, without
  // changing the kernel (the encode that returns an image sets offset). Both
  // check the source as encode does.
  ImageDescriptor destination_image_descriptor(const Image& source);
  // -resultStateForSourceImage:sourceStates:destinationImage:. The state
  // binds to the batch of its first encode, which may be a batch that
  // `source` is one image of.
  std::shared_ptr<State> result_state(const Image& source);

 protected:
  // The family's result state, for a source encode checked.
  virtual std::shared_ptr<State> new_result_state(const Image& source);
  virtual Window window() const { return Window{}; }
  // The destination an encode without one makes: the padding policy's.
  // `source_state` is what the encode was given to size it by
  // (MPSImageSizeEncodingState: a convolution transpose's convolution
  // gradient state), or null; most families take none.
  virtual ImageDescriptor destination_descriptor(const Image& source, const State* source_state) {
    return apply_padding(source, window(), destination_channels(source));
  }
  // The offset resolve() uses.
  virtual Offset source_offset() const { return offset; }
  // Feature channels the kernel reads; most read the whole source_slice.
  virtual int64_t source_channels(const Image& source) const { return source_slice(source); }
  virtual int64_t destination_channels(const Image& source) const {
    return source_channels(source);
  }
  // Family checks of the source beyond channel counts (data type, size).
  virtual void check_source(const Image& source) const;
  virtual void check_state(const State& state) const;
  // How the destination may overlap the source (cpu, cuda).
  virtual InPlace in_place() const { return InPlace::None; }
  virtual void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                      const std::shared_ptr<Image>& destination, const Geometry& geometry,
                      const std::shared_ptr<State>& state) = 0;
  // Whether the padding policy's result depends on nothing but the source's
  // descriptor and the properties PaddingPlan compares.
  virtual bool reuses_padding() const { return true; }
  // The block an encode of geometry `g` writes, and what it reads of the
  // source, for check_aliasing.
  ImageBlock written_block(const Image& source, const Geometry& g) const;
  ReadImage source_read(const Image& source, const Geometry& g) const;

 private:
  // The padding policy's last result: an encode without a destination
  // repeats it while the source's descriptor and the properties it reads stay
  // the same, as in a training loop.
  struct PaddingPlan {
    bool repeats(const Kernel& kernel, const Image& source) const;
    void remember(const Kernel& kernel, const Image& source, const ImageDescriptor& destination,
                  const Geometry& geometry);
    bool valid = false;
    ImageDescriptor source_descriptor;
    Region clip_rect;
    uint32_t padding_method = 0;
    int64_t destination_feature_channel_offset = 0, source_feature_channel_offset = 0;
    int64_t source_feature_channel_max_count = 0;
    Offset offset;  // after the policy set it; z as it was
    ImageDescriptor destination;
    Geometry geometry;
  };
  PaddingPlan plan_;
};

// One source of an MPSCNNBinaryKernel: its offset, edge mode, strides and
// feature channel slice.
struct BinarySource {
  Offset offset;
  EdgeMode edge_mode = EdgeMode::Zero;
  // 0 repeats one pixel along that dimension (broadcasting).
  int64_t stride_x = 1, stride_y = 1;
  int64_t feature_channel_offset = 0;
  // MPS's ULONG_MAX: every channel from feature_channel_offset on.
  int64_t feature_channel_max_count = std::numeric_limits<int64_t>::max();
};

// Where one source of a binary encode is read for destination pixel
// (BinaryGeometry::x, y) of image destination_image, channel
// destination_channel. A broadcast dimension reads one position only.
struct BinarySourceGeometry {
  int64_t image = 0, channel = 0, x = 0, y = 0;
  int64_t stride_x = 1, stride_y = 1;
  bool broadcast_channels = false;
  // Extents of the block read: the destination's, 1 where broadcast.
  int64_t read_channels = 0, read_height = 0, read_width = 0;
};

// Where a binary forward encode read and wrote.
struct BinaryGeometry {
  int64_t destination_image = 0, images = 0, destination_channel = 0, channels = 0;
  int64_t x = 0, y = 0, width = 0, height = 0;  // destination region written
  BinarySourceGeometry primary, secondary;
};

// MPSNNBinaryGradientState: the forward geometry and both source shapes.
// GradientState's source_descriptor is the primary image's.
class BinaryGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  const char* class_name() const override { return "MPSNNBinaryGradientState"; }
  ImageDescriptor secondary_descriptor;
  uint64_t primary_identity = 0, secondary_identity = 0;
  BinaryGeometry binary_geometry;
};

// MPSCNNBinaryKernel: a forward kernel of a primary and a secondary image.
// Kernel's offset, edge_mode and source_feature_channel_offset are not read:
// each source has its own BinarySource.
class BinaryKernel : public Kernel {
 public:
  using Kernel::Kernel;
  using Encoded = UnaryKernel::Encoded;

  BinarySource primary, secondary;

  // -encodeToCommandBuffer:primaryImage:secondaryImage:[destinationState:]...
  // Without a destination one is made as destination_image_descriptor
  // says; the offsets are used as set either way.
  Encoded encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
                 const std::shared_ptr<Image>& secondary_image, const std::shared_ptr<Image>& destination,
                 const std::shared_ptr<State>& state, bool want_state);
  // The destination an encode without one makes: the padding policy's,
  // whose custom method alone may change the kernel.
  ImageDescriptor destination_image_descriptor(const Image& primary_image, const Image& secondary_image);
  // -resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage:.
  std::shared_ptr<State> result_state(const Image& primary_image, const Image& secondary_image);

  // Read-only window of each source (1 for pointwise kernels).
  virtual int64_t kernel_width(bool secondary) const { return 1; }
  virtual int64_t kernel_height(bool secondary) const { return 1; }
  virtual int64_t dilation_rate_x(bool secondary) const { return 1; }
  virtual int64_t dilation_rate_y(bool secondary) const { return 1; }
  // 0 repeats one feature channel of that source over every destination
  // channel (arithmetic's strideInFeatureChannels); 1 by default.
  virtual int64_t feature_channel_stride(bool secondary) const { return 1; }

 protected:
  // Throws ArgumentError for a property outside its limits (both sources'
  // offsets, strides, channel offsets and counts, and Kernel's).
  void check_properties() const override;
  // Data types and family checks of both sources.
  virtual void check_sources(const Image& primary_image, const Image& secondary_image) const;
  // The padding policy's size of the destination, before its custom method.
  ImageDescriptor padded_descriptor(const Image& primary_image, const Image& secondary_image) const;
  // How the destination may overlap the primary or the secondary image (cpu,
  // cuda); for a gradient kernel, the source gradient or its secondary image.
  virtual InPlace in_place(bool secondary) const { return InPlace::None; }
  virtual void check_state(const State& state) const;
  virtual std::shared_ptr<BinaryGradientState> new_result_state();
  // Feature channels of a source the kernel reads (its slice), and of the
  // destination: the sources' slices must agree unless one broadcasts.
  int64_t source_channels(const Image& image, bool secondary) const;
  int64_t destination_channels(const Image& primary_image, const Image& secondary_image) const;
  BinaryGeometry resolve(const Image& primary_image, const Image& secondary_image, const Image& destination) const;
  virtual void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
                      const std::shared_ptr<Image>& secondary_image, const std::shared_ptr<Image>& destination,
                      const BinaryGeometry& geometry, const std::shared_ptr<State>& state) = 0;

 private:
  void check_inputs(const Image& primary_image, const Image& secondary_image) const;
};

// What a gradient kernel's secondary image is: the forward source for most
// families, the forward result where the gradient is a function of it
// (softmax, log-softmax).
enum class GradientSecondary { ForwardSource, ForwardResult };

// MPSCNNGradientKernel, a binary kernel: the primary image is the gradient of
// the forward result, the secondary image the forward source or result as
// the family declares, and the state the forward's result state. The
// geometry of the forward encode comes from the state at every encode, as
// MPS sets it from the state in -destinationImageDescriptorForSourceImages:
// sourceStates:, so the gradient matches the forward pass without any setup;
// the primary and secondary properties, offsets, clip rect and kernel offsets
// set by hand are refused (check_properties).
class GradientKernel : public BinaryKernel {
 public:
  using BinaryKernel::BinaryKernel;

  int64_t kernel_offset_x = 0;
  int64_t kernel_offset_y = 0;

  std::shared_ptr<Image> encode(CommandBuffer& command_buffer,
                                const std::shared_ptr<Image>& source_gradient,
                                const std::shared_ptr<Image>& source_image,
                                const std::shared_ptr<State>& gradient_state,
                                const std::shared_ptr<Image>& destination_gradient);

  // The descriptor of the gradient of the forward source: its size, in the
  // source gradient's data type (a custom padding method may change that).
  ImageDescriptor destination_image_descriptor(const Image& source_gradient, const State& gradient_state);

  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
  bool is_backwards() const override { return true; }
  bool is_state_modified() const override { return false; }

 protected:
  // Also throws ArgumentError for geometry set by hand: a primary or
  // secondary property, offset, clip_rect, a feature channel offset or a
  // kernel offset away from its default.
  void check_properties() const override;
  // `expected` (the forward source's descriptor), as the padding policy's
  // custom method gives it: its format may change, its size may not.
  ImageDescriptor custom_gradient_padding(const std::vector<const Image*>& sources, const State& state,
                                          const ImageDescriptor& expected);
  virtual GradientSecondary gradient_secondary() const { return GradientSecondary::ForwardSource; }
  // The MPS class of the forward kernel whose states this kernel consumes:
  // MPS names each gradient kernel after its forward kernel, so by default
  // class_name() without "Gradient".
  virtual std::string_view forward_class_name() const;
  // The state this kernel consumes, or throws TypeMismatchError.
  virtual const GradientState& gradient_state_of(const State& state) const;
  // encode's checks of its arguments, for gradient kernels that write no image.
  void check_arguments(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                       const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& gradient_state) const;
  // Throws StateError unless `source_image` is the image of the forward
  // encode that made the state: its source (ForwardSource) or its result
  // (ForwardResult).
  virtual void check_source_image(State& state, const GradientState& forward, const Image& source_image) const;
  // Checks the images against the forward encode of the state.
  virtual void check(const Image& source_gradient, const Image& secondary_image,
                     const GradientState& state) const;
  // Kernel::check_aliasing for the destination gradient of an encode, which
  // may write all of it, against both images the encode reads.
  void check_aliasing(const Image& destination_gradient, const Image& source_gradient, const Image& source_image,
                      const GradientState& state) const;
  // For a pointwise forward geometry `g`: records zeros into the
  // destination gradient unless the forward pass read every pixel, channel
  // and image of its source, since what it did not read gets no gradient.
  static void record_zeros_outside(CommandBuffer& command_buffer, const std::shared_ptr<Image>& destination_gradient,
                                   const Geometry& g);
  // For a windowed forward geometry `g` over `source_image`: the same unless
  // the forward pass read every channel and image of its source.
  static void record_zeros_outside_slice(CommandBuffer& command_buffer,
                                         const std::shared_ptr<Image>& destination_gradient, const Image& source_image,
                                         const Geometry& g);
  virtual void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                      const std::shared_ptr<Image>& source_image,
                      const std::shared_ptr<State>& state,
                      const std::shared_ptr<Image>& destination_gradient) = 0;

 private:
  // BinaryKernel's forward encode, which a gradient kernel has no use for:
  // it encodes with a gradient state. Throws TypeMismatchError.
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
              const std::shared_ptr<Image>& secondary_image, const std::shared_ptr<Image>& destination,
              const BinaryGeometry& geometry, const std::shared_ptr<State>& state) final;
};

// Kernels whose destination may lie exactly over the elements it is
// computed from (InPlace::Exact): pointwise kernels, and those that read
// what they need of each element before they write it.
class InPlaceUnaryKernel : public UnaryKernel {
 protected:
  using UnaryKernel::UnaryKernel;
  InPlace in_place() const final { return InPlace::Exact; }
};

class InPlaceGradientKernel : public GradientKernel {
 protected:
  using GradientKernel::GradientKernel;
  InPlace in_place(bool) const final { return InPlace::Exact; }
};

}  // namespace mpsx
