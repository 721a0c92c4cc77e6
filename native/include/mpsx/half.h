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

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ff;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return float_from_bits(bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t bits = bits_of(f);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude >= 0x7f800000)  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (magnitude > 0x7f800000 ? 0x200 : 0));
  if (magnitude >= 0x477ff000)  // rounds to >= 65520: overflow
    return static_cast<uint16_t>(sign | 0x7c00);
  if (magnitude < 0x38800000) {  // subnormal half or zero
    if (magnitude < 0x33000000) return static_cast<uint16_t>(sign);
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exponent;  // 14 + (113 - exponent)
    uint32_t half_mantissa = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1))) ++half_mantissa;
    return static_cast<uint16_t>(sign | half_mantissa);
  }
  uint32_t rounded = magnitude + 0xfff + ((magnitude >> 13) & 1);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

inline float bfloat16_to_float(uint16_t b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float f) {
  uint32_t bits = bits_of(f);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace mpsx
