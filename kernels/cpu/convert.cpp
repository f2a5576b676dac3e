// Reads top to bottom: the scalar reference loops, the x86 vector loops (each compiled
// for its own target with a function attribute, so the rest of the library stays
// portable), then the run-time dispatch.
#include "kernels/cpu/convert.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdlib>  // std::getenv
#include <cstring>
#include <stdexcept>  // std::invalid_argument
#include <string>

#include "kernels/cpu/cpu_features.h"  // cpu_features: which paths this CPU runs
#include "kernels/fp_bits.h"  // the scalar definitions every path must equal

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2, F16C, AVX-512F/BW, AVX-512-BF16 intrinsics
#endif

namespace ampcheck::kernels::cpu {
namespace {

// ---- scalar -------------------------------------------------------------------------
void f32_to_f16_scalar(const float* s, std::uint16_t* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = kernels::f32_to_f16(s[i]);
}
void f16_to_f32_scalar(const std::uint16_t* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = kernels::f16_to_f32(s[i]);
}
void f32_to_bf16_scalar(const float* s, std::uint16_t* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = kernels::f32_to_bf16(s[i]);
}
void bf16_to_f32_scalar(const std::uint16_t* s, float* d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = kernels::bf16_to_f32(s[i]);
}

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* helpers as "maybe uninitialized" once they
// are inlined here (GCC bug 105593); the warning says nothing about this code.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- AVX2 + F16C: 8 lanes -----------------------------------------------------------
// vcvtps2ph/vcvtph2ps are IEEE round-to-nearest-even with subnormals, and quiet NaNs
// keeping their top payload bits: exactly the scalar definition.
__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* s, std::uint16_t* d,
                                                            std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), kRne);
    const __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(s + i + 8), kRne);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 8), b);
  }
  f32_to_f16_scalar(s + i, d + i, n - i);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const std::uint16_t* s, float* d,
                                                            std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    const __m256 b =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 8)));
    _mm256_storeu_ps(d + i, a);
    _mm256_storeu_ps(d + i + 8, b);
  }
  f16_to_f32_scalar(s + i, d + i, n - i);
}

// bf16 has no AVX2 instruction: the scalar integer rounding, 8 lanes at a time.
__attribute__((target("avx2"))) __m256i bf16_round_avx2(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* s, std::uint16_t* d,
                                                       std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m256i b =
        bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
    // packus interleaves 128-bit lanes (a0 b0 a1 b1); the permute puts them back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  f32_to_bf16_scalar(s + i, d + i, n - i);
}

__attribute__((target("avx2"))) __m256i bf16_widen_avx2(__m128i h) {
  const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(x, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000)));
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const std::uint16_t* s, float* d,
                                                       std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_widen_avx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    const __m256i b =
        bf16_widen_avx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 8), b);
  }
  bf16_to_f32_scalar(s + i, d + i, n - i);
}

// ---- AVX-512F/BW: 16 lanes ----------------------------------------------------------
__attribute__((target("avx512f,avx512bw"))) void f32_to_f16_avx512(const float* s,
                                                                    std::uint16_t* d,
                                                                    std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm512_cvtps_ph(_mm512_loadu_ps(s + i), kRne);
    const __m256i b = _mm512_cvtps_ph(_mm512_loadu_ps(s + i + 16), kRne);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16), b);
  }
  f32_to_f16_scalar(s + i, d + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) void f16_to_f32_avx512(const std::uint16_t* s,
                                                                    float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m512 b =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16)));
    _mm512_storeu_ps(d + i, a);
    _mm512_storeu_ps(d + i + 16, b);
  }
  f16_to_f32_scalar(s + i, d + i, n - i);
}

// Rounded bf16 patterns in the low half of each 32-bit lane.
__attribute__((target("avx512f,avx512bw"))) __m512i bf16_round_avx512(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(rounded, nan, quiet);
}

// Two vectors of 32-bit lanes holding 16-bit values -> 32 16-bit values in order.
// packus interleaves 128-bit lanes (a0 b0 a1 b1 ...); the permute puts them back.
__attribute__((target("avx512f,avx512bw"))) __m512i pack_u32_pairs(__m512i a, __m512i b) {
  const __m512i order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
  return _mm512_permutexvar_epi64(order, _mm512_packus_epi32(a, b));
}

__attribute__((target("avx512f,avx512bw"))) void f32_to_bf16_avx512(const float* s,
                                                                     std::uint16_t* d,
                                                                     std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = bf16_round_avx512(_mm512_loadu_si512(s + i));
    const __m512i b = bf16_round_avx512(_mm512_loadu_si512(s + i + 16));
    _mm512_storeu_si512(d + i, pack_u32_pairs(a, b));
  }
  f32_to_bf16_scalar(s + i, d + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) __m512i bf16_widen_avx512(__m256i h) {
  const __m512i x = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(x, nan, x, _mm512_set1_epi32(0x00400000));
}

__attribute__((target("avx512f,avx512bw"))) void bf16_to_f32_avx512(const std::uint16_t* s,
                                                                     float* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a =
        bf16_widen_avx512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m512i b =
        bf16_widen_avx512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16)));
    _mm512_storeu_si512(d + i, a);
    _mm512_storeu_si512(d + i + 16, b);
  }
  bf16_to_f32_scalar(s + i, d + i, n - i);
}

// ---- AVX-512-BF16 -------------------------------------------------------------------
// vcvtne2ps2bf16 rounds to nearest even and quiets NaNs like the scalar path, but treats
// subnormal inputs as zero. Blocks holding a subnormal (rare in real data) take the
// integer rounding instead, so the result stays exact.
__attribute__((target("avx512f,avx512bw"))) __mmask16 subnormal_lanes(__m512 v) {
  const __m512i abs = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  return _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(abs, abs), abs,
                                      _mm512_set1_epi32(0x00800000));
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void f32_to_bf16_avx512bf16(
    const float* s, std::uint16_t* d, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(s + i);
    const __m512 b = _mm512_loadu_ps(s + i + 16);
    __m512i out;
    if ((subnormal_lanes(a) | subnormal_lanes(b)) == 0)
      out = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
    else
      out = pack_u32_pairs(bf16_round_avx512(_mm512_castps_si512(a)),
                           bf16_round_avx512(_mm512_castps_si512(b)));
    _mm512_storeu_si512(d + i, out);
  }
  f32_to_bf16_scalar(s + i, d + i, n - i);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // __x86_64__

// One loop per Isa, in enum order; a path without its own loop for a conversion reuses
// the best loop of the paths below it.
template <typename Src, typename Dst>
using PathTable = std::array<void (*)(const Src*, Dst*, std::size_t), kIsaCount>;

#if defined(__x86_64__)
constexpr PathTable<float, std::uint16_t> kF32ToF16{
    f32_to_f16_scalar, f32_to_f16_f16c, f32_to_f16_avx512, f32_to_f16_avx512};
constexpr PathTable<std::uint16_t, float> kF16ToF32{
    f16_to_f32_scalar, f16_to_f32_f16c, f16_to_f32_avx512, f16_to_f32_avx512};
constexpr PathTable<float, std::uint16_t> kF32ToBf16{
    f32_to_bf16_scalar, f32_to_bf16_avx2, f32_to_bf16_avx512, f32_to_bf16_avx512bf16};
constexpr PathTable<std::uint16_t, float> kBf16ToF32{
    bf16_to_f32_scalar, bf16_to_f32_avx2, bf16_to_f32_avx512, bf16_to_f32_avx512};
#else
constexpr PathTable<float, std::uint16_t> kF32ToF16{
    f32_to_f16_scalar, f32_to_f16_scalar, f32_to_f16_scalar, f32_to_f16_scalar};
constexpr PathTable<std::uint16_t, float> kF16ToF32{
    f16_to_f32_scalar, f16_to_f32_scalar, f16_to_f32_scalar, f16_to_f32_scalar};
constexpr PathTable<float, std::uint16_t> kF32ToBf16{
    f32_to_bf16_scalar, f32_to_bf16_scalar, f32_to_bf16_scalar, f32_to_bf16_scalar};
constexpr PathTable<std::uint16_t, float> kBf16ToF32{
    bf16_to_f32_scalar, bf16_to_f32_scalar, bf16_to_f32_scalar, bf16_to_f32_scalar};
#endif

constexpr std::array<std::string_view, kIsaCount> kIsaNames{"scalar", "f16c", "avx512",
                                                            "avx512_bf16"};

template <typename Src, typename Dst>
void run(const PathTable<Src, Dst>& table, const Src* src, Dst* dst, std::size_t n, Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument("conversion path \"" + std::string(isa_name(isa)) +
                                "\" is not supported by this CPU (best: " +
                                std::string(isa_name(best_isa())) + ")");
  table[static_cast<std::size_t>(isa)](src, dst, n);
}

}  // namespace

std::string_view isa_name(Isa isa) { return kIsaNames[static_cast<std::size_t>(isa)]; }

std::optional<Isa> isa_from_name(std::string_view name) {
  for (int i = 0; i < kIsaCount; ++i)
    if (kIsaNames[static_cast<std::size_t>(i)] == name) return static_cast<Isa>(i);
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  static const std::array<bool, kIsaCount> supported = [] {
    std::array<bool, kIsaCount> s{true, false, false, false};
    const CpuFeatures& f = cpu_features();
    s[1] = f.avx2 && f.f16c;
    s[2] = s[1] && f.avx512f && f.avx512bw;
    s[3] = s[2] && f.avx512_bf16;
    return s;
  }();
  return supported[static_cast<std::size_t>(isa)];
}

Isa best_isa() {
  static const Isa best = [] {
    for (int i = kIsaCount - 1; i > 0; --i)
      if (isa_supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
    return Isa::scalar;
  }();
  return best;
}

void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n, Isa isa) {
  run(kF32ToF16, src, dst, n, isa);
}
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n, Isa isa) {
  run(kF16ToF32, src, dst, n, isa);
}
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n, Isa isa) {
  run(kF32ToBf16, src, dst, n, isa);
}
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n, Isa isa) {
  run(kBf16ToF32, src, dst, n, isa);
}

Isa active_isa() {
  static const Isa isa = [] {
    const char* env = std::getenv("AMPCHECK_CPU_ISA");
    if (env == nullptr || *env == '\0') return best_isa();
    const auto chosen = isa_from_name(env);
    if (!chosen)
      throw std::invalid_argument("AMPCHECK_CPU_ISA=\"" + std::string(env) +
                                  "\" is not a conversion path; use scalar, f16c, avx512 or "
                                  "avx512_bf16, or unset it for the best one");
    if (!isa_supported(*chosen))
      throw std::invalid_argument("AMPCHECK_CPU_ISA=" + std::string(env) +
                                  " is not supported by this CPU; the best it runs is " +
                                  std::string(isa_name(best_isa())));
    return *chosen;
  }();
  return isa;
}


namespace {

template <typename T>
const T* as(const void* p, std::size_t i = 0) {
  return static_cast<const T*>(p) + i;
}
template <typename T>
T* as(void* p, std::size_t i = 0) {
  return static_cast<T*>(p) + i;
}

void narrow_from_f32(const float* s, std::uint16_t* d, std::size_t n, DType to) {
  (to == DType::f16 ? f32_to_f16 : f32_to_bf16)(s, d, n, active_isa());
}

// f64 -> f16/bf16 with one rounding, as f64_to_f16_bits / f64_to_bf16_bits define it, on
// the vector paths: each double is first rounded to binary32 *to odd* (truncated, and
// the last bit set when anything was cut off), then the float is rounded to nearest even
// by narrow_from_f32. Rounding to odd with at least two more bits than the target (24
// against 11 and 8, subnormal targets included) never creates a false tie, so the two
// steps round as one (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums:
// proved algorithms using rounding to odd", 2008). Values outside float's finite range
// (NaN, Inf, |x| > FLT_MAX) take the scalar definition.
void f64_to_narrow(const double* s, std::uint16_t* d, std::size_t n, DType to) {
  const auto exact = to == DType::f16 ? f64_to_f16_bits : f64_to_bf16_bits;
  constexpr double kLargest = static_cast<double>(std::numeric_limits<float>::max());
  std::array<float, 1024> odd;
  for (std::size_t i = 0; i < n; i += odd.size()) {
    const std::size_t m = std::min(odd.size(), n - i);
    bool special = false;
    for (std::size_t j = 0; j < m; ++j) {
      const double x = s[i + j];
      const float f = static_cast<float>(x);  // nearest
      std::uint32_t b = bits_of(f);
      if (static_cast<double>(f) != x) {
        if (std::fabs(static_cast<double>(f)) > std::fabs(x)) --b;  // one step toward zero: truncated
        b |= 1u;                                                     // sticky: round to odd
      }
      special = special || !(std::fabs(x) <= kLargest);
      odd[j] = float_of(b);
    }
    narrow_from_f32(odd.data(), d + i, m, to);
    if (special)
      for (std::size_t j = 0; j < m; ++j)
        if (!(std::fabs(s[i + j]) <= kLargest)) d[i + j] = exact(bits_of(s[i + j]));
  }
}
void widen_to_f32(const std::uint16_t* s, float* d, std::size_t n, DType from) {
  (from == DType::f16 ? f16_to_f32 : bf16_to_f32)(s, d, n, active_isa());
}

}  // namespace

void convert(const void* src, DType from, void* dst, DType to, std::size_t n) {
  if (from == DType::i64 || to == DType::i64)
    throw std::invalid_argument("convert: only float dtypes convert here (an i64 tensor takes integral values)");
  if (n == 0) return;  // an empty tensor's buffers may be null
  const bool narrow_from = from == DType::f16 || from == DType::bf16;
  const bool narrow_to = to == DType::f16 || to == DType::bf16;
  if (from == to) {
    std::memcpy(dst, src, n * element_size(from));
  } else if (from == DType::f32 && narrow_to) {
    narrow_from_f32(as<float>(src), as<std::uint16_t>(dst), n, to);
  } else if (narrow_from && to == DType::f32) {
    widen_to_f32(as<std::uint16_t>(src), as<float>(dst), n, from);
  } else if (from == DType::f64 && to == DType::f32) {
    std::transform(as<double>(src), as<double>(src, n), as<float>(dst),
                   [](double v) { return static_cast<float>(v); });
  } else if (from == DType::f32 && to == DType::f64) {
    std::transform(as<float>(src), as<float>(src, n), as<double>(dst),
                   [](float v) { return static_cast<double>(v); });
  } else if (from == DType::f64) {  // to f16/bf16: one rounding from binary64
    f64_to_narrow(as<double>(src), as<std::uint16_t>(dst), n, to);
  } else {  // f16/bf16 -> f64 or f16 <-> bf16: through f32, which holds both exactly
    std::array<float, 1024> tmp;
    for (std::size_t i = 0; i < n; i += tmp.size()) {
      const std::size_t m = std::min(tmp.size(), n - i);
      widen_to_f32(as<std::uint16_t>(src, i), tmp.data(), m, from);
      if (to == DType::f64)
        std::transform(tmp.data(), tmp.data() + m, as<double>(dst, i),
                       [](float v) { return static_cast<double>(v); });
      else
        narrow_from_f32(tmp.data(), as<std::uint16_t>(dst, i), m, to);
    }
  }
}

}  // namespace ampcheck::kernels::cpu
