#include "mpsx/kernels/local_contrast_normalization.h"

#include <cstdint>

#include "backend.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// An MPS offset names the source pixel of the clipRect's first pixel: the
// window's centre, floor(kernel / 2) right of and below its top-left tap.
MPSOffset window_centre(const LocalContrastNormalizationDescriptor& d, const LocalContrastNormalizationPass& pass) {
  return MPSOffset{pass.first_x + d.kernel_width / 2, pass.first_y + d.kernel_height / 2, 0};
}

MPSImageEdgeMode edge_mode_of(const LocalContrastNormalizationPass& pass) {
  return pass.edge_mode == EdgeMode::Clamp ? MPSImageEdgeModeClamp : MPSImageEdgeModeZero;
}

// The properties of either class (the forward kernel and its gradient declare the same ones).
template <class Kernel>
void set_parameters(Kernel* kernel, const LocalContrastNormalizationParameters& p) {
  set_alpha_beta_delta(kernel, p);
  kernel.p0 = p.p0;
  kernel.pm = p.pm;
  kernel.ps = p.ps;
}

class MetalLocalContrastNormalization final : public LocalContrastNormalizationPrimitive {
 public:
  MetalLocalContrastNormalization(const MetalBackend& backend, const LocalContrastNormalizationDescriptor& d)
      : d_(d),
        forward_([[MPSCNNLocalContrastNormalization alloc] initWithDevice:backend.device()
                                                              kernelWidth:ns(d.kernel_width)
                                                             kernelHeight:ns(d.kernel_height)]),
        gradient_(d.gradient ? [[MPSCNNLocalContrastNormalizationGradient alloc] initWithDevice:backend.device()
                                                                                   kernelWidth:ns(d.kernel_width)
                                                                                  kernelHeight:ns(d.kernel_height)]
                             : nil) {
  }

  void forward(ExecutionContext& context, const LocalContrastNormalizationPass& pass, const ImageRegion& source,
               const ImageRegion& destination) const override {
    set_forward(pass, source, destination);
    encode_batch(forward_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const LocalContrastNormalizationPass& pass,
                const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    MetalContext& metal = context_of(context);
    set_forward(pass, source_image, source_gradient);
    set_parameters(gradient_, pass.parameters);
    gradient_.primaryEdgeMode = MPSImageEdgeModeZero;  // dy is read at the centres only
    gradient_.secondaryEdgeMode = edge_mode_of(pass);  // the forward pass's, for the source image
    encode_gradient_with_forward_states(forward_, gradient_, metal.command_buffer(), source_gradient, source_image,
                                        window_centre(d_, pass), destination_gradient, slice_channels);
  }

 private:
  void set_forward(const LocalContrastNormalizationPass& pass, const ImageRegion& source,
                   const ImageRegion& destination) const {
    set_parameters(forward_, pass.parameters);
    forward_.edgeMode = edge_mode_of(pass);  // what window pixels off the image read, as on cpu and cuda
    set_regions(forward_, window_centre(d_, pass), source, destination, slice_channels);
  }

  LocalContrastNormalizationDescriptor d_;
  MPSCNNLocalContrastNormalization* forward_;
  MPSCNNLocalContrastNormalizationGradient* gradient_;
};

const Registered<LocalContrastNormalizationPrimitive, MetalLocalContrastNormalization> registered("metal");

}  // namespace

}  // namespace mpsx::metal
