// Size arithmetic on values that come from users. Every element count, byte
// count and size limit computed from them goes through these helpers, which
// throw instead of wrapping around (docs/semantics.md, "Size limits"). And
// the floating-point parameters users give, checked in one place.
// `what...` are the parts of a message naming what is computed or checked;
// they are only formatted when the check fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "mpsx/errors.h"
#include "mpsx/types.h"

namespace mpsx {

inline constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();

// a * b of non-negative integers of any type, or ShapeError when the product
// is above kMaxCount.
template <class A, class B, class... What>
int64_t checked_mul(A a, B b, const What&... what) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    fail<ShapeError>(what..., " overflows: ", a, " * ", b, " is above ", kMaxCount);
  return product;
}

// The product of non-negative factors: an element count.
template <class... What>
int64_t checked_count(std::initializer_list<int64_t> factors, const What&... what) {
  int64_t product = 1;
  bool overflow = false;
  for (int64_t f : factors) overflow = __builtin_mul_overflow(product, f, &product) || overflow;
  if (overflow) {
    std::string product_of;
    for (int64_t f : factors) product_of += (product_of.empty() ? "" : " * ") + std::to_string(f);
    fail<ShapeError>(what..., " overflows: ", product_of, " is above ", kMaxCount);
  }
  return product;
}

// Bytes of `count` (>= 0) values of `element_size` bytes each.
template <class C, class... What>
size_t checked_bytes(C count, size_t element_size, const What&... what) {
  return static_cast<size_t>(checked_mul(count, element_size, what...));
}

// A size a user gives (image extent, channel count, kernel size, stride,
// dilation rate): ArgumentError unless 1 <= value <= kMaxDimension.
template <class... What>
void check_size(int64_t value, const What&... what) {
  if (value < 1) fail<ArgumentError>(what..., " must be positive, given ", value);
  if (value > kMaxDimension)
    fail<ArgumentError>(what..., " must be at most ", kMaxDimension, ", given ", value);
}

// Any other bounded value a user gives: ArgumentError unless
// minimum <= value <= maximum.
template <class... What>
void check_range(int64_t value, int64_t minimum, int64_t maximum, const What&... what) {
  if (value < minimum || value > maximum)
    fail<ArgumentError>(what..., " must be between ", minimum, " and ", maximum, ", given ", value);
}

// A floating-point parameter `owner` is given as `name` (a learning rate, a
// loss's weight, a neuron's a, a clamp's bound), at construction and at every
// setter: ArgumentError naming both and the value for NaN, which would reach
// every value the parameter touches, and for an infinity, except where the
// parameter means something with it: the bounds of a clamp, open on their
// side (maximum_value, gradient_clip_max: +inf; minimum_value,
// gradient_clip_min: -inf), and a comparison's threshold (either).
// docs/semantics.md, "Floating-point parameters". Returns the value.
float checked_parameter(float value, const char* owner, const char* name);

}  // namespace mpsx
