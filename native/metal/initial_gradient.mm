#include "mpsx/kernels/initial_gradient.h"

#include "backend.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

class MetalInitialGradient final : public InitialGradientPrimitive {
 public:
  MetalInitialGradient(const MetalBackend& backend, const InitialGradientDescriptor&)
      : kernel_([[MPSNNInitialGradient alloc] initWithDevice:backend.device()]) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    set_regions(kernel_, origin_of(source), source, destination, exact_channels);
    encode_batch(kernel_, context_of(context).command_buffer(), source, destination);
  }

 private:
  MPSNNInitialGradient* kernel_;
};

const Registered<InitialGradientPrimitive, MetalInitialGradient> registered("metal");

}  // namespace

}  // namespace mpsx::metal
