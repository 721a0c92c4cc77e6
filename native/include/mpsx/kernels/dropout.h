// MPSCNNDropout, MPSCNNDropoutGradient and MPSCNNDropoutGradientState.
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/buffer.h"
#include "mpsx/kernel.h"
#include "mpsx/philox.h"

namespace mpsx {

class ExecutionContext;

// The parameters MPSCNNDropout and its gradient are made with.
struct DropoutDescriptor {
  float keep_probability = 1.0f;
  uint64_t seed = 0;
  // maskStrideInPixels x, y, z (feature channels): 1 for a mask value per
  // position, 0 to broadcast one value along that dimension.
  int64_t mask_stride_x = 1, mask_stride_y = 1, mask_stride_z = 1;

  bool operator==(const DropoutDescriptor& o) const {
    return keep_probability == o.keep_probability && seed == o.seed && mask_stride_x == o.mask_stride_x &&
           mask_stride_y == o.mask_stride_y && mask_stride_z == o.mask_stride_z;
  }
  // Throws ArgumentError for keep_probability outside (0, 1] or a mask
  // stride other than 0 or 1.
  void validate(const char* kernel) const;
};

// The mask's generator (docs/semantics.md, "Dropout"): Philox4x32-10 keyed
// by the seed, its counter (block, encode) with `encode` the forward
// kernel's encode index. Mask element e (in the state's images x channels x
// height x width order) is word e % 4 of block e / 4, kept iff that word is
// below `threshold`. Every backend that computes the mask itself uses this.
struct DropoutGenerator {
  uint64_t seed = 0;
  uint64_t encode = 0;
  uint64_t threshold = 0;  // ceil(keep_probability * 2^32)

  MPSX_HOST_DEVICE Philox4x32 block(uint64_t index) const {
    return philox4x32_10(Philox4x32{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                     static_cast<uint32_t>(encode), static_cast<uint32_t>(encode >> 32)}},
                         static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
  MPSX_HOST_DEVICE bool kept(uint32_t word) const { return word < threshold; }
};

// The generator of a kernel's `encode`-th forward encode (from 0).
DropoutGenerator dropout_generator(const DropoutDescriptor& d, uint64_t encode);

// MPSCNNDropoutGradientState: the mask of one forward encode, one object for
// its whole batch (MPSCNNDropout.h: "same state is used across entire
// batch"). `mask` holds mask_images x mask_channels x mask_height x
// mask_width bytes (1 kept, 0 dropped): the forward source's images, feature
// channels, height and width, the last three 1 where the mask stride
// broadcasts. The forward encode that fills it writes it whole, so a
// gradient encoded later, on any command buffer, reads that encode's mask.
class DropoutGradientState : public GradientState {
 public:
  DropoutGradientState(std::shared_ptr<Device> device, const DropoutDescriptor& descriptor, int64_t images,
                       int64_t channels, int64_t height, int64_t width);
  const char* class_name() const override { return "MPSCNNDropoutGradientState"; }
  void synchronize(CommandBuffer& command_buffer) override;
  bool shares_memory(const Image& image) const override { return image.overlaps(mask_.get()); }

  const DropoutDescriptor& descriptor() const { return descriptor_; }
  const std::shared_ptr<Buffer>& mask() const { return mask_; }
  int64_t mask_images() const { return images_; }
  int64_t mask_channels() const { return channels_; }
  int64_t mask_height() const { return height_; }
  int64_t mask_width() const { return width_; }
  // Also throws ShapeError unless the mask has the shape `source` needs.
  void check_bindable(const Image& source, const char* kernel) const override;
  // Reads the mask (mask_images x ... x mask_width bytes) into
  // `destination`; throws SynchronizationError unless the host may read it.
  void read_mask(void* destination) const;

  // What a backend keeps beside the mask (metal: the MPS state objects).
  std::shared_ptr<void> backend_state;

 private:
  DropoutDescriptor descriptor_;
  int64_t images_, channels_, height_, width_;
  std::shared_ptr<Buffer> mask_;
};

// What a backend runs for dropout. Regions have equal extents; the mask
// position of a region's element (n, c, y, x) is the origin plus (n, c, y,
// x), the channel, y or x taken as 0 where the mask broadcasts.
struct DropoutOrigin {
  int64_t image = 0, channel = 0, y = 0, x = 0;
};

class DropoutPrimitive : public PrimitiveInterface<DropoutDescriptor> {
 public:
  static constexpr const char* family = "dropout";
  // Fills the state's whole mask from `generator`, then y = x / keep where
  // kept, else 0.
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                       const DropoutOrigin& origin, const DropoutGenerator& generator,
                       DropoutGradientState& state) const = 0;
  // dx = dy / keep where the state's mask kept, else 0. `source` is the
  // forward source (unread by cpu and cuda).
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient, const DropoutOrigin& origin,
                        const DropoutGradientState& state) const = 0;
};

// In place: pointwise.
class CNNDropout : public InPlaceUnaryKernel {
 public:
  CNNDropout(std::shared_ptr<Device> device, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropout"; }
  const DropoutDescriptor& dropout_descriptor() const { return descriptor_; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  DropoutDescriptor descriptor_;
  std::shared_ptr<const DropoutPrimitive> primitive_;
  // Forward encodes so far: each draws the masks of its own counter.
  uint64_t encodes_ = 0;
};

// In place: pointwise.
class CNNDropoutGradient : public InPlaceGradientKernel {
 public:
  CNNDropoutGradient(std::shared_ptr<Device> device, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropoutGradient"; }
  const DropoutDescriptor& dropout_descriptor() const { return descriptor_; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  DropoutDescriptor descriptor_;
  std::shared_ptr<const DropoutPrimitive> primitive_;
};

}  // namespace mpsx
