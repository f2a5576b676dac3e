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
