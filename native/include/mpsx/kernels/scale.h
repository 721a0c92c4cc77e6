// MPSImageScale's resampling (MPSImageBilinearScale, MPSImageLanczosScale),
// the kernel of MPSNNScaleNode and its subclasses. MPS has no gradient of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

enum class ScaleKind : int32_t { Bilinear = 0, Lanczos };

// MPSScaleTransform: destination position = source position * scale +
// translate, per axis, in pixel-edge coordinates (docs/semantics.md,
// "Scale").
struct ScaleTransform {
  double scale_x = 1, scale_y = 1, translate_x = 0, translate_y = 0;
  bool operator==(const ScaleTransform& o) const {
    return scale_x == o.scale_x && scale_y == o.scale_y && translate_x == o.translate_x &&
           translate_y == o.translate_y;
  }
};
// Throws ArgumentError naming `owner` and `what` for a scale that is not
// finite and positive, or a translation that is not finite.
void check_scale_transform(const ScaleTransform& t, const char* owner, const char* what);

// One resampling pass over fixed images and geometry: the key a kernel
// caches its primitive under. The pass reads whole source images (images x
// channels x source_height x source_width) and writes width x height
// destination pixels; the first written column and row are first_x and
// first_y from clip_rect's origin, where the transform's destination
// coordinates start, and the source coordinates start at (offset_x,
// offset_y).
struct ScaleDescriptor {
  ScaleKind kind = ScaleKind::Bilinear;
  ScaleTransform transform;
  ImageDescriptor source, destination;
  int64_t images = 0, channels = 0;
  int64_t source_width = 0, source_height = 0;
  int64_t offset_x = 0, offset_y = 0;
  int64_t first_x = 0, first_y = 0, width = 0, height = 0;

  bool operator==(const ScaleDescriptor& o) const;
};

// The taps of one axis: destination pixel o (0 .. count - 1) is the sum
// over k < per_output of weight[o * per_output + k] times source pixel
// index[o * per_output + k] (clamped into the image; unused taps weigh 0).
struct ScaleTaps {
  int64_t per_output = 0;
  std::vector<int64_t> index;
  std::vector<float> weight;
};
// The taps of destination pixels first .. first + count - 1 of an axis of
// `size` source pixels: centre c = offset + (u + 0.5 - translate) / scale -
// 0.5 in source pixels, clamped to -0.5 .. size - 0.5; bilinear weighs the
// pixels within 1 of c by the tent, Lanczos-3 those within 3 / min(scale, 1)
// by the Lanczos window stretched by 1 / min(scale, 1); the taps inside the
// image normalized to sum 1.
ScaleTaps scale_taps(ScaleKind kind, double scale, double translate, int64_t offset, int64_t size, int64_t first,
                     int64_t count);

// What a backend runs for a ScaleDescriptor: `source` covers the whole
// source images and channels, `destination` the region written.
class ScalePrimitive : public PrimitiveInterface<ScaleDescriptor> {
 public:
  static constexpr const char* family = "scale";
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
};

// MPSImageBilinearScale / MPSImageLanczosScale. The destination an encode
// without one makes is output_width x output_height with the source's
// channels.
class ImageScale : public UnaryKernel {
 public:
  ImageScale(std::shared_ptr<Device> device, ScaleKind kind);
  const char* class_name() const override;
  ScaleKind kind() const { return kind_; }
  // MPSImageScale.scaleTransform; none: the source scaled to fill the
  // destination image. Checked at encode (check_scale_transform).
  std::optional<ScaleTransform> scale_transform;
  // The size of the destination an encode without one makes.
  int64_t output_width = 1, output_height = 1;

 protected:
  void check_properties() const override;
  // The destination's size is output_width x output_height, which
  // PaddingPlan does not compare.
  bool reuses_padding() const override { return false; }
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  ScaleKind kind_;
  PrimitiveCache<ScaleDescriptor, ScalePrimitive> primitives_;
};

}  // namespace mpsx
