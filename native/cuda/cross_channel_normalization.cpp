#include "mpsx/kernels/cross_channel_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "cross_channel_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-element factors.
constexpr size_t kFactorsSlot = 0;

// shaders/cuda/cross_channel_normalization.cu: per element, two passes
// through scratch factors (so results may overwrite what they read), over
// any strides and float16 or float32 images.
class CudaCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  explicit CudaCrossChannelNormalization(const CrossChannelNormalizationDescriptor& d) : d_(d) {
    const int64_t elements = checked_count({d.images, d.channels, d.height, d.width},
                                           "MPSCNNCrossChannelNormalization: the region's element count");
    bytes_ = checked_bytes(elements, (d.gradient ? 2 : 1) * sizeof(float),
                           "MPSCNNCrossChannelNormalization: the scratch size");
  }

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    cross_channel_normalization_forward(window(p), source, destination, factors, cuda.stream());
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    cross_channel_normalization_gradient(window(p), source_gradient, source, destination_gradient, factors,
                                         cuda.stream());
  }

 private:
  CrossChannelWindow window(const CrossChannelNormalizationParameters& p) const {
    CrossChannelWindow w;
    w.before = d_.before();
    w.after = d_.after();
    w.scale = p.alpha / static_cast<float>(d_.kernel_size);
    w.beta = p.beta;
    w.delta = p.delta;
    return w;
  }

  CrossChannelNormalizationDescriptor d_;
  size_t bytes_ = 0;
};

std::unique_ptr<CrossChannelNormalizationPrimitive> make_cross_channel_normalization(
    Backend&, const CrossChannelNormalizationDescriptor& descriptor) {
  return std::make_unique<CudaCrossChannelNormalization>(descriptor);
}

const RegisterPrimitive<CrossChannelNormalizationPrimitive> registered("cuda", make_cross_channel_normalization);

}  // namespace

}  // namespace mpsx::cuda
