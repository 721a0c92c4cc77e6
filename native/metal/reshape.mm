#include "mpsx/kernels/reshape.h"

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

MPSImageEdgeMode edge_mode_of(EdgeMode mode) {
  switch (mode) {
    case EdgeMode::Zero: return MPSImageEdgeModeZero;
    case EdgeMode::Clamp: return MPSImageEdgeModeClamp;
    case EdgeMode::Mirror: return MPSImageEdgeModeMirror;
    case EdgeMode::MirrorWithEdge: return MPSImageEdgeModeMirrorWithEdge;
    case EdgeMode::Constant: return MPSImageEdgeModeConstant;
  }
  return MPSImageEdgeModeZero;
}

// The forward kernel whose properties say what the pass does; its gradient
// kernel reads them from the states it makes.
MPSCNNKernel* make_forward(id<MTLDevice> device, const ReshapeDescriptor& d) {
  if (d.kind == ReshapeKind::Reshape) return [[MPSNNReshape alloc] initWithDevice:device];
  // paddingSizeBefore / After x and y only size a destination MPS makes;
  // offset and clipRect place this one. The channels pad the slice.
  MPSImageCoordinate before = {0, 0, ns(-d.first_channel)};
  MPSImageCoordinate after = {0, 0, ns(d.channels - d.source_channels + d.first_channel)};
  NSData* fill = nil;
  if (d.fill_values)
    fill = [NSData dataWithBytes:d.fill_values->data() length:static_cast<NSUInteger>(d.channels) * sizeof(float)];
  MPSNNPad* pad = [[MPSNNPad alloc] initWithDevice:device
                                 paddingSizeBefore:before
                                  paddingSizeAfter:after
                                    fillValueArray:fill];
  pad.edgeMode = edge_mode_of(d.edge_mode);
  pad.fillValue = d.fill_value;
  return pad;
}

MPSCNNGradientKernel* make_gradient(id<MTLDevice> device, const ReshapeDescriptor& d) {
  if (d.kind == ReshapeKind::Reshape) return [[MPSNNReshapeGradient alloc] initWithDevice:device];
  return [[MPSNNPadGradient alloc] initWithDevice:device];
}

class MetalReshape final : public ReshapePrimitive {
 public:
  MetalReshape(const MetalBackend& backend, const ReshapeDescriptor& d)
      : d_(d),
        forward_(make_forward(backend.device(), d)),
        gradient_(d.gradient ? make_gradient(backend.device(), d) : nil) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    encode_forward(forward_, context_of(context).command_buffer(), offset(), source, destination, exact_channels);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    encode_gradient_of_forward(forward_, gradient_, context_of(context).command_buffer(), offset(), source_gradient,
                               destination_gradient, exact_channels);
  }

 private:
  // The pad reads source pixel offset + (destination pixel -
  // clipRect.origin), its edge mode past the image; the reshape all of it.
  MPSOffset offset() const {
    if (d_.kind == ReshapeKind::Pad) return MPSOffset{d_.first_x, d_.first_y, 0};
    return MPSOffset{0, 0, 0};
  }

  ReshapeDescriptor d_;
  MPSCNNKernel* forward_;
  MPSCNNGradientKernel* gradient_;
};

std::unique_ptr<ReshapePrimitive> make_reshape(Backend& backend, const ReshapeDescriptor& d) {
  return std::make_unique<MetalReshape>(static_cast<MetalBackend&>(backend), d);
}

const RegisterPrimitive<ReshapePrimitive> registered("metal", make_reshape);

}  // namespace

}  // namespace mpsx::metal
