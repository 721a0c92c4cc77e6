#include "mpsx/kernels/scale.h"

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// Texture slice `slice` (four feature channels) of an image, as the 2D
// texture MPSUnaryImageKernel encodes.
id<MTLTexture> slice_of(MPSImage* image, NSUInteger slice) {
  id<MTLTexture> texture = image.texture;
  if (texture.textureType == MTLTextureType2D) return texture;
  return [texture newTextureViewWithPixelFormat:texture.pixelFormat
                                    textureType:MTLTextureType2D
                                         levels:NSMakeRange(0, 1)
                                         slices:NSMakeRange(slice, 1)];
}

// MPSImageBilinearScale / MPSImageLanczosScale over each image and texture
// slice of the region, with mpsx's offset and clip_rect origin folded into
// the transform (MPSImageResampling.h: the translation is "in destination
// coordinates", and "For the top left corner of the clipRect, the
// dest_position is considered to be {0,0}").
class MetalScale final : public ScalePrimitive {
 public:
  MetalScale(const MetalBackend& backend, const ScaleDescriptor& d)
      : name_(d.kind == ScaleKind::Bilinear ? "MPSImageBilinearScale" : "MPSImageLanczosScale") {
    if (d.kind == ScaleKind::Bilinear)
      scale_ = [[MPSImageBilinearScale alloc] initWithDevice:backend.device()];
    else
      scale_ = [[MPSImageLanczosScale alloc] initWithDevice:backend.device()];
    const ScaleTransform& t = d.transform;
    MPSScaleTransform transform = {
        t.scale_x, t.scale_y,
        t.translate_x - static_cast<double>(d.offset_x) * t.scale_x - static_cast<double>(d.first_x),
        t.translate_y - static_cast<double>(d.offset_y) * t.scale_y - static_cast<double>(d.first_y)};
    scale_.scaleTransform = &transform;  // copied into the kernel
    scale_.offset = MPSOffset{0, 0, 0};
    scale_.edgeMode = MPSImageEdgeModeClamp;
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    check_distinct(name_, source, destination);
    const NSUInteger first_source = feature_channel_offset(source) / 4;
    const NSUInteger first_destination = feature_channel_offset(destination) / 4;
    const NSUInteger slices = slice_channels(source) / 4;
    scale_.clipRect = clip_rect_of(destination);
    id<MTLCommandBuffer> command_buffer = context_of(context).command_buffer();
    for (int64_t n = 0; n < source.n; ++n) {
      MPSImage* from = image_of(source, n);
      MPSImage* to = image_of(destination, n);
      for (NSUInteger s = 0; s < slices; ++s)
        [scale_ encodeToCommandBuffer:command_buffer
                        sourceTexture:slice_of(from, first_source + s)
                   destinationTexture:slice_of(to, first_destination + s)];
    }
  }

 private:
  const char* name_;
  MPSImageScale* scale_;
};

std::unique_ptr<ScalePrimitive> make_scale(Backend& backend, const ScaleDescriptor& d) {
  return std::make_unique<MetalScale>(static_cast<MetalBackend&>(backend), d);
}

const RegisterPrimitive<ScalePrimitive> registered("metal", make_scale);

}  // namespace

}  // namespace mpsx::metal
