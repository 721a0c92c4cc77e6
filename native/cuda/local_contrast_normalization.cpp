#include "mpsx/kernels/local_contrast_normalization.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "local_contrast_normalization.cuh"

namespace mpsx::cuda {
namespace {

class CudaLocalContrastNormalization final : public LocalContrastNormalizationPrimitive {
 public:
  explicit CudaLocalContrastNormalization(const LocalContrastNormalizationDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const LocalContrastNormalizationPass& pass, const ImageRegion& source,
               const ImageRegion& destination) const override {
    local_contrast_normalization_forward(d_, pass, source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const LocalContrastNormalizationPass& pass,
                const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    local_contrast_normalization_gradient(d_, pass, source_gradient, source_image, destination_gradient,
                                          context_of(context).stream());
  }

 private:
  LocalContrastNormalizationDescriptor d_;
};

const Registered<LocalContrastNormalizationPrimitive, CudaLocalContrastNormalization> registered("cuda");

}  // namespace
}  // namespace mpsx::cuda
