// kernels/cpu/vectorize.h: the elementwise loops compiled for AVX2 and AVX-512 must give
// the bits of the one-element-at-a-time loop. The reference applies the same shared
// formula (kernels/elementwise.h, kernels/training_kernels.h) through a call the compiler
// cannot see into, so it is never vectorized; each vector path this CPU runs must equal
// it bit for bit on inputs that reach every IEEE corner: subnormals, signed zeros, the
// largest finite values, Inf and NaN. (What would break it: an a*b+c contracted into one
// fma where the target enables FMA, a reassociated reduction, a vector sqrt or divide
// that is not correctly rounded, or flush-to-zero. The build has -ffp-contract=off and no
// fast-math; the ops' own kernels then inherit this through vectorized().)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/cpu/convert.h"
#include "kernels/numerics_kernels.h"
#include "kernels/fp_bits.h"
#include "kernels/elementwise.h"
#include "kernels/training_kernels.h"

namespace ampcheck {
namespace {

namespace kc = kernels::cpu;
constexpr int kN = 4099;  // not a multiple of any vector width: the loops' tails run too

// Random floats over the whole exponent range, both signs, with the corner values mixed in.
std::vector<float> corner_floats(std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_real_distribution<float> unit(-4.0f, 4.0f);
  const float corners[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -1e-40f, 1e-38f,
                           std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 65504.0f, 1.0f};
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i) {
    if (i % 13 == 0) v[i] = corners[(i / 13) % std::size(corners)];
    else if (i % 3 == 0) v[i] = std::bit_cast<float>(bits(gen));  // any pattern, NaNs included
    else v[i] = unit(gen) * scale;
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string& first) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) {
      // NaN payloads may differ between a scalar and a vector NaN: both must be NaN.
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      std::ostringstream text;
      text << "element " << i << ": " << std::hexfloat << a[i] << " vs " << b[i];
      first = text.str();
      return false;
    }
  return true;
}

// Calls f(i) for every i through a function pointer the optimizer cannot inline.
template <typename F>
void one_at_a_time(F& f) {
  void (*volatile call)(F&, int) = [](F& g, int i) { g(i); };
  for (int i = 0; i < kN; ++i) call(f, i);
}

// Runs `loop` (a whole-array loop) on every path this CPU has and compares each result
// with `reference` (filled by the one-at-a-time loop).
template <typename Loop>
void expect_every_path(const char* what, const std::vector<float>& reference, std::vector<float>& out, Loop loop) {
  auto run = [&](const char* path, auto runner) {
    std::fill(out.begin(), out.end(), -1.0f);
    runner();
    std::string first;
    EXPECT_TRUE(same_bits(reference, out, first)) << what << " on the " << path << " path differs at " << first;
  };
  run("baseline (SSE2)", [&] { loop(); });
  if (kc::gemm_isa_supported(kc::GemmIsa::avx2)) run("AVX2", [&] { kc::run_avx2(loop); });
  if (kc::gemm_isa_supported(kc::GemmIsa::avx512)) run("AVX-512", [&] { kc::run_avx512(loop); });
  run("vectorized()", [&] { kc::vectorized(loop); });
}

TEST(VectorizedLoops, AdamUpdateSameBitsOnEveryPath) {
  for (const bool decoupled : {false, true}) {
    kernels::AdamStep s;
    s.lr_over_bias1 = 1e-3 / (1 - 0.9 * 0.9 * 0.9);
    s.bias2_sqrt = std::sqrt(1 - 0.999 * 0.999 * 0.999);
    s.weight_decay = 0.01;
    s.decay = 1 - 1e-3 * 0.01;
    s.decoupled = decoupled;
    const std::vector<float> p0 = corner_floats(1), g = corner_floats(2, 1e-3f), m0 = corner_floats(3, 1e-4f);
    std::vector<float> v0 = corner_floats(4, 1e-6f);
    for (float& x : v0) x = std::fabs(x);  // a second moment
    // Reference: one element per opaque call. The result is p, m and v side by side.
    std::vector<float> reference(3 * kN), out(3 * kN);
    {
      auto f = [&](int i) {
        float p = p0[i], m = m0[i], v = v0[i];
        kernels::adam_element(p, g[i], m, v, s);
        reference[i] = p;
        reference[kN + i] = m;
        reference[2 * kN + i] = v;
      };
      one_at_a_time(f);
    }
    expect_every_path(decoupled ? "AdamW" : "Adam", reference, out, [&] {
      float* p = out.data();
      float* m = out.data() + kN;
      float* v = out.data() + 2 * kN;
      for (int i = 0; i < kN; ++i) {
        p[i] = p0[i];
        m[i] = m0[i];
        v[i] = v0[i];
      }
      for (int i = 0; i < kN; ++i) kernels::adam_element(p[i], g[i], m[i], v[i], s);
    });
  }
}

TEST(VectorizedLoops, UnscaleSameBitsAndSameFoundInfOnEveryPath) {
  const std::vector<float> g = corner_floats(5, 1e4f);
  const float inv = static_cast<float>(1.0 / 65536.0);
  std::vector<float> reference(kN), out(kN);
  bool bad_reference = false;
  {
    auto f = [&](int i) { reference[i] = kernels::unscale_element(g[i], inv, bad_reference); };
    one_at_a_time(f);
  }
  ASSERT_TRUE(bad_reference);  // the inputs hold Inf and NaN
  bool bad = false;
  expect_every_path("unscale", reference, out, [&] {
    bad = false;
    for (int i = 0; i < kN; ++i) out[i] = kernels::unscale_element(g[i], inv, bad);
  });
  EXPECT_EQ(bad, bad_reference);
}

// f(x[i], y[i]) over the arrays: one opaque call per element against the inlined loop.
template <typename F>
void check_map(const char* name, F f) {
  static const std::vector<float> x = corner_floats(6), y = corner_floats(7);
  std::vector<float> reference(kN), out(kN);
  {
    auto g = [&](int i) { reference[i] = f(x[i], y[i]); };
    one_at_a_time(g);
  }
  expect_every_path(name, reference, out, [&] {
    for (int i = 0; i < kN; ++i) out[i] = f(x[i], y[i]);
  });
}

// Maps of the elementwise family as the ops write them: selects, divides, sqrt, and libm
// calls (which stay calls: they must not change either).
TEST(VectorizedLoops, ElementwiseFormulasSameBitsOnEveryPath) {
  check_map("relu_backward", [](float a, float b) { return kernels::relu_backward(a, b); });
  check_map("hardswish", [](float a, float) { return kernels::hardswish(a); });
  check_map("hardswish_backward", [](float a, float b) { return kernels::hardswish_backward(a, b); });
  check_map("max_nan", [](float a, float b) { return kernels::max_nan(a, b); });
  check_map("div then sqrt", [](float a, float b) { return kernels::math::sqrt(kernels::math::abs(a / b)); });
  check_map("a*b+c (no contraction)", [](float a, float b) { return a * b + a; });
  check_map("sigmoid_backward", [](float a, float b) { return kernels::sigmoid_backward(a, b); });
  check_map("gelu_tanh", [](float a, float) { return kernels::gelu_tanh(a); });
}

}  // namespace
}  // namespace ampcheck

namespace ampcheck {
namespace {

// The statistics pass of f32/f16/bf16 data (a float path: vectorized counts, sums in
// element order) against the f64 path it replaced, which is its definition: the same
// values stored as f64 must give the same summary, field for field, bit for bit.
TEST(VectorizedLoops, FloatStatisticsEqualTheF64PassOnTheSameValues) {
  const auto& k = kernels::NumericsKernels::cpu();
  std::vector<float> values = corner_floats(11, 3e4f);
  // Values at f16's and bf16's rounding bounds and both zeros early, so the first-seen
  // signed zero and every count are exercised.
  const float edges[] = {-0.0f, 0.0f, 65504.0f, 65519.99f, 65520.0f, 0x1p-25f, 0x1.8p-25f, 0x1.ffcp-15f,
                         0x1.ffbp-15f, 0x1.fep127f, 0x1.ffp127f, 0x1p-134f, 0x1.fep-127f, 0x1.fdp-127f};
  for (std::size_t i = 0; i < std::size(edges); ++i) values[i] = edges[i];
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    // The data in `dtype`, and the same values widened exactly to f64.
    std::vector<std::uint16_t> half(values.size());
    kernels::View v{values.data(), DType::f32, {static_cast<std::int64_t>(values.size())}};
    if (dtype != DType::f32) {
      kc::convert(values.data(), DType::f32, half.data(), dtype, values.size());
      v = kernels::View{half.data(), dtype, v.shape};
    }
    std::vector<double> wide(values.size());
    kc::convert(v.data, dtype, wide.data(), DType::f64, values.size());
    const kernels::View w{wide.data(), DType::f64, v.shape};
    const kernels::NumericsSummary a = k.stats(v), b = k.stats(w);
    const char* name = dtype == DType::f32 ? "f32" : dtype == DType::f16 ? "f16" : "bf16";
    EXPECT_EQ(a.count, b.count) << name;
    EXPECT_EQ(a.nan, b.nan) << name;
    EXPECT_EQ(a.pos_inf, b.pos_inf) << name;
    EXPECT_EQ(a.neg_inf, b.neg_inf) << name;
    for (int i = 0; i < kernels::NumericsSummary::kBins; ++i) EXPECT_EQ(a.bins[i], b.bins[i]) << name << " bin " << i;
    for (const auto& [x, y] : {std::pair{a.f16, b.f16}, std::pair{a.bf16, b.bf16}}) {
      EXPECT_EQ(x.overflow, y.overflow) << name;
      EXPECT_EQ(x.rounds_to_max, y.rounds_to_max) << name;
      EXPECT_EQ(x.underflow, y.underflow) << name;
      EXPECT_EQ(x.subnormal, y.subnormal) << name;
    }
    for (const auto& [x, y] : {std::pair{a.sum, b.sum}, std::pair{a.sum_squares, b.sum_squares}, std::pair{a.min, b.min},
                               std::pair{a.max, b.max}, std::pair{a.absmax, b.absmax},
                               std::pair{a.min_nonzero_abs, b.min_nonzero_abs}})
      EXPECT_EQ(std::bit_cast<std::uint64_t>(x), std::bit_cast<std::uint64_t>(y)) << name << ": " << x << " vs " << y;
    EXPECT_GT(a.f16.overflow + a.f16.underflow + a.f16.subnormal + a.f16.rounds_to_max, 0) << name;
  }
}

}  // namespace
}  // namespace ampcheck

namespace ampcheck {
namespace {

// f64 -> f16/bf16 in bulk (through binary32 rounded to odd, then the vector narrowing)
// against the scalar single-rounding definition, on the values where rounding twice
// goes wrong: the midpoints between two neighbours of the narrow format, and the
// doubles just above and below them that binary32 rounding to nearest would fold onto
// the midpoint; plus random bit patterns over the whole range, Inf, NaN and f64
// subnormals.
TEST(VectorizedLoops, F64ToHalfAndBfloat16RoundOnceOnEveryValueClass) {
  std::mt19937_64 gen(3);
  for (const DType to : {DType::f16, DType::bf16}) {
    std::vector<double> xs;
    const int mantissa = to == DType::f16 ? 10 : 7;
    const int emin = to == DType::f16 ? -14 : -126, emax = to == DType::f16 ? 15 : 127;
    for (int k = 0; k < 20000; ++k) {
      const int e = std::uniform_int_distribution<int>(emin - mantissa - 2, emax)(gen);
      const double q = std::ldexp(1.0, std::max(e, emin) - mantissa);  // the target's quantum there
      const double lo = std::ldexp(1.0, e) + q * static_cast<double>(std::uniform_int_distribution<int>(0, (1 << mantissa) - 1)(gen));
      const double mid = lo + q / 2;
      const double sign = (k & 1) ? -1.0 : 1.0;
      for (const double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), mid + mid * 0x1p-40,
                             mid - mid * 0x1p-40, lo, lo + q * 0x1p-30})
        xs.push_back(sign * x);
    }
    for (int k = 0; k < 20000; ++k) xs.push_back(std::bit_cast<double>(gen()));
    for (const double x : {0.0, -0.0, 1e-320, -1e-320, 1e-50, 65520.0, 65519.999999, 3.4e38, 3.41e38, 1e300,
                           std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()})
      xs.push_back(x);
    std::vector<std::uint16_t> got(xs.size());
    kc::convert(xs.data(), DType::f64, got.data(), to, xs.size());
    int checked = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const std::uint64_t bits = std::bit_cast<std::uint64_t>(xs[i]);
      const std::uint16_t want = to == DType::f16 ? kernels::f64_to_f16_bits(bits) : kernels::f64_to_bf16_bits(bits);
      ASSERT_EQ(got[i], want) << (to == DType::f16 ? "f16" : "bf16") << " of " << std::hexfloat << xs[i];
      ++checked;
    }
    EXPECT_GT(checked, 100000);
  }
}

}  // namespace
}  // namespace ampcheck
