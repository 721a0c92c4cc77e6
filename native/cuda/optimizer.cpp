#include "mpsx/kernels/optimizer.h"

#include "backend.h"
#include "optimizer.cuh"

namespace mpsx::cuda {
namespace {

class CudaOptimizer final : public OptimizerPrimitive {
 public:
  explicit CudaOptimizer(const OptimizerConfiguration& c) : update_(optimizer_update(c)) {}

  void update(ExecutionContext& context, const OptimizerScalars& scalars,
              const OptimizerArrayList& list) const override {
    update_(scalars, list, context_of(context).stream());
  }

 private:
  OptimizerUpdate update_;
};

}  // namespace

std::unique_ptr<OptimizerPrimitive> CudaBackend::make_optimizer(const OptimizerConfiguration& configuration) {
  return std::make_unique<CudaOptimizer>(configuration);
}

}  // namespace mpsx::cuda
