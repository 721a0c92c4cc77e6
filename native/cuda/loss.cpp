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

 private:
  LossDescriptor d_;
};

std::unique_ptr<LossPrimitive> make_loss(Backend&, const LossDescriptor& descriptor) {
  return std::make_unique<CudaLoss>(descriptor);
}

const RegisterPrimitive<LossPrimitive> registered("cuda", make_loss);

}  // namespace

}  // namespace mpsx::cuda
