#include "mpsx/kernels/upsampling.h"

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

MPSCNNUpsampling* make_forward(id<MTLDevice> device, const UpsamplingDescriptor& d) {
  if (d.kind == UpsamplingKind::Nearest)
    return [[MPSCNNUpsamplingNearest alloc] initWithDevice:device
                                       integerScaleFactorX:ns(d.scale_x)
                                       integerScaleFactorY:ns(d.scale_y)];
  return [[MPSCNNUpsamplingBilinear alloc] initWithDevice:device
                                      integerScaleFactorX:ns(d.scale_x)
                                      integerScaleFactorY:ns(d.scale_y)
                                             alignCorners:d.align_corners ? YES : NO];
}

MPSCNNUpsamplingGradient* make_gradient(id<MTLDevice> device, const UpsamplingDescriptor& d) {
  if (d.kind == UpsamplingKind::Nearest)
    return [[MPSCNNUpsamplingNearestGradient alloc] initWithDevice:device
                                               integerScaleFactorX:ns(d.scale_x)
                                               integerScaleFactorY:ns(d.scale_y)];
  return [[MPSCNNUpsamplingBilinearGradient alloc] initWithDevice:device
                                              integerScaleFactorX:ns(d.scale_x)
                                              integerScaleFactorY:ns(d.scale_y)];
}

class MetalUpsampling final : public UpsamplingPrimitive {
 public:
  MetalUpsampling(const MetalBackend& backend, const UpsamplingDescriptor& d)
      : d_(d),
        forward_(make_forward(backend.device(), d)),
        gradient_(d.gradient ? make_gradient(backend.device(), d) : nil) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    encode_forward(forward_, context_of(context).command_buffer(), offset(), source, destination, slice_channels);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    encode_gradient_of_forward(forward_, gradient_, context_of(context).command_buffer(), offset(), source_gradient,
                               destination_gradient, slice_channels);
  }

 private:
  // MPS reads source pixel offset + (destination pixel - clipRect.origin) /
  // scale: the region's first upsampled pixel must start a source pixel's block.
  MPSOffset offset() const { return MPSOffset{d_.first_x / d_.scale_x, d_.first_y / d_.scale_y, 0}; }

  UpsamplingDescriptor d_;
  MPSCNNUpsampling* forward_;
  MPSCNNUpsamplingGradient* gradient_;
};

std::unique_ptr<UpsamplingPrimitive> make_upsampling(Backend& backend, const UpsamplingDescriptor& d) {
  if (d.gradient && d.align_corners)
    fail<ArgumentError>("MPSCNNUpsamplingBilinearGradient: MPS's bilinear gradient has no align_corners; "
                        "align_corners=True is not available on metal");
  if (d.first_x % d.scale_x != 0 || d.first_y % d.scale_y != 0)
    fail<ArgumentError>(d.kind == UpsamplingKind::Nearest ? "MPSCNNUpsamplingNearest" : "MPSCNNUpsamplingBilinear",
                        ": on metal the region must start at a multiple of the scale factors in the upsampled "
                        "image; it starts at (", d.first_x, ", ", d.first_y, ") with scale factors ", d.scale_x, "x",
                        d.scale_y);
  return std::make_unique<MetalUpsampling>(static_cast<MetalBackend&>(backend), d);
}

const RegisterPrimitive<UpsamplingPrimitive> registered("metal", make_upsampling);

}  // namespace

}  // namespace mpsx::metal
