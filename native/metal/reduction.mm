#include "mpsx/kernels/reduction.h"

#include "backend.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

class MetalReduction final : public ReductionPrimitive {
 public:
  MetalReduction(const MetalBackend& backend, const ReductionDescriptor&)
      : sum_([[MPSNNReduceFeatureChannelsSum alloc] initWithDevice:backend.device()]) {}

  void feature_channels_sum(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                            float weight) const override {
    // clipRectSource replaces the offset (MPSNNReduceUnary); the sum reads
    // exactly the region's channels.
    set_regions(sum_, origin_of(source), source, destination, exact_channels);
    sum_.clipRectSource = MTLRegionMake3D(ns(source.x), ns(source.y), 0, ns(source.w), ns(source.h), 1);
    sum_.weight = weight;
    encode_batch(sum_, context_of(context).command_buffer(), source, destination);
  }

 private:
  MPSNNReduceFeatureChannelsSum* sum_;
};

const Registered<ReductionPrimitive, MetalReduction> registered("metal");

}  // namespace

}  // namespace mpsx::metal
