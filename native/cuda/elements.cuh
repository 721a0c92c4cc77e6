// Reading and writing image elements of any data type in device code, and
// the index arithmetic of regions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "mpsx/image.h"

namespace mpsx::cuda {

__device__ __forceinline__ float load(const void* base, int64_t index, DataType type) {
  switch (type) {
    case DataType::Float32: return static_cast<const float*>(base)[index];
    case DataType::Float16: return __half2float(static_cast<const __half*>(base)[index]);
    case DataType::BFloat16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[index]) << 16;
      return __uint_as_float(bits);
    }
    case DataType::UInt8: return static_cast<const uint8_t*>(base)[index] * (1.0f / 255.0f);
  }
  return 0.0f;
}

__device__ __forceinline__ void store(void* base, int64_t index, DataType type, float value) {
  switch (type) {
    case DataType::Float32: static_cast<float*>(base)[index] = value; return;
    case DataType::Float16: static_cast<__half*>(base)[index] = __float2half_rn(value); return;
    case DataType::BFloat16: {
      uint32_t bits = __float_as_uint(value);
      bits += 0x7fff + ((bits >> 16) & 1);
      static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(bits >> 16);
      return;
    }
    case DataType::UInt8:
      static_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(__float2int_rn(fminf(fmaxf(value, 0.0f), 1.0f) * 255.0f));
      return;
  }
}

// The element offset of (n, c, y, x) in a region.
__device__ __forceinline__ int64_t offset_of(const ImageRegion& r, int64_t n, int64_t c, int64_t y, int64_t x) {
  return n * r.stride.n + c * r.stride.c + y * r.stride.h + x * r.stride.w;
}

// Index arithmetic in kernels: 32-bit where every index and offset is below
// 2^31 (the usual case), 64-bit otherwise. Integer division is a long
// instruction sequence on GPUs, and 64-bit division many times longer than
// 32-bit, so kernels template on the index type and the host picks it.
constexpr int64_t kNarrowLimit = int64_t{1} << 31;

// n / divisor for a divisor fixed at launch. 32-bit: a multiply-high, an add
// and a shift (Granlund and Montgomery, as in PyTorch's IntDivider), exact for
// n < 2^31; 64-bit: plain division.
template <class Index>
struct Divider {
  Index divisor = 1;
  Divider() = default;
  explicit Divider(int64_t d) : divisor(d > 0 ? d : 1) {}
  __device__ __forceinline__ Index divide(Index n) const { return n / divisor; }
};

template <>
struct Divider<uint32_t> {
  uint32_t divisor = 1, multiplier = 1, shift = 0;
  Divider() = default;
  explicit Divider(int64_t d) : divisor(static_cast<uint32_t>(d > 0 ? d : 1)) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    multiplier = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t divide(uint32_t n) const { return (__umulhi(n, multiplier) + n) >> shift; }
};

// A region's data, data type and strides, in Index arithmetic.
template <class Index>
struct Strided {
  void* data = nullptr;
  DataType type = DataType::Float32;
  Index n = 0, c = 0, h = 0, w = 0;  // strides
  Strided() = default;
  explicit Strided(const ImageRegion& r)
      : data(r.data),
        type(r.data_type),
        n(static_cast<Index>(r.stride.n)),
        c(static_cast<Index>(r.stride.c)),
        h(static_cast<Index>(r.stride.h)),
        w(static_cast<Index>(r.stride.w)) {}
  // The offset of channel 0 of a pixel.
  __device__ __forceinline__ Index at(Index image, Index row, Index column) const {
    return image * n + row * h + column * w;
  }
  __device__ __forceinline__ Index at(Index image, Index channel, Index row, Index column) const {
    return at(image, row, column) + channel * c;
  }
  __device__ __forceinline__ float load(Index offset) const { return mpsx::cuda::load(data, offset, type); }
  __device__ __forceinline__ void store(Index offset, float value) const { mpsx::cuda::store(data, offset, type, value); }
};

// A region's extents, splitting pixel and element indices into coordinates.
template <class Index>
struct Extents {
  Divider<Index> c, w, h;  // channels, columns, rows
  Extents() = default;
  explicit Extents(const ImageRegion& r) : c(r.c), w(r.w), h(r.h) {}
  // Pixel p counted in (image, row, column) order.
  __device__ __forceinline__ void pixel(Index p, Index* image, Index* row, Index* column) const {
    const Index rows = w.divide(p);
    *column = p - rows * w.divisor;
    *image = h.divide(rows);
    *row = rows - *image * h.divisor;
  }
  // Element i counted channels innermost (NHWC order); returns its channel.
  __device__ __forceinline__ Index element(Index i, Index* image, Index* row, Index* column) const {
    const Index p = c.divide(i);
    pixel(p, image, row, column);
    return i - p * c.divisor;
  }
};

// The first index of the calling thread in a grid-stride loop, and the step.
template <class Index>
__device__ __forceinline__ Index grid_first() {
  return static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
}
template <class Index>
__device__ __forceinline__ Index grid_step() {
  return static_cast<Index>(gridDim.x) * blockDim.x;
}

// Whether 32-bit indices hold `count` and every offset of the regions
// (regions without data aside).
inline bool narrow_indices(int64_t count, std::initializer_list<ImageRegion> regions) {
  if (count >= kNarrowLimit) return false;
  for (const ImageRegion& r : regions) {
    if (!r.data || r.element_count() == 0) continue;
    const ImageLayout& s = r.stride;
    if (s.n < 0 || s.c < 0 || s.h < 0 || s.w < 0) return false;
    if ((r.n - 1) * s.n + (r.c - 1) * s.c + (r.h - 1) * s.h + (r.w - 1) * s.w >= kNarrowLimit) return false;
  }
  return true;
}

// Calls f(uint32_t{}) when `narrow`, f(int64_t{}) otherwise.
template <class F>
void with_index(bool narrow, F&& f) {
  if (narrow)
    f(uint32_t{});
  else
    f(int64_t{});
}

// A grid large enough for `count` elements at `threads` per block, capped.
inline unsigned blocks_for(int64_t count, unsigned threads = 256) {
  int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// The current device's multiprocessors, queried once per device.
inline int multiprocessors() {
  constexpr int kCached = 64;
  static std::atomic<int> cached[kCached];
  int device = 0, count = 0;
  cudaGetDevice(&device);
  if (device >= 0 && device < kCached && (count = cached[device].load(std::memory_order_relaxed)) > 0) return count;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count < 1) {
    cudaGetLastError();
    return 1;
  }
  if (device >= 0 && device < kCached) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

// Values a thread loads and stores at once: 16 bytes of float32, 8 of
// float16, so that elementwise work is bound by memory rather than by
// instructions. (Vectors of 8 float16 held so many registers that few
// blocks fitted on a multiprocessor.)
constexpr int kVectorWidth = 4;

template <class T, int W>
__device__ __forceinline__ void load_vector(const T* data, int64_t offset, float (&values)[W]) {
  static_assert(W == kVectorWidth);
  if constexpr (sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(data + offset);
    values[0] = v.x, values[1] = v.y, values[2] = v.z, values[3] = v.w;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(data + offset);
    const float2 low = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 high = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    values[0] = low.x, values[1] = low.y, values[2] = high.x, values[3] = high.y;
  }
}

template <class T, int W>
__device__ __forceinline__ void store_vector(T* data, int64_t offset, const float (&values)[W]) {
  static_assert(W == kVectorWidth);
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(data + offset) = make_float4(values[0], values[1], values[2], values[3]);
  } else {
    const __half2 low = __floats2half2_rn(values[0], values[1]), high = __floats2half2_rn(values[2], values[3]);
    uint2 raw;
    raw.x = *reinterpret_cast<const uint32_t*>(&low);
    raw.y = *reinterpret_cast<const uint32_t*>(&high);
    *reinterpret_cast<uint2*>(data + offset) = raw;
  }
}

}  // namespace mpsx::cuda
