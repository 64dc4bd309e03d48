// Philox-4x32-10 (Salmon, Moraes, Dror and Shaw 2011; Random123's philox4x32_R(10, ...)): the
// counter-based generator behind the sampler's noise (gumbel.h), one definition for the CPU
// handler and the CUDA kernels. Integer arithmetic only (32x32 -> 64-bit products, xor, add), so
// host and device compute the same words by construction; the known answers are checked by
// tests/cpp/gumbel_test.cc (host) and tests/cuda/gumbel_check.cu (device).
#ifndef JAX_ARGREDUCE_FFI_PHILOX_H_
#define JAX_ARGREDUCE_FFI_PHILOX_H_

#include <cstdint>

#include "order.h"  // JAX_ARGREDUCE_HD

namespace jax_argreduce {

// ---------------------------------------------------------------------------------------------
// Philox-4x32-10 (Random123 philox4x32_R(10, ...)): 10 rounds, round r uses key + r * (W0, W1).
// ---------------------------------------------------------------------------------------------
struct Philox4x32Block {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
}  // namespace philox_detail

JAX_ARGREDUCE_HD Philox4x32Block Philox4x32_10(Philox4x32Block counter, uint32_t k0,
                                               uint32_t k1) {
  using namespace philox_detail;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;  // one IMAD.WIDE.U32 each
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return Philox4x32Block{{c0, c1, c2, c3}};
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_PHILOX_H_
