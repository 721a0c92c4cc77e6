#include "neuron.cuh"

#include "elements.cuh"
#include "neuron_math.cuh"

namespace mpsx::cuda {
namespace {

template <class Index>
__global__ void forward_kernel(NeuronParameters p, Extents<Index> e, Strided<Index> x, Strided<Index> y,
                               int64_t first_channel, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    y.store(y.at(image, c, row, column), forward_value(p, x.load(x.at(image, c, row, column)), first_channel + c));
  }
}

template <class Index>
__global__ void gradient_kernel(NeuronParameters p, Extents<Index> e, Strided<Index> dy, Strided<Index> x,
                                Strided<Index> dx, int64_t first_channel, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    const float value =
        derivative(p, x.load(x.at(image, c, row, column)), first_channel + c) * dy.load(dy.at(image, c, row, column));
    dx.store(dx.at(image, c, row, column), value);
  }
}

}  // namespace

void neuron_forward(const NeuronParameters& p, const ImageRegion& x, const ImageRegion& y, int64_t first_channel,
                    cudaStream_t stream) {
  const int64_t count = x.element_count();
  if (count == 0) return;
  with_index(narrow_indices(count, {x, y}), [&](auto index) {
    using Index = decltype(index);
    forward_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(p, Extents<Index>(x), Strided<Index>(x),
                                                                 Strided<Index>(y), first_channel,
                                                                 static_cast<Index>(count));
  });
}

void neuron_gradient(const NeuronParameters& p, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                     int64_t first_channel, cudaStream_t stream) {
  const int64_t count = x.element_count();
  if (count == 0) return;
  with_index(narrow_indices(count, {dy, x, dx}), [&](auto index) {
    using Index = decltype(index);
    gradient_kernel<Index><<<blocks_for(count), 256, 0, stream>>>(p, Extents<Index>(x), Strided<Index>(dy),
                                                                  Strided<Index>(x), Strided<Index>(dx), first_channel,
                                                                  static_cast<Index>(count));
  });
}

}  // namespace mpsx::cuda
