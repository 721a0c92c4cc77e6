// Reading and writing image elements of any data type in device code, and
// the index arithmetic of regions.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// The element offset of the i-th value of a region, counted channels
// innermost (NHWC order), and its channel.
__device__ __forceinline__ int64_t offset_of_index(const ImageRegion& r, int64_t i, int64_t* channel) {
  int64_t c = i % r.c;
  int64_t rest = i / r.c;
  int64_t x = rest % r.w;
  rest /= r.w;
  int64_t y = rest % r.h;
  int64_t n = rest / r.h;
  *channel = c;
  return offset_of(r, n, c, y, x);
}

// A grid large enough for `count` elements at `threads` per block, capped.
inline unsigned blocks_for(int64_t count, unsigned threads = 256) {
  int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace mpsx::cuda
