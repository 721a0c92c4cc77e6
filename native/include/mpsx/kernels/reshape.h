// MPSNNPad, MPSNNReshape and their gradients (MPSNNReshape.h): kernels that
// move elements without arithmetic, except the pad gradient's sums.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

enum class ReshapeKind : int32_t { Pad = 0, Reshape };

// MPSImageCoordinate: a position or an extent in x, y and feature channels.
struct ImageCoordinate {
  int64_t x = 0, y = 0, channel = 0;
  bool operator==(const ImageCoordinate& o) const { return x == o.x && y == o.y && channel == o.channel; }
};

// One pad or reshape pass over fixed images and geometry: the key a kernel
// caches its primitive under.
struct ReshapeDescriptor {
  ReshapeKind kind = ReshapeKind::Pad;
  bool gradient = false;
  EdgeMode edge_mode = EdgeMode::Zero;
  // EdgeMode::Constant: the value of every channel written, or one per
  // channel written (the kernel's fill value array, which outlives it).
  float fill_value = 0;
  std::shared_ptr<const std::vector<float>> fill_values;
  // The forward source and destination images: x and y for the forward pass,
  // the destination gradient and the source gradient for the gradient pass.
  ImageDescriptor source, destination;
  int64_t images = 0;
  // The source slice the forward pass reads (whole, every row and column).
  int64_t source_channels = 0, source_height = 0, source_width = 0;
  // The region the forward pass writes.
  int64_t channels = 0, height = 0, width = 0;
  // Pad: the source position, relative to the slice, that the region's first
  // element reads (negative or past the slice where it is padding).
  int64_t first_channel = 0, first_y = 0, first_x = 0;

  bool operator==(const ReshapeDescriptor& o) const;
};

// Where each of `count` padded positions from `first` reads along an axis of
// `size` source positions: the source index, or -1 for the fill value (Zero,
// Constant). Clamp repeats the edge, Mirror reflects about the edge element,
// MirrorWithEdge about the border (MPSCoreTypes.h, MPSImageEdgeMode).
std::vector<int64_t> pad_map(EdgeMode mode, int64_t size, int64_t first, int64_t count);
// The inverse of a pad map over `size` source positions: the positions that
// read source index i are readers[begin[i] .. begin[i + 1]).
struct PadReaders {
  std::vector<int64_t> begin, readers;
};
PadReaders pad_readers(const std::vector<int64_t>& map, int64_t size);

// What a backend runs for a ReshapeDescriptor.
class ReshapePrimitive : public PrimitiveInterface<ReshapeDescriptor> {
 public:
  static constexpr const char* family = "reshape";
  // Pad: `destination` (the region written) reads `source` (the whole slice)
  // through the pad maps of its three axes, the fill value where one is -1.
  // Reshape: the elements of `source` in height x width x channels order
  // laid into `destination` in the same order (docs/semantics.md, "Reshape").
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
  // Writes every element of destination_gradient (the whole forward source
  // slice). Pad: the sum of the source_gradient elements that read it.
  // Reshape: source_gradient reshaped back.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                        const ImageRegion& destination_gradient) const = 0;
};

// What a pad or reshape forward encode leaves for its gradient beyond the
// geometry: the edge mode, the channels written and where they start.
class ReshapeGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  ReshapeKind kind = ReshapeKind::Pad;
  EdgeMode edge_mode = EdgeMode::Zero;
  int64_t first_channel = 0, channels = 0;
};

// The forward kernels share their state, of their kind, and how they record
// a pass.
class ReshapeKernel : public UnaryKernel {
 protected:
  ReshapeKernel(std::shared_ptr<Device> device, ReshapeKind kind);
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  // Records the pass `d` describes, after leaving in the state what its
  // gradient reads.
  void record_pass(CommandBuffer& command_buffer, const ReshapeDescriptor& d, const std::shared_ptr<Image>& source,
                   const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>& state);

 private:
  ReshapeKind kind_;
  PrimitiveCache<ReshapeDescriptor, ReshapePrimitive> primitives_;
};

// The gradient kernels run the pass their forward encode's state describes
// backwards.
class ReshapeGradientKernel : public GradientKernel {
 protected:
  ReshapeGradientKernel(std::shared_ptr<Device> device, ReshapeKind kind);
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  ReshapeKind kind_;
  PrimitiveCache<ReshapeDescriptor, ReshapePrimitive> primitives_;
};

// MPSNNPad. Destination pixel (x, y) of the clip rect reads source pixel
// offset + (x, y) - clip_rect.origin; destination channel
// destination_feature_channel_offset + j reads the source slice's channel
// j - padding_size_before.channel. Reads outside the image or the slice give
// what edge_mode says.
class NNPad : public ReshapeKernel {
 public:
  // fill_value_array (may be empty): one value per channel written.
  NNPad(std::shared_ptr<Device> device, ImageCoordinate padding_size_before = {},
        ImageCoordinate padding_size_after = {}, std::vector<float> fill_value_array = {});
  const char* class_name() const override { return "MPSNNPad"; }
  bool extended_edge_modes() const override { return true; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  ImageCoordinate padding_size_before, padding_size_after;
  float fill_value = 0;
  // Null where none was given.
  const std::shared_ptr<const std::vector<float>>& fill_value_array() const { return fill_values_; }

 protected:
  // Also ArgumentError for a padding size outside 0..kMaxDimension.
  void check_properties() const override;
  // Also ShapeError for a CONSTANT pad whose fill value array is shorter
  // than the channels written.
  void check_source(const Image& source) const override;
  int64_t destination_channels(const Image& source) const override;
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  // padding_size_before and _after size the destination: none of what
  // PaddingPlan compares.
  bool reuses_padding() const override { return false; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  std::shared_ptr<const std::vector<float>> fill_values_;
};

// MPSNNPadGradient: the edge mode and geometry come from the state.
class NNPadGradient : public ReshapeGradientKernel {
 public:
  explicit NNPadGradient(std::shared_ptr<Device> device)
      : ReshapeGradientKernel(std::move(device), ReshapeKind::Pad) {}
  const char* class_name() const override { return "MPSNNPadGradient"; }
};

// MPSNNReshape. The reshaped sizes are the encode's; else the kernel's (a
// graph node's), else the destination's, else the source's. offset.x, .y
// and clip_rect's x, y, width and height must keep their defaults.
class NNReshape : public ReshapeKernel {
 public:
  // 0, 0, 0: sized at each encode.
  NNReshape(std::shared_ptr<Device> device, int64_t reshaped_width = 0, int64_t reshaped_height = 0,
            int64_t reshaped_feature_channels = 0);
  const char* class_name() const override { return "MPSNNReshape"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  // -encodeToCommandBuffer:sourceImage:[destinationState:destinationStateIsTemporary:]
  // reshapedWidth:reshapedHeight:reshapedFeatureChannels: (0, 0, 0: as above).
  Encoded encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                 const std::shared_ptr<Image>& destination, const std::shared_ptr<State>& state, bool want_state,
                 int64_t reshaped_width, int64_t reshaped_height, int64_t reshaped_feature_channels);
  // -destinationImageDescriptorForSourceImages:sourceStates: with the sizes
  // an encode is given (0, 0, 0: the kernel's, else the source's).
  ImageDescriptor destination_image_descriptor(const Image& source, int64_t reshaped_width, int64_t reshaped_height,
                                               int64_t reshaped_feature_channels);
  const ImageCoordinate& reshaped() const { return reshaped_; }

 protected:
  void check_properties() const override;
  // Also ShapeError unless the reshaped sizes hold the slice's elements.
  void check_source(const Image& source) const override;
  int64_t destination_channels(const Image& source) const override;
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  bool reuses_padding() const override { return false; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  // x width, y height, channel feature channels; all 0 where unset.
  ImageCoordinate reshaped_;
  // Sets reshaped_ for one encode or query; the caller restores it.
  void size_for(int64_t width, int64_t height, int64_t channels, const Image* destination);
};

// MPSNNReshapeGradient.
class NNReshapeGradient : public ReshapeGradientKernel {
 public:
  explicit NNReshapeGradient(std::shared_ptr<Device> device)
      : ReshapeGradientKernel(std::move(device), ReshapeKind::Reshape) {}
  const char* class_name() const override { return "MPSNNReshapeGradient"; }
};

}  // namespace mpsx
