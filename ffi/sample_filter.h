// The filtered sampler's per-row rules (SPEC §1f), host and device, shared by the CPU handler
// (cpu_sample.h) and the CUDA kernels, so both keep the same tokens bit for bit.
//
// A row's tokens are ordered by z = logit * (1/T) (the sampler's scaled logit, categorical.h;
// order.h's order: NaN first, larger first, the lowest column among equal z). Each filter keeps
// a prefix of that order, so the kept set is the shortest of the three prefixes:
//   top-k:  the first k tokens (k == 0 or k >= cols: all);
//   top-p:  a token of the top-k set is kept iff the mass of the tokens of the set strictly
//           before it is below p times the set's mass (the first token always);
//   min-p:  a token is kept iff its mass relative to the top token is at least min_p.
// Masses are order-independent, so every device, launch geometry and vocab sharding finds the
// same prefix: E = ExpF32(d), d = z - z_max rounded to float32 (0 where z == z_max, so ±inf
// tops have E = 1), correctly rounded (exact_math.h), non-decreasing in z; top-p sums
// MassFixed(E) = floor(E * 2^32) in 64-bit integers (at most 2^31 tokens of at most 2^32: no
// overflow) and compares with MassBelow, exactly. The resolution is 2^-32 of the top token's
// mass: a token whose E is below 2^-32 weighs nothing, so top-p with p < 1 never keeps it.
// Both orders agree (E is monotone in z), which is what makes each kept set a prefix.
#ifndef JAX_ARGREDUCE_FFI_SAMPLE_FILTER_H_
#define JAX_ARGREDUCE_FFI_SAMPLE_FILTER_H_

#include <cstdint>

#include "categorical.h"
#include "exact_math.h"
#include "order.h"

namespace jax_argreduce {

// One row's filters, decoded (None becomes the value that keeps everything).
struct RowFilters {
  int64_t k = 0;        // top-k: 0 (or >= cols) keeps all
  float p = 1.0f;       // top-p: >= 1 keeps all
  float min_p = 0.0f;   // min-p: <= 0 keeps all

  JAX_ARGREDUCE_HD bool HasTopK(int64_t cols) const { return k > 0 && k < cols; }
  JAX_ARGREDUCE_HD bool HasTopP() const { return p < 1.0f; }
  JAX_ARGREDUCE_HD bool HasMinP() const { return min_p > 0.0f; }
  JAX_ARGREDUCE_HD bool Any(int64_t cols) const { return HasTopK(cols) || HasTopP() || HasMinP(); }
};

// E of a token with scaled logit z in a row whose top scaled logit is z_max (z <= z_max, both
// not NaN, z_max > -inf): the float32 mass relative to the top token, in [0, 1].
template <class Noise>
JAX_ARGREDUCE_HD float RelativeMass(Noise z, Noise z_max) {
  if (!(z < z_max)) return 1.0f;
  // A subtraction is never contracted; the float64 difference rounds to nearest once.
  return ExpF32(static_cast<float>(z - z_max));
}

// d of a token: z - z_max rounded to float32 (0 where z == z_max, ±inf tops included), the
// argument of its mass ExpF32(d).
template <class Noise>
JAX_ARGREDUCE_HD float MassExponent(Noise z, Noise z_max) {
  return z < z_max ? static_cast<float>(z - z_max) : 0.0f;
}

// MassFixed(RelativeMass(z, z_max)), a token's fixed-point mass (exact_math.h's MassOfExponent).
template <class Noise>
JAX_ARGREDUCE_HD uint64_t FixedMass(Noise z, Noise z_max) {
  return MassOfExponent(MassExponent(z, z_max));
}

// min-p as a floor on d: ExpF32(d) >= min_p iff d >= MinPFloor(min_p) (ExpF32 is
// non-decreasing, so the kept d form [floor, 0]); found by bisection over the float32
// magnitudes of d <= 0 (32 steps a row instead of an exp per token). +inf where no d <= 0
// qualifies (min_p > 1, a traced value).
JAX_ARGREDUCE_HD float MinPFloor(float min_p) {
  if (!(ExpF32(0.0f) >= min_p)) return INFINITY;
  uint32_t lo = 0, hi = 0x7F800000u;  // magnitudes: E(-|lo|) >= min_p; find the largest
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (ExpF32(-exact_detail::AsFloat(mid)) >= min_p) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return -exact_detail::AsFloat(lo);
}

#ifdef __CUDACC__
// MinPFloor(min_p) by one warp (every lane calls it and gets the floor): the same predicate
// searched 32 ways at once over the same magnitudes (7 rounds of one ExpF32 per lane instead of
// 31 in a row). The predicate is monotone, so the largest magnitude that passes is unique:
// both searches find it.
__device__ inline float MinPFloorWarp(float min_p) {
  if (!(ExpF32(0.0f) >= min_p)) return INFINITY;
  const uint32_t lane = threadIdx.x % 32;
  uint32_t lo = 0, hi = 0x7F800000u;  // E(-|lo|) >= min_p; the largest such magnitude <= hi
  while (lo < hi) {
    const uint32_t step = (hi - lo + 31) / 32;  // lane i tries lo + (i + 1) * step (<= hi)
    const uint32_t q = min(hi, lo + (lane + 1) * step);
    // The lanes that pass are a prefix (q grows with the lane, the predicate falls).
    const uint32_t pass = __ballot_sync(0xFFFFFFFFu, ExpF32(-exact_detail::AsFloat(q)) >= min_p);
    if (pass == 0) {
      hi = min(hi, lo + step) - 1;
    } else {  // the answer is in [the last passing try, the first failing one)
      const uint32_t last = 31 - __clz(pass);
      const uint32_t fail = last < 31 ? min(hi, lo + (last + 2) * step) : hi + 1;
      lo = min(hi, lo + (last + 1) * step);
      hi = fail - 1;
    }
  }
  return -exact_detail::AsFloat(lo);
}
#endif

// A vocabulary split over devices without a top-k (jax_argreduce/_sharding.py,
// split_prefix_sample): top-p's last kept token found from exchanged integer masses, never the
// logits. The levels resolve z's radix key (kKeyBits: 32, or 64 for float64 noise) in digits of
// kDigitBits, high bits first, the last level taking the rest (11 + 11 + 10 for 32 bits):
// level l sums, per digit, the masses of the tokens under the digits picked at levels < l;
// every shard's sums add up (64-bit integers: exact in any order) to the row's.
template <int kKeyBits>
struct MassLevels {
  static constexpr int kDigitBits = 11;
  static constexpr int kWidth = 1 << kDigitBits;  // digits a level's histogram holds, at most
  static constexpr int kCount = (kKeyBits + kDigitBits - 1) / kDigitBits;
  static constexpr JAX_ARGREDUCE_HD int Bits(int level) {
    return level + 1 < kCount ? kDigitBits : kKeyBits - kDigitBits * (kCount - 1);
  }
  static constexpr JAX_ARGREDUCE_HD int Shift(int level) {
    return kKeyBits - kDigitBits * level - Bits(level);
  }
  // Whether `key` lies under the digits of `prefix` picked at levels < `level`.
  static JAX_ARGREDUCE_HD bool Under(uint64_t key, uint64_t prefix, int level) {
    const int high = Shift(level) + Bits(level);
    return high >= 64 || (key >> high) == (prefix >> high);
  }
  static JAX_ARGREDUCE_HD int64_t Digit(uint64_t key, int level) {
    return static_cast<int64_t>((key >> Shift(level)) & ((uint64_t{1} << Bits(level)) - 1));
  }
};

// Masses cross devices as kMassLimbs uint32 limbs of kMassLimbBits each, low first: JAX
// without x64 has no uint64 arrays, and a sum over at most 2^10 shards cannot carry out of a
// limb (2^22 * 2^10 = 2^32), so the row's 64-bit sums come back exactly.
constexpr int kMassLimbs = 3;
constexpr int kMassLimbBits = 22;

JAX_ARGREDUCE_HD uint64_t MassFromLimbs(const uint32_t* limbs) {
  uint64_t mass = 0;
  for (int j = 0; j < kMassLimbs; ++j) {
    mass += static_cast<uint64_t>(limbs[j]) << (kMassLimbBits * j);
  }
  return mass;
}
JAX_ARGREDUCE_HD void MassToLimbs(uint64_t mass, uint32_t* limbs) {
  for (int j = 0; j < kMassLimbs; ++j) {
    limbs[j] = static_cast<uint32_t>((mass >> (kMassLimbBits * j)) & ((1u << kMassLimbBits) - 1));
  }
}

// The mass (FixedMass) of every token whose z has radix key `key` (not a NaN's: RadixKey's
// inverse), in a row whose top is z_max: a level's digits complete the key, so the last
// level's tokens of one digit share one z and one mass.
template <class Noise>
JAX_ARGREDUCE_HD uint64_t KeyMass(uint64_t key, Noise z_max) {
  if constexpr (sizeof(Noise) == 8) {
    const int64_t ordered = static_cast<int64_t>(key ^ (uint64_t{1} << 63));
    const uint64_t bits = ordered >= 0 ? static_cast<uint64_t>(ordered)
                                       : ((uint64_t{1} << 63) | (0 - static_cast<uint64_t>(ordered)));
    return FixedMass(exact_detail::AsDouble(bits), z_max);
  } else {
    const int32_t ordered = static_cast<int32_t>(static_cast<uint32_t>(key) ^ (1u << 31));
    const uint32_t bits = ordered >= 0 ? static_cast<uint32_t>(ordered)
                                       : ((1u << 31) | (0u - static_cast<uint32_t>(ordered)));
    return FixedMass(exact_detail::AsFloat(bits), z_max);
  }
}

// The digit of one level's histogram `masses` (`size` digits) where the running mass, from
// `before` (the mass of the tokens above the level's prefix), reaches p of `total`; `before`
// becomes the mass above that digit. TopPBar's walk over its buckets (cpu_sample.h): empty
// digits are skipped, and the crossing digit's first token is kept (its mass before is below p
// of the total, or it is the row's first token).
JAX_ARGREDUCE_HD int64_t CrossingDigit(const uint64_t* masses, int64_t size, float p,
                                       uint64_t total, uint64_t& before) {
  int64_t b = size - 1;
  for (; b > 0; --b) {
    if (masses[b] == 0) continue;
    if (!MassBelow(before + masses[b], p, total)) break;
    before += masses[b];
  }
  return b;
}

// How many of the `ties` tokens of one key (each of mass `mass`, the first's mass before
// `before`) top-p keeps, in column order: the first, then each whose mass before is below p of
// the total (monotone: a bisection).
JAX_ARGREDUCE_HD int64_t TiesKept(uint64_t before, uint64_t mass, int64_t ties, float p,
                                  uint64_t total) {
  if (ties <= 1) return ties;
  int64_t lo = 1, hi = ties;  // kept: [0, lo) surely; the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;  // is tie `mid` kept?
    if (MassBelow(before + static_cast<uint64_t>(mid) * mass, p, total)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The sampler's noisy key of column `col` (this call's) of a row into `key`, the key of
// y = fl(z + G(key, row, global column)), where it could reach `floor`; false, with no log, where
// it cannot. A draw's `floor` is the key of a pair that enters the same reduction as this token
// (the lane's best so far, or another lane's of the same row): gumbel.h's bound G <=
// GumbelUpperBound* of the noise bits and rounding's monotonicity give key(fl(z + G)) <=
// key(fl(z + bound)), so a token whose bound key is below `floor` draws a key below it and
// neither wins nor ties. Strictly below: the floor's pair may have a higher column, which a tie
// of keys would lose (categorical.h's scan skips on equal keys too, its best having the lower
// column). Float32 noise is bounded by its high half, so the low stream's generator runs only
// past the bound, as the logs do.
template <Format F>
JAX_ARGREDUCE_HD bool NoisyKeyReaches(const typename GumbelKeyPolicy<F>::Row& r,
                                      typename GumbelKeyPolicy<F>::Noise z, int64_t col,
                                      typename GumbelKeyPolicy<F>::Key floor,
                                      typename GumbelKeyPolicy<F>::Key& key) {
  using Row = typename GumbelKeyPolicy<F>::Row;
  using gumbel_detail::Add;
  const uint32_t c = r.col_offset + static_cast<uint32_t>(col);
  if constexpr (F == Format::kF64) {
    const uint64_t bits =
        GumbelBitsF64(GumbelBitsPairF64(r.k0, r.k1, r.counter_row, c >> 1), c & 1u);
    if (Row::KeyOf(Add(z, GumbelUpperBoundF64(bits))) < floor) return false;
    key = Row::KeyOf(Add(z, GumbelFromBitsF64(bits)));
  } else {
    const uint32_t high =
        GumbelHalf(GumbelBitsHighF32(r.k0, r.k1, r.counter_row, c >> 3), c & 7u);
    if (Row::KeyOf(Add(z, GumbelUpperBoundHighF32(high))) < floor) return false;
    const uint32_t low = GumbelHalf(GumbelBitsLowF32(r.k0, r.k1, r.counter_row, c >> 3), c & 7u);
    key = Row::KeyOf(Add(z, GumbelFromBitsF32(GumbelJoinF32(high, low))));
  }
  return true;
}

// The noisy key with no floor: the value the unfiltered sampler's scan compares (categorical.h,
// Visit), so a row without filters samples what categorical samples.
template <Format F>
JAX_ARGREDUCE_HD typename GumbelKeyPolicy<F>::Key NoisyKey(
    const typename GumbelKeyPolicy<F>::Row& r, typename GumbelKeyPolicy<F>::Noise z,
    int64_t col) {
  using Key = typename GumbelKeyPolicy<F>::Key;
  Key key = KeyLimits<Key>::kLowest;
  NoisyKeyReaches<F>(r, z, col, KeyLimits<Key>::kLowest, key);  // no key is below kLowest
  return key;
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_SAMPLE_FILTER_H_
