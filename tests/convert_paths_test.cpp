// The 16-bit side, exhaustively (every f16 and bf16 pattern), the binary64 path on random
// inputs, the published values, every conversion pair of the engine, and the vector
// paths' tails and robustness to flush-to-zero modes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_getcsr / _mm_setcsr: FTZ and DAZ
#endif

#include "engine/dtype/convert.h"
#include "kernels/cpu/convert.h"
#include "kernels/fp_bits.h"
#include "tests/reference_fp.h"

namespace ampcheck {
namespace {

namespace cpu = kernels::cpu;

std::vector<cpu::Isa> supported_paths() {
  std::vector<cpu::Isa> out;
  for (int i = 0; i < cpu::kIsaCount; ++i)
    if (cpu::isa_supported(static_cast<cpu::Isa>(i))) out.push_back(static_cast<cpu::Isa>(i));
  return out;
}

std::vector<std::uint16_t> all_16bit_patterns() {
  std::vector<std::uint16_t> v(1u << 16);
  for (std::uint32_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

struct Narrow {
  const char* name;
  DType dtype;
  const test::RefFormat& ref;
  float (*widen)(std::uint16_t);
  std::uint16_t (*narrow)(float);
};

std::vector<Narrow> narrow_formats() {
  return {{"f16", DType::f16, test::ref_f16(), kernels::f16_to_f32, kernels::f32_to_f16},
          {"bf16", DType::bf16, test::ref_bf16(), kernels::bf16_to_f32, kernels::f32_to_bf16}};
}

TEST(Exhaustive16, EveryPatternDecodesToItsExactValueAndRoundTrips) {
  for (const Narrow& f : narrow_formats()) {
    int nans = 0;
    for (std::uint32_t p = 0; p < (1u << 16); ++p) {
      const auto h = static_cast<std::uint16_t>(p);
      const double want = f.ref.decode(p);
      const float got = f.widen(h);
      double got64 = 0;
      convert(&h, f.dtype, &got64, DType::f64, 1);
      if (std::isnan(want)) {
        ++nans;
        ASSERT_TRUE(std::isnan(got)) << f.name << " " << p;
        ASSERT_TRUE(std::isnan(got64)) << f.name << " " << p;
        const std::uint32_t b = kernels::bits_of(got);
        EXPECT_EQ(b >> 31, p >> 15) << "NaN keeps its sign";
        EXPECT_NE(b & 0x00400000u, 0u) << "NaN comes out quiet: " << f.name << " " << p;
        // round trip: a NaN stays a NaN with its payload, now quiet
        EXPECT_EQ(f.narrow(got), p | f.ref.quiet_bit()) << f.name << " " << p;
        continue;
      }
      ASSERT_EQ(static_cast<double>(got), want) << f.name << " pattern " << p;
      ASSERT_EQ(std::signbit(got), (p >> 15) != 0) << f.name << " keeps the sign of " << p;
      ASSERT_EQ(got64, want) << f.name << " to f64, pattern " << p;
      ASSERT_EQ(f.narrow(got), p) << f.name << " round trip of " << p;
    }
    // 2 signs x (2^M - 1) mantissas
    EXPECT_EQ(nans, 2 * ((1 << f.ref.mantissa_bits()) - 1)) << f.name;
  }
}

TEST(Exhaustive16, VectorWideningEqualsScalarOnEveryPattern) {
  const auto in = all_16bit_patterns();
  for (bool bf : {false, true}) {
    auto fn = bf ? cpu::bf16_to_f32 : cpu::f16_to_f32;
    std::vector<float> want(in.size()), got(in.size());
    fn(in.data(), want.data(), in.size(), cpu::Isa::scalar);
    for (cpu::Isa isa : supported_paths()) {
      fn(in.data(), got.data(), in.size(), isa);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << (bf ? "bf16" : "f16") << " widening on path " << cpu::isa_name(isa);
    }
  }
}

// Every length from 0 to 100 at every start offset 0..3: the vector bodies and the
// scalar tails must meet without a gap or an overrun (guard values stay put).
TEST(ConvertPaths, TailsAndOffsetsLeaveNeighboursUntouched) {
  std::mt19937 rng(7);
  std::vector<float> src(128);
  for (float& v : src) v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), static_cast<int>(rng() % 40) - 20);
  constexpr std::uint16_t kGuard = 0xdead;
  for (cpu::Isa isa : supported_paths()) {
    for (std::size_t off = 0; off < 4; ++off) {
      for (std::size_t n = 0; off + n <= 100; ++n) {
        for (bool bf : {false, true}) {
          std::vector<std::uint16_t> out(104, kGuard);
          (bf ? cpu::f32_to_bf16 : cpu::f32_to_f16)(src.data() + off, out.data() + off, n, isa);
          for (std::size_t i = 0; i < out.size(); ++i) {
            if (i >= off && i < off + n) {
              const std::uint16_t want = bf ? kernels::f32_to_bf16(src[i]) : kernels::f32_to_f16(src[i]);
              ASSERT_EQ(out[i], want) << cpu::isa_name(isa) << " n=" << n << " off=" << off;
            } else {
              ASSERT_EQ(out[i], kGuard) << cpu::isa_name(isa) << " wrote outside n=" << n << " off=" << off;
            }
          }
        }
      }
    }
  }
}

// Published encodings (IEEE 754 binary16 examples; bfloat16 is binary32's top half).
TEST(ConvertPaths, PublishedEncodings) {
  struct Case { double x; std::uint16_t f16; std::uint16_t bf16; };
  const Case cases[] = {
      {1.0, 0x3c00, 0x3f80},          {-2.0, 0xc000, 0xc000},
      {65504.0, 0x7bff, 0x4780},      {0.1, 0x2e66, 0x3dcd},
      {1.0 / 3.0, 0x3555, 0x3eab},    {3.141592653589793, 0x4248, 0x4049},
      {5.9604644775390625e-08, 0x0001, 0x3380},  // 2^-24: smallest f16 subnormal
      {6.103515625e-05, 0x0400, 0x3880},          // 2^-14: smallest f16 normal
      {-0.0, 0x8000, 0x8000},         {0.0, 0x0000, 0x0000},
      {HUGE_VAL, 0x7c00, 0x7f80},     {-HUGE_VAL, 0xfc00, 0xff80},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(encode(c.x, DType::f16), c.f16) << c.x;
    EXPECT_EQ(encode(c.x, DType::bf16), c.bf16) << c.x;
    EXPECT_EQ(kernels::f32_to_f16(static_cast<float>(c.x)), c.f16) << c.x;
    EXPECT_EQ(kernels::f32_to_bf16(static_cast<float>(c.x)), c.bf16) << c.x;
  }
  EXPECT_EQ(encode(std::nan(""), DType::f16), 0x7e00);
  EXPECT_EQ(encode(std::nan(""), DType::bf16), 0x7fc0);
}

// binary64 inputs round once, straight to the target: checked on random patterns
// spread over the whole range that matters (and past it) against the reference.
TEST(ConvertPaths, F64PathMatchesReferenceOnRandomPatterns) {
  std::mt19937_64 rng(42);
  for (const Narrow& f : narrow_formats()) {
    for (int i = 0; i < 2'000'000; ++i) {
      std::uint64_t bits = rng();
      // Most draws land in exponents near the format (binary64 exponent 1023 +- 160).
      if (i % 4 != 0) bits = (bits & 0x800fffffffffffffull) | ((1023ull - 160 + rng() % 320) << 52);
      const double x = kernels::double_of(bits);
      const std::uint64_t got = encode(x, f.dtype);
      ASSERT_EQ(got, f.ref.encode(x)) << f.name << " of " << std::hexfloat << x;
    }
    // Ties that going through binary32 would break twice: x = a tie point of the target
    // nudged by 2^-40 relative, below binary32's resolution.
    for (std::uint32_t p = 1; p < f.ref.inf_bits() - 1; p += 97) {
      const double lo = f.ref.decode(p), hi = f.ref.decode(p + 1);
      for (double x : {(lo + hi) / 2 * (1 + 0x1p-40), (lo + hi) / 2 * (1 - 0x1p-40)})
        ASSERT_EQ(encode(x, f.dtype), f.ref.encode(x)) << f.name << " near tie " << std::hexfloat << x;
    }
  }
}

// Every pair of dtypes: the buffer conversion equals decode -> round (one rounding).
TEST(ConvertPaths, EveryDTypePairAgreesWithOneRounding) {
  std::mt19937_64 rng(3);
  std::vector<double> values(5000);
  for (double& v : values) v = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng), static_cast<int>(rng() % 60) - 30);
  values.insert(values.end(), {0.0, -0.0, HUGE_VAL, -HUGE_VAL, 65519.0, 65520.0, 1e-8, 3e-8});
  for (DType from : kFloatDTypes) {
    std::vector<std::uint64_t> src_bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) src_bits[i] = encode(values[i], from);
    const std::size_t from_bytes = static_cast<std::size_t>(info(from).bits / 8);
    std::vector<unsigned char> src(values.size() * from_bytes);
    for (std::size_t i = 0; i < values.size(); ++i) std::memcpy(&src[i * from_bytes], &src_bits[i], from_bytes);
    for (DType to : kFloatDTypes) {
      const std::size_t to_bytes = static_cast<std::size_t>(info(to).bits / 8);
      std::vector<unsigned char> dst(values.size() * to_bytes);
      convert(src.data(), from, dst.data(), to, values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint64_t got = 0;
        std::memcpy(&got, &dst[i * to_bytes], to_bytes);
        ASSERT_EQ(got, encode(decode(src_bits[i], from), to))
            << name(from) << " -> " << name(to) << " of " << values[i];
      }
    }
  }
}

#if defined(__x86_64__)
// Code that sets flush-to-zero / denormals-are-zero (fast-math builds, some BLAS) must
// not change what the conversions produce.
TEST(ConvertPaths, FlushToZeroModesDoNotChangeResults) {
  const auto in16 = all_16bit_patterns();
  std::vector<float> want(in16.size()), got(in16.size());
  std::vector<float> sub(1u << 16);  // f32 values around the f16 subnormal range
  for (std::uint32_t i = 0; i < sub.size(); ++i) sub[i] = kernels::float_of(0x33000000u + i * 97u);
  std::vector<std::uint16_t> want16(sub.size()), got16(sub.size());

  cpu::f16_to_f32(in16.data(), want.data(), in16.size(), cpu::Isa::scalar);
  cpu::f32_to_f16(sub.data(), want16.data(), sub.size(), cpu::Isa::scalar);
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  for (cpu::Isa isa : supported_paths()) {
    cpu::f16_to_f32(in16.data(), got.data(), in16.size(), isa);
    cpu::f32_to_f16(sub.data(), got16.data(), sub.size(), isa);
    const bool same = std::memcmp(want.data(), got.data(), got.size() * sizeof(float)) == 0 &&
                      want16 == got16;
    _mm_setcsr(saved);
    ASSERT_TRUE(same) << "path " << cpu::isa_name(isa) << " changes under FTZ/DAZ";
    _mm_setcsr(saved | 0x8040u);
  }
  _mm_setcsr(saved);
}
#endif

TEST(ConvertPaths, UnsupportedPathIsRefusedWithItsName) {
  for (int i = 0; i < cpu::kIsaCount; ++i) {
    const auto isa = static_cast<cpu::Isa>(i);
    if (cpu::isa_supported(isa)) continue;
    float x = 1;
    std::uint16_t y = 0;
    try {
      cpu::f32_to_f16(&x, &y, 1, isa);
      FAIL() << "expected a refusal";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(cpu::isa_name(isa)), std::string::npos);
    }
  }
  EXPECT_EQ(cpu::isa_from_name("avx512_bf16"), cpu::Isa::avx512_bf16);
  EXPECT_FALSE(cpu::isa_from_name("sse2"));
}

}  // namespace
}  // namespace ampcheck
