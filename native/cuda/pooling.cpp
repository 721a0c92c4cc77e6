#include "mpsx/kernels/pooling.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "pooling.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the gradient's per-window values.
constexpr size_t kWindowSlot = 0;

class CudaPooling final : public PoolingPrimitive {
 public:
  explicit CudaPooling(const PoolingDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    pooling_forward(d_, source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    const size_t bytes = pooling_gradient_scratch_bytes(d_, source_gradient);
    void* scratch = bytes ? cuda.scratch(kWindowSlot, bytes) : nullptr;
    pooling_gradient(d_, source_gradient, source_image, destination_gradient, scratch, cuda.stream());
  }

 private:
  PoolingDescriptor d_;
};

const Registered<PoolingPrimitive, CudaPooling> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
