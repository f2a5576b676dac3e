// The fp8 formats of kernels/fp_bits.h (E4M3 "fn" and E5M2, MXFP8's E8M0 scale):
//   - against ml_dtypes (tests/data/fp8/ml_dtypes_fp8.txt, written by its
//     make_ml_dtypes_table.py): every code widened to binary32, and binary32 patterns at
//     every boundary of both formats (each value, each midpoint, +-1 ulp), the specials
//     and random patterns, cast without saturation, bit for bit;
//   - every binary32 pattern of the range where fp8 results change, and a stride of the
//     rest, against a reference that enumerates the format's values (nearest, ties to
//     the even code) and shares no code with fp_bits.h, both overflow rules;
//   - the E8M0 scale against its definition (the power of two at or above amax / max).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/fp_bits.h"

namespace ampcheck {
namespace {

using kernels::Fp8Overflow;

std::uint32_t bits(float f) { return kernels::bits_of(f); }
float value(std::uint32_t b) { return kernels::float_of(b); }

std::uint8_t encode(int exp_bits, std::uint32_t x, Fp8Overflow o) {
  return exp_bits == 4 ? kernels::f32_to_e4m3_bits(x, o) : kernels::f32_to_e5m2_bits(x, o);
}
std::uint32_t decode(int exp_bits, std::uint8_t c) {
  return exp_bits == 4 ? kernels::e4m3_bits_to_f32_bits(c) : kernels::e5m2_bits_to_f32_bits(c);
}

TEST(Fp8MlDtypes, EveryCodeAndEveryBoundaryPatternIsWhatMlDtypesMakesOfIt) {
  const std::string path = std::string(AMPCHECK_SOURCE_DIR) + "/tests/data/fp8/ml_dtypes_fp8.txt";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string line;
  int decodes = 0, encodes = 0, wrong = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string op, fmt, a, b;
    s >> op >> fmt >> a >> b;
    const int e = fmt == "e4m3" ? 4 : 5;
    const auto x = static_cast<std::uint32_t>(std::stoul(a, nullptr, 16));
    const auto want = static_cast<std::uint32_t>(std::stoul(b, nullptr, 16));
    std::uint32_t got = 0;
    if (op == "decode") {
      got = decode(e, static_cast<std::uint8_t>(x));
      ++decodes;
    } else {
      got = encode(e, x, Fp8Overflow::to_nonfinite);
      ++encodes;
    }
    if (got != want && ++wrong <= 10) ADD_FAILURE() << line << ": got " << std::hex << got;
  }
  EXPECT_EQ(decodes, 512);
  EXPECT_GT(encodes, 10000);
  EXPECT_EQ(wrong, 0);
}

TEST(Fp8, TheFormatsLimitsAreTransformerEnginesAndCudas) {
  // E4M3: max 448, min normal 2^-6, min subnormal 2^-9, no Inf; E5M2: max 57344, min
  // normal 2^-14, min subnormal 2^-16 (the OCP 8-bit floating point specification).
  EXPECT_EQ(value(decode(4, 0x7e)), 448.0f);
  EXPECT_EQ(value(decode(4, 0x08)), std::ldexp(1.0f, -6));
  EXPECT_EQ(value(decode(4, 0x01)), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(value(decode(4, 0x7f))));
  EXPECT_EQ(value(decode(5, 0x7b)), 57344.0f);
  EXPECT_EQ(value(decode(5, 0x04)), std::ldexp(1.0f, -14));
  EXPECT_EQ(value(decode(5, 0x01)), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(value(decode(5, 0x7c))));
  // Saturating casts (CUDA's __NV_SATFINITE): beyond max and Inf become +-max, NaN stays.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encode(4, bits(1e6f), Fp8Overflow::saturate), 0x7e);
  EXPECT_EQ(encode(4, bits(-inf), Fp8Overflow::saturate), 0xfe);
  EXPECT_EQ(encode(4, bits(-inf), Fp8Overflow::to_nonfinite), 0xff);
  EXPECT_EQ(encode(5, bits(1e6f), Fp8Overflow::saturate), 0x7b);
  EXPECT_EQ(encode(5, bits(inf), Fp8Overflow::to_nonfinite), 0x7c);
  EXPECT_EQ(encode(4, 0x7fc00000u, Fp8Overflow::saturate), 0x7f);
  EXPECT_EQ(encode(5, 0xffc00000u, Fp8Overflow::saturate), 0xfe);
}

// ---- the enumeration reference -------------------------------------------------------

// A format's non-negative finite values in code order, built from the OCP definition,
// plus the value the code after max would have (the rounding boundary above max).
struct Enumerated {
  int exp_bits, man_bits, bias;
  std::uint32_t max_code;
  std::vector<double> values;  // values[c] for c = 0 .. max_code + 1

  explicit Enumerated(int e) : exp_bits(e), man_bits(7 - e), bias((1 << (e - 1)) - 1) {
    max_code = e == 4 ? 0x7e : 0x7b;
    for (std::uint32_t c = 0; c <= max_code + 1; ++c) {
      const std::uint32_t field = c >> man_bits, frac = c & ((1u << man_bits) - 1u);
      const double f = static_cast<double>(frac) / static_cast<double>(1u << man_bits);
      values.push_back(field == 0 ? std::ldexp(f, 1 - bias) : std::ldexp(1.0 + f, static_cast<int>(field) - bias));
    }
  }
  // The code of a finite, non-negative x: the nearest value, a tie to the even code; the
  // code after max means "too large".
  std::uint32_t nearest(double x) const {
    const auto it = std::lower_bound(values.begin(), values.end(), x);
    if (it == values.end()) return max_code + 1;
    const auto hi = static_cast<std::uint32_t>(it - values.begin());
    if (*it == x || hi == 0) return hi;
    const std::uint32_t lo = hi - 1;
    const double dl = x - values[lo], dh = values[hi] - x;
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1u) ? hi : lo;
  }
  std::uint8_t expected(std::uint32_t x, Fp8Overflow o) const {  // x non-negative
    const float f = value(x);
    const std::uint32_t nan = exp_bits == 4 ? 0x7f : 0x7e;
    if (std::isnan(f)) return static_cast<std::uint8_t>(nan);
    const std::uint32_t over = o == Fp8Overflow::saturate ? max_code : (exp_bits == 4 ? 0x7fu : 0x7cu);
    if (std::isinf(f)) return static_cast<std::uint8_t>(over);
    const std::uint32_t c = nearest(static_cast<double>(f));
    return static_cast<std::uint8_t>(c > max_code ? over : c);
  }
};

TEST(Fp8Enumerated, EveryBinary32PatternWhereTheResultChangesRoundsToTheNearestValue) {
  for (int e : {4, 5}) {
    const Enumerated ref(e);
    // Binades from well below the smallest subnormal to well above max: every pattern
    // (a sanitizer build takes every 61st); beyond them a stride (results are constant).
    const int lo_exp = 1 - ref.bias - ref.man_bits - 3, hi_exp = ref.bias + 3;
    const std::uint32_t lo = static_cast<std::uint32_t>(lo_exp + 127) << 23;
    const std::uint32_t hi = static_cast<std::uint32_t>(hi_exp + 127) << 23;
#if defined(AMPCHECK_SANITIZED)
    const std::uint32_t dense_step = 61;
#else
    const std::uint32_t dense_step = 1;
#endif
    std::atomic<std::uint64_t> checked{0}, wrong{0};
    std::atomic<std::uint32_t> first_wrong{0};
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; ++t)
      threads.emplace_back([&, t] {
        std::uint64_t c = 0, w = 0;
        const auto check = [&](std::uint32_t p) {  // p non-negative: the reference once, both signs and rules
          for (Fp8Overflow o : {Fp8Overflow::to_nonfinite, Fp8Overflow::saturate}) {
            const std::uint8_t want = ref.expected(p, o);
            c += 2;
            if (encode(e, p, o) != want && w++ == 0) first_wrong = p;
            if (encode(e, p | 0x80000000u, o) != (want | 0x80u) && w++ == 0) first_wrong = p | 0x80000000u;
          }
        };
        for (std::uint64_t p = lo + t * dense_step; p < hi; p += std::uint64_t{n} * dense_step)
          check(static_cast<std::uint32_t>(p));
        for (std::uint64_t p = t * 4099u; p <= 0x7fffffffu; p += std::uint64_t{n} * 4099u)
          if (p < lo || p >= hi) check(static_cast<std::uint32_t>(p));
        checked += c;
        wrong += w;
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0u) << "E" << e << "M" << 7 - e << ": first wrong pattern 0x" << std::hex
                                << first_wrong.load();
    EXPECT_GT(checked.load(), 1000000u);
  }
}

TEST(Fp8Enumerated, EveryCodeWidensToTheValueTheDefinitionGivesIt) {
  for (int e : {4, 5}) {
    const Enumerated ref(e);
    for (std::uint32_t c = 0; c < 256; ++c) {
      const double got = static_cast<double>(value(decode(e, static_cast<std::uint8_t>(c))));
      const std::uint32_t mag = c & 0x7f;
      const double sign = (c & 0x80) ? -1.0 : 1.0;
      if (mag <= ref.max_code) {
        EXPECT_EQ(got, sign * ref.values[mag]) << "E" << e << " code " << c;
        EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);
      } else if (e == 5 && mag == 0x7c) {
        EXPECT_EQ(got, sign * HUGE_VAL) << c;
      } else {
        EXPECT_TRUE(std::isnan(got)) << "E" << e << " code " << c;
      }
    }
  }
}

// TransformerEngine's MXFP8 kernels (quantize_mxfp8.cuh, ptx.cuh): the E8M0 code of
// amax x (1 / max_elem), both in binary32, rounded up to a power of two; satfinite.
TEST(Fp8E8m0, TheBlockScaleIsThePowerOfTwoAtOrAboveAmaxTimesTheReciprocalOfMax) {
  for (const float max_elem : {448.0f, 57344.0f}) {
    // Definition: the smallest power of two 2^k (k in [-127, 127]) with amax x rcp <= 2^k,
    // the product taken in binary32 with rcp = 1 / max_elem in binary32; Inf: the largest.
    const float rcp = 1.0f / max_elem;
    const auto expected = [&](float amax) -> int {
      const float q = amax * rcp;
      if (std::isnan(q)) return 0xff;
      if (std::isinf(q)) return 254;
      for (int k = -127; k <= 127; ++k)
        if (static_cast<double>(q) <= std::ldexp(1.0, k)) return k + 127;
      return 254;
    };
    std::uint32_t state = 12345;
    for (int i = 0; i < 200000; ++i) {
      state = state * 1664525u + 1013904223u;
      const float amax = value(state & 0x7fffffffu);
      if (std::isnan(amax)) continue;
      ASSERT_EQ(kernels::e8m0_scale_bits(amax, max_elem), expected(amax)) << amax;
    }
    for (const float amax : {0.0f, 448.0f, 449.0f, 57344.0f, 1.0f, std::ldexp(1.0f, -140), 3.4e38f})
      EXPECT_EQ(kernels::e8m0_scale_bits(amax, max_elem), expected(amax)) << amax;
    EXPECT_EQ(kernels::e8m0_scale_bits(std::numeric_limits<float>::infinity(), max_elem), 0xfe);
    EXPECT_EQ(kernels::e8m0_scale_bits(std::numeric_limits<float>::quiet_NaN(), max_elem), 0xff);
    // The elements of a block divided by its scale never exceed max_elem: no saturation.
    for (const float amax : {1.0f, 449.0f, 1e-20f, 3e30f}) {
      const float scale = kernels::e8m0_to_f32(kernels::e8m0_scale_bits(amax, max_elem));
      EXPECT_LE(amax / scale, max_elem) << amax;
      EXPECT_GT(amax / scale, max_elem / 2) << amax;  // and use the top binade
    }
  }
  EXPECT_EQ(kernels::e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(kernels::e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(kernels::e8m0_to_f32(0xff)));
  // TE's exp2f_rcp: 2^(127 - code) from its bits, 1 for code 0, 0 for 254 (whose 2^-127
  // the bits cannot build).
  for (int code = 1; code <= 253; ++code)
    EXPECT_EQ(kernels::e8m0_multiplier(static_cast<std::uint8_t>(code)), std::ldexp(1.0f, 127 - code)) << code;
  EXPECT_EQ(kernels::e8m0_multiplier(0), 1.0f);
  EXPECT_EQ(kernels::e8m0_multiplier(254), 0.0f);
  EXPECT_TRUE(std::isnan(kernels::e8m0_multiplier(0xff)));
}

// TransformerEngine's cast of a tensor (kernels/cpu/fp8.h): on every path, each element
// is the scalar cast of x * scale (the product rounded once in binary32), the amax is the
// largest |x| with NaN left out (computed here in binary64), and the widening gives every
// code's exact value times scale_inv. Lengths that leave vector tails, both formats, both
// overflow rules, scales that are and are not powers of two.
TEST(Fp8Buffers, QuantizeIsTheScalarCastOfTheScaledValueWithItsAmax) {
  using kernels::Fp8Format;
  namespace cpu = kernels::cpu;
  std::vector<cpu::Isa> paths{cpu::Isa::scalar};
  for (int i = 1; i < cpu::kIsaCount; ++i)
    if (cpu::isa_supported(static_cast<cpu::Isa>(i))) paths.push_back(static_cast<cpu::Isa>(i));
  std::uint32_t state = 20261127;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{37},
                              std::size_t{4099}}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t r = next();
      // Mostly values near the fp8 ranges (exponents -20..20), some anything (NaN, Inf, huge).
      x[i] = (r & 7u) == 0 ? value(next())
                           : std::ldexp(static_cast<float>(r >> 8) / 16777216.0f, static_cast<int>(r % 41u) - 20) *
                                 ((r & 8u) ? -1.0f : 1.0f);
    }
    double want_amax = 0.0;
    for (float v : x)
      if (!std::isnan(v)) want_amax = std::max(want_amax, std::fabs(static_cast<double>(v)));
    for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (const Fp8Overflow o : {Fp8Overflow::to_nonfinite, Fp8Overflow::saturate})
        for (const float scale : {1.0f, 0.75f, 448.0f / 3.0f, std::ldexp(1.0f, 12), std::ldexp(1.0f, -9)}) {
          std::vector<std::uint8_t> want(n);
          for (std::size_t i = 0; i < n; ++i)
            want[i] = encode(f == Fp8Format::e4m3 ? 4 : 5, bits(x[i] * scale), o);
          for (const cpu::Isa isa : paths) {
            std::vector<std::uint8_t> got(n, 0xaa);
            const float amax = cpu::quantize_fp8(x.data(), got.data(), n, scale, f, o, isa);
            ASSERT_EQ(got, want) << "n " << n << " scale " << scale << " path " << cpu::isa_name(isa);
            ASSERT_EQ(static_cast<double>(amax), want_amax) << "n " << n << " path " << cpu::isa_name(isa);
          }
        }
  }
}

TEST(Fp8Buffers, DequantizeGivesEveryCodesValueTimesScaleInv) {
  using kernels::Fp8Format;
  namespace cpu = kernels::cpu;
  std::vector<std::uint8_t> codes(256 * 3 + 5);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 7u + 3u);
  for (int i = 0; i < cpu::kIsaCount; ++i) {
    const auto isa = static_cast<cpu::Isa>(i);
    if (!cpu::isa_supported(isa)) continue;
    for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (const float scale_inv : {1.0f, 0.1f, std::ldexp(1.0f, -7)}) {
        std::vector<float> got(codes.size());
        cpu::dequantize_fp8(codes.data(), got.data(), codes.size(), scale_inv, f, isa);
        for (std::size_t k = 0; k < codes.size(); ++k) {
          const float want = value(decode(f == Fp8Format::e4m3 ? 4 : 5, codes[k])) * scale_inv;
          ASSERT_EQ(bits(got[k]), bits(want)) << "code " << int(codes[k]) << " path " << cpu::isa_name(isa);
        }
        std::vector<float> plain(codes.size());
        cpu::fp8_to_f32(codes.data(), plain.data(), codes.size(), f, isa);
        for (std::size_t k = 0; k < codes.size(); ++k)
          ASSERT_EQ(bits(plain[k]), decode(f == Fp8Format::e4m3 ? 4 : 5, codes[k])) << int(codes[k]);
      }
  }
}

// MXFP8: per block of 32 elements of a row (the last one shorter), a power-of-two scale at
// or just above amax / max (so amax / scale lies in (max / 2, max]; an all-zero block takes
// the smallest), and every element the saturating cast of x / scale; widening gives the
// code's value times its block's scale. A NaN element stays NaN and does not move its
// block's scale.
TEST(Fp8Buffers, MxFp8BlocksTakeTheScaleOfTheirAmaxAndCastSaturating) {
  using kernels::Fp8Format;
  namespace cpu = kernels::cpu;
  const std::int64_t rows = 3, cols = 70, blocks = 3;
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  std::uint32_t state = 7;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      state = state * 1664525u + 1013904223u;
      const int exponent = static_cast<int>(r * 40 - 60 + (c / 32) * 15);  // every block its own range
      x[static_cast<std::size_t>(r * cols + c)] =
          std::ldexp(static_cast<float>(state >> 8) / 16777216.0f - 0.5f, exponent);
    }
  for (std::int64_t c = 32; c < 64; ++c) x[static_cast<std::size_t>(c)] = 0.0f;  // row 0, block 1: zeros
  x[5] = std::numeric_limits<float>::quiet_NaN();
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const double max_elem = f == Fp8Format::e4m3 ? 448.0 : 57344.0;
    for (int i = 0; i < cpu::kIsaCount; ++i) {
      const auto isa = static_cast<cpu::Isa>(i);
      if (!cpu::isa_supported(isa)) continue;
      std::vector<std::uint8_t> codes(x.size()), scales(static_cast<std::size_t>(rows * blocks));
      cpu::quantize_mxfp8(x.data(), codes.data(), scales.data(), rows, cols, f, isa);
      std::vector<float> back(x.size());
      cpu::dequantize_mxfp8(codes.data(), scales.data(), back.data(), rows, cols, f, isa);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t b = 0; b < blocks; ++b) {
          const std::int64_t first = r * cols + b * 32, n = std::min<std::int64_t>(32, cols - b * 32);
          double amax = 0.0;
          for (std::int64_t k = first; k < first + n; ++k)
            if (!std::isnan(x[static_cast<std::size_t>(k)])) amax = std::max(amax, std::fabs(double{x[static_cast<std::size_t>(k)]}));
          const double scale = std::ldexp(1.0, scales[static_cast<std::size_t>(r * blocks + b)] - 127);
          if (amax == 0.0) {
            EXPECT_EQ(scales[static_cast<std::size_t>(r * blocks + b)], 0) << r << "," << b;
          } else {
            EXPECT_LE(amax / scale, max_elem) << r << "," << b;
            EXPECT_GT(amax / scale, max_elem / 2) << r << "," << b;
          }
          for (std::int64_t k = first; k < first + n; ++k) {
            const float v = x[static_cast<std::size_t>(k)];
            const auto want = encode(f == Fp8Format::e4m3 ? 4 : 5, bits(static_cast<float>(v / scale)), Fp8Overflow::saturate);
            ASSERT_EQ(codes[static_cast<std::size_t>(k)], want) << "element " << k << " path " << cpu::isa_name(isa);
            const float widened = value(decode(f == Fp8Format::e4m3 ? 4 : 5, want)) * static_cast<float>(scale);
            ASSERT_EQ(bits(back[static_cast<std::size_t>(k)]), bits(widened)) << "element " << k;
          }
        }
      EXPECT_TRUE(std::isnan(back[5]));
    }
  }
}

}  // namespace
}  // namespace ampcheck
