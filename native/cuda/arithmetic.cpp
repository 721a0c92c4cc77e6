#include "mpsx/kernels/arithmetic.h"
#include "mpsx/registry.h"

#include "arithmetic.cuh"
#include "backend.h"

namespace mpsx::cuda {
namespace {

class CudaArithmetic final : public ArithmeticPrimitive {
 public:
  void forward(ExecutionContext& context, const ImageRegion& primary, const ImageRegion& secondary,
               const ImageRegion& destination, const ArithmeticParameters& parameters) const override {
    arithmetic_forward(parameters, primary, secondary, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion* other,
                const ImageRegion& destination_gradient, float scale) const override {
    arithmetic_gradient(source_gradient, other, destination_gradient, scale, context_of(context).stream());
  }
};

const Registered<ArithmeticPrimitive, CudaArithmetic> registered("cuda");

}  // namespace
}  // namespace mpsx::cuda
