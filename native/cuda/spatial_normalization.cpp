#include "mpsx/kernels/spatial_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "spatial_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-element factors.
constexpr size_t kFactorsSlot = 0;

// shaders/cuda/spatial_normalization.cu: per element, two passes through
// scratch factors of the written region (so results may overwrite what they
// read), over any strides and float16 or float32 images.
class CudaSpatialNormalization final : public SpatialNormalizationPrimitive {
 public:
  explicit CudaSpatialNormalization(const SpatialNormalizationDescriptor& d) : d_(d) {
    const int64_t elements = checked_count({d.images, d.channels, d.height, d.width},
                                           "MPSCNNSpatialNormalization: the region's element count");
    bytes_ = checked_bytes(elements, (d.gradient ? 2 : 1) * sizeof(float),
                           "MPSCNNSpatialNormalization: the scratch size");
  }

  void forward(ExecutionContext& context, const SpatialNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    spatial_normalization_forward(window(p), source, destination, factors, cuda.stream());
  }

  void gradient(ExecutionContext& context, const SpatialNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    spatial_normalization_gradient(window(p), source_gradient, source, destination_gradient, factors,
                                         cuda.stream());
  }

 private:
  SpatialWindow window(const SpatialNormalizationParameters& p) const {
    SpatialWindow w;
    w.before = d_.before();
    w.after = d_.after();
    w.origin_x = d_.source_x;
    w.origin_y = d_.source_y;
    w.scale = p.alpha / static_cast<float>(d_.kernel_size * d_.kernel_size);
    w.beta = p.beta;
    w.delta = p.delta;
    w.clamp = d_.edge_mode == EdgeMode::Clamp;
    return w;
  }

  SpatialNormalizationDescriptor d_;
  size_t bytes_ = 0;
};

std::unique_ptr<SpatialNormalizationPrimitive> make_spatial_normalization(
    Backend&, const SpatialNormalizationDescriptor& descriptor) {
  return std::make_unique<CudaSpatialNormalization>(descriptor);
}

const RegisterPrimitive<SpatialNormalizationPrimitive> registered("cuda", make_spatial_normalization);

}  // namespace

}  // namespace mpsx::cuda
