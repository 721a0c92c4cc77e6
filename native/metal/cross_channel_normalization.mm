#include "mpsx/kernels/cross_channel_normalization.h"

#include <cstdint>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// MPSCNNCrossChannelNormalization(+Gradient), with alpha, beta and delta set
// at every encode. On metal the values are what Apple's kernels compute.
class MetalCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  MetalCrossChannelNormalization(const MetalBackend& backend, const CrossChannelNormalizationDescriptor& d) {
    id<MTLDevice> device = backend.device();
    const NSUInteger size = static_cast<NSUInteger>(d.kernel_size);
    // The gradient pass makes its states with the forward kernel too.
    forward_ = [[MPSCNNCrossChannelNormalization alloc] initWithDevice:device kernelSize:size];
    if (d.gradient)
      gradient_ = [[MPSCNNCrossChannelNormalizationGradient alloc] initWithDevice:device kernelSize:size];
  }

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    check_distinct("MPSCNNCrossChannelNormalization", source, destination);
    set_forward(p, source, destination);
    encode_batch(forward_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    const char* name = "MPSCNNCrossChannelNormalizationGradient";
    check_distinct(name, source_gradient, destination_gradient);
    check_distinct(name, source, destination_gradient);
    set_forward(p, source, source_gradient);
    set_alpha_beta_delta(gradient_, p);
    encode_gradient_with_forward_states(forward_, gradient_, context_of(context).command_buffer(), source_gradient,
                                        source, origin_of(source), destination_gradient, exact_channels);
  }

 private:
  void set_forward(const CrossChannelNormalizationParameters& p, const ImageRegion& source,
                   const ImageRegion& destination) const {
    set_alpha_beta_delta(forward_, p);
    set_regions(forward_, origin_of(source), source, destination, exact_channels);
  }

  MPSCNNCrossChannelNormalization* forward_ = nil;
  MPSCNNCrossChannelNormalizationGradient* gradient_ = nil;
};

const Registered<CrossChannelNormalizationPrimitive, MetalCrossChannelNormalization> registered("metal");

}  // namespace

}  // namespace mpsx::metal
