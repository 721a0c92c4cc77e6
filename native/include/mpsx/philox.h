// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC11; Random123's philox4x32_R with R = 10): a counter-based generator,
// so any element's random number is a pure function of (key, counter) and
// host and device code compute the same bits. Usable from C++ and CUDA.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MPSX_HOST_DEVICE __host__ __device__
#else
#define MPSX_HOST_DEVICE
#endif

namespace mpsx {

struct Philox4x32 {
  uint32_t v[4];
};

MPSX_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * counter.v[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * counter.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    counter = Philox4x32{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return counter;
}

}  // namespace mpsx
