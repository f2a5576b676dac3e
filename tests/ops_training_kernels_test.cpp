// The training family (optimizer updates, the loss scaler's unscale, clipping) and the
// numerics family (the inspector's statistics and scans) over Views: the CPU tables
// against references written out here (PyTorch's update rules in the compute type, the
// engine's own rounding for the low-precision classes), and, on a machine with a GPU,
// the CUDA tables against the CPU tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/dtype/convert.h"  // round_to: the engine's rounding, the reference here
#include "engine/dtype/dtype.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel.h"
#include "engine/tensor.h"
#include "kernels/cpu/numerics.h"  // stats on a chosen path
#include "kernels/cuda/cuda.h"  // probe
#include "kernels/numerics_kernels.h"
#include "tests/gpu_test_util.h"
#include "kernels/training_kernels.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

using kernels::NumericsKernels;
using kernels::NumericsSummary;
using kernels::TrainingKernels;
using kernels::View;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Values that exercise every class: normal values of several magnitudes, zeros of both
// signs, f16/bf16 overflow, rounds-to-max, underflow and subnormal values, NaN and Infs.
std::vector<double> mixed_values(std::size_t n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> exponent(-30, 20);
  const double special[] = {0.0, -0.0, 65504.0, 65510.0, 65520.0, -70000.0, 3e38, 0x1p-25, 0x1p-24,
                            0x1.8p-25, 6e-8, 1e-5, -3e-6, 0x1p-14, 0x1.ffcp-15, 1e-40, kInf, -kInf, kNaN};
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = i % 7 == 3 ? special[(i / 7) % std::size(special)] : std::ldexp(normal(gen), exponent(gen));
  return v;
}

std::vector<double> random_values(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(gen);
  return v;
}

// ---- the tables ---------------------------------------------------------------------------

TEST(TrainingKernels, TheCpuTableHasEveryEntry) {
  const TrainingKernels& k = TrainingKernels::cpu();
  EXPECT_NE(k.sgd, nullptr);
  EXPECT_NE(k.adam, nullptr);
  EXPECT_NE(k.unscale, nullptr);
  EXPECT_NE(k.sum_squares, nullptr);
  EXPECT_NE(k.scale, nullptr);
  const NumericsKernels& n = NumericsKernels::cpu();
  EXPECT_NE(n.stats, nullptr);
  EXPECT_NE(n.scan, nullptr);
  EXPECT_NE(n.all_finite, nullptr);
  EXPECT_NE(n.any_nonzero, nullptr);
  EXPECT_NE(n.swamped, nullptr);
}

TEST(TrainingKernels, TheCudaTableAnswersOrSaysThereIsNoGpu) {
  if (!kernels::cuda::probe().built_with_cuda) {
    EXPECT_THROW(TrainingKernels::cuda(), std::runtime_error);
    EXPECT_THROW(NumericsKernels::cuda(), std::runtime_error);
    return;
  }
  EXPECT_NE(TrainingKernels::cuda().unscale, nullptr);
  EXPECT_NE(NumericsKernels::cuda().stats, nullptr);
}

// ---- optimizer updates on the CPU -----------------------------------------------------------

// PyTorch's SGD with momentum written out in float, one operation at a time.
TEST(TrainingKernels, CpuSgdIsPyTorchsRuleInTheComputeTypeRoundedOnce) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::size_t n = 9000;  // more than one chunk
    Tensor p = Tensor::from(random_values(n, 1), {static_cast<std::int64_t>(n)}, dtype);
    const Tensor g = Tensor::from(random_values(n, 2), {static_cast<std::int64_t>(n)}, DType::f32);
    Tensor b = Tensor::from(random_values(n, 3), {static_cast<std::int64_t>(n)}, DType::f32);
    const std::vector<double> p0 = p.to_f64(), g0 = g.to_f64(), b0 = b.to_f64();
    kernels::SgdStep s;
    s.lr = 0.1;
    s.weight_decay = 0.01;
    s.momentum = 0.9;
    s.one_minus_dampening = 1 - 0.25;
    s.nesterov = false;
    TrainingKernels::cpu().sgd(view_of(p), view_of(g), view_of(b), s);
    const std::vector<double> p1 = p.to_f64(), b1 = b.to_f64();
    for (std::size_t i = 0; i < n; ++i) {
      const float pf = static_cast<float>(p0[i]);
      const float gf = static_cast<float>(g0[i]) + static_cast<float>(0.01) * pf;
      const float bf = static_cast<float>(0.9) * static_cast<float>(b0[i]) + static_cast<float>(0.75) * gf;
      const float want = pf - static_cast<float>(0.1) * bf;
      ASSERT_EQ(b1[i], static_cast<double>(bf)) << i;
      ASSERT_EQ(p1[i], round_to(want, dtype)) << name(dtype) << " element " << i;
    }
  }
}

TEST(TrainingKernels, CpuAdamWIsPyTorchsRuleInTheComputeType) {
  const std::size_t n = 5000;
  Tensor p = Tensor::from(random_values(n, 4), {static_cast<std::int64_t>(n)}, DType::f32);
  const Tensor g = Tensor::from(random_values(n, 5, 1e-3), {static_cast<std::int64_t>(n)}, DType::f16);
  Tensor m = Tensor::zeros({static_cast<std::int64_t>(n)}, DType::f32);
  Tensor v = Tensor::zeros({static_cast<std::int64_t>(n)}, DType::f32);
  const std::vector<double> p0 = p.to_f64(), g0 = g.to_f64();
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  kernels::AdamStep s;
  s.lr_over_bias1 = lr / (1 - b1);
  s.bias2_sqrt = std::sqrt(1 - b2);
  s.beta1 = b1;
  s.one_minus_beta1 = 1 - b1;
  s.beta2 = b2;
  s.one_minus_beta2 = 1 - b2;
  s.eps = eps;
  s.weight_decay = wd;
  s.decay = 1 - lr * wd;
  s.decoupled = true;
  TrainingKernels::cpu().adam(view_of(p), view_of(g), view_of(m), view_of(v), s);
  const std::vector<double> p1 = p.to_f64();
  for (std::size_t i = 0; i < n; ++i) {
    float pf = static_cast<float>(p0[i]) * static_cast<float>(1 - lr * wd);
    const float gf = static_cast<float>(g0[i]);
    const float mf = static_cast<float>(1 - b1) * gf;
    const float vf = static_cast<float>(1 - b2) * gf * gf;
    pf -= static_cast<float>(lr / (1 - b1)) * mf /
          (std::sqrt(vf) / static_cast<float>(std::sqrt(1 - b2)) + static_cast<float>(eps));
    ASSERT_EQ(p1[i], static_cast<double>(pf)) << i;
  }
}

// ---- the loss scaler's unscale --------------------------------------------------------------

TEST(TrainingKernels, CpuUnscaleMultipliesEveryGradientAndFlagsEachNonFiniteOne) {
  const double inv_scale = 1.0 / 3.0;  // not a power of two: the product rounds
  std::vector<Tensor> grads = {
      Tensor::from(random_values(5000, 6, 100.0), {5000}, DType::f16),
      Tensor::from(std::vector<double>{1.0, kInf, 2.0}, {3}, DType::bf16),
      Tensor::from(random_values(7, 7), {7}, DType::f32),
      Tensor::from(std::vector<double>{1e308, 0.5}, {2}, DType::f64),
      Tensor::from(std::vector<double>{1.0, kNaN}, {2}, DType::f32),
      Tensor::empty({0}, DType::f32),
  };
  std::vector<Tensor> out;
  std::vector<View> in_views, out_views;
  for (const Tensor& g : grads) {
    out.push_back(Tensor::empty(g.shape(), g.dtype() == DType::f64 ? DType::f64 : DType::f32));
    in_views.push_back(view_of(g));
    out_views.push_back(view_of(out.back()));
  }
  std::vector<std::uint8_t> flags(grads.size(), 7);
  const bool found = TrainingKernels::cpu().unscale(in_views, out_views, inv_scale, flags.data());
  EXPECT_TRUE(found);
  EXPECT_EQ(flags, (std::vector<std::uint8_t>{0, 1, 0, 0, 1, 0}));
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const std::vector<double> g = grads[t].to_f64(), o = out[t].to_f64();
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double want = out[t].dtype() == DType::f64 ? g[i] * inv_scale
                                                       : static_cast<float>(g[i]) * static_cast<float>(inv_scale);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(o[i]));
      else
        EXPECT_EQ(o[i], want) << "gradient " << t << " element " << i;
    }
  }
  // Finite gradients: no flag, and a null per-tensor array is allowed.
  EXPECT_FALSE(TrainingKernels::cpu().unscale({in_views[0], in_views[2]}, {out_views[0], out_views[2]}, inv_scale,
                                              nullptr));
}

// ---- clipping -----------------------------------------------------------------------------------

TEST(TrainingKernels, CpuSumOfSquaresContinuesOneLoopOverEveryGradient) {
  const Tensor a = Tensor::from(random_values(10000, 8), {10000}, DType::f16);
  const Tensor b = Tensor::from(random_values(333, 9), {333}, DType::f64);
  double want = 0;
  for (const Tensor* t : {&a, &b})
    for (const double x : t->to_f64()) want += x * x;
  double got = TrainingKernels::cpu().sum_squares(view_of(a), 0.0);
  got = TrainingKernels::cpu().sum_squares(view_of(b), got);
  EXPECT_EQ(got, want);
}

TEST(TrainingKernels, CpuScaleMultipliesInTheComputeTypeAndRoundsOnce) {
  Tensor t = Tensor::from(random_values(4100, 10), {4100}, DType::bf16);
  const std::vector<double> before = t.to_f64();
  TrainingKernels::cpu().scale(view_of(t), 0.3);
  const std::vector<double> after = t.to_f64();
  for (std::size_t i = 0; i < before.size(); ++i)
    ASSERT_EQ(after[i], round_to(static_cast<float>(before[i]) * 0.3f, DType::bf16)) << i;
}

// ---- numerics statistics --------------------------------------------------------------------

TEST(NumericsKernels, TheClassBoundariesAreTheDtypeLimits) {
  const struct {
    DType dtype;
    kernels::NarrowBounds bounds;
  } cases[] = {{DType::f16, kernels::f16_bounds()}, {DType::bf16, kernels::bf16_bounds()}};
  for (const auto& c : cases) {
    const DTypeInfo& i = info(c.dtype);
    EXPECT_EQ(c.bounds.max, i.max());
    EXPECT_EQ(c.bounds.overflow, i.max() + std::ldexp(1.0, i.max_exponent() - i.mantissa_bits - 1));
    EXPECT_EQ(c.bounds.underflow, i.min_subnormal() / 2);
    EXPECT_EQ(c.bounds.min_normal_tie, i.min_normal() - i.min_subnormal() / 2);
    // Each boundary is where the engine's rounding changes class.
    EXPECT_TRUE(std::isinf(round_to(c.bounds.overflow, c.dtype)));
    EXPECT_EQ(round_to(std::nextafter(c.bounds.overflow, 0.0), c.dtype), i.max());
    EXPECT_EQ(round_to(c.bounds.underflow, c.dtype), 0.0);
    EXPECT_EQ(round_to(std::nextafter(c.bounds.underflow, 1.0), c.dtype), i.min_subnormal());
    EXPECT_EQ(round_to(c.bounds.min_normal_tie, c.dtype), i.min_normal());
    EXPECT_LT(round_to(std::nextafter(c.bounds.min_normal_tie, 0.0), c.dtype), i.min_normal());
  }
}

// The summary of each element, classified by the engine's own rounding.
NumericsSummary reference_summary(const std::vector<double>& values) {
  NumericsSummary s;
  s.count = static_cast<std::int64_t>(values.size());
  auto narrow = [](double x, DType d, kernels::NarrowCounts& c) {
    const DTypeInfo& i = info(d);
    const double r = round_to(x, d);
    c.overflow += std::isinf(r);
    c.rounds_to_max += std::fabs(x) > i.max() && std::fabs(r) == i.max();
    c.underflow += x != 0 && r == 0;
    c.subnormal += r != 0 && std::fabs(r) < i.min_normal();
  };
  for (const double x : values) {
    if (std::isnan(x)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(x)) {
      ++(x > 0 ? s.pos_inf : s.neg_inf);
      continue;
    }
    if (x == 0) {
      ++s.bins[NumericsSummary::kZeroBin];
    } else {
      const int e = std::ilogb(x);
      ++s.bins[e < NumericsSummary::kMinExponent   ? NumericsSummary::kBelowBin
               : e > NumericsSummary::kMaxExponent ? NumericsSummary::kAboveBin
                                                   : e - NumericsSummary::kMinExponent + 1];
      s.min_nonzero_abs = std::min(s.min_nonzero_abs, std::fabs(x));
    }
    narrow(x, DType::f16, s.f16);
    narrow(x, DType::bf16, s.bf16);
    s.sum += x;
    s.sum_squares += x * x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.absmax = std::max(s.absmax, std::fabs(x));
  }
  return s;
}

void expect_same_counts(const NumericsSummary& got, const NumericsSummary& want, const std::string& what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.pos_inf, want.pos_inf) << what;
  EXPECT_EQ(got.neg_inf, want.neg_inf) << what;
  for (int k = 0; k < NumericsSummary::kBins; ++k) EXPECT_EQ(got.bins[k], want.bins[k]) << what << " bin " << k;
  for (const auto& [g, w] : {std::pair{got.f16, want.f16}, std::pair{got.bf16, want.bf16}}) {
    EXPECT_EQ(g.overflow, w.overflow) << what;
    EXPECT_EQ(g.rounds_to_max, w.rounds_to_max) << what;
    EXPECT_EQ(g.underflow, w.underflow) << what;
    EXPECT_EQ(g.subnormal, w.subnormal) << what;
  }
  EXPECT_EQ(got.min, want.min) << what;
  EXPECT_EQ(got.max, want.max) << what;
  EXPECT_EQ(got.absmax, want.absmax) << what;
  EXPECT_EQ(got.min_nonzero_abs, want.min_nonzero_abs) << what;
}

TEST(NumericsKernels, CpuStatsCountEveryClassAsTheEnginesRoundingDoes) {
  const std::vector<double> values = mixed_values(40000, 11);  // three chunks
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(values.size())}, dtype);
    const NumericsSummary got = NumericsKernels::cpu().stats(view_of(t));
    const NumericsSummary want = reference_summary(t.to_f64());
    expect_same_counts(got, want, std::string(name(dtype)));
    EXPECT_NEAR(got.sum, want.sum, 1e-9 * want.sum_squares) << name(dtype);
    EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares) << name(dtype);
  }
}

TEST(NumericsKernels, CpuStatsOfF64DataOutsideTheF32RangeLandBelowAndAbove) {
  const Tensor t = Tensor::from(std::vector<double>{1e-320, 1e-50, 1e50, 1e300, 1.0, -0.0}, {6}, DType::f64);
  const NumericsSummary s = NumericsKernels::cpu().stats(view_of(t));
  EXPECT_EQ(s.bins[NumericsSummary::kBelowBin], 2);
  EXPECT_EQ(s.bins[NumericsSummary::kAboveBin], 2);
  EXPECT_EQ(s.bins[NumericsSummary::kZeroBin], 1);
  EXPECT_EQ(s.bins[0 - NumericsSummary::kMinExponent + 1], 1);  // 1.0: exponent 0
  EXPECT_EQ(s.min_nonzero_abs, 1e-320);
}

TEST(NumericsKernels, CpuStatsAreTheSameBitsForAnyThreadCount) {
  const std::vector<double> values = mixed_values(100000, 12);
  const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(values.size())}, DType::f32);
  const int threads = num_threads();
  set_num_threads(1);
  const NumericsSummary one = NumericsKernels::cpu().stats(view_of(t));
  set_num_threads(2);
  const NumericsSummary two = NumericsKernels::cpu().stats(view_of(t));
  set_num_threads(threads);
  EXPECT_EQ(std::memcmp(&one.sum, &two.sum, sizeof one.sum), 0);
  EXPECT_EQ(std::memcmp(&one.sum_squares, &two.sum_squares, sizeof one.sum), 0);
  expect_same_counts(one, two, "1 vs 2 threads");
}

// The bits of each double field, so that -0 and +0 (and NaN payloads) differ.
void expect_same_bits(const NumericsSummary& got, const NumericsSummary& want, const std::string& what) {
  expect_same_counts(got, want, what);
  const std::pair<double, double> fields[] = {{got.sum, want.sum}, {got.sum_squares, want.sum_squares},
                                              {got.min, want.min}, {got.max, want.max},
                                              {got.absmax, want.absmax}, {got.min_nonzero_abs, want.min_nonzero_abs}};
  for (std::size_t k = 0; k < std::size(fields); ++k)
    EXPECT_EQ(std::memcmp(&fields[k].first, &fields[k].second, sizeof(double)), 0)
        << what << " field " << k << ": " << fields[k].first << " vs " << fields[k].second;
}

TEST(NumericsKernels, CpuStatsAreTheSameBitsOnEveryPath) {
  using kernels::cpu::GemmIsa;
  std::vector<GemmIsa> paths;
  for (const GemmIsa isa : {GemmIsa::avx2, GemmIsa::avx512})
    if (kernels::cpu::gemm_isa_supported(isa)) paths.push_back(isa);
  if (paths.empty()) GTEST_SKIP() << "this CPU runs only the scalar path";
  for (const std::size_t n : {std::size_t{7}, std::size_t{1029}, std::size_t{40000}, std::size_t{40003}}) {
    const std::vector<double> values = mixed_values(n, 13);
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(n)}, dtype);
      const NumericsSummary scalar = kernels::cpu::stats(view_of(t), GemmIsa::scalar);
      for (const GemmIsa isa : paths)
        expect_same_bits(kernels::cpu::stats(view_of(t), isa), scalar,
                         std::string(name(dtype)) + " n=" + std::to_string(n) + " " +
                             std::string(kernels::cpu::gemm_isa_name(isa)));
      // The f64 path (stats of f64 data) is the same rule: the same summary for the same values.
      expect_same_bits(NumericsKernels::cpu().stats(view_of(t.to(DType::f64))), scalar,
                       std::string(name(dtype)) + " as f64, n=" + std::to_string(n));
    }
  }
}

// The documented order of the sums (kernels/numerics_kernels.h): within chunks of 2^14
// elements, element i into lane i % 8, the lanes folded ((0+1)+(2+3))+((4+5)+(6+7)), the
// chunks added in order; NaN and Inf left out.
TEST(NumericsKernels, CpuSumsRunInEightLanesPerChunkFoldedPairwise) {
  const std::vector<double> values = mixed_values(50001, 14);
  const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(values.size())}, DType::f32);
  const std::vector<double> exact = t.to_f64();
  double sum = 0, squares = 0;
  constexpr std::size_t kChunk = 1 << 14;
  for (std::size_t c = 0; c < exact.size(); c += kChunk) {
    double ls[8] = {}, lq[8] = {};
    for (std::size_t i = c; i < std::min(exact.size(), c + kChunk); ++i) {
      if (!std::isfinite(exact[i])) continue;
      ls[(i - c) % 8] += exact[i];
      lq[(i - c) % 8] += exact[i] * exact[i];
    }
    const auto fold = [](const double* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); };
    sum += fold(ls);
    squares += fold(lq);
  }
  const NumericsSummary s = NumericsKernels::cpu().stats(view_of(t));
  EXPECT_EQ(std::memcmp(&s.sum, &sum, sizeof sum), 0) << s.sum << " vs " << sum;
  EXPECT_EQ(std::memcmp(&s.sum_squares, &squares, sizeof sum), 0) << s.sum_squares << " vs " << squares;
}

// The float dtypes' scan (the statistics' vectorised pass and a search for the largest)
// against the element-by-element scan of the same values stored as f64.
TEST(NumericsKernels, CpuScanOfFloatsIsTheElementScanOfTheSameValues) {
  for (const std::size_t n : {std::size_t{9}, std::size_t{40003}}) {
    std::vector<double> values = mixed_values(n, 15);
    values[n - 1] = -7e4;  // ties in magnitude with an earlier 7e4: the first is `largest`
    values[n / 2] = 7e4;
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(n)}, dtype);
      const kernels::ValueScan got = NumericsKernels::cpu().scan(view_of(t));
      const kernels::ValueScan want = NumericsKernels::cpu().scan(view_of(t.to(DType::f64)));
      const std::string what = std::string(name(dtype)) + " n=" + std::to_string(n);
      EXPECT_EQ(got.nan, want.nan) << what;
      EXPECT_EQ(got.pos_inf, want.pos_inf) << what;
      EXPECT_EQ(got.neg_inf, want.neg_inf) << what;
      EXPECT_EQ(got.zero, want.zero) << what;
      EXPECT_EQ(got.finite_nonzero, want.finite_nonzero) << what;
      const std::pair<double, double> fields[] = {{got.min, want.min}, {got.max, want.max}, {got.absmax, want.absmax},
                                                  {got.largest, want.largest}};
      for (const auto& [g, w] : fields) EXPECT_EQ(std::memcmp(&g, &w, sizeof g), 0) << what << ": " << g << " vs " << w;
    }
  }
}

TEST(NumericsKernels, CpuMinAndMaxOfSignedZerosFollowTotalOrderInAnyOrder) {
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (const bool negative_first : {false, true}) {
      // The two zeros in different chunks, and both in the first.
      std::vector<double> values(40000, 0.0);
      values[negative_first ? 5 : 30000] = -0.0;
      values[negative_first ? 6 : 3] = -0.0;
      const Tensor t = Tensor::from(values, {40000}, dtype);
      const NumericsSummary s = NumericsKernels::cpu().stats(view_of(t));
      EXPECT_TRUE(s.min == 0.0 && std::signbit(s.min)) << name(dtype) << " min " << s.min;
      EXPECT_TRUE(s.max == 0.0 && !std::signbit(s.max)) << name(dtype) << " max " << s.max;
      const kernels::ValueScan scan = NumericsKernels::cpu().scan(view_of(t));
      EXPECT_TRUE(std::signbit(scan.min) && !std::signbit(scan.max)) << name(dtype);
    }
  }
}

TEST(NumericsKernels, CpuScanCountsNonFiniteValuesAndFindsTheFirstLargest) {
  const Tensor t = Tensor::from(std::vector<double>{0.0, -3.0, kNaN, 2.0, 3.0, -kInf, -0.0, kInf, 1e-3}, {9},
                                DType::f32);
  const kernels::ValueScan s = NumericsKernels::cpu().scan(view_of(t));
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.pos_inf, 1);
  EXPECT_EQ(s.neg_inf, 1);
  EXPECT_EQ(s.zero, 2);
  EXPECT_EQ(s.finite_nonzero, 4);
  EXPECT_EQ(s.min, -3.0);
  EXPECT_EQ(s.max, 3.0);
  EXPECT_EQ(s.absmax, 3.0);
  EXPECT_EQ(s.largest, -3.0);  // -3 comes before 3

  const kernels::ValueScan none = NumericsKernels::cpu().scan(view_of(Tensor::from(std::vector<double>{kNaN}, {1})));
  EXPECT_TRUE(std::isnan(none.min) && std::isnan(none.max) && std::isnan(none.absmax));
  EXPECT_EQ(none.largest, 0.0);
}

TEST(NumericsKernels, CpuBitChecksSeeInfNanAndNonzeroInEveryDtype) {
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    std::vector<double> v(9000, 0.0);
    const NumericsKernels& k = NumericsKernels::cpu();
    EXPECT_TRUE(k.all_finite(view_of(Tensor::from(v, {9000}, dtype))));
    EXPECT_FALSE(k.any_nonzero(view_of(Tensor::from(v, {9000}, dtype))));
    v[8999] = -0.0;
    EXPECT_FALSE(k.any_nonzero(view_of(Tensor::from(v, {9000}, dtype)))) << name(dtype);
    v[8999] = 1e-3;
    EXPECT_TRUE(k.any_nonzero(view_of(Tensor::from(v, {9000}, dtype)))) << name(dtype);
    v[8000] = kNaN;
    EXPECT_FALSE(k.all_finite(view_of(Tensor::from(v, {9000}, dtype)))) << name(dtype);
    v[8000] = -kInf;
    EXPECT_FALSE(k.all_finite(view_of(Tensor::from(v, {9000}, dtype)))) << name(dtype);
  }
}

TEST(NumericsKernels, CpuSwampingAgreesWithTheElementDefinition) {
  const std::vector<double> w = random_values(20000, 13, 10.0);
  std::vector<double> dw = random_values(20000, 14, 1e-3);
  for (std::size_t i = 0; i < dw.size(); i += 5) dw[i] = 0;
  for (std::size_t i = 1; i < dw.size(); i += 7) dw[i] *= 1e-20;  // lost even in f64
  for (const DType param : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Tensor wt = Tensor::from(w, {20000}, DType::f32);
    const Tensor ut = Tensor::from(dw, {20000}, DType::f64);
    const kernels::SwampCounts got = NumericsKernels::cpu().swamped(view_of(wt), view_of(ut), param);
    kernels::SwampCounts want;
    const std::vector<double> wv = wt.to_f64();
    for (std::size_t i = 0; i < dw.size(); ++i) {
      if (dw[i] == 0) continue;
      ++want.nonzero;
      want.swamped += kernels::swamped_element(round_to(wv[i], param), dw[i], param);
    }
    EXPECT_EQ(got.nonzero, want.nonzero) << name(param);
    EXPECT_EQ(got.swamped, want.swamped) << name(param);
    EXPECT_GT(want.swamped, 0) << name(param);  // the sample exercises both outcomes
  }
}

// ---- CUDA against the CPU ---------------------------------------------------------------------

TEST(TrainingKernelsCuda, OptimizerStepsGiveTheCpuBits) {
  SKIP_WITHOUT_GPU();
  for (const bool adam : {false, true}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      auto make = [&](Device device) {
        Tensor p = Tensor::from(random_values(3000, 15), {3000}, dtype).to(device).set_requires_grad();
        return optim::NamedParams{{"w", p}};
      };
      optim::NamedParams cpu_params = make(Device::cpu), gpu_params = make(Device::cuda);
      std::unique_ptr<optim::Optimizer> cpu_opt, gpu_opt;
      if (adam) {
        cpu_opt = std::make_unique<optim::AdamW>(cpu_params, 1e-3);
        gpu_opt = std::make_unique<optim::AdamW>(gpu_params, 1e-3);
      } else {
        cpu_opt = std::make_unique<optim::SGD>(cpu_params, 0.1, optim::SGD::Options{0.9, 0, 0.01, true});
        gpu_opt = std::make_unique<optim::SGD>(gpu_params, 0.1, optim::SGD::Options{0.9, 0, 0.01, true});
      }
      for (unsigned step = 0; step < 3; ++step) {
        const Tensor g = Tensor::from(random_values(3000, 16 + step), {3000}, dtype);
        cpu_params[0].second.set_grad(g);
        gpu_params[0].second.set_grad(g.to(Device::cuda));
        cpu_opt->step();
        gpu_opt->step();
      }
      EXPECT_EQ(bytes_of(gpu_params[0].second), bytes_of(cpu_params[0].second))
          << (adam ? "AdamW " : "SGD ") << name(dtype);
      // The state held by name: a range-for over state().buffers.at("w") would iterate a map
      // of a temporary destroyed before the loop runs (C++20 extends no lifetime there).
      const optim::State state = gpu_opt->state();
      for (const auto& [bname, buf] : state.buffers.at("w")) EXPECT_EQ(buf.device(), Device::cuda) << bname;
    }
  }
}

TEST(TrainingKernelsCuda, UnscaleInOneLaunchGivesTheCpuBitsAndFlags) {
  SKIP_WITHOUT_GPU();
  std::vector<Tensor> grads = {
      Tensor::from(random_values(70000, 17, 100.0), {70000}, DType::f16),
      Tensor::from(std::vector<double>{1.0, kInf, 2.0}, {3}, DType::bf16),
      Tensor::from(random_values(7, 18), {7}, DType::f32),
      Tensor::from(std::vector<double>{1e308, 0.5}, {2}, DType::f64),
      Tensor::from(std::vector<double>{1.0, kNaN}, {2}, DType::f32),
  };
  std::vector<Tensor> cpu_out, gpu_out, gpu_in;
  std::vector<View> ci, co, gi, go;
  for (const Tensor& g : grads) {
    const DType od = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
    cpu_out.push_back(Tensor::empty(g.shape(), od));
    gpu_out.push_back(Tensor::empty(g.shape(), od, Device::cuda));
    gpu_in.push_back(g.to(Device::cuda));
  }
  for (std::size_t t = 0; t < grads.size(); ++t) {
    ci.push_back(view_of(grads[t]));
    co.push_back(view_of(cpu_out[t]));
    gi.push_back(view_of(gpu_in[t]));
    go.push_back(view_of(gpu_out[t]));
  }
  std::vector<std::uint8_t> cpu_flags(grads.size()), gpu_flags(grads.size());
  EXPECT_EQ(TrainingKernels::cuda().unscale(gi, go, 1.0 / 3.0, gpu_flags.data()),
            TrainingKernels::cpu().unscale(ci, co, 1.0 / 3.0, cpu_flags.data()));
  EXPECT_EQ(gpu_flags, cpu_flags);
  // Bit for bit, but a NaN's payload: the CPU passes on the input's (0x7FC00000), an NVIDIA
  // GPU's multiply returns its canonical NaN (0x7FFFFFFF). Both are NaN where the other is.
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const std::vector<double> g = gpu_out[t].to_f64(), c = cpu_out[t].to_f64();
    ASSERT_EQ(g.size(), c.size()) << t;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(c[i])) {
        EXPECT_TRUE(std::isnan(g[i])) << t << "[" << i << "]";
      } else {
        EXPECT_EQ(std::memcmp(&g[i], &c[i], sizeof(double)), 0) << t << "[" << i << "]: " << g[i] << " vs " << c[i];
      }
    }
  }
}

TEST(TrainingKernelsCuda, ClippingAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const Tensor a = Tensor::from(random_values(100000, 19), {100000}, DType::f32);
  const double cpu = TrainingKernels::cpu().sum_squares(view_of(a), 1.0);
  const Tensor ga = a.to(Device::cuda);
  const double gpu = TrainingKernels::cuda().sum_squares(view_of(ga), 1.0);
  EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);
  EXPECT_EQ(TrainingKernels::cuda().sum_squares(view_of(ga), 1.0), gpu);  // the same bits every run
  Tensor c = a.clone();
  Tensor gc = ga.clone();
  TrainingKernels::cpu().scale(view_of(c), 0.7);
  TrainingKernels::cuda().scale(view_of(gc), 0.7);
  EXPECT_EQ(bytes_of(gc), bytes_of(c));
}

TEST(NumericsKernelsCuda, StatsScanAndSwampingAgreeWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<double> values = mixed_values(300000, 20);
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Tensor t = Tensor::from(values, {static_cast<std::int64_t>(values.size())}, dtype);
    const Tensor g = t.to(Device::cuda);
    const NumericsSummary cpu = NumericsKernels::cpu().stats(view_of(t));
    const NumericsSummary gpu = NumericsKernels::cuda().stats(view_of(g));
    expect_same_counts(gpu, cpu, std::string(name(dtype)));
    EXPECT_NEAR(gpu.sum, cpu.sum, 1e-9 * cpu.sum_squares) << name(dtype);
    EXPECT_NEAR(gpu.sum_squares, cpu.sum_squares, 1e-12 * cpu.sum_squares) << name(dtype);
    const NumericsSummary again = NumericsKernels::cuda().stats(view_of(g));
    EXPECT_EQ(std::memcmp(&again.sum, &gpu.sum, sizeof gpu.sum), 0) << "the same bits every run";

    const kernels::ValueScan cs = NumericsKernels::cpu().scan(view_of(t));
    const kernels::ValueScan gs = NumericsKernels::cuda().scan(view_of(g));
    EXPECT_EQ(gs.nan, cs.nan);
    EXPECT_EQ(gs.pos_inf, cs.pos_inf);
    EXPECT_EQ(gs.neg_inf, cs.neg_inf);
    EXPECT_EQ(gs.zero, cs.zero);
    EXPECT_EQ(gs.finite_nonzero, cs.finite_nonzero);
    EXPECT_EQ(gs.min, cs.min);
    EXPECT_EQ(gs.max, cs.max);
    EXPECT_EQ(gs.absmax, cs.absmax);
    EXPECT_EQ(gs.largest, cs.largest);

    EXPECT_EQ(NumericsKernels::cuda().all_finite(view_of(g)), NumericsKernels::cpu().all_finite(view_of(t)));
    EXPECT_EQ(NumericsKernels::cuda().any_nonzero(view_of(g)), NumericsKernels::cpu().any_nonzero(view_of(t)));

    const Tensor u = Tensor::from(random_values(values.size(), 21, 1e-3), t.shape(), DType::f32);
    const Tensor gu = u.to(Device::cuda);
    const Tensor w = Tensor::from(random_values(values.size(), 22, 10.0), t.shape(), dtype);
    const Tensor gw = w.to(Device::cuda);
    const kernels::SwampCounts csw = NumericsKernels::cpu().swamped(view_of(w), view_of(u), dtype);
    const kernels::SwampCounts gsw = NumericsKernels::cuda().swamped(view_of(gw), view_of(gu), dtype);
    EXPECT_EQ(gsw.nonzero, csw.nonzero) << name(dtype);
    EXPECT_EQ(gsw.swamped, csw.swamped) << name(dtype);
  }
  const Tensor finite = Tensor::from(random_values(5000, 23), {5000}, DType::f16).to(Device::cuda);
  EXPECT_TRUE(NumericsKernels::cuda().all_finite(view_of(finite)));
  EXPECT_FALSE(NumericsKernels::cuda().any_nonzero(view_of(Tensor::zeros({5000}, DType::bf16, Device::cuda))));
}

}  // namespace
}  // namespace ampcheck
