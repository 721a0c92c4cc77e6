#include "mpsx/kernels/batch_normalization.h"
#include "mpsx/registry.h"

#include <iterator>

#include "backend.h"
#include "batch_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-chunk partial sums.
constexpr size_t kSumsSlot = 3;

class CudaBatchNormalization final : public BatchNormalizationPrimitive {
 public:
  CudaBatchNormalization(const CudaBackend& backend, const BatchNormalizationDescriptor& d)
      : neuron_(backend.ordinal(), d.fused_neuron) {}

  void statistics(ExecutionContext& context, const ImageRegion& source, BatchNormalizationBatch& batch,
                  int64_t before) const override {
    CudaContext& cuda = context_of(context);
    batch_normalization_statistics(source, values_of(batch.mean()), values_of(batch.variance()), before,
                                   sums(cuda, source), cuda.stream());
  }

  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, const float* mean, const float* variance,
                 float epsilon) const override {
    batch_normalization_normalize(neuron_.parameters(), source, destination, {gamma, beta, mean, variance, epsilon},
                                  nullptr, nullptr, context_of(context).stream());
  }

  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, float epsilon, BatchNormalizationBatch& batch) const override {
    batch_normalization_normalize(neuron_.parameters(), source, destination,
                                  {gamma, beta, values_of(batch.mean()), values_of(batch.variance()), epsilon},
                                  values_of(batch.gamma()), values_of(batch.beta()), context_of(context).stream());
  }

  void statistics_gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                           float epsilon, BatchNormalizationBatch& batch, bool accumulate) const override {
    CudaContext& cuda = context_of(context);
    batch_normalization_statistics_gradient(neuron_.parameters(), source_gradient, source, parameters(batch, epsilon),
                                            values_of(batch.gradient_for_gamma()), values_of(batch.gradient_for_beta()),
                                            accumulate, sums(cuda, source), cuda.stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float epsilon, BatchNormalizationBatch& batch,
                int64_t count) const override {
    batch_normalization_gradient(neuron_.parameters(), source_gradient, source, destination_gradient,
                                 parameters(batch, epsilon), values_of(batch.gradient_for_gamma()),
                                 values_of(batch.gradient_for_beta()), count, context_of(context).stream());
  }

  void update_running_statistics(ExecutionContext& context, int64_t channels, const float* mean,
                                 const float* variance, const float* batch_mean, const float* batch_variance,
                                 float momentum, float bessel, float* result_mean,
                                 float* result_variance) const override {
    const size_t bytes = static_cast<size_t>(channels) * sizeof(float);
    const DeviceSpan spans[] = {{mean, bytes},        {variance, bytes},    {batch_mean, bytes},
                                {batch_variance, bytes}, {result_mean, bytes}, {result_variance, bytes}};
    cudaStream_t stream = context_of(context).stream_touching(spans, std::size(spans));
    batch_normalization_update_running_statistics(channels, mean, variance, batch_mean, batch_variance, momentum,
                                                  bessel, result_mean, result_variance, stream);
  }

 private:
  static float* values_of(const std::shared_ptr<Buffer>& buffer) { return static_cast<float*>(buffer->data()); }

  // The batch's gamma, beta, mean and variance: what its training passes read.
  static ChannelParameters parameters(const BatchNormalizationBatch& batch, float epsilon) {
    return {values_of(batch.gamma()), values_of(batch.beta()), values_of(batch.mean()), values_of(batch.variance()),
            epsilon};
  }

  static void* sums(CudaContext& cuda, const ImageRegion& source) {
    return cuda.scratch(kSumsSlot, batch_normalization_sums_bytes(source));
  }

  DeviceNeuron neuron_;
};

const Registered<BatchNormalizationPrimitive, CudaBatchNormalization> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
