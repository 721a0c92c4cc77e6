// Group (and instance) normalization on cuda: the kernels of
// group_normalization.cu.
#include "mpsx/kernels/group_normalization.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "group_normalization.cuh"

namespace mpsx::cuda {
namespace {

class CudaGroupNormalization final : public GroupNormalizationPrimitive {
 public:
  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination, int64_t groups,
               const float* gamma, const float* beta, float epsilon,
               GroupNormalizationStatistics& statistics) const override {
    group_normalization_forward(source, destination, groups, gamma, beta, epsilon,
                                static_cast<float*>(statistics.mean->data()),
                                static_cast<float*>(statistics.variance->data()), context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t groups, const float* gamma, const float*,
                float epsilon, GroupNormalizationStatistics& statistics, float* gradient_for_gamma,
                float* gradient_for_beta) const override {
    group_normalization_gradient(source_gradient, source, destination_gradient, groups, gamma, epsilon,
                                 static_cast<const float*>(statistics.mean->data()),
                                 static_cast<const float*>(statistics.variance->data()), gradient_for_gamma,
                                 gradient_for_beta, context_of(context).stream());
  }
};

const Registered<GroupNormalizationPrimitive, CudaGroupNormalization> registered("cuda");

}  // namespace
}  // namespace mpsx::cuda
