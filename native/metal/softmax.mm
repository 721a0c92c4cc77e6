#include "mpsx/kernels/softmax.h"

#include <cstdint>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

class MetalSoftMax final : public SoftMaxPrimitive {
 public:
  MetalSoftMax(const MetalBackend& backend, const SoftMaxDescriptor& d) : d_(d) {
    id<MTLDevice> device = backend.device();
    // The gradient pass makes its states with the forward kernel too.
    forward_ = d.log ? [[MPSCNNLogSoftMax alloc] initWithDevice:device] : [[MPSCNNSoftMax alloc] initWithDevice:device];
    if (d.gradient)
      gradient_ = d.log ? [[MPSCNNLogSoftMaxGradient alloc] initWithDevice:device]
                        : [[MPSCNNSoftMaxGradient alloc] initWithDevice:device];
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    check_distinct(forward_name(), source, destination);
    set_forward(source, destination);
    encode_batch(forward_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& result,
                const ImageRegion& destination_gradient) const override {
    const char* name = d_.log ? "MPSCNNLogSoftMaxGradient" : "MPSCNNSoftMaxGradient";
    check_distinct(name, source_gradient, destination_gradient);
    check_distinct(name, result, destination_gradient);
    // The forward kernel's source is not at hand here (the gradient reads
    // the result); a softmax keeps the size and channels of what it reads,
    // so the result stands for it.
    set_forward(result, source_gradient);
    encode_gradient_with_forward_states(forward_, gradient_, context_of(context).command_buffer(), source_gradient,
                                        result, origin_of(result), destination_gradient, exact_channels);
  }

 private:
  const char* forward_name() const { return d_.log ? "MPSCNNLogSoftMax" : "MPSCNNSoftMax"; }

  void set_forward(const ImageRegion& source, const ImageRegion& destination) const {
    set_regions(forward_, origin_of(source), source, destination, exact_channels);
  }

  SoftMaxDescriptor d_;
  MPSCNNKernel* forward_ = nil;  // MPSCNNSoftMax or MPSCNNLogSoftMax
  MPSCNNGradientKernel* gradient_ = nil;
};

const Registered<SoftMaxPrimitive, MetalSoftMax> registered("metal");

}  // namespace

}  // namespace mpsx::metal
