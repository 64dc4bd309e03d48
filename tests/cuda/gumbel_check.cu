// GPU == CPU bit-identity check of ffi/gumbel.h (the counter-based Gumbel noise of the fused
// sampler, SPEC §1c). The same header runs in a kernel and on the host (compiled by nvcc's host
// compiler); every result is compared bit for bit:
//   * Philox-4x32-10 known answers on the device;
//   * GumbelNoiseF32 / GumbelNoiseGroupF32 / GumbelNoiseF64 / GumbelNoiseGroupF64 on a grid of
//     (key, row, column): rows up to 2^64-1, columns up to 2^31-1, device vs host, and group vs
//     per-element on the device;
//   * the transform over edge windows + a stride of all 2^32 bit patterns (float32), 2^22
//     patterns (float64), the cheap upper bound, and the logs (GumbelLogF32 over a stride of all
//     positive normal floats, GumbelLog1pF32, GumbelLogF64);
//   * the FNV digests pinned in tests/cpp/gumbel_test.cc recomputed from the DEVICE results, so
//     the GPU is tied to the values g++/clang give on any flags;
//   * exact_math.h's own exp, ExpF32, over every float32 in [-104, 89] (outside: +0, +inf, NaN,
//     checked by the host test), a token's mass MassOfExponent (and its fast step's mass and
//     refinement flag) over every float32 d in [-24, 0], and the fixed-point masses MassFixed /
//     MassBelow on random and boundary inputs; the host side of ExpF32 is correctly rounded over
//     that range (tests/cpp/exact_math_test.cc), so the device's is too.
//
// Build: nvcc -std=c++17 -arch=sm_90 -O3 -Xcompiler -mfma -I ffi tests/cuda/gumbel_check.cu \
//          -o /tmp/gumbel_check
//        (no --use_fast_math, no -ftz=true: the header needs IEEE mode. -Xcompiler -mfma only
//        makes the host side ~10x faster (std::fma inline instead of a libm call), same bits.)
// Run:   /tmp/gumbel_check   (host side: ~100M reference values and 2.2G exp values, ~1 min)
// Prints one line per check and "gumbel_check: PASS (...)" or "gumbel_check: FAIL (...)";
// exits 1 on any mismatch, 2 on a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gumbel.h"

using namespace jax_argreduce;

#include "cuda_check.h"  // CHECK(call)

namespace {

int g_failures = 0;
uint64_t g_compared = 0;

// Bit casts: the ones gumbel.h uses (memcpy on the host, intrinsics on the device).
using gumbel_detail::AsBits;
using gumbel_detail::AsDouble;
using gumbel_detail::AsFloat;

// Compares device and host bit patterns; prints the first few mismatches.
template <class Bits_t, class Describe>
void Compare(const char* what, const std::vector<Bits_t>& dev, const std::vector<Bits_t>& host,
             Describe describe) {
  uint64_t bad = 0;
  for (size_t i = 0; i < dev.size(); ++i) {
    if (dev[i] != host[i]) {
      if (bad < 5)
        std::printf("    %s mismatch at %s: device %016" PRIx64 " host %016" PRIx64 "\n", what,
                    describe(i).c_str(), static_cast<uint64_t>(dev[i]),
                    static_cast<uint64_t>(host[i]));
      ++bad;
    }
  }
  g_compared += dev.size();
  std::printf("%s  %s: %zu values, %" PRIu64 " mismatches\n", bad ? "FAIL" : "ok  ", what,
              dev.size(), bad);
  if (bad) ++g_failures;
}

std::string Str(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Str(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// ---------------------------------------------------------------------------------------------
__global__ void PhiloxKernel(const uint32_t* in, uint32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Philox4x32Block r = Philox4x32_10(
      Philox4x32Block{{in[6 * i], in[6 * i + 1], in[6 * i + 2], in[6 * i + 3]}}, in[6 * i + 4],
      in[6 * i + 5]);
  for (int j = 0; j < 4; ++j) out[4 * i + j] = r.v[j];
}

void CheckKat() {
  const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  std::vector<uint32_t> in, expect;
  for (auto& k : kat) {
    in.insert(in.end(), k, k + 6);
    expect.insert(expect.end(), k + 6, k + 10);
  }
  uint32_t* d_in = ToDevice(in);
  uint32_t* d_out = ToDevice(std::vector<uint32_t>(12, 0));
  PhiloxKernel<<<1, 32>>>(d_in, d_out, 3);
  CHECK(cudaGetLastError());
  Compare("Philox4x32-10 KAT on the device", ToHost(d_out, 12), expect,
          [](size_t i) { return Str("vector %zu word %zu", i / 4, i % 4); });
  cudaFree(d_in);
  cudaFree(d_out);
}

// ---------------------------------------------------------------------------------------------
// Grid of (key, row, column).
struct Query {
  uint32_t k0, k1;
  uint64_t row;
  uint32_t col;
};

__global__ void GridKernel(const Query* q, int n, uint32_t* f32, uint32_t* f32_group,
                           uint64_t* f64, uint64_t* f64_group) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Query x = q[i];
  f32[i] = __float_as_uint(GumbelNoiseF32(x.k0, x.k1, x.row, x.col));
  const GumbelF32x8 g = GumbelNoiseGroupF32(x.k0, x.k1, x.row, x.col / 8);
  float gj = g.v[0];
  for (uint32_t j = 1; j < 8; ++j) gj = j == x.col % 8 ? g.v[j] : gj;
  f32_group[i] = __float_as_uint(gj);
  f64[i] = static_cast<uint64_t>(__double_as_longlong(GumbelNoiseF64(x.k0, x.k1, x.row, x.col)));
  const GumbelF64x2 h = GumbelNoiseGroupF64(x.k0, x.k1, x.row, x.col / 2);
  f64_group[i] =
      static_cast<uint64_t>(__double_as_longlong((x.col % 2) == 0 ? h.v[0] : h.v[1]));
}

void CheckGrid() {
  const uint32_t keys[][2] = {{0, 0}, {0x12345678u, 0x9abcdef0u}, {0xFFFFFFFFu, 0xFFFFFFFFu},
                              {0xC0FFEEu, 0xBADF00Du}};
  const uint64_t rows[] = {0, 1, 2, 3, 255, 65537, 0xFFFFFFFFull, 0x100000000ull,
                           0x123456789abull, ~0ull};
  std::vector<uint32_t> cols;
  for (uint32_t c = 0; c < 4096; ++c) cols.push_back(c);
  for (uint32_t base : {202048u - 2048u, 262144u - 2048u, 0x80000000u - 4096u})
    for (uint32_t c = 0; c < 4096; ++c) cols.push_back(base + c);
  std::vector<Query> q;
  for (auto& k : keys)
    for (uint64_t r : rows)
      for (uint32_t c : cols) q.push_back({k[0], k[1], r, c});
  const int n = static_cast<int>(q.size());
  Query* d_q = ToDevice(q);
  uint32_t *d_f32, *d_f32g;
  uint64_t *d_f64, *d_f64g;
  CHECK(cudaMalloc(&d_f32, n * 4));
  CHECK(cudaMalloc(&d_f32g, n * 4));
  CHECK(cudaMalloc(&d_f64, n * 8));
  CHECK(cudaMalloc(&d_f64g, n * 8));
  GridKernel<<<(n + 255) / 256, 256>>>(d_q, n, d_f32, d_f32g, d_f64, d_f64g);
  CHECK(cudaGetLastError());
  const auto f32 = ToHost(d_f32, n), f32g = ToHost(d_f32g, n);
  const auto f64 = ToHost(d_f64, n), f64g = ToHost(d_f64g, n);
  std::vector<uint32_t> h32(n);
  std::vector<uint64_t> h64(n);
  for (int i = 0; i < n; ++i) {
    h32[i] = AsBits(GumbelNoiseF32(q[i].k0, q[i].k1, q[i].row, q[i].col));
    h64[i] = AsBits(GumbelNoiseF64(q[i].k0, q[i].k1, q[i].row, q[i].col));
  }
  auto where = [&](size_t i) {
    return Str("key %08x %08x row %" PRIu64 " col %u", q[i].k0, q[i].k1, q[i].row, q[i].col);
  };
  Compare("GumbelNoiseF32 device == host", f32, h32, where);
  Compare("GumbelNoiseGroupF32 device == GumbelNoiseF32 host", f32g, h32, where);
  Compare("GumbelNoiseF64 device == host", f64, h64, where);
  Compare("GumbelNoiseGroupF64 device == GumbelNoiseF64 host", f64g, h64, where);
  cudaFree(d_q);
  cudaFree(d_f32);
  cudaFree(d_f32g);
  cudaFree(d_f64);
  cudaFree(d_f64g);
}

// ---------------------------------------------------------------------------------------------
// Elementwise functions over input lists.
enum Fn : int { kNoise32 = 0, kBound32, kLog32, kLog1p32, kNoise64, kBound64, kLog64, kLog1p64 };

__global__ void Map32Kernel(int fn, const uint32_t* in, uint32_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t b = in[i];
    float r = 0;
    switch (fn) {
      case kNoise32: r = GumbelFromBitsF32(b); break;
      case kBound32: r = GumbelUpperBoundF32(b); break;
      case kLog32: r = GumbelLogF32(__uint_as_float(b)); break;
      case kLog1p32: r = GumbelLog1pF32(__uint_as_float(b)); break;
      default: break;
    }
    out[i] = __float_as_uint(r);
  }
}
__global__ void Map64Kernel(int fn, const uint64_t* in, uint64_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint64_t b = in[i];
    const double x = __longlong_as_double(static_cast<long long>(b));
    double r = 0;
    switch (fn) {
      case kNoise64: r = GumbelFromBitsF64(b); break;
      case kBound64: r = GumbelUpperBoundF64(b); break;
      case kLog64: r = GumbelLogF64(x); break;
      case kLog1p64: r = GumbelLog1pF64(x); break;
      default: break;
    }
    out[i] = static_cast<uint64_t>(__double_as_longlong(r));
  }
}

std::vector<uint32_t> DeviceMap32(Fn fn, const std::vector<uint32_t>& in) {
  uint32_t* d_in = ToDevice(in);
  uint32_t* d_out;
  CHECK(cudaMalloc(&d_out, std::max<size_t>(1, in.size()) * 4));
  Map32Kernel<<<1024, 256>>>(fn, d_in, d_out, in.size());
  CHECK(cudaGetLastError());
  auto out = ToHost(d_out, in.size());
  cudaFree(d_in);
  cudaFree(d_out);
  return out;
}
std::vector<uint64_t> DeviceMap64(Fn fn, const std::vector<uint64_t>& in) {
  uint64_t* d_in = ToDevice(in);
  uint64_t* d_out;
  CHECK(cudaMalloc(&d_out, std::max<size_t>(1, in.size()) * 8));
  Map64Kernel<<<1024, 256>>>(fn, d_in, d_out, in.size());
  CHECK(cudaGetLastError());
  auto out = ToHost(d_out, in.size());
  cudaFree(d_in);
  cudaFree(d_out);
  return out;
}

uint32_t HostMap32(Fn fn, uint32_t b) {
  switch (fn) {
    case kNoise32: return AsBits(GumbelFromBitsF32(b));
    case kBound32: return AsBits(GumbelUpperBoundF32(b));
    case kLog32: return AsBits(GumbelLogF32(AsFloat(b)));
    case kLog1p32: return AsBits(GumbelLog1pF32(AsFloat(b)));
    default: return 0;
  }
}
uint64_t HostMap64(Fn fn, uint64_t b) {
  switch (fn) {
    case kNoise64: return AsBits(GumbelFromBitsF64(b));
    case kBound64: return AsBits(GumbelUpperBoundF64(b));
    case kLog64: return AsBits(GumbelLogF64(AsDouble(b)));
    case kLog1p64: return AsBits(GumbelLog1pF64(AsDouble(b)));
    default: return 0;
  }
}

void CompareMap32(const char* what, Fn fn, const std::vector<uint32_t>& in,
                  std::vector<uint32_t>* dev_out = nullptr) {
  const auto dev = DeviceMap32(fn, in);
  std::vector<uint32_t> host(in.size());
  for (size_t i = 0; i < in.size(); ++i) host[i] = HostMap32(fn, in[i]);
  Compare(what, dev, host, [&](size_t i) { return Str("input %08x", in[i]); });
  if (dev_out) *dev_out = dev;
}
void CompareMap64(const char* what, Fn fn, const std::vector<uint64_t>& in,
                  std::vector<uint64_t>* dev_out = nullptr) {
  const auto dev = DeviceMap64(fn, in);
  std::vector<uint64_t> host(in.size());
  for (size_t i = 0; i < in.size(); ++i) host[i] = HostMap64(fn, in[i]);
  Compare(what, dev, host, [&](size_t i) { return Str("input %016" PRIx64, in[i]); });
  if (dev_out) *dev_out = dev;
}

uint64_t Fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 0x100000001B3ull;
  return h;
}

void CheckTransformsAndDigests() {
  // float32 noise and bound: edge windows + a stride over all 2^32 patterns.
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (1u << 20); ++b) {
    bits.push_back(static_cast<uint32_t>(b));
    bits.push_back(static_cast<uint32_t>(0x80000000ull - (1u << 19) + b));
    bits.push_back(static_cast<uint32_t>(0xFFFFFFFFull - b));
  }
  for (uint64_t b = 0; b < (1ull << 32); b += 251) bits.push_back(static_cast<uint32_t>(b));
  CompareMap32("GumbelFromBitsF32 device == host (edges + every 251st of 2^32)", kNoise32, bits);
  CompareMap32("GumbelUpperBoundF32 device == host", kBound32, bits);

  // The pinned digests of tests/cpp/gumbel_test.cc, from the device's results.
  const uint64_t kPinned[4] = {0x684354c453b8f544ull, 0x1cbb1bbaf913e66cull,
                               0xf0ae51cd8280e5c2ull, 0xc53f1c3d8eef4912ull};
  uint64_t digest[4] = {0xCBF29CE484222325ull, 0xCBF29CE484222325ull, 0xCBF29CE484222325ull,
                        0xCBF29CE484222325ull};
  {
    std::vector<uint32_t> in;
    for (uint64_t b = 0; b < (1ull << 32); b += 1021) in.push_back(static_cast<uint32_t>(b));
    in.push_back(0xFFFFFFFFu);
    std::vector<uint32_t> dev;
    CompareMap32("GumbelFromBitsF32 device == host (digest set)", kNoise32, in, &dev);
    for (uint32_t v : dev) digest[0] = Fnv(digest[0], v);
  }
  {
    std::vector<uint64_t> in;
    for (uint64_t i = 0; i < (1u << 20); ++i) {
      const uint64_t b = i * 0x9E3779B97F4A7C15ull;
      in.push_back(b);
      in.push_back(b >> (i % 64));
    }
    std::vector<uint64_t> dev;
    CompareMap64("GumbelFromBitsF64 device == host (digest set)", kNoise64, in, &dev);
    for (uint64_t v : dev) digest[1] = Fnv(digest[1], v);
    CompareMap64("GumbelUpperBoundF64 device == host", kBound64, in);
  }
  {
    // log32 digest interleaves log(x) and, where defined, log1p(x - 1).
    std::vector<uint32_t> xs, x1;
    std::vector<uint8_t> has1;
    for (uint32_t bb = AsBits(FLT_MIN); bb < AsBits(FLT_MAX); bb += 4093) {
      xs.push_back(bb);
      const bool ok = AsFloat(bb) >= 0x1p-20f && AsFloat(bb) <= 0x1p100f;
      has1.push_back(ok);
      if (ok) x1.push_back(AsBits(AsFloat(bb) - 1.0f));
    }
    std::vector<uint32_t> dl, dl1;
    CompareMap32("GumbelLogF32 device == host (digest set)", kLog32, xs, &dl);
    CompareMap32("GumbelLog1pF32 device == host (digest set)", kLog1p32, x1, &dl1);
    size_t k = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      digest[2] = Fnv(digest[2], dl[i]);
      if (has1[i]) digest[2] = Fnv(digest[2], dl1[k++]);
    }
  }
  {
    std::vector<uint64_t> xs;
    for (uint64_t i = 0; i < (1u << 20); ++i)
      xs.push_back((1 + (i * 2654435761u) % 2046) << 52 | ((i * 0x9E3779B97F4A7C15ull) >> 12));
    std::vector<uint64_t> dev;
    CompareMap64("GumbelLogF64 device == host (digest set)", kLog64, xs, &dev);
    for (uint64_t v : dev) digest[3] = Fnv(digest[3], v);
  }
  const bool ok = std::equal(digest, digest + 4, kPinned);
  std::printf("%s  device digests == gumbel_test's pinned digests: %016" PRIx64 " %016" PRIx64
              " %016" PRIx64 " %016" PRIx64 "\n",
              ok ? "ok  " : "FAIL", digest[0], digest[1], digest[2], digest[3]);
  if (!ok) ++g_failures;

  // More log inputs: a stride over all positive normal floats, log1p over (-1, 2^30].
  std::vector<uint32_t> logs;
  for (uint32_t bb = AsBits(FLT_MIN); bb < AsBits(FLT_MAX); bb += 127) logs.push_back(bb);
  CompareMap32("GumbelLogF32 device == host (every 127th positive normal)", kLog32, logs);
  std::vector<uint32_t> log1ps;
  for (uint32_t bb = AsBits(0x1p-60f); bb <= AsBits(0x1p30f); bb += 61) log1ps.push_back(bb);
  for (uint32_t bb = AsBits(0x1p-60f); bb <= AsBits(1.0f - 0x1p-24f); bb += 61)
    log1ps.push_back(bb | 0x80000000u);
  CompareMap32("GumbelLog1pF32 device == host (x in (-1, 2^30])", kLog1p32, log1ps);
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> b64, l64, l1p64;
  for (int i = 0; i < (1 << 22); ++i) {
    const uint64_t r = rng();
    const int shift = static_cast<int>(rng() % 64);
    b64.push_back(i % 4 == 0 ? r >> shift : i % 4 == 1 ? ~(r >> shift) : r);
    l64.push_back((1 + rng() % 2046) << 52 | (r >> 12));
    double y = AsDouble((1023 - 80 + rng() % 120) << 52 | (r >> 12));
    if ((r & 1) && y < 1) y = -y;
    l1p64.push_back(AsBits(y));
  }
  CompareMap64("GumbelFromBitsF64 device == host (2^22 patterns, tails)", kNoise64, b64);
  CompareMap64("GumbelLogF64 device == host", kLog64, l64);
  CompareMap64("GumbelLog1pF64 device == host", kLog1p64, l1p64);
}

// ---------------------------------------------------------------------------------------------
// The own exp and the fixed-point masses (exact_math.h, included by gumbel.h).

// Float32 patterns in increasing order of value: key k <-> bits (negative floats reversed).
JAX_ARGREDUCE_HD uint32_t BitsOfKey(uint32_t key) {
  return key >= 0x80000000u ? key & 0x7FFFFFFFu : ~key;
}
uint32_t KeyOfBits(uint32_t bits) {
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

__global__ void ExpRangeKernel(uint32_t key0, uint32_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float_as_uint(ExpF32(__uint_as_float(BitsOfKey(key0 + static_cast<uint32_t>(i)))));
  }
}

// A token's mass from d = z - z_max (exact_math.h): MassOfExponent, and the fast step's mass with
// its refinement flag in bit 63 (a mass is at most 2^32).
__global__ void MassOfExponentKernel(uint32_t key0, uint64_t* full, uint64_t* fast, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float d = __uint_as_float(BitsOfKey(key0 + static_cast<uint32_t>(i)));
    full[i] = MassOfExponent(d);
    const FastMass m = MassOfExponentFast(d);
    fast[i] = m.mass | (m.refine ? 1ull << 63 : 0ull);
  }
}

struct MassQuery {
  uint64_t prefix, total;
  float p;
};
__global__ void MassKernel(const MassQuery* q, uint64_t* fixed, uint32_t* below, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    fixed[i] = MassFixed(q[i].p);
    below[i] = MassBelow(q[i].prefix, q[i].p, q[i].total) ? 1u : 0u;
  }
}

void CheckExpAndMasses() {
  // Every float in [-104, 89], in chunks of 2^26 (the device and the host, bit for bit).
  const uint32_t key_lo = KeyOfBits(AsBits(-104.0f)), key_hi = KeyOfBits(AsBits(89.0f));
  const size_t chunk = size_t{1} << 26;
  uint32_t* d_out;
  CHECK(cudaMalloc(&d_out, chunk * 4));
  uint64_t total = 0, bad = 0;
  for (uint64_t key0 = key_lo; key0 <= key_hi; key0 += chunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, key_hi + 1ull - key0));
    ExpRangeKernel<<<1024, 256>>>(static_cast<uint32_t>(key0), d_out, n);
    CHECK(cudaGetLastError());
    const auto dev = ToHost(d_out, n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t x = BitsOfKey(static_cast<uint32_t>(key0 + i));
      const uint32_t host = AsBits(ExpF32(AsFloat(x)));
      if (dev[i] != host && bad++ < 5) {
        std::printf("    ExpF32 mismatch at x %08x: device %08x host %08x\n", x, dev[i], host);
      }
    }
    total += n;
  }
  cudaFree(d_out);
  g_compared += total;
  std::printf("%s  ExpF32 device == host (every float in [-104, 89]): %" PRIu64
              " values, %" PRIu64 " mismatches\n", bad ? "FAIL" : "ok  ", total, bad);
  if (bad) ++g_failures;

  // The masses' shortcut (two conversions on the device, casts on the host) and its refinement
  // flag over every d in [-24, 0], both zeros included.
  {
    const uint32_t lo = KeyOfBits(AsBits(-24.0f)), hi = KeyOfBits(AsBits(0.0f));
    uint64_t *d_full, *d_fast;
    CHECK(cudaMalloc(&d_full, chunk * 8));
    CHECK(cudaMalloc(&d_fast, chunk * 8));
    uint64_t count = 0, wrong = 0;
    for (uint64_t key0 = lo; key0 <= hi; key0 += chunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, hi + 1ull - key0));
      MassOfExponentKernel<<<1024, 256>>>(static_cast<uint32_t>(key0), d_full, d_fast, n);
      CHECK(cudaGetLastError());
      const auto full = ToHost(d_full, n);
      const auto fast = ToHost(d_fast, n);
      for (size_t i = 0; i < n; ++i) {
        const float d = AsFloat(BitsOfKey(static_cast<uint32_t>(key0 + i)));
        const FastMass m = MassOfExponentFast(d);
        const uint64_t host_fast = m.mass | (m.refine ? 1ull << 63 : 0ull);
        if ((full[i] != MassOfExponent(d) || fast[i] != host_fast) && wrong++ < 5) {
          std::printf("    MassOfExponent mismatch at d %a: device %" PRIu64 " / %" PRIx64
                      ", host %" PRIu64 " / %" PRIx64 "\n", d, full[i], fast[i],
                      MassOfExponent(d), host_fast);
        }
      }
      count += n;
    }
    cudaFree(d_full);
    cudaFree(d_fast);
    g_compared += count;
    std::printf("%s  MassOfExponent(Fast) device == host (every float in [-24, 0]): %" PRIu64
                " values, %" PRIu64 " mismatches\n", wrong ? "FAIL" : "ok  ", count, wrong);
    if (wrong) ++g_failures;
  }

  // Masses: p over every exponent and random mantissas (with edges), totals of every bit length,
  // prefixes at floor(p * total) + {-1, 0, 1} (the comparison's boundary) and random.
  std::mt19937_64 rng(2024);
  std::vector<MassQuery> q;
  for (int i = 0; i < (1 << 20); ++i) {
    float p = AsFloat(static_cast<uint32_t>(rng() % (AsBits(1.0f) + 1u)));
    if (i % 8 == 1) p = 1.0f;
    if (i % 8 == 2) p = std::ldexp(1.0f, -static_cast<int>(rng() % 150));
    const uint64_t tot = (rng() >> (11 + rng() % 53)) + (i % 16 == 3 ? (1ull << 53) - 4 : 0);
    const double exact_floor = std::floor(static_cast<double>(p) * static_cast<double>(tot));
    const uint64_t fl = static_cast<uint64_t>(exact_floor);  // near the boundary is enough here
    const uint64_t prefix = i % 4 == 0 ? rng() % (tot + 1) : fl + (i % 4) - 2;
    q.push_back(MassQuery{prefix < (1ull << 53) ? prefix : 0, tot, p});
  }
  MassQuery* d_q = ToDevice(q);
  uint64_t* d_fixed;
  uint32_t* d_below;
  CHECK(cudaMalloc(&d_fixed, q.size() * 8));
  CHECK(cudaMalloc(&d_below, q.size() * 4));
  MassKernel<<<256, 256>>>(d_q, d_fixed, d_below, q.size());
  CHECK(cudaGetLastError());
  const auto dev_fixed = ToHost(d_fixed, q.size());
  const auto dev_below = ToHost(d_below, q.size());
  std::vector<uint64_t> host_fixed(q.size());
  std::vector<uint32_t> host_below(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    host_fixed[i] = MassFixed(q[i].p);
    host_below[i] = MassBelow(q[i].prefix, q[i].p, q[i].total) ? 1u : 0u;
  }
  auto describe = [&](size_t i) {
    return Str("prefix %" PRIu64 " p %a total %" PRIu64, q[i].prefix, q[i].p, q[i].total);
  };
  Compare("MassFixed device == host", dev_fixed, host_fixed, describe);
  Compare("MassBelow device == host", dev_below, host_below, describe);
  cudaFree(d_q);
  cudaFree(d_fixed);
  cudaFree(d_below);
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gumbel_check on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  CheckKat();
  CheckGrid();
  CheckTransformsAndDigests();
  CheckExpAndMasses();
  if (g_failures == 0) {
    std::printf("gumbel_check: PASS (%" PRIu64 " values compared bit for bit)\n", g_compared);
    return 0;
  }
  std::printf("gumbel_check: FAIL (%d checks failed, %" PRIu64 " values compared)\n", g_failures,
              g_compared);
  return 1;
}
