// The neuron functions of MPSCNNNeuron.h on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mpsx/image.h"
#include "mpsx/kernels/neuron.h"

namespace mpsx::cuda {

// The parameters of a neuron as kernels take them; slopes: PReLU's a per
// feature channel, in device memory.
struct NeuronParameters {
  NeuronType type = NeuronType::None;
  float a = 0, b = 0, c = 0;
  const float* slopes = nullptr;
};

// A neuron descriptor's parameters for kernels, PReLU's slopes uploaded once
// to the device of `ordinal` and freed with it (native/cuda/neuron.cpp).
class DeviceNeuron {
 public:
  DeviceNeuron(int ordinal, const NeuronDescriptor& descriptor);
  ~DeviceNeuron();
  DeviceNeuron(const DeviceNeuron&) = delete;
  DeviceNeuron& operator=(const DeviceNeuron&) = delete;
  const NeuronParameters& parameters() const { return parameters_; }

 private:
  int ordinal_;
  NeuronParameters parameters_;
  void* slopes_ = nullptr;
};

// y = f(x) over regions of equal extents; channel 0 of the regions is feature
// channel `first_channel` (for per-channel slopes). In place when x is y.
void neuron_forward(const NeuronParameters& p, const ImageRegion& x, const ImageRegion& y, int64_t first_channel,
                    cudaStream_t stream);
// dx = f'(x) * dy.
void neuron_gradient(const NeuronParameters& p, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                     int64_t first_channel, cudaStream_t stream);

}  // namespace mpsx::cuda
