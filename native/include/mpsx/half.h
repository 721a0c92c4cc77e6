// IEEE binary16 and bfloat16 conversions, round to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace mpsx {

// A float's IEEE bits, and back.
inline uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Without branches, so that loops over many values vectorize: float16
// subnormals are their mantissa times 2^-24, exactly; floats below float16's
// normals round to nearest even by a float addition that puts the result's
// bits at the bottom (0.5 = 2^-1 holds 2^-24 in its last mantissa bit).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu,
                 mantissa = h & 0x3ffu;
  const uint32_t normal = sign | ((exponent + 112) << 23) | (mantissa << 13);
  const uint32_t inf_or_nan = sign | 0x7f800000u | (mantissa << 13);
  const uint32_t subnormal = sign | bits_of(static_cast<float>(static_cast<int32_t>(mantissa)) * 0x1p-24f);
  return float_from_bits(exponent == 0 ? subnormal : exponent == 31 ? inf_or_nan : normal);
}

inline uint16_t float_to_half(float f) {
  const uint32_t bits = bits_of(f);
  const uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  const uint32_t inf_or_nan = sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u);
  const uint32_t normal = sign | ((magnitude + 0xfffu + ((magnitude >> 13) & 1u) - 0x38000000u) >> 13);
  const uint32_t subnormal = sign | (bits_of(float_from_bits(magnitude) + 0.5f) - 0x3f000000u);
  return static_cast<uint16_t>(magnitude >= 0x7f800000u   ? inf_or_nan
                               : magnitude >= 0x477ff000u ? (sign | 0x7c00u)  // rounds to 65520 or more
                               : magnitude < 0x38800000u  ? subnormal
                                                          : normal);
}

inline float bfloat16_to_float(uint16_t b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  uint32_t bits = bits_of(f);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace mpsx
