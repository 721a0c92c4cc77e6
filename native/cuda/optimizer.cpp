#include "mpsx/kernels/optimizer.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "optimizer.cuh"

namespace mpsx::cuda {
namespace {

class CudaOptimizer final : public OptimizerPrimitive {
 public:
  explicit CudaOptimizer(const OptimizerConfiguration& c)
      : update_(optimizer_update(c)), value_bytes_(size_of(c.data_type)), scalars_(c) {}

  void update(ExecutionContext& context, const OptimizerStep& step, const OptimizerArrayList& list) const override {
    OptimizerScalars scalars = scalars_;
    scalars.learning_rate = step.learning_rate;
    update_(scalars, list, stream_for(context_of(context), list));
  }

 private:
  // Copies pending from before (a reload of other weights) go out with the
  // ones after, unless the update touches them.
  cudaStream_t stream_for(CudaContext& cuda, const OptimizerArrayList& list) const {
    DeviceSpan spans[7 * kMaxUpdatedArrays];
    size_t count = 0;
    for (size_t i = 0; i < list.count; ++i) {
      const OptimizerArrays& a = list.arrays[i];
      const size_t bytes = a.count * value_bytes_;
      const void* const arrays[] = {a.gradient, a.values,   a.result,        a.momentum,
                                    a.velocity, a.maximum_velocity, a.sum_of_squares};
      for (const void* data : arrays) spans[count++] = {data, bytes};
    }
    return cuda.stream_touching(spans, count);
  }

  OptimizerUpdate update_;
  size_t value_bytes_;
  OptimizerScalars scalars_;  // the configuration's; each step sets the learning rate
};

const Registered<OptimizerPrimitive, CudaOptimizer> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
