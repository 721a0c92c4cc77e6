// MPSCNNDropout, MPSCNNDropoutGradient and MPSCNNDropoutGradientState.
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/buffer.h"
#include "mpsx/kernel.h"

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

// The counter-based generator of the mask (docs/semantics.md, "Dropout"):
// whether the element at mask position (channel, y, x) is kept. The same
// integer arithmetic on every backend that computes the mask itself.
struct DropoutGenerator {
  uint64_t seed = 0;
  uint64_t threshold = 0;  // kept iff the hash's top 24 bits are below it

  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  static inline
#ifdef __CUDACC__
      __host__ __device__
#endif
      uint64_t mix(uint64_t z) {
    z += kGolden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
#ifdef __CUDACC__
  __host__ __device__
#endif
      bool kept(uint64_t channel, uint64_t y, uint64_t x) const {
    uint64_t h = mix(mix(mix(mix(seed) ^ channel) ^ y) ^ x);
    return (h >> 40) < threshold;
  }
};

DropoutGenerator dropout_generator(const DropoutDescriptor& d);

// MPSCNNDropoutGradientState: the mask of one forward encode, shared by
// every image of its batch. `mask` holds mask_channels x mask_height x
// mask_width bytes (1 kept, 0 dropped): the forward source's feature
// channels, height and width, each 1 where the mask stride broadcasts.
class DropoutGradientState : public GradientState {
 public:
  DropoutGradientState(std::shared_ptr<Device> device, const DropoutDescriptor& descriptor, int64_t channels,
                       int64_t height, int64_t width);
  const char* class_name() const override { return "MPSCNNDropoutGradientState"; }
  void synchronize(CommandBuffer& command_buffer) override;
  bool shares_memory(const Image& image) const override { return image.overlaps(mask_.get()); }

  const DropoutDescriptor& descriptor() const { return descriptor_; }
  const std::shared_ptr<Buffer>& mask() const { return mask_; }
  int64_t mask_channels() const { return channels_; }
  int64_t mask_height() const { return height_; }
  int64_t mask_width() const { return width_; }
  // Reads the mask (mask_channels x mask_height x mask_width bytes) into
  // `destination`; throws SynchronizationError unless the host may read it.
  void read_mask(void* destination) const;

  // What a backend keeps beside the mask (metal: the MPS state objects).
  std::shared_ptr<void> backend_state;

 private:
  DropoutDescriptor descriptor_;
  int64_t channels_, height_, width_;
  std::shared_ptr<Buffer> mask_;
};

// What a backend runs for dropout. Regions have equal extents; the mask
// position of a region's element (n, c, y, x) is (first_channel + c,
// first_y + y, first_x + x) in the forward source image, each taken as 0
// where the mask broadcasts.
struct DropoutOrigin {
  int64_t channel = 0, y = 0, x = 0;
};

class DropoutPrimitive {
 public:
  static constexpr const char* family = "dropout";
  using Descriptor = DropoutDescriptor;
  virtual ~DropoutPrimitive() = default;
  // Fills the state's whole mask, then y = x / keep where kept, else 0.
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                       const DropoutOrigin& origin, DropoutGradientState& state) const = 0;
  // dx = dy / keep where the state's mask kept, else 0. `source` is the
  // forward source (unread by cpu and cuda).
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient, const DropoutOrigin& origin,
                        const DropoutGradientState& state) const = 0;
};

class CNNDropout : public UnaryKernel {
 public:
  CNNDropout(std::shared_ptr<Device> device, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropout"; }
  const DropoutDescriptor& dropout_descriptor() const { return descriptor_; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  // Pointwise.
  InPlace in_place() const override { return InPlace::Exact; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  DropoutDescriptor descriptor_;
  std::shared_ptr<const DropoutPrimitive> primitive_;
};

class CNNDropoutGradient : public GradientKernel {
 public:
  CNNDropoutGradient(std::shared_ptr<Device> device, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropoutGradient"; }
  const DropoutDescriptor& dropout_descriptor() const { return descriptor_; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  // Pointwise.
  InPlace in_place(bool) const override { return InPlace::Exact; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  DropoutDescriptor descriptor_;
  std::shared_ptr<const DropoutPrimitive> primitive_;
};

}  // namespace mpsx
