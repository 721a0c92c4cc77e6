#include "mpsx/kernels/neuron.h"
#include "mpsx/registry.h"

#include "backend.h"
#include "neuron.cuh"

namespace mpsx::cuda {

DeviceNeuron::DeviceNeuron(int ordinal, const NeuronDescriptor& d) : ordinal_(ordinal) {
  parameters_.type = d.type;
  parameters_.a = d.a;
  parameters_.b = d.b;
  parameters_.c = d.c;
  if (d.a_per_channel.empty()) return;
  DeviceScope scope(ordinal_);
  const size_t bytes = d.a_per_channel.size() * sizeof(float);
  MPSX_CUDA_CHECK(cudaMalloc(&slopes_, bytes));
  MPSX_CUDA_CHECK(cudaMemcpy(slopes_, d.a_per_channel.data(), bytes, cudaMemcpyHostToDevice));
  parameters_.slopes = static_cast<const float*>(slopes_);
}

DeviceNeuron::~DeviceNeuron() {
  if (!slopes_) return;
  DeviceScope scope(ordinal_);
  cudaFree(slopes_);
}

namespace {

class CudaNeuron final : public NeuronPrimitive {
 public:
  CudaNeuron(const CudaBackend& backend, const NeuronDescriptor& d) : neuron_(backend.ordinal(), d) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               int64_t first_channel) const override {
    neuron_forward(neuron_.parameters(), source, destination, first_channel, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t first_channel) const override {
    neuron_gradient(neuron_.parameters(), source_gradient, source, destination_gradient, first_channel,
                    context_of(context).stream());
  }

 private:
  DeviceNeuron neuron_;
};

const Registered<NeuronPrimitive, CudaNeuron> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda
