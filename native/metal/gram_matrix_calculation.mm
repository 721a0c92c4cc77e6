#include "mpsx/kernels/gram_matrix_calculation.h"

#include "backend.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

class MetalGramMatrix final : public GramMatrixPrimitive {
 public:
  explicit MetalGramMatrix(const MetalBackend& backend)
      : forward_([[MPSNNGramMatrixCalculation alloc] initWithDevice:backend.device() alpha:1.0f]),
        gradient_([[MPSNNGramMatrixCalculationGradient alloc] initWithDevice:backend.device() alpha:1.0f]) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               float alpha) const override {
    set_forward(source, destination, alpha);
    encode_batch(forward_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float alpha) const override {
    // The forward kernel, set as for its pass, makes the gradient states,
    // which carry its alpha to the gradient kernel.
    set_forward(source, source_gradient, alpha);
    gradient_.alpha = alpha;
    encode_gradient_with_forward_states(forward_, gradient_, context_of(context).command_buffer(), source_gradient,
                                        source, MPSOffset{0, 0, 0}, destination_gradient, exact_channels);
  }

 private:
  // The kernel keeps its default offset and clipRect (MPS supports no
  // other); the channel offsets and count select the slice.
  void set_forward(const ImageRegion& source, const ImageRegion& destination, float alpha) const {
    forward_.alpha = alpha;
    forward_.sourceFeatureChannelOffset = feature_channel_offset(source);
    forward_.sourceFeatureChannelMaxCount = exact_channels(source);
    forward_.destinationFeatureChannelOffset = feature_channel_offset(destination);
  }

  MPSNNGramMatrixCalculation* forward_;
  MPSNNGramMatrixCalculationGradient* gradient_;
};

const Registered<GramMatrixPrimitive, MetalGramMatrix> registered("metal");

}  // namespace

}  // namespace mpsx::metal
