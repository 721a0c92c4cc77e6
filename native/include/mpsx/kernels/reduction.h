// The kernels of MPS's reduction nodes (MPSNNGraphNodes.h): the spatial mean
// and its gradient, and MPSNNReduceFeatureChannelsSum.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mpsx/kernel.h"
#include "mpsx/kernels/pooling.h"

namespace mpsx {

class ExecutionContext;

enum class ReductionKind : int32_t { SpatialMean = 0, FeatureChannelsSum };

// One feature channel sum over fixed images and extents: the key a kernel
// caches its primitive under.
struct ReductionDescriptor {
  ImageDescriptor source, destination;
  int64_t images = 0, channels = 0, height = 0, width = 0;

  bool operator==(const ReductionDescriptor& o) const;
};

// What a backend runs for a ReductionDescriptor. The spatial mean and its
// gradient are average pooling with one window over the rectangle read, and
// run on the pooling family's primitive.
class ReductionPrimitive : public PrimitiveInterface<ReductionDescriptor> {
 public:
  static constexpr const char* family = "reduction";
  // destination (images x 1 x height x width) = weight * the sum over the
  // channels of source (images x channels x height x width).
  virtual void feature_channels_sum(ExecutionContext& context, const ImageRegion& source,
                                    const ImageRegion& destination, float weight) const = 0;
};

// MPSNNReduceUnary's clipRectSource: which part of the source to read.
// Throws ArgumentError for a position outside +-kMaxPosition or a negative
// size.
void check_clip_rect_source(const Region& clip_rect_source, const char* owner);

// What a spatial mean's forward encode leaves for its gradient: the source
// rectangle it averaged (MPSNNReduceUnary: the part of clipRectSource inside
// the source).
class ReductionGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  Region read;
};

// A reduction over the part of clip_rect_source inside the source, which
// replaces offset (MPSNNReduceUnary: "The latter is ignored"); every image
// of the batch is read. The spatial mean writes one pixel per image and
// channel; the feature channel sum one channel over the rectangle, times
// weight. The destination is written at clip_rect's origin.
class NNReduceUnary : public UnaryKernel {
 public:
  NNReduceUnary(std::shared_ptr<Device> device, ReductionKind kind);
  const char* class_name() const override;
  ReductionKind kind() const { return kind_; }
  // MPSNNReduceUnary.clipRectSource (MPSRectNoClip: the whole source).
  Region clip_rect_source = kRectNoClip;
  // MPSNNReduceFeatureChannelsSum.weight (the feature channel sum only).
  float weight = 1.0f;
  // The spatial mean's gradient; none for the feature channel sum (MPS has
  // no gradient of it).
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  void check_properties() const override;
  Offset source_offset() const override { return Offset{}; }
  // The destination's size follows clip_rect_source, which PaddingPlan does
  // not compare.
  bool reuses_padding() const override { return false; }
  int64_t destination_channels(const Image& source) const override;
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  // The part of clip_rect_source inside `source`; ShapeError where none is.
  Region source_rectangle(const Image& source) const;
  ReductionKind kind_;
  PrimitiveCache<PoolingDescriptor, PoolingPrimitive> means_;
  PrimitiveCache<ReductionDescriptor, ReductionPrimitive> sums_;
};

// The spatial mean's gradient: the source gradient's pixel divided by the
// rectangle's pixel count over the rectangle, zero elsewhere.
class NNReduceSpatialMeanGradient : public GradientKernel {
 public:
  explicit NNReduceSpatialMeanGradient(std::shared_ptr<Device> device);
  const char* class_name() const override { return "MPSNNReduceSpatialMeanGradient"; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  PrimitiveCache<PoolingDescriptor, PoolingPrimitive> primitives_;
};

// The average pooling pass of a spatial mean over `read` of images shaped
// as `source`, into one pixel per image and channel of `destination`.
PoolingDescriptor spatial_mean_pass(bool gradient, const Region& read, int64_t images, int64_t channels,
                                    const ImageDescriptor& source, const ImageDescriptor& destination);

}  // namespace mpsx
