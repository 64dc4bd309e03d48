// The (key, index) total order behind every argmax/argmin path of jax_argreduce: the CPU
// handler, the CUDA kernels and (re-stated in jnp) the XLA fallback in jax_argreduce/_xla.py.
//
// A float is never compared as a float. Its bits are mapped to a signed integer "key" whose
// integer order is the order argmax wants (SPEC §1):
//   * finite values and ±inf keep their numeric order, subnormals included (pure integer
//     arithmetic: nothing can flush them to zero);
//   * -0.0 and +0.0 get the same key (0), so they tie;
//   * every NaN, whatever its sign or payload, gets the largest key, for argmax and argmin
//     alike (argmin negates the key of non-NaN values instead of reversing the comparison);
//   * no value maps to kLowestKey, so the reduction identity can never win against data.
// Pairs are then ordered by (key descending, index ascending): ties and NaNs resolve to the
// lowest index whatever order partial results are combined in.
#ifndef JAX_ARGREDUCE_FFI_ORDER_H_
#define JAX_ARGREDUCE_FFI_ORDER_H_

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define JAX_ARGREDUCE_HD __host__ __device__ __forceinline__
#define JAX_ARGREDUCE_HD_NOINLINE inline __host__ __device__ __noinline__
#else
#define JAX_ARGREDUCE_HD inline
#define JAX_ARGREDUCE_HD_NOINLINE inline
#endif

namespace jax_argreduce {

// Floating formats the kernels take. They only ever see the bits.
enum class Format : int { kF16 = 0, kBF16 = 1, kF32 = 2, kF64 = 3 };

template <Format F>
struct FormatTraits;

template <>
struct FormatTraits<Format::kF16> {
  using Bits = uint16_t;
  using Key = int32_t;
  static constexpr Bits kInfBits = 0x7C00;  // exponent all ones, mantissa 0
};
template <>
struct FormatTraits<Format::kBF16> {
  using Bits = uint16_t;
  using Key = int32_t;
  static constexpr Bits kInfBits = 0x7F80;
};
template <>
struct FormatTraits<Format::kF32> {
  using Bits = uint32_t;
  using Key = int32_t;
  static constexpr Bits kInfBits = 0x7F800000u;
};
template <>
struct FormatTraits<Format::kF64> {
  using Bits = uint64_t;
  using Key = int64_t;
  static constexpr Bits kInfBits = 0x7FF0000000000000ull;
};

template <class Key>
struct KeyLimits;
template <>
struct KeyLimits<int32_t> {
  static constexpr int32_t kNaN = 0x7FFFFFFF;                   // every NaN
  static constexpr int32_t kLowest = -0x7FFFFFFF - 1;           // identity, never produced
};
template <>
struct KeyLimits<int64_t> {
  static constexpr int64_t kNaN = 0x7FFFFFFFFFFFFFFFll;
  static constexpr int64_t kLowest = -0x7FFFFFFFFFFFFFFFll - 1;
};

// Key of one element. kIsMin selects argmin: the order of non-NaN keys is reversed, NaN stays
// on top. |key| <= kInfBits < kNaN for every non-NaN, so the negation cannot overflow.
template <Format F, bool kIsMin>
JAX_ARGREDUCE_HD typename FormatTraits<F>::Key OrderedKey(typename FormatTraits<F>::Bits bits) {
  using Traits = FormatTraits<F>;
  using Bits = typename Traits::Bits;
  using Key = typename Traits::Key;
  constexpr int kSignShift = 8 * sizeof(Bits) - 1;
  constexpr Bits kMagnitudeMask = static_cast<Bits>(~(Bits{1} << kSignShift));
  const Key magnitude = static_cast<Key>(bits & kMagnitudeMask);
  const bool negative = (bits >> kSignShift) != 0;
  const Key ordered = (negative != kIsMin) ? -magnitude : magnitude;  // -0, +0 both give 0
  // Selects, not branches: vectorizes on the CPU, no divergence on the GPU.
  return magnitude > static_cast<Key>(Traits::kInfBits) ? KeyLimits<Key>::kNaN : ordered;
}

// True when (key_a, index_a) wins over (key_b, index_b): larger key, then lower index.
template <class Key>
JAX_ARGREDUCE_HD bool Better(Key key_a, int32_t index_a, Key key_b, int32_t index_b) {
  return key_a > key_b || (key_a == key_b && index_a < index_b);
}

// A partial result. Indices are column positions in a row of at most INT32_MAX columns.
template <class Key>
struct ArgPair {
  Key key;
  int32_t index;

  static JAX_ARGREDUCE_HD ArgPair Identity() { return {KeyLimits<Key>::kLowest, 0x7FFFFFFF}; }
};

template <class Key>
JAX_ARGREDUCE_HD ArgPair<Key> Combine(ArgPair<Key> a, ArgPair<Key> b) {
  return Better(b.key, b.index, a.key, a.index) ? b : a;
}

// Combine as the operator of a generic reduction (device.cuh's WarpReduce and BlockReduce): a
// total order, so it is associative and commutative and any reduction tree gives one answer.
struct CombinePairs {
  template <class Key>
  JAX_ARGREDUCE_HD ArgPair<Key> operator()(ArgPair<Key> a, ArgPair<Key> b) const {
    return Combine(a, b);
  }
};

// The radix key of a format: an unsigned integer of the format's own width (16 bits for the
// 16-bit formats, so a radix select over them takes half the digit passes of float32) whose
// unsigned order is the argmax order of OrderedKey: the signed key with its sign bit flipped.
// Every NaN gets the largest key (all ones), -0 and +0 the same one; the bias is larger than
// +inf's magnitude, so no element has a key below 2^(W-11) (W the width): the zero key is free
// for "no element" (padding, sentinels), and so is every key whose top 11 bits are zero.
template <Format F>
struct RadixTraits {
  using Radix = std::conditional_t<sizeof(typename FormatTraits<F>::Bits) == 2, uint16_t,
                                   std::make_unsigned_t<typename FormatTraits<F>::Key>>;
  static constexpr int kBits = 8 * sizeof(Radix);
};

template <Format F>
JAX_ARGREDUCE_HD typename RadixTraits<F>::Radix RadixKey(typename FormatTraits<F>::Bits bits) {
  using Radix = typename RadixTraits<F>::Radix;
  using Key = typename FormatTraits<F>::Key;
  constexpr Radix kBias = static_cast<Radix>(Radix{1} << (RadixTraits<F>::kBits - 1));
  const Key key = OrderedKey<F, false>(bits);
  // 16-bit formats: |key| <= inf bits < 2^15 or key == kNaN, which maps to all ones.
  if constexpr (sizeof(Radix) == 2) {
    return key == KeyLimits<Key>::kNaN ? Radix{0xFFFF} : static_cast<Radix>(key + kBias);
  } else {
    return static_cast<Radix>(static_cast<Radix>(key) ^ kBias);
  }
}

// indices[at] = index, into an int64 index array when is_int64, else int32 (every op's index
// output: the index dtype is the call's, int32 unless the caller's x64 mode asks for int64).
JAX_ARGREDUCE_HD void StoreIndex(void* indices, bool is_int64, int64_t at, int64_t index) {
  if (is_int64) {
    static_cast<int64_t*>(indices)[at] = index;
  } else {
    static_cast<int32_t*>(indices)[at] = static_cast<int32_t>(index);
  }
}

// Bytes of one element of `format`.
constexpr int FormatBytes(Format format) {
  return format == Format::kF64 ? 8 : format == Format::kF32 ? 4 : 2;
}

// NaN-propagating max/min in the elements' own format (a NaN operand gives a NaN: the order's
// "NaN above everything"; which of -0/+0 survives is left open, they share a key). No .ftz:
// subnormals compare exactly. Device code only; float32 max on every architecture, the rest
// from sm_80 (the instructions' first architecture).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define JAX_ARGREDUCE_NAN_MINMAX(name, op, type, cons)                          \
  __device__ __forceinline__ type name(type a, type b) {                        \
    type d;                                                                     \
    asm(op " %0, %1, %2;" : "=" cons(d) : cons(a), cons(b));                    \
    return d;                                                                   \
  }
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNF32, "max.NaN.f32", float, "f")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNF32, "min.NaN.f32", float, "f")
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNBF16x2, "max.NaN.bf16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNBF16x2, "min.NaN.bf16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MaxNaNF16x2, "max.NaN.f16x2", uint32_t, "r")
JAX_ARGREDUCE_NAN_MINMAX(MinNaNF16x2, "min.NaN.f16x2", uint32_t, "r")
#undef JAX_ARGREDUCE_NAN_MINMAX
// The same on two packed pairs of 16-bit elements of format F (bfloat16 or float16).
template <Format F, bool kIsMin = false>
__device__ __forceinline__ uint32_t NaNMinMax16x2(uint32_t a, uint32_t b) {
  static_assert(F == Format::kBF16 || F == Format::kF16, "16-bit formats only");
  if constexpr (F == Format::kBF16) return kIsMin ? MinNaNBF16x2(a, b) : MaxNaNBF16x2(a, b);
  else return kIsMin ? MinNaNF16x2(a, b) : MaxNaNF16x2(a, b);
}
#elif defined(__CUDA_ARCH__)
__device__ __forceinline__ float MaxNaNF32(float a, float b) {
  return a != a || a > b ? a : b;  // b NaN: b
}
#endif

// The one (format, is_min) dispatch of the project: calls
// fn(std::integral_constant<Format, F>{}, std::bool_constant<kIsMin>{}) for the runtime pair,
// so templates are instantiated for every format and both orders in one place.
template <class Fn>
decltype(auto) DispatchFormat(Format format, bool is_min, Fn&& fn) {
  auto with_order = [&](auto format_tag) -> decltype(auto) {
    return is_min ? fn(format_tag, std::true_type{}) : fn(format_tag, std::false_type{});
  };
  switch (format) {
    case Format::kF16: return with_order(std::integral_constant<Format, Format::kF16>{});
    case Format::kBF16: return with_order(std::integral_constant<Format, Format::kBF16>{});
    case Format::kF32: return with_order(std::integral_constant<Format, Format::kF32>{});
    case Format::kF64: break;
  }
  return with_order(std::integral_constant<Format, Format::kF64>{});
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_ORDER_H_
