#include "normalization.h"

#include <algorithm>

#include "backend.h"

namespace mpsx::cpu {

namespace {

MPSX_CPU_LOOP
void moments_loop(const float* __restrict x, int64_t pixels, int64_t channels, const float* __restrict shift,
                 float* __restrict s, float* __restrict q, double* __restrict sum, double* __restrict squares) {
  for (int64_t first = 0; first < pixels; first += kMomentBlock) {
    const int64_t end = std::min(pixels, first + kMomentBlock);
    for (int64_t c = 0; c < channels; ++c) s[c] = q[c] = 0.0f;
    for (int64_t p = first; p < end; ++p) {
      const float* v = x + p * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float d = v[c] - shift[c];
        s[c] += d;
        q[c] += d * d;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      sum[c] += s[c];
      squares[c] += q[c];
    }
  }
}

}  // namespace

void add_moments(const float* __restrict x, int64_t pixels, int64_t channels, const float* __restrict shift,
                 float* __restrict s, float* __restrict q, double* __restrict sum, double* __restrict squares) {
  Cloned<moments_loop>::run(x, pixels, channels, shift, s, q, sum, squares);
}

}  // namespace mpsx::cpu
