// The fp8 casts on the CPU (kernels/cpu/fp8.h). The AVX2 path is compiled for its own
// target with a function attribute (as convert.cpp's are) and rounds as the scalar
// definition does, without going through binary64:
//   - at or above the format's smallest normal, round-to-nearest-even on the binary32
//     bits: add half an ulp of the target (minus one, plus the kept lsb) and shift; the
//     exponent re-biases by a subtraction, and a carry moves up a binade by itself;
//   - below it, the code is |x| in units of the smallest subnormal, |x| * 2^(bias-1+man)
//     (an exact product), rounded to the nearest integer, ties to even, by the
//     instruction's own rounding (not MXCSR's); a code of 2^man is the smallest normal.
// Too-large values and Inf take the overflow rule's code, NaN the format's NaN.
#include "kernels/cpu/fp8.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ampcheck::kernels::cpu {
namespace {

template <int E>
std::uint8_t encode(float x, Fp8Overflow o) {
  return E == 4 ? f32_to_e4m3_bits(bits_of(x), o) : f32_to_e5m2_bits(bits_of(x), o);
}

template <int E>
float decode(std::uint8_t c) {
  return float_of(fp8_bits_to_f32_bits<E>(c));
}

// Every code's binary32 value, from the scalar definition.
template <int E>
const std::array<float, 256>& table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[static_cast<std::size_t>(c)] = decode<E>(static_cast<std::uint8_t>(c));
    return v;
  }();
  return t;
}

template <int E>
float quantize_scalar(const float* s, std::uint8_t* d, std::size_t n, float scale, bool scaled, Fp8Overflow o) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float ax = float_of(bits_of(s[i]) & 0x7fffffffu);
    if (ax > amax) amax = ax;  // false for NaN: it does not enter the amax
    d[i] = encode<E>(scaled ? s[i] * scale : s[i], o);
  }
  return amax;
}

template <int E>
void dequantize_scalar(const std::uint8_t* s, float* d, std::size_t n, float scale_inv, bool scaled) {
  for (std::size_t i = 0; i < n; ++i) d[i] = scaled ? decode<E>(s[i]) * scale_inv : decode<E>(s[i]);
}

#if defined(__x86_64__)
template <int E>
__attribute__((target("avx2"))) __m256i codes_avx2(__m256 x, Fp8Overflow o) {
  constexpr int kMan = E == 4 ? 3 : 2, kBias = E == 4 ? 7 : 15;
  constexpr int kShift = 23 - kMan;
  constexpr int kMaxCode = E == 4 ? 0x7e : 0x7b;
  const int too_large = o == Fp8Overflow::saturate ? kMaxCode : (E == 4 ? 0x7f : 0x7c);
  const __m256i xi = _mm256_castps_si256(x);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(xi, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, kShift), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32((1 << (kShift - 1)) - 1), lsb));
  const __m256i normal =
      _mm256_sub_epi32(_mm256_srli_epi32(rounded, kShift), _mm256_set1_epi32((127 - kBias) << kMan));
  const __m256 units = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(static_cast<float>(1 << (kBias - 1 + kMan))));
  const __m256i sub = _mm256_cvttps_epi32(_mm256_round_ps(units, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i below_normal = _mm256_cmpgt_epi32(_mm256_set1_epi32((127 + 1 - kBias) << 23), a);
  __m256i code = _mm256_blendv_epi8(normal, sub, below_normal);
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(too_large), _mm256_cmpgt_epi32(code, _mm256_set1_epi32(kMaxCode)));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(E == 4 ? 0x7f : 0x7e), nan);
  return _mm256_or_si256(code, sign);
}

// The low byte of each 32-bit lane, as 8 bytes.
__attribute__((target("avx2"))) void store8_avx2(__m256i codes, std::uint8_t* d) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(codes, pick), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d), _mm256_castsi256_si128(bytes));
}

template <int E>
__attribute__((target("avx2"))) float quantize_avx2(const float* s, std::uint8_t* d, std::size_t n, float scale,
                                                     bool scaled, Fp8Overflow o) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(s + i);
    amax = _mm256_max_ps(_mm256_and_ps(x, abs_mask), amax);  // a NaN lane keeps amax (the second operand)
    store8_avx2(codes_avx2<E>(scaled ? _mm256_mul_ps(x, vscale) : x, o), d + i);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float m = quantize_scalar<E>(s + i, d + i, n - i, scale, scaled, o);
  for (float v : lanes)
    if (v > m) m = v;
  return m;
}

template <int E>
__attribute__((target("avx2"))) void dequantize_avx2(const std::uint8_t* s, float* d, std::size_t n, float scale_inv,
                                                      bool scaled) {
  const float* t = table<E>().data();
  const __m256 vs = _mm256_set1_ps(scale_inv);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t eight;
    std::memcpy(&eight, s + i, sizeof eight);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(eight)));
    const __m256 v = _mm256_i32gather_ps(t, idx, 4);
    _mm256_storeu_ps(d + i, scaled ? _mm256_mul_ps(v, vs) : v);
  }
  dequantize_scalar<E>(s + i, d + i, n - i, scale_inv, scaled);
}
#endif

void check(Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument("fp8 conversion path \"" + std::string(isa_name(isa)) +
                                "\" is not supported by this CPU (best: " + std::string(isa_name(best_isa())) + ")");
}

template <int E>
float quantize(const float* s, std::uint8_t* d, std::size_t n, float scale, bool scaled, Fp8Overflow o, Isa isa) {
  check(isa);
#if defined(__x86_64__)
  if (isa != Isa::scalar) return quantize_avx2<E>(s, d, n, scale, scaled, o);
#endif
  return quantize_scalar<E>(s, d, n, scale, scaled, o);
}

template <int E>
void dequantize(const std::uint8_t* s, float* d, std::size_t n, float scale_inv, bool scaled, Isa isa) {
  check(isa);
#if defined(__x86_64__)
  if (isa != Isa::scalar) return dequantize_avx2<E>(s, d, n, scale_inv, scaled);
#endif
  dequantize_scalar<E>(s, d, n, scale_inv, scaled);
}

}  // namespace

void f32_to_fp8(const float* src, std::uint8_t* dst, std::size_t n, Fp8Format format, Fp8Overflow overflow, Isa isa) {
  if (format == Fp8Format::e4m3) quantize<4>(src, dst, n, 1.0f, false, overflow, isa);
  else quantize<5>(src, dst, n, 1.0f, false, overflow, isa);
}

void fp8_to_f32(const std::uint8_t* src, float* dst, std::size_t n, Fp8Format format, Isa isa) {
  if (format == Fp8Format::e4m3) dequantize<4>(src, dst, n, 1.0f, false, isa);
  else dequantize<5>(src, dst, n, 1.0f, false, isa);
}

float quantize_fp8(const float* src, std::uint8_t* dst, std::size_t n, float scale, Fp8Format format,
                   Fp8Overflow overflow, Isa isa) {
  return format == Fp8Format::e4m3 ? quantize<4>(src, dst, n, scale, true, overflow, isa)
                                   : quantize<5>(src, dst, n, scale, true, overflow, isa);
}

void dequantize_fp8(const std::uint8_t* src, float* dst, std::size_t n, float scale_inv, Fp8Format format, Isa isa) {
  if (format == Fp8Format::e4m3) dequantize<4>(src, dst, n, scale_inv, true, isa);
  else dequantize<5>(src, dst, n, scale_inv, true, isa);
}

std::uint8_t mx_block_code(const float* x, std::size_t n, Fp8Format format) {
  const float max_elem = format == Fp8Format::e4m3 ? 448.0f : 57344.0f;
  float amax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float ax = float_of(bits_of(x[i]) & 0x7fffffffu);
    if (ax > amax) amax = ax;  // NaN does not enter it
  }
  return e8m0_scale_bits(amax, max_elem);
}

void quantize_mxfp8(const float* src, std::uint8_t* codes, std::uint8_t* scales, std::int64_t rows, std::int64_t cols,
                    Fp8Format format, Isa isa) {
  const std::int64_t blocks = (cols + kMxBlock - 1) / kMxBlock;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t first = r * cols + b * kMxBlock;
      const auto n = static_cast<std::size_t>(std::min(kMxBlock, cols - b * kMxBlock));
      const std::uint8_t code = mx_block_code(src + first, n, format);
      scales[r * blocks + b] = code;
      quantize_fp8(src + first, codes + first, n, e8m0_multiplier(code), format, Fp8Overflow::saturate, isa);
    }
}

void dequantize_mxfp8(const std::uint8_t* codes, const std::uint8_t* scales, float* dst, std::int64_t rows,
                      std::int64_t cols, Fp8Format format, Isa isa) {
  const std::int64_t blocks = (cols + kMxBlock - 1) / kMxBlock;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t first = r * cols + b * kMxBlock;
      const auto n = static_cast<std::size_t>(std::min(kMxBlock, cols - b * kMxBlock));
      dequantize_fp8(codes + first, dst + first, n, e8m0_to_f32(scales[r * blocks + b]), format, isa);
    }
}

}  // namespace ampcheck::kernels::cpu
