#include "mpsx/kernels/loss.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "loss.cuh"

namespace mpsx::cuda {
namespace {

class CudaLoss final : public LossPrimitive {
 public:
  explicit CudaLoss(const LossDescriptor& d) : d_(d) {}

  void loss_and_gradient(ExecutionContext& context, const ImageRegion& source, const ImageRegion& labels,
                         const ImageRegion& weights, const ImageRegion& gradient,
                         const ImageRegion& loss) const override {
    CudaContext& cuda = context_of(context);
    const size_t bytes = loss_scratch_bytes(d_, source);
    void* scratch = bytes ? cuda.scratch(0, bytes) : nullptr;
    cuda::loss_and_gradient(d_, source, labels, weights, gradient, loss, scratch, cuda.stream());
  }

  // The loss pass of loss_and_gradient, its gradient written to scratch.
  void forward_loss(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                    const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& loss) const override {
    CudaContext& cuda = context_of(context);
    const size_t bytes = loss_scratch_bytes(d, source);
    void* scratch = bytes ? cuda.scratch(0, bytes) : nullptr;
    ImageRegion gradient = source;
    gradient.data_type = DataType::Float32;
    gradient.stride = ImageLayout{source.h * source.w * source.c, 1, source.w * source.c, source.c};
    gradient.data = cuda.scratch(1, static_cast<size_t>(source.element_count()) * sizeof(float));
    cuda::loss_and_gradient(d, source, labels, weights, gradient, loss, scratch, cuda.stream());
  }

  void loss_gradient(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                     const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& source_gradient,
                     const ImageRegion& gradient, bool labels_gradient) const override {
    CudaContext& cuda = context_of(context);
    void* scratch = cuda.scratch(0, loss_gradient_scratch_bytes(source));
    cuda::loss_gradient(d, source, labels, weights, source_gradient, gradient, labels_gradient, scratch,
                        cuda.stream());
  }

 private:
  LossDescriptor d_;
};

const Registered<LossPrimitive, CudaLoss> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
