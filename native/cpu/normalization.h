// What the cpu normalizations (batch, instance) share: per-channel sums in
// float over blocks of pixels, folded into double.
#pragma once

#include <cstdint>

namespace mpsx::cpu {

// Pixels summed in float before the sums fold into double: few enough for
// float's precision, enough for the float loop to run at full width.
inline constexpr int64_t kMomentBlock = 128;

// s += x - shift, q += (x - shift)^2 per channel, over `pixels` dense pixels
// of `channels` values, folded in blocks of kMomentBlock into sum and
// squares; s and q are scratch of `channels` floats each.
void add_moments(const float* __restrict x, int64_t pixels, int64_t channels, const float* __restrict shift,
                 float* __restrict s, float* __restrict q, double* __restrict sum, double* __restrict squares);

}  // namespace mpsx::cpu
