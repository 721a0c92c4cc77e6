#include "convolution.cuh"

#include "channels.cuh"

namespace mpsx::cuda {
namespace {

template <bool kAdd, class Index>
__global__ void biases_kernel(Extents<Index> e, Strided<Index> r, const float* biases, Index count) {
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    Index image, row, column;
    const Index c = e.element(i, &image, &row, &column);
    const Index o = r.at(image, c, row, column);
    r.store(o, kAdd ? r.load(o) + biases[c] : biases[c]);
  }
}

// A dense region (channels.cuh): a thread's W channels, as vectors of T.
template <bool kAdd, class T, class Index>
__global__ void dense_biases_kernel(DenseChunks<Index, kVectorWidth> chunks, T* r, const float* biases) {
  constexpr int W = kVectorWidth;
  const Index c = chunks.channel();
  if (c >= chunks.channels) return;
  float b[W];
#pragma unroll
  for (int w = 0; w < W; ++w) b[w] = biases[c + w];
  float v[kPixelBatch][W];
  chunks.map_pixels(
      [&](int j, Index offset) {
        if (kAdd) load_vector<T, W>(r, offset, v[j]);
      },
      [&](int j, Index offset) {
#pragma unroll
        for (int w = 0; w < W; ++w) v[j][w] = kAdd ? v[j][w] + b[w] : b[w];
        store_vector<T, W>(r, offset, v[j]);
      });
}

template <class T, int W>
struct DenseValues {
  static constexpr int kConstants = 1, kLoads = 1;
  const T* r;
  __device__ void constants(int64_t, float (&k)[1]) const { k[0] = 0.0f; }
  template <class Index>
  __device__ void load(Index offset, float (&values)[1][W]) const {
    load_vector<T, W>(r, offset, values[0]);
  }
  __device__ void add(int64_t, const float (&)[1][W], const float (&values)[1][W], float (&sums)[W][1]) const {
#pragma unroll
    for (int w = 0; w < W; ++w) sums[w][0] += values[0][w];
  }
};

template <bool kAdd>
void launch_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  const int64_t count = region.element_count();
  if (count == 0) return;
  if (with_dense_regions(region, {region}, [&](auto type, auto index, const ChannelTiling& t) {
        using T = decltype(type);
        using Index = decltype(index);
        dense_biases_kernel<kAdd, T, Index><<<t.grid, t.block, 0, stream>>>(
            DenseChunks<Index, kVectorWidth>(t, region), static_cast<T*>(region.data), biases);
      }))
    return;
  with_index(narrow_indices(count, {region}), [&](auto index) {
    using Index = decltype(index);
    biases_kernel<kAdd, Index><<<blocks_for(count), 256, 0, stream>>>(Extents<Index>(region), Strided<Index>(region),
                                                                       biases, static_cast<Index>(count));
  });
}

// The values of a region, summed per channel.
template <class Index>
struct Values {
  static constexpr int kLoads = 1;
  Strided<Index> r;
  __device__ Index channel(Index c) const { return c * r.c; }
  __device__ void load(Index offset, Index image, Index row, Index column, float (&values)[1]) const {
    values[0] = r.load(r.at(image, row, column) + offset);
  }
  __device__ void add(Index, const float (&values)[1], float (&sums)[1]) const { sums[0] += values[0]; }
};

struct Totals {
  float* sums;
  __device__ void operator()(int64_t c, const double (&totals)[1]) const { sums[c] = static_cast<float>(totals[0]); }
};

}  // namespace

void fill_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  launch_biases<false>(region, biases, stream);
}

void add_biases(const ImageRegion& region, const float* biases, cudaStream_t stream) {
  launch_biases<true>(region, biases, stream);
}

size_t channel_sums_scratch_bytes(const ImageRegion& region) {
  return channel_partials_bytes(region, 1);
}

void channel_sums(const ImageRegion& region, float* sums, float* partials, cudaStream_t stream) {
  if (region.c == 0) return;
  // The partial sums are doubles: `partials` is scratch memory of
  // channel_sums_scratch_bytes, aligned as cudaMalloc aligns.
  if (region.element_count() > 0 &&
      with_dense_regions(region, {region}, [&](auto type, auto index, const ChannelTiling& t) {
        using T = decltype(type);
        using Index = decltype(index);
        constexpr int W = kVectorWidth;
        sum_dense_channels<1>(t, DenseChunks<Index, W>(t, region),
                              DenseValues<T, W>{static_cast<const T*>(region.data)}, Totals{sums},
                              reinterpret_cast<double*>(partials), stream);
      }))
    return;
  const ChannelTiling t = channel_tiling(region);
  with_index(narrow_indices(t, {region}), [&](auto index) {
    using Index = decltype(index);
    sum_channels<1>(t, ChannelChunks<Index>(t, region), Values<Index>{Strided<Index>(region)}, Totals{sums},
                    reinterpret_cast<double*>(partials), stream);
  });
}

}  // namespace mpsx::cuda
