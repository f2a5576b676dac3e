// Bit-exact IEEE 754 conversions between binary64/binary32 and the two 16-bit formats
// (binary16 "fp16" and bfloat16), rounding to nearest, ties to even.
//
// One scalar definition, compiled for the host and (under nvcc) for the device, so the
// CPU paths, the vector paths and the CUDA kernels agree bit for bit by construction.
//
// Semantics, all formats:
//   - subnormals are produced and consumed (no flush to zero);
//   - a finite value whose rounded magnitude exceeds the format's max becomes +-Inf;
//   - +-0 keeps its sign;
//   - NaN stays NaN: sign kept, the most significant payload bits kept, the quiet bit
//     set (what x86 F16C does in hardware, and what IEEE 754 recommends).
#pragma once

#include <cstdint>  // std::uint16_t, std::uint32_t, std::uint64_t

#if defined(__CUDACC__)
#define AMPCHECK_HD __host__ __device__ __forceinline__
#else
#define AMPCHECK_HD inline
#endif

namespace ampcheck::kernels {

// Raw bit views without aliasing UB, usable on host and device.
AMPCHECK_HD std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(std::uint32_t, f);
#endif
}
AMPCHECK_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}
AMPCHECK_HD std::uint64_t bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  return __builtin_bit_cast(std::uint64_t, d);
#endif
}
AMPCHECK_HD double double_of(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return __builtin_bit_cast(double, u);
#endif
}

// ---- binary32 -> binary16 -------------------------------------------------------------
AMPCHECK_HD std::uint16_t f32_to_f16_bits(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u)  // NaN: top 10 payload bits, quiet bit forced
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x03ffu));
  if (ax >= 0x477ff000u)  // >= 65520 = 65504 + half an ulp: rounds to Inf (Inf included)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // >= 2^-14: an fp16 normal. Rebias 127 -> 15, round 13 bits.
    const std::uint32_t odd = (ax >> 13) & 1u;
    return static_cast<std::uint16_t>(sign | ((ax - (112u << 23) + 0x0fffu + odd) >> 13));
  }
  if (ax <= 0x33000000u)  // <= 2^-25, half the smallest subnormal: the tie goes to even 0
    return static_cast<std::uint16_t>(sign);
  // fp16 subnormal: value = m * 2^(e-150), quantum 2^-24, so keep m >> (126 - e).
  const std::uint32_t e = ax >> 23;  // 102..112 here
  const std::uint32_t m = (ax & 0x007fffffu) | 0x00800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | q);  // q == 0x400 encodes the min normal
}

// ---- binary16 -> binary32 (exact) -----------------------------------------------------
AMPCHECK_HD std::uint32_t f16_bits_to_f32_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x03ffu;
  if (e == 0x1fu)
    return m == 0 ? (sign | 0x7f800000u) : (sign | 0x7fc00000u | (m << 13));
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  // subnormal m * 2^-24: exact as a float product (m < 2^10, result a normal binary32)
  return sign | bits_of(static_cast<float>(m) * 5.9604644775390625e-08f);
}

// ---- binary32 -> bfloat16 -------------------------------------------------------------
AMPCHECK_HD std::uint16_t f32_to_bf16_bits(std::uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // Same exponent range as binary32: rounding the low 16 bits is all there is to it, and
  // a carry out of the mantissa moves to the next binade or to Inf, as it should.
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- bfloat16 -> binary32 (exact) -----------------------------------------------------
AMPCHECK_HD std::uint32_t bf16_bits_to_f32_bits(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  return (x & 0x7fffffffu) > 0x7f800000u ? (x | 0x00400000u) : x;
}

// ---- binary64 -> a narrower binary format with ExpBits/ManBits ------------------------
// Used for f64 -> f16 / bf16 with a single rounding (going through binary32 would round
// twice and can be off by one ulp). Returns the target's bit pattern.
template <int ExpBits, int ManBits>
AMPCHECK_HD std::uint32_t f64_to_narrow_bits(std::uint64_t x) {
  constexpr std::uint32_t kBias = (1u << (ExpBits - 1)) - 1u;
  constexpr int kEmin = 1 - static_cast<int>(kBias);
  constexpr int kEmax = static_cast<int>(kBias);
  constexpr std::uint32_t kInf = ((1u << ExpBits) - 1u) << ManBits;
  const std::uint32_t sign = static_cast<std::uint32_t>(x >> 63) << (ExpBits + ManBits);
  const std::uint64_t ax = x & 0x7fffffffffffffffull;
  if (ax > 0x7ff0000000000000ull)  // NaN
    return sign | kInf | (1u << (ManBits - 1)) |
           static_cast<std::uint32_t>((ax >> (52 - ManBits)) & ((1u << ManBits) - 1u));
  const int e = static_cast<int>(ax >> 52) - 1023;
  if (e > kEmax) return sign | kInf;  // >= 2^(emax+1), Inf included
  if (e < kEmin - ManBits - 1) return sign;  // < half the smallest subnormal (f64 subnormals too)
  const std::uint64_t sig = (ax & 0x000fffffffffffffull) | 0x0010000000000000ull;
  // value = sig * 2^(e-52); target quantum 2^(max(e, emin) - ManBits)
  const int shift = 52 - ManBits + (e < kEmin ? kEmin - e : 0);  // <= 52 - ManBits + ManBits + 1
  std::uint64_t q = sig >> shift;
  const std::uint64_t rem = sig & ((1ull << shift) - 1ull);
  const std::uint64_t half = 1ull << (shift - 1);
  q += (rem > half || (rem == half && (q & 1ull))) ? 1ull : 0ull;
  if (e < kEmin) return sign | static_cast<std::uint32_t>(q);  // subnormal (or min normal)
  // q in [2^M, 2^(M+1)]: the carry of q == 2^(M+1) lands in the exponent field.
  const std::uint32_t bits = ((static_cast<std::uint32_t>(e) + kBias) << ManBits) +
                             static_cast<std::uint32_t>(q - (1ull << ManBits));
  return sign | (bits >= kInf ? kInf : bits);
}

// A double rounded once to binary32, to nearest even, as IEEE 754 rounds it: beyond FLT_MAX
// but below the midpoint 2^128 - 2^103 it is FLT_MAX, from there +-Inf (a C++ cast of a
// double beyond float's range is undefined behaviour); NaN stays NaN.
AMPCHECK_HD float f64_to_f32(double x) {
  const double a = x < 0 ? -x : x;  // false for NaN: the cast below keeps it
  if (a >= 340282356779733661637539395458142568448.0) return float_of(x < 0 ? 0xff800000u : 0x7f800000u);
  if (a > 340282346638528859811704183484516925440.0) return float_of(x < 0 ? 0xff7fffffu : 0x7f7fffffu);
  return static_cast<float>(x);  // in range: the cast rounds to nearest even
}

AMPCHECK_HD std::uint16_t f64_to_f16_bits(std::uint64_t x) {
  return static_cast<std::uint16_t>(f64_to_narrow_bits<5, 10>(x));
}
AMPCHECK_HD std::uint16_t f64_to_bf16_bits(std::uint64_t x) {
  return static_cast<std::uint16_t>(f64_to_narrow_bits<8, 7>(x));
}

// ---- fp8: OCP 8-bit formats, as TransformerEngine, cuBLASLt and ml_dtypes define them ----
// E4M3 ("e4m3fn": 4 exponent bits, bias 7, 3 mantissa bits) has no Inf: exponent field 15
// holds finite values up to 448 (0x7e) and S.1111.111 is its only NaN (0x7f, 0xff).
// E5M2 (5 exponent bits, bias 15, 2 mantissa bits) is IEEE-like: Inf 0x7c, NaN 0x7d-0x7f,
// max 57344 (0x7b). Rounding is to nearest, ties to even, subnormals kept, as above.
// Two overflow rules:
//   - not saturating (Fp8Overflow::to_nonfinite: ml_dtypes' and numpy's astype, PyTorch's
//     .to(float8_e5m2)): a value that rounds beyond max, and Inf, become NaN in E4M3 and Inf
//     in E5M2;
//   - saturating (Fp8Overflow::saturate: CUDA's __NV_SATFINITE, TransformerEngine's casts,
//     PyTorch's .to(float8_e4m3fn) (torch 2.15)): they become +-max; NaN stays NaN.
enum class Fp8Overflow : std::uint8_t { to_nonfinite, saturate };

namespace fp8_detail {
// Largest finite code magnitude and the non-finite code a too-large value takes.
template <int ExpBits>
struct Layout;
template <>
struct Layout<4> {  // E4M3 (fn)
  static constexpr int kMan = 3, kBias = 7;
  static constexpr std::uint32_t kMaxCode = 0x7eu, kOverflowCode = 0x7fu;  // 448; NaN
};
template <>
struct Layout<5> {  // E5M2
  static constexpr int kMan = 2, kBias = 15;
  static constexpr std::uint32_t kMaxCode = 0x7bu, kOverflowCode = 0x7cu;  // 57344; Inf
};
}  // namespace fp8_detail

// binary64 -> fp8 with one rounding (binary32 inputs convert to binary64 exactly first).
template <int ExpBits>
AMPCHECK_HD std::uint8_t f64_to_fp8_bits(std::uint64_t x, Fp8Overflow overflow) {
  using L = fp8_detail::Layout<ExpBits>;
  constexpr int kMan = L::kMan;
  constexpr int kEmin = 1 - L::kBias;
  const std::uint32_t sign = static_cast<std::uint32_t>(x >> 63) << 7;
  const std::uint64_t ax = x & 0x7fffffffffffffffull;
  const std::uint32_t too_large = overflow == Fp8Overflow::saturate ? L::kMaxCode : L::kOverflowCode;
  // NaN: E4M3's one NaN, E5M2's quiet NaN, of its sign (two payload bits carry nothing
  // worth keeping; ml_dtypes drops them too).
  if (ax > 0x7ff0000000000000ull) return static_cast<std::uint8_t>(sign | (ExpBits == 4 ? 0x7fu : 0x7eu));
  if (ax == 0x7ff0000000000000ull) return static_cast<std::uint8_t>(sign | too_large);
  const int e = static_cast<int>(ax >> 52) - 1023;
  if (e > L::kBias + 1) return static_cast<std::uint8_t>(sign | too_large);  // >= 2^(bias+2): beyond any code
  if (e < kEmin - kMan - 1) return static_cast<std::uint8_t>(sign);          // < half the smallest subnormal
  const std::uint64_t sig = (ax & 0x000fffffffffffffull) | 0x0010000000000000ull;
  const int shift = 52 - kMan + (e < kEmin ? kEmin - e : 0);
  std::uint64_t q = sig >> shift;
  const std::uint64_t rem = sig & ((1ull << shift) - 1ull);
  const std::uint64_t half = 1ull << (shift - 1);
  q += (rem > half || (rem == half && (q & 1ull))) ? 1ull : 0ull;
  if (e < kEmin) return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(q));  // subnormal or min normal
  const std::uint32_t code = ((static_cast<std::uint32_t>(e + L::kBias)) << kMan) +
                             static_cast<std::uint32_t>(q - (1ull << kMan));  // a carry moves up a binade
  return static_cast<std::uint8_t>(sign | (code > L::kMaxCode ? too_large : code));
}

// fp8 -> binary32, exact. A NaN comes back as the quiet NaN of its sign (as ml_dtypes
// widens it; E5M2's two payload bits are not kept).
template <int ExpBits>
AMPCHECK_HD std::uint32_t fp8_bits_to_f32_bits(std::uint8_t c) {
  using L = fp8_detail::Layout<ExpBits>;
  constexpr int kMan = L::kMan;
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t e = (c >> kMan) & ((1u << ExpBits) - 1u);
  const std::uint32_t m = c & ((1u << kMan) - 1u);
  if (ExpBits == 4 && (c & 0x7fu) == 0x7fu) return sign | 0x7fc00000u;
  if (ExpBits == 5 && e == 0x1fu) return sign | (m == 0 ? 0x7f800000u : 0x7fc00000u);
  if (e != 0) return sign | ((e - static_cast<std::uint32_t>(L::kBias) + 127u) << 23) | (m << (23 - kMan));
  if (m == 0) return sign;
  // subnormal m * 2^(1 - bias - kMan): exact as a float product
  return sign | bits_of(static_cast<float>(m) * float_of(static_cast<std::uint32_t>(127 + 1 - L::kBias - kMan) << 23));
}

AMPCHECK_HD std::uint8_t f32_to_e4m3_bits(std::uint32_t x, Fp8Overflow o) {
  return f64_to_fp8_bits<4>(bits_of(static_cast<double>(float_of(x))), o);
}
AMPCHECK_HD std::uint8_t f32_to_e5m2_bits(std::uint32_t x, Fp8Overflow o) {
  return f64_to_fp8_bits<5>(bits_of(static_cast<double>(float_of(x))), o);
}
AMPCHECK_HD std::uint32_t e4m3_bits_to_f32_bits(std::uint8_t c) { return fp8_bits_to_f32_bits<4>(c); }
AMPCHECK_HD std::uint32_t e5m2_bits_to_f32_bits(std::uint8_t c) { return fp8_bits_to_f32_bits<5>(c); }

// ---- E8M0: MXFP8's shared block scale ---------------------------------------------------
// A power of two 2^(code - 127), code 0..254; 0xff is NaN. A block of 32 values takes the
// scale TransformerEngine's MXFP8 kernels give it (transformer_engine/common/cast/mxfp8/
// quantize_mxfp8.cuh: float_to_e8m0(amax * Quantized_Limits<OType>::max_norm_rcp), the
// product with the binary32 reciprocal of max_elem, 448 for E4M3 and 57344 for E5M2;
// common/util/ptx.cuh: float_to_e8m0 is Blackwell's cvt.rp.satfinite.ue8m0x2.f32): that
// product rounded up to a power of two, so that no element of the block saturates (for every
// normal binary32 amax the code of the quotient amax / max_elem: both max_elems' reciprocals
// round up). A product at or below 2^-127 takes code 0 (a block of zeros too), one beyond
// 2^127 code 254, an infinite amax code 254 (satfinite), a NaN one the NaN code.
AMPCHECK_HD std::uint8_t e8m0_scale_bits(float amax, float max_elem) {
  const std::uint32_t q = bits_of(amax * (1.0f / max_elem)) & 0x7fffffffu;
  if (q > 0x7f800000u) return 0xffu;
  if (q == 0x7f800000u) return 0xfeu;
  const std::uint32_t e = q >> 23, m = q & 0x007fffffu;
  if (e == 0) return m > 0x00400000u ? 1u : 0u;  // binary32 subnormal: 2^-127 is code 0
  if (e >= 254u) return 254u;
  return static_cast<std::uint8_t>(e + (m != 0 ? 1u : 0u));
}
AMPCHECK_HD float e8m0_to_f32(std::uint8_t code) {
  if (code == 0xffu) return float_of(0x7fc00000u);
  if (code == 0) return float_of(0x00400000u);  // 2^-127, a binary32 subnormal
  return float_of(static_cast<std::uint32_t>(code) << 23);
}
// What a block's elements are multiplied by before their cast: TE's exp2f_rcp (ptx.cuh),
// 2^(127 - code) built from its bits, but 1 for code 0 (a block of zeros, or of values so
// small that their amax product is at most 2^-127: their elements are cast unscaled) and 0
// for code 254 (2^-127 is not built by the bits); NaN for the NaN code.
AMPCHECK_HD float e8m0_multiplier(std::uint8_t code) {
  if (code == 0xffu) return float_of(0x7fc00000u);
  if (code == 0) return 1.0f;
  return float_of(static_cast<std::uint32_t>(254u - code) << 23);
}

// Typed conveniences.
AMPCHECK_HD std::uint16_t f32_to_f16(float f) { return f32_to_f16_bits(bits_of(f)); }
AMPCHECK_HD std::uint16_t f32_to_bf16(float f) { return f32_to_bf16_bits(bits_of(f)); }
AMPCHECK_HD float f16_to_f32(std::uint16_t h) { return float_of(f16_bits_to_f32_bits(h)); }
AMPCHECK_HD float bf16_to_f32(std::uint16_t b) { return float_of(bf16_bits_to_f32_bits(b)); }

}  // namespace ampcheck::kernels
