// MPSCNNUpsamplingNearest / Bilinear and their gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

enum class UpsamplingKind : int32_t { Nearest = 0, Bilinear };

// One upsampling pass over fixed images and geometry: the key a kernel
// caches its primitive under. The forward pass reads whole source images
// (images x channels x source_height x source_width) and writes a region of
// width x height destination pixels whose first pixel is column first_x, row
// first_y of the upsampled image (source size times the scale factors).
struct UpsamplingDescriptor {
  UpsamplingKind kind = UpsamplingKind::Nearest;
  bool gradient = false;
  bool align_corners = false;
  int64_t scale_x = 1, scale_y = 1;
  // The forward source and destination images: x and y for the forward pass,
  // the destination gradient and the source gradient for the gradient pass.
  ImageDescriptor source, destination;
  int64_t images = 0, channels = 0;
  int64_t source_width = 0, source_height = 0;
  int64_t first_x = 0, first_y = 0, width = 0, height = 0;

  bool operator==(const UpsamplingDescriptor& o) const;
};

// Where upsampled pixel u reads along one axis: (1 - lambda) * x[i0] +
// lambda * x[i1], as torch.nn.functional.interpolate computes with integer
// scale factors (docs/semantics.md, "Upsampling").
struct UpsamplingTap {
  int64_t i0 = 0, i1 = 0;
  float lambda = 0;
};
// The taps of upsampled pixels first .. first + count - 1 of an axis of
// `size` source pixels scaled by `scale`.
std::vector<UpsamplingTap> upsampling_taps(UpsamplingKind kind, bool align_corners, int64_t scale, int64_t size,
                                           int64_t first, int64_t count);
// For each source pixel of the axis, the range [begin, end) of tap indices
// that read it (begin == end where none does).
std::vector<std::pair<int64_t, int64_t>> upsampling_readers(const std::vector<UpsamplingTap>& taps, int64_t size);
// The weight with which tap t reads source pixel i.
inline float upsampling_weight(const UpsamplingTap& t, int64_t i) {
  return (t.i0 == i ? 1.0f - t.lambda : 0.0f) + (t.i1 == i ? t.lambda : 0.0f);
}

// What a backend runs for an UpsamplingDescriptor: `source` covers the whole
// source images and channels (for the gradient pass: `destination_gradient`),
// `destination` (`source_gradient`) the region written (read).
class UpsamplingPrimitive : public PrimitiveInterface<UpsamplingDescriptor> {
 public:
  static constexpr const char* family = "upsampling";
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
  // Writes every pixel of destination_gradient: the transpose of the
  // forward interpolation applied to source_gradient.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                        const ImageRegion& destination_gradient) const = 0;
};

// The scale factors and corner alignment shared by the four kernels.
class UpsamplingParameters {
 public:
  // Throws ArgumentError for a scale factor outside 1..kMaxDimension.
  UpsamplingParameters(UpsamplingKind kind, bool gradient, int64_t scale_x, int64_t scale_y, bool align_corners);
  const char* upsampling_class_name() const { return class_name_; }
  UpsamplingKind kind() const { return kind_; }
  int64_t scale_factor_x() const { return scale_x_; }
  int64_t scale_factor_y() const { return scale_y_; }
  bool align_corners() const { return align_corners_; }

 protected:
  UpsamplingDescriptor describe(const Geometry& g, int64_t channels, int64_t source_width, int64_t source_height,
                                const ImageDescriptor& source, const ImageDescriptor& destination) const;

 private:
  const char* class_name_;
  UpsamplingKind kind_;
  bool gradient_;
  int64_t scale_x_, scale_y_;
  bool align_corners_;
};

// What an upsampling forward encode leaves for its gradient: the geometry,
// and the scale factors and alignment the gradient must share.
class UpsamplingGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  int64_t scale_x = 1, scale_y = 1;
  bool align_corners = false;
};

class CNNUpsampling : public UnaryKernel, public UpsamplingParameters {
 public:
  CNNUpsampling(std::shared_ptr<Device> device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                bool align_corners = false);
  const char* class_name() const override { return upsampling_class_name(); }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  PrimitiveCache<UpsamplingDescriptor, UpsamplingPrimitive> primitives_;
};

class CNNUpsamplingGradient : public GradientKernel, public UpsamplingParameters {
 public:
  CNNUpsamplingGradient(std::shared_ptr<Device> device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                        bool align_corners = false);
  const char* class_name() const override { return upsampling_class_name(); }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  PrimitiveCache<UpsamplingDescriptor, UpsamplingPrimitive> primitives_;
};

}  // namespace mpsx
