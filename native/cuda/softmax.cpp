#include "mpsx/kernels/softmax.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "softmax.cuh"

namespace mpsx::cuda {
namespace {

// softmax.cu: one warp per pixel, over any strides and float16
// or float32 images; nothing to build per shape.
class CudaSoftMax final : public SoftMaxPrimitive {
 public:
  explicit CudaSoftMax(const SoftMaxDescriptor& d) : log_(d.log) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    softmax_forward(log_, source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& result,
                const ImageRegion& destination_gradient) const override {
    softmax_gradient(log_, source_gradient, result, destination_gradient, context_of(context).stream());
  }

 private:
  bool log_;
};

const Registered<SoftMaxPrimitive, CudaSoftMax> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
