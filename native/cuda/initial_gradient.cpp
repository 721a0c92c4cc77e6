#include "mpsx/kernels/initial_gradient.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "initial_gradient.cuh"

namespace mpsx::cuda {
namespace {

class CudaInitialGradient final : public InitialGradientPrimitive {
 public:
  CudaInitialGradient(const CudaBackend&, const InitialGradientDescriptor&) {}

  void forward(ExecutionContext& context, const ImageRegion&, const ImageRegion& destination) const override {
    initial_gradient(destination, context_of(context).stream());
  }
};

const Registered<InitialGradientPrimitive, CudaInitialGradient> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
