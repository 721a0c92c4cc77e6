// Work over a region's pixels with one channel per thread, and sums per
// channel (batch normalization's moments and products, bias gradients) that
// are deterministic: blocks write partial sums of fixed chunks of pixels, and
// a second kernel folds them in a fixed order, in double.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "elements.cuh"

namespace mpsx::cuda {

constexpr unsigned kChannelThreads = 256;
// Blocks the grids aim at per multiprocessor: enough to hide memory latency,
// few enough that the partial sums stay few. On an H100, 2 made the
// reference CNN's batch-32 steps 12-21 us faster than 4, and batch-256 ones
// no slower; 1 made batch-256 steps slower.
constexpr int64_t kChannelBlocksPerMultiprocessor = 2;
// Pixels a thread sums in float before adding them into its double sums:
// few enough for float's precision about a shift.
constexpr int kFloatRun = 16;

// Pixels whose values a thread loads together (map_pixels): loads in flight
// together hide memory latency.
constexpr int kPixelBatch = 4;

// Blocks of kChannelThreads threads: threadIdx.x picks a channel of a tile of
// adjacent channels (coalesced: channels are innermost), threadIdx.y a row of
// a chunk of pixels; grid x runs over the chunks, grid y over channel tiles.
struct ChannelTiling {
  dim3 grid, block;
  int64_t pixels = 0, chunk_pixels = 0, chunks = 0;
};

inline ChannelTiling channel_tiling(const ImageRegion& r) {
  unsigned width = 1;
  while (width < 32 && width < r.c) width *= 2;
  const int64_t rows = kChannelThreads / width, tiles = (r.c + width - 1) / width;
  const int64_t wanted = std::max<int64_t>(1, (kChannelBlocksPerMultiprocessor * multiprocessors() + tiles - 1) / tiles);
  ChannelTiling t;
  t.pixels = r.n * r.h * r.w;
  t.chunk_pixels = std::max<int64_t>(1, ((t.pixels + wanted - 1) / wanted + rows - 1) / rows) * rows;
  t.chunks = std::max<int64_t>(1, (t.pixels + t.chunk_pixels - 1) / t.chunk_pixels);
  t.block = dim3(width, static_cast<unsigned>(rows));
  t.grid = dim3(static_cast<unsigned>(t.chunks), static_cast<unsigned>(tiles));
  return t;
}

// A tiling as kernels see it, over regions of the extents it was made for.
template <class Index>
struct ChannelChunks {
  Extents<Index> extents;
  Index pixels = 0, chunk_pixels = 0, channels = 0;
  ChannelChunks(const ChannelTiling& t, const ImageRegion& r)
      : extents(r),
        pixels(static_cast<Index>(t.pixels)),
        chunk_pixels(static_cast<Index>(t.chunk_pixels)),
        channels(static_cast<Index>(r.c)) {}

  // The calling thread's channel; `channels` or more for none.
  __device__ __forceinline__ Index channel() const {
    return static_cast<Index>(blockIdx.y) * blockDim.x + threadIdx.x;
  }
  // The thread's first pixel (of its row of its block's chunk), the end of
  // the chunk, and the step between the thread's pixels.
  __device__ __forceinline__ Index first() const { return static_cast<Index>(blockIdx.x) * chunk_pixels + threadIdx.y; }
  __device__ __forceinline__ Index end() const {
    const Index begin = static_cast<Index>(blockIdx.x) * chunk_pixels;
    return pixels - begin < chunk_pixels ? pixels : begin + chunk_pixels;
  }
  __device__ __forceinline__ Index step() const { return blockDim.y; }

  // load(j, image, row, column) for a batch of kPixelBatch of the thread's
  // pixels, then store(j, image, row, column) for them, batch after batch:
  // the batch's loads are in flight together, and in-place work stays right.
  template <class Load, class Store>
  __device__ __forceinline__ void map_pixels(Load&& load, Store&& store) const {
    const Index last = end();
    for (Index p = first(); p < last; p += kPixelBatch * step()) {
      Index image[kPixelBatch], row[kPixelBatch], column[kPixelBatch];
#pragma unroll
      for (int j = 0; j < kPixelBatch; ++j)
        if (p + j * step() < last) {
          extents.pixel(p + j * step(), &image[j], &row[j], &column[j]);
          load(j, image[j], row[j], column[j]);
        }
#pragma unroll
      for (int j = 0; j < kPixelBatch; ++j)
        if (p + j * step() < last) store(j, image[j], row[j], column[j]);
    }
  }
};

// Whether 32-bit indices hold the tiling's pixels and the regions' offsets.
inline bool narrow_indices(const ChannelTiling& t, std::initializer_list<ImageRegion> regions) {
  return narrow_indices(t.pixels + t.chunk_pixels, regions);
}

namespace channels_detail {

// v summed over the 32 lanes of a warp, into lane 0, in a fixed order.
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Summands s (K per pixel, see sum_channels) over the thread's pixels,
// folded over the block's rows into partials[chunk][k][channel].
template <int K, class Index, class Summands>
__global__ void partials_kernel(ChannelChunks<Index> chunks, Summands s, double* partials) {
  const Index c = chunks.channel();
  double total[K] = {};
  if (c < chunks.channels) {
    const auto channel = s.channel(c);
    float values[kPixelBatch][Summands::kLoads];
    float run[K] = {};
    int length = 0;
    chunks.map_pixels(
        [&](int j, Index image, Index row, Index column) { s.load(channel, image, row, column, values[j]); },
        [&](int j, Index, Index, Index) {
          s.add(channel, values[j], run);
          if (++length < kFloatRun) return;
          for (int k = 0; k < K; ++k) {
            total[k] += run[k];
            run[k] = 0.0f;
          }
          length = 0;
        });
    for (int k = 0; k < K; ++k) total[k] += run[k];
  }
  __shared__ double folded[K][kChannelThreads];
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  for (int k = 0; k < K; ++k) folded[k][t] = total[k];
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half)
      for (int k = 0; k < K; ++k) folded[k][t] += folded[k][t + half * blockDim.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < chunks.channels)
    for (int k = 0; k < K; ++k)
      partials[(int64_t(blockIdx.x) * K + k) * int64_t(chunks.channels) + c] = folded[k][threadIdx.x];
}

// One block of kChannelThreads threads per channel: the channel's partial
// sums over the chunks, in a fixed order, handed to finish(channel, totals).
template <int K, class Finish>
__global__ void totals_kernel(const double* partials, int64_t chunks, int64_t channels, Finish finish) {
  const int64_t c = blockIdx.x;
  double sums[K] = {};
  for (int64_t j = threadIdx.x; j < chunks; j += blockDim.x)
    for (int k = 0; k < K; ++k) sums[k] += partials[(j * K + k) * channels + c];
  __shared__ double warps[K][kChannelThreads / 32];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int k = 0; k < K; ++k) {
    sums[k] = warp_sum(sums[k]);
    if (lane == 0) warps[k][warp] = sums[k];
  }
  __syncthreads();
  if (warp != 0) return;
  for (int k = 0; k < K; ++k) sums[k] = warp_sum(lane < kChannelThreads / 32 ? warps[k][lane] : 0.0);
  if (lane == 0) finish(c, sums);
}

}  // namespace channels_detail

// Dense NHWC regions (a pixel's channels adjacent, pixels adjacent, images
// adjacent) of float32 or float16 whose channels come in fours, aligned to
// a vector: a thread takes a vector of kVectorWidth channels, and a pixel's
// offset is its index times the channels, so that the work is bound by
// memory rather than by instructions.

inline bool dense_nhwc(const ImageRegion& r) {
  const ImageLayout& s = r.stride;
  return s.c == 1 && (r.w == 1 || s.w == r.c) && (r.h == 1 || s.h == r.w * r.c) &&
         (r.n == 1 || s.n == r.h * r.w * r.c);
}

inline bool same_extents(const ImageRegion& a, const ImageRegion& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
}

// The data type that the regions with data all have, if they are dense,
// float32 or float16 and vectors fit them; otherwise UInt8, for none.
inline DataType dense_type(std::initializer_list<ImageRegion> regions) {
  DataType type = DataType::UInt8;
  for (const ImageRegion& r : regions) {
    if (!r.data) continue;
    if (r.data_type != DataType::Float32 && r.data_type != DataType::Float16) return DataType::UInt8;
    if (type != DataType::UInt8 && r.data_type != type) return DataType::UInt8;
    type = r.data_type;
    if (!dense_nhwc(r) || r.c % kVectorWidth || reinterpret_cast<uintptr_t>(r.data) % (kVectorWidth * size_of(type)))
      return DataType::UInt8;
  }
  return type;
}

// The tiling of a dense region whose channels go kVectorWidth to a thread.
inline ChannelTiling dense_channel_tiling(const ImageRegion& r) {
  ImageRegion vectors = r;
  vectors.c = r.c / kVectorWidth;
  return channel_tiling(vectors);
}

// Where the regions are dense (dense_type), calls f(T{}, Index{}, tiling)
// with their element type (float or __half), the index type the tiling of
// `tiled` needs and that tiling, and answers true; false otherwise.
template <class F>
bool with_dense_regions(const ImageRegion& tiled, std::initializer_list<ImageRegion> regions, F&& f) {
  const DataType type = dense_type(regions);
  if (type == DataType::UInt8) return false;
  const ChannelTiling t = dense_channel_tiling(tiled);
  with_index(narrow_indices(t, regions), [&](auto index) {
    if (type == DataType::Float32)
      f(float{}, index, t);
    else
      f(__half{}, index, t);
  });
  return true;
}

// A dense tiling as kernels see it: threadIdx.x picks a vector of W
// channels of the block's tile of blockDim.x * W channels.
template <class Index, int W>
struct DenseChunks {
  Index pixels = 0, chunk_pixels = 0, channels = 0;
  DenseChunks(const ChannelTiling& t, const ImageRegion& r)
      : pixels(static_cast<Index>(t.pixels)),
        chunk_pixels(static_cast<Index>(t.chunk_pixels)),
        channels(static_cast<Index>(r.c)) {}

  // The first channel of the block's tile, and of the calling thread.
  __device__ __forceinline__ Index tile() const { return static_cast<Index>(blockIdx.y) * blockDim.x * W; }
  __device__ __forceinline__ Index channel() const { return tile() + threadIdx.x * W; }
  // load(j, offset) for a batch of kPixelBatch of the thread's pixels (the
  // offset of its first channel there), then store(j, offset) for them.
  template <class Load, class Store>
  __device__ __forceinline__ void map_pixels(Load&& load, Store&& store) const {
    const Index begin = static_cast<Index>(blockIdx.x) * chunk_pixels;
    const Index last = pixels - begin < chunk_pixels ? pixels : begin + chunk_pixels;
    const Index first = channel(), step = blockDim.y;
    for (Index p = begin + threadIdx.y; p < last; p += kPixelBatch * step) {
#pragma unroll
      for (int j = 0; j < kPixelBatch; ++j)
        if (p + j * step < last) load(j, (p + j * step) * channels + first);
#pragma unroll
      for (int j = 0; j < kPixelBatch; ++j)
        if (p + j * step < last) store(j, (p + j * step) * channels + first);
    }
  }
};

// The most channels a dense tile holds: 32 vectors.
constexpr unsigned kMaxTileChannels = 32 * 4;

// N constants per channel of a block's tile, made once per block by
// make(channel, float (&constants)[N]) (a thread a channel) and handed to
// each thread as constants[N][W] of its channels: the per-channel work
// (square roots, divisions in double) is not repeated by every row.
template <int N, int W, class Index, class Make>
__device__ __forceinline__ void tile_constants(const DenseChunks<Index, W>& chunks, Make&& make,
                                               float (&constants)[N][W]) {
  __shared__ float shared[N][kMaxTileChannels];
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, count = blockDim.x * W;
  for (unsigned i = t; i < count; i += blockDim.x * blockDim.y) {
    float values[N];
    if (chunks.tile() + i < chunks.channels) make(chunks.tile() + i, values);
#pragma unroll
    for (int k = 0; k < N; ++k) shared[k][i] = values[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k)
#pragma unroll
    for (int w = 0; w < W; ++w) constants[k][w] = shared[k][threadIdx.x * W + w];
}

namespace channels_detail {

// As partials_kernel over a dense tiling: Summands has kConstants and
// `constants(Index c, float (&)[kConstants])` (per channel, see
// tile_constants), kLoads, `load(Index offset, float (&values)[kLoads][W])`
// and `add(Index c, const float (&constants)[kConstants][W], const float
// (&values)[kLoads][W], float (&sums)[W][K])` for the thread's channels c to
// c + W - 1. The rows of a warp fold
// through shuffles, the warps in shared memory, in a fixed order.
template <int K, int W, class Index, class Summands>
__global__ void dense_partials_kernel(DenseChunks<Index, W> chunks, Summands s, double* partials) {
  float constants[Summands::kConstants][W];
  tile_constants(chunks, [&](Index c, float (&k)[Summands::kConstants]) { s.constants(c, k); }, constants);
  const Index c = chunks.channel();
  double total[W][K] = {};
  if (c < chunks.channels) {
    float values[kPixelBatch][Summands::kLoads][W];
    float run[W][K] = {};
    int length = 0;
    chunks.map_pixels([&](int j, Index offset) { s.load(offset, values[j]); },
                      [&](int j, Index) {
                        s.add(c, constants, values[j], run);
                        if (++length < kFloatRun) return;
#pragma unroll
                        for (int w = 0; w < W; ++w)
#pragma unroll
                          for (int k = 0; k < K; ++k) {
                            total[w][k] += run[w][k];
                            run[w][k] = 0.0f;
                          }
                        length = 0;
                      });
#pragma unroll
    for (int w = 0; w < W; ++w)
#pragma unroll
      for (int k = 0; k < K; ++k) total[w][k] += run[w][k];
  }
  // blockDim.x divides 32: lanes blockDim.x apart hold the same channels.
  const unsigned lane = (threadIdx.y * blockDim.x + threadIdx.x) % 32;
  const unsigned warp = (threadIdx.y * blockDim.x + threadIdx.x) / 32;
#pragma unroll
  for (int w = 0; w < W; ++w)
#pragma unroll
    for (int k = 0; k < K; ++k)
      for (unsigned offset = 16; offset >= blockDim.x; offset /= 2)
        total[w][k] += __shfl_down_sync(0xffffffffu, total[w][k], offset);
  __shared__ double warps[kChannelThreads / 32][K][kMaxTileChannels];
  if (lane < blockDim.x)
#pragma unroll
    for (int w = 0; w < W; ++w)
#pragma unroll
      for (int k = 0; k < K; ++k) warps[warp][k][lane * W + w] = total[w][k];
  __syncthreads();
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x, count = blockDim.x * W;
  const unsigned warp_count = blockDim.x * blockDim.y / 32;
  for (unsigned i = t; i < count; i += blockDim.x * blockDim.y) {
    if (chunks.tile() + i >= chunks.channels) continue;
    for (int k = 0; k < K; ++k) {
      double sum = 0;
      for (unsigned v = 0; v < warp_count; ++v) sum += warps[v][k][i];
      partials[(int64_t(blockIdx.x) * K + k) * int64_t(chunks.channels) + chunks.tile() + i] = sum;
    }
  }
}

}  // namespace channels_detail

// sum_channels over a dense tiling (dense_channel_tiling).
template <int K, int W, class Index, class Summands, class Finish>
void sum_dense_channels(const ChannelTiling& t, const DenseChunks<Index, W>& chunks, const Summands& s,
                        const Finish& finish, double* partials, cudaStream_t stream) {
  channels_detail::dense_partials_kernel<K><<<t.grid, t.block, 0, stream>>>(chunks, s, partials);
  channels_detail::totals_kernel<K><<<static_cast<unsigned>(chunks.channels), kChannelThreads, 0, stream>>>(
      partials, t.chunks, static_cast<int64_t>(chunks.channels), finish);
}

// Bytes of the partial sums of `sums` per channel that sum_channels needs, or
// sum_dense_channels of any width.
inline size_t channel_partials_bytes(const ImageRegion& r, int sums) {
  int64_t chunks = channel_tiling(r).chunks;
  if (r.c % kVectorWidth == 0) chunks = std::max(chunks, dense_channel_tiling(r).chunks);
  return static_cast<size_t>(chunks * sums * r.c) * sizeof(double);
}

// For every channel c of the tiled extents, K sums over the pixels, handed to
// finish(int64_t c, const double (&totals)[K]) on the device. Summands has
// `Channel channel(Index c)`, the thread's per-channel constants; kLoads, the
// values a pixel reads, read by `load(const Channel&, Index image, Index row,
// Index column, float (&values)[kLoads])`; and `add(const Channel&, const
// float (&values)[kLoads], float (&sums)[K])`. partials: scratch of
// channel_partials_bytes(region, K) bytes.
template <int K, class Index, class Summands, class Finish>
void sum_channels(const ChannelTiling& t, const ChannelChunks<Index>& chunks, const Summands& s, const Finish& finish,
                  double* partials, cudaStream_t stream) {
  channels_detail::partials_kernel<K><<<t.grid, t.block, 0, stream>>>(chunks, s, partials);
  channels_detail::totals_kernel<K><<<static_cast<unsigned>(chunks.channels), kChannelThreads, 0, stream>>>(
      partials, t.chunks, static_cast<int64_t>(chunks.channels), finish);
}

}  // namespace mpsx::cuda
