#include "mpsx/kernels/reduction.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "reduction.cuh"

namespace mpsx::cuda {
namespace {

class CudaReduction final : public ReductionPrimitive {
 public:
  CudaReduction(const CudaBackend&, const ReductionDescriptor&) {}

  void feature_channels_sum(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                            float weight) const override {
    cuda::feature_channels_sum(source, destination, weight, context_of(context).stream());
  }
};

const Registered<ReductionPrimitive, CudaReduction> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
