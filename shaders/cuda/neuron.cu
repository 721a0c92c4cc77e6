#include "neuron.cuh"

#include "elements.cuh"
#include "neuron_math.cuh"

namespace mpsx::cuda {
namespace {

__global__ void forward_kernel(NeuronParameters p, ImageRegion x, ImageRegion y, int64_t first_channel,
                               int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c;
    int64_t from = offset_of_index(x, i, &c);
    int64_t to = offset_of_index(y, i, &c);
    store(y.data, to, y.data_type, forward_value(p, load(x.data, from, x.data_type), first_channel + c));
  }
}

__global__ void gradient_kernel(NeuronParameters p, ImageRegion dy, ImageRegion x, ImageRegion dx,
                                int64_t first_channel, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c;
    int64_t g = offset_of_index(dy, i, &c);
    int64_t v = offset_of_index(x, i, &c);
    int64_t d = offset_of_index(dx, i, &c);
    float value = derivative(p, load(x.data, v, x.data_type), first_channel + c) * load(dy.data, g, dy.data_type);
    store(dx.data, d, dx.data_type, value);
  }
}

}  // namespace

void neuron_forward(const NeuronParameters& p, const ImageRegion& x, const ImageRegion& y, int64_t first_channel,
                    cudaStream_t stream) {
  int64_t count = x.element_count();
  if (count == 0) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(p, x, y, first_channel, count);
}

void neuron_gradient(const NeuronParameters& p, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                     int64_t first_channel, cudaStream_t stream) {
  int64_t count = x.element_count();
  if (count == 0) return;
  gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(p, dy, x, dx, first_channel, count);
}

}  // namespace mpsx::cuda
