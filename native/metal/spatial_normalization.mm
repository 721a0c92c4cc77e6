#include "mpsx/kernels/spatial_normalization.h"

#include <cstdint>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// MPSCNNSpatialNormalization(+Gradient), with alpha, beta and delta set at
// every encode. The source regions cover whole images: the forward offset is
// the written region's origin in the source. On metal the values are what
// Apple's kernels compute.
class MetalSpatialNormalization final : public SpatialNormalizationPrimitive {
 public:
  MetalSpatialNormalization(const MetalBackend& backend, const SpatialNormalizationDescriptor& d) {
    id<MTLDevice> device = backend.device();
    const NSUInteger size = static_cast<NSUInteger>(d.kernel_size);
    offset_ = MPSOffset{static_cast<NSInteger>(d.source_x), static_cast<NSInteger>(d.source_y), 0};
    // What window taps off the source read: the forward kernel's edgeMode;
    // on the gradient it belongs to the secondary (forward source) image.
    edge_mode_ = d.edge_mode == EdgeMode::Clamp ? MPSImageEdgeModeClamp : MPSImageEdgeModeZero;
    // The gradient pass makes its states with the forward kernel too.
    forward_ = [[MPSCNNSpatialNormalization alloc] initWithDevice:device kernelWidth:size kernelHeight:size];
    if (d.gradient)
      gradient_ = [[MPSCNNSpatialNormalizationGradient alloc] initWithDevice:device kernelWidth:size kernelHeight:size];
  }

  void forward(ExecutionContext& context, const SpatialNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    check_distinct("MPSCNNSpatialNormalization", source, destination);
    set_forward(p, source, destination);
    encode_batch(forward_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const SpatialNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    const char* name = "MPSCNNSpatialNormalizationGradient";
    check_distinct(name, source_gradient, destination_gradient);
    check_distinct(name, source, destination_gradient);
    set_forward(p, source, source_gradient);
    set_alpha_beta_delta(gradient_, p);
    gradient_.primaryEdgeMode = MPSImageEdgeModeZero;  // dy is read inside the written region only
    gradient_.secondaryEdgeMode = edge_mode_;
    encode_gradient_with_forward_states(forward_, gradient_, context_of(context).command_buffer(), source_gradient,
                                        source, origin_of(source), destination_gradient, exact_channels);
  }

 private:
  void set_forward(const SpatialNormalizationParameters& p, const ImageRegion& source,
                   const ImageRegion& destination) const {
    set_alpha_beta_delta(forward_, p);
    forward_.edgeMode = edge_mode_;
    set_regions(forward_, offset_, source, destination, exact_channels);
  }

  MPSOffset offset_;
  MPSImageEdgeMode edge_mode_ = MPSImageEdgeModeZero;
  MPSCNNSpatialNormalization* forward_ = nil;
  MPSCNNSpatialNormalizationGradient* gradient_ = nil;
};

const Registered<SpatialNormalizationPrimitive, MetalSpatialNormalization> registered("metal");

}  // namespace

}  // namespace mpsx::metal
