#include "mpsx/kernels/gram_matrix_calculation.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "gram_matrix_calculation.cuh"

namespace mpsx::cuda {
namespace {

class CudaGramMatrix final : public GramMatrixPrimitive {
 public:
  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               float alpha) const override {
    gram_matrix_forward(source, destination, alpha, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float alpha) const override {
    gram_matrix_gradient(source_gradient, source, destination_gradient, alpha, context_of(context).stream());
  }
};

const Registered<GramMatrixPrimitive, CudaGramMatrix> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
