// Window taps of the spatial normalizations (spatial, local contrast) along
// one axis, on the device; as tap() and reads() in native/cpu/backend.h.
#pragma once

#include <cstdint>

namespace mpsx::cuda {

// The pixel a window tap at position v of an axis of n pixels reads: v, or
// off the source -1 (ZERO: the tap reads 0) or the nearest pixel (clamp).
__device__ __forceinline__ int64_t tap(bool clamp, int64_t v, int64_t n) {
  if (v >= 0 && v < n) return v;
  if (!clamp) return -1;
  return v < 0 ? 0 : n - 1;
}

// How many taps of [first, last] read pixel p of an axis of n pixels: the
// tap at p, and with clamp the taps beyond the edge p is on.
__device__ __forceinline__ int64_t reads(bool clamp, int64_t p, int64_t n, int64_t first, int64_t last) {
  int64_t low = p, high = p;
  if (clamp && p == 0) low = first < p ? first : p;
  if (clamp && p == n - 1) high = last > p ? last : p;
  const int64_t count = (high < last ? high : last) - (low > first ? low : first) + 1;
  return count > 0 ? count : 0;
}

}  // namespace mpsx::cuda
