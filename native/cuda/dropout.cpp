#include "mpsx/kernels/dropout.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "dropout.cuh"

namespace mpsx::cuda {
namespace {

class CudaDropout final : public DropoutPrimitive {
 public:
  explicit CudaDropout(const DropoutDescriptor& d) : d_(d) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               const DropoutOrigin& origin, const DropoutGenerator& generator,
               DropoutGradientState& state) const override {
    cudaStream_t stream = context_of(context).stream();
    uint8_t* mask = static_cast<uint8_t*>(state.mask()->data());
    dropout_mask(generator, mask, static_cast<int64_t>(state.mask()->length()), stream);
    dropout_apply(d_, source, destination, mask, state, origin, stream);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion&,
                const ImageRegion& destination_gradient, const DropoutOrigin& origin,
                const DropoutGradientState& state) const override {
    dropout_apply(d_, source_gradient, destination_gradient, static_cast<const uint8_t*>(state.mask()->data()), state,
                  origin, context_of(context).stream());
  }

 private:
  DropoutDescriptor d_;
};

const Registered<DropoutPrimitive, CudaDropout> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
