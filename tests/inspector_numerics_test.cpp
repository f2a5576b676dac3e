// Numerics statistics (inspector/numerics.h) against independent references: hand-derived
// powers of two for the fp16/bf16 boundaries, frexp for the exponent bins, plain double
// loops for the moments.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/parallel.h"
#include "engine/tensor.h"
#include "inspector/numerics.h"

namespace ampcheck::inspector {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorStats stats_of(std::vector<double> values, DType dtype = DType::f32) {
  const auto n = static_cast<std::int64_t>(values.size());
  return compute_stats(Tensor::from(values, {n}, dtype));
}

double next_down_f32(double x) { return std::nextafter(static_cast<float>(x), 0.0f); }
double next_up_f32(double x) { return std::nextafter(static_cast<float>(x), 1.0f); }

// ---- fp16 / bf16 boundaries, derived by hand ----
// f16: max 65504 = (2 - 2^-10) 2^15, ulp there 2^5, so 65504 + 16 = 65520 is the tie
// that rounds to even (Inf). Smallest subnormal 2^-24, half of it 2^-25 ties to 0.
// Largest subnormal 2^-14 - 2^-24; 2^-14 - 2^-25 ties up to the normal 2^-14.
// bf16: max (2 - 2^-7) 2^127 = 2^128 - 2^120, ulp 2^120, overflow tie 2^128 - 2^119.
// Smallest subnormal 2^-133, underflow up to 2^-134; 2^-126 - 2^-134 ties up to 2^-126.

TEST(NumericsBoundaries, Fp16OverflowIs65520AndAbove) {
  EXPECT_EQ(stats_of({70000.0}).f16.overflow, 1);
  EXPECT_EQ(stats_of({70000.0}).bf16.overflow, 0);
  EXPECT_EQ(stats_of({65520.0}).f16.overflow, 1);
  EXPECT_EQ(stats_of({-65520.0}).f16.overflow, 1);
  EXPECT_EQ(stats_of({65519.0}).f16.overflow, 0);
  EXPECT_EQ(stats_of({65519.0}).f16.rounds_to_max, 1);
  EXPECT_EQ(stats_of({next_down_f32(65520.0)}).f16.overflow, 0);
  EXPECT_EQ(stats_of({next_down_f32(65520.0)}).f16.rounds_to_max, 1);
  EXPECT_EQ(stats_of({65505.0}).f16.rounds_to_max, 1);
  const TensorStats at_max = stats_of({65504.0, -65504.0});
  EXPECT_EQ(at_max.f16.overflow, 0);
  EXPECT_EQ(at_max.f16.rounds_to_max, 0);
}

TEST(NumericsBoundaries, Bf16OverflowIsMaxPlusHalfUlp) {
  const double tie = std::ldexp(1.0, 128) - std::ldexp(1.0, 119);
  const double max = std::ldexp(1.0, 128) - std::ldexp(1.0, 120);
  EXPECT_EQ(stats_of({tie}).bf16.overflow, 1);
  EXPECT_EQ(stats_of({-tie}).bf16.overflow, 1);
  EXPECT_EQ(stats_of({std::numeric_limits<float>::max()}).bf16.overflow, 1);
  EXPECT_EQ(stats_of({next_down_f32(tie)}).bf16.overflow, 0);
  EXPECT_EQ(stats_of({next_down_f32(tie)}).bf16.rounds_to_max, 1);
  EXPECT_EQ(stats_of({max}).bf16.overflow, 0);
  EXPECT_EQ(stats_of({max}).bf16.rounds_to_max, 0);
  EXPECT_EQ(stats_of({max}).f16.overflow, 1);
}

TEST(NumericsBoundaries, Fp16UnderflowIsUpToHalfTheSmallestSubnormal) {
  EXPECT_EQ(stats_of({1e-9}).f16.underflow, 1);
  EXPECT_EQ(stats_of({1e-9}).bf16.underflow, 0);
  EXPECT_EQ(stats_of({1e-9}).bf16.subnormal, 0);
  const double half_min = std::ldexp(1.0, -25);
  EXPECT_EQ(stats_of({half_min}).f16.underflow, 1);
  EXPECT_EQ(stats_of({-half_min}).f16.underflow, 1);
  EXPECT_EQ(stats_of({half_min * 1.0001}).f16.underflow, 0);
  EXPECT_EQ(stats_of({half_min * 1.0001}).f16.subnormal, 1);
  EXPECT_EQ(stats_of({std::ldexp(1.0, -24)}).f16.subnormal, 1);
  // Zero is not an underflow: nothing was lost.
  EXPECT_EQ(stats_of({0.0, -0.0}).f16.underflow, 0);
}

TEST(NumericsBoundaries, Fp16SubnormalRange) {
  const double min_normal = std::ldexp(1.0, -14);
  const double tie = min_normal - std::ldexp(1.0, -25);
  EXPECT_EQ(stats_of({min_normal}).f16.subnormal, 0);
  EXPECT_EQ(stats_of({tie}).f16.subnormal, 0);  // rounds up to the normal 2^-14
  EXPECT_EQ(stats_of({next_down_f32(tie)}).f16.subnormal, 1);
  EXPECT_EQ(stats_of({-std::ldexp(1.0, -15)}).f16.subnormal, 1);
  EXPECT_EQ(stats_of({min_normal - std::ldexp(1.0, -24)}).f16.subnormal, 1);
}

TEST(NumericsBoundaries, Bf16UnderflowAndSubnormalRange) {
  const double half_min = std::ldexp(1.0, -134);
  EXPECT_EQ(stats_of({half_min}).bf16.underflow, 1);
  EXPECT_EQ(stats_of({-half_min}).bf16.underflow, 1);
  EXPECT_EQ(stats_of({next_up_f32(half_min)}).bf16.underflow, 0);
  EXPECT_EQ(stats_of({next_up_f32(half_min)}).bf16.subnormal, 1);
  const double min_normal = std::ldexp(1.0, -126);
  const double tie = min_normal - std::ldexp(1.0, -134);
  EXPECT_EQ(stats_of({min_normal}).bf16.subnormal, 0);
  EXPECT_EQ(stats_of({tie}).bf16.subnormal, 0);  // rounds up to the normal 2^-126
  EXPECT_EQ(stats_of({next_down_f32(tie)}).bf16.subnormal, 1);
  EXPECT_EQ(stats_of({std::ldexp(1.0, -133)}).bf16.subnormal, 1);
  EXPECT_EQ(stats_of({std::ldexp(1.0, -133)}).f16.underflow, 1);
}

// f64 data rounds once, straight to f16: going through f32 first would turn these into
// the tie values and round the other way.
TEST(NumericsBoundaries, F64DataRoundsOnce) {
  const double above_half_min = std::nextafter(std::ldexp(1.0, -25), 1.0);
  EXPECT_EQ(stats_of({above_half_min}, DType::f64).f16.subnormal, 1);
  EXPECT_EQ(stats_of({above_half_min}, DType::f64).f16.underflow, 0);
  const double below_overflow = std::nextafter(65520.0, 0.0);
  EXPECT_EQ(stats_of({below_overflow}, DType::f64).f16.overflow, 0);
  EXPECT_EQ(stats_of({below_overflow}, DType::f64).f16.rounds_to_max, 1);
}

TEST(NumericsBoundaries, LowPrecisionData) {
  // f16 data is already f16: its subnormals count, nothing overflows or underflows.
  const TensorStats h = stats_of({65504.0, std::ldexp(1.0, -20), std::ldexp(1.0, -24), 1.0},
                                 DType::f16);
  EXPECT_EQ(h.f16.overflow, 0);
  EXPECT_EQ(h.f16.underflow, 0);
  EXPECT_EQ(h.f16.subnormal, 2);
  EXPECT_EQ(h.bf16.subnormal, 0);
  // bf16 data beyond the f16 range, as f16.
  const TensorStats b = stats_of({1e30, 1e-30, std::ldexp(1.0, -130)}, DType::bf16);
  EXPECT_EQ(b.f16.overflow, 1);
  EXPECT_EQ(b.f16.underflow, 2);
  EXPECT_EQ(b.bf16.subnormal, 1);
}

// ---- random tensors against plain-loop references ----

struct Reference {
  ExponentHistogram histogram;
  LowPrecisionCounts f16, bf16;
  double min = kInf, max = -kInf, absmax = 0.0, min_nonzero_abs = kInf;
};

// Classes from the hand-derived thresholds above, not from any conversion.
void classify_by_threshold(double a, double max, double overflow_at, double underflow_to,
                           double min_normal_tie, LowPrecisionCounts& c) {
  if (a >= overflow_at)
    ++c.overflow;
  else if (a > max)
    ++c.rounds_to_max;
  else if (a <= underflow_to)
    ++c.underflow;
  else if (a < min_normal_tie)
    ++c.subnormal;
}

Reference reference_of(const std::vector<double>& values) {
  Reference r;
  for (const double x : values) {
    if (std::isnan(x)) {
      ++r.histogram.nan;
      continue;
    }
    if (std::isinf(x)) {
      ++(x > 0 ? r.histogram.pos_inf : r.histogram.neg_inf);
      continue;
    }
    r.min = std::min(r.min, x);
    r.max = std::max(r.max, x);
    r.absmax = std::max(r.absmax, std::fabs(x));
    if (x == 0.0) {
      ++r.histogram.zero;
      continue;
    }
    r.min_nonzero_abs = std::min(r.min_nonzero_abs, std::fabs(x));
    int e2 = 0;
    std::frexp(x, &e2);  // |x| = m 2^e2 with m in [0.5, 1): floor(log2|x|) = e2 - 1
    const int e = e2 - 1;
    if (e < -149)
      ++r.histogram.below;
    else if (e > 127)
      ++r.histogram.above;
    else
      ++r.histogram.at(e);
    const double a = std::fabs(x);
    classify_by_threshold(a, 65504.0, 65520.0, std::ldexp(1.0, -25),
                          std::ldexp(1.0, -14) - std::ldexp(1.0, -25), r.f16);
    classify_by_threshold(a, std::ldexp(1.0, 128) - std::ldexp(1.0, 120),
                          std::ldexp(1.0, 128) - std::ldexp(1.0, 119), std::ldexp(1.0, -134),
                          std::ldexp(1.0, -126) - std::ldexp(1.0, -134), r.bf16);
  }
  return r;
}

// Values spread over the dtype's exponent range and the f16 boundaries, with zeros, NaN
// and infinities planted.
std::vector<double> random_values(std::int64_t n, DType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  int lo = -152, hi = 130;
  if (dtype == DType::f64) lo = -1080, hi = 1030;
  if (dtype == DType::f16) lo = -27, hi = 17;
  std::uniform_int_distribution<int> wide(lo, hi), near_f16(-27, 17), kind(0, 99);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) {
    const int k = kind(rng);
    const double sign = (k % 2 == 0) ? 1.0 : -1.0;
    if (k < 4)
      x = sign * 0.0;
    else if (k < 7)
      x = kNaN;
    else if (k < 9)
      x = kInf;
    else if (k < 11)
      x = -kInf;
    else if (k < 13)  // around the f16 overflow boundary
      x = sign * std::uniform_real_distribution<double>(65500.0, 65530.0)(rng);
    else if (k < 15)  // around the bf16 overflow boundary
      x = sign * std::ldexp(std::uniform_real_distribution<double>(1.99, 2.0)(rng), 127);
    else if (k < 55)
      x = sign * std::ldexp(mantissa(rng), wide(rng));
    else
      x = sign * std::ldexp(mantissa(rng), near_f16(rng));
  }
  return v;
}

TEST(NumericsRandom, HistogramAndClassesMatchIndependentReferenceInEveryDtype) {
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(std::string(name(dtype)));
    const std::int64_t n = 150001;  // several chunks, the last one short
    const Tensor t = Tensor::from(random_values(n, dtype, 7), {n}, dtype);
    const std::vector<double> stored = t.to_f64();
    const Reference r = reference_of(stored);
    const TensorStats s = compute_stats(t);

    EXPECT_EQ(s.count, n);
    EXPECT_EQ(s.tensors, 1);
    EXPECT_EQ(s.histogram.total(), n);
    EXPECT_TRUE(s.histogram == r.histogram);
    EXPECT_GT(s.nans(), 0);
    EXPECT_GT(s.pos_inf(), 0);
    EXPECT_GT(s.neg_inf(), 0);
    EXPECT_GT(s.zeros(), 0);
    EXPECT_TRUE(s.f16 == r.f16);
    EXPECT_TRUE(s.bf16 == r.bf16);
    EXPECT_EQ(s.min, r.min);
    EXPECT_EQ(s.max, r.max);
    EXPECT_EQ(s.absmax, r.absmax);
    EXPECT_EQ(s.min_nonzero_abs, r.min_nonzero_abs);
    if (dtype == DType::f64) {
      EXPECT_GT(s.histogram.below, 0);
      EXPECT_GT(s.histogram.above, 0);
    } else {
      EXPECT_EQ(s.histogram.below, 0);
      EXPECT_EQ(s.histogram.above, 0);
    }
    if (dtype != DType::f16) {
      EXPECT_GT(s.f16.overflow, 0);
      EXPECT_GT(s.f16.underflow, 0);
      EXPECT_GT(s.f16.subnormal, 0);
    }
    // bf16 has no value between 65504 and 65520 (its ulp there is 256).
    if (dtype == DType::f32 || dtype == DType::f64) {
      EXPECT_GT(s.f16.rounds_to_max, 0);
      EXPECT_GT(s.bf16.rounds_to_max, 0);
      EXPECT_GT(s.bf16.overflow, 0);
      EXPECT_GT(s.bf16.underflow, 0);
      EXPECT_GT(s.bf16.subnormal, 0);
    }
  }
}

TEST(NumericsRandom, MomentsMatchPlainLoop) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.5, 3.0);
  const std::int64_t n = 200000;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = normal(rng);
  v[5] = 0.0;
  v[17] = kNaN;
  v[99999] = kInf;
  v[150000] = -kInf;
  v[123] = 1e-30;
  for (const DType dtype : kFloatDTypes) {
    SCOPED_TRACE(std::string(name(dtype)));
    const Tensor t = Tensor::from(v, {n}, dtype);
    const std::vector<double> stored = t.to_f64();
    double sum = 0.0, sum_sq = 0.0, lo = kInf, hi = -kInf, min_nz = kInf;
    std::int64_t finite = 0;
    for (const double x : stored) {
      if (!std::isfinite(x)) continue;
      ++finite;
      sum += x;
      sum_sq += x * x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (x != 0.0) min_nz = std::min(min_nz, std::fabs(x));
    }
    const TensorStats s = compute_stats(t);
    EXPECT_EQ(s.finite(), finite);
    EXPECT_EQ(s.min, lo);
    EXPECT_EQ(s.max, hi);
    EXPECT_EQ(s.absmax, std::max(-lo, hi));
    EXPECT_EQ(s.min_nonzero_abs, min_nz);
    const double mean = sum / static_cast<double>(finite);
    const double rms = std::sqrt(sum_sq / static_cast<double>(finite));
    EXPECT_NEAR(s.mean, mean, 1e-11 * std::fabs(mean));
    EXPECT_NEAR(s.rms, rms, 1e-11 * rms);
    const double range = std::log2(std::max(-lo, hi) / min_nz);
    EXPECT_NEAR(s.dynamic_range_log2, range, 1e-12 * range);
  }
}

TEST(NumericsStats, SmallTensorByHand) {
  // min -4, max 2, absmax 4, min nonzero 0.5; finite mean (2 - 4 + 0.5 + 0) / 4.
  const TensorStats s = stats_of({2.0, -4.0, 0.5, 0.0, kNaN, kInf});
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.finite(), 4);
  EXPECT_EQ(s.nonzero_finite(), 3);
  EXPECT_EQ(s.min, -4.0);
  EXPECT_EQ(s.max, 2.0);
  EXPECT_EQ(s.absmax, 4.0);
  EXPECT_EQ(s.min_nonzero_abs, 0.5);
  EXPECT_EQ(s.mean, -1.5 / 4.0);
  EXPECT_EQ(s.rms, std::sqrt(20.25 / 4.0));
  EXPECT_EQ(s.dynamic_range_log2, 3.0);
  EXPECT_EQ(s.histogram.at(1), 1);   // 2
  EXPECT_EQ(s.histogram.at(2), 1);   // -4
  EXPECT_EQ(s.histogram.at(-1), 1);  // 0.5
}

TEST(NumericsStats, EmptyAndNonFiniteTensorsLeaveValueStatisticsUndefined) {
  const TensorStats empty = compute_stats(Tensor::empty({0}));
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.tensors, 1);
  EXPECT_TRUE(std::isnan(empty.mean));
  const TensorStats bad = stats_of({kNaN, kInf});
  EXPECT_EQ(bad.count, 2);
  EXPECT_TRUE(std::isnan(bad.min));
  EXPECT_TRUE(std::isnan(bad.max));
  EXPECT_TRUE(std::isnan(bad.rms));
  const TensorStats zeros = stats_of({0.0, -0.0});
  EXPECT_EQ(zeros.absmax, 0.0);
  EXPECT_EQ(zeros.mean, 0.0);
  EXPECT_TRUE(std::isnan(zeros.min_nonzero_abs));
  EXPECT_TRUE(std::isnan(zeros.dynamic_range_log2));
}

TEST(NumericsStats, RejectsIntegerAndUndefinedTensors) {
  EXPECT_THROW(compute_stats(Tensor::from(std::vector<std::int64_t>{1, 2}, {2})),
               std::invalid_argument);
  EXPECT_THROW(compute_stats(Tensor()), std::invalid_argument);
}

// ---- aggregation over steps ----

void expect_same_counts_and_extremes(const TensorStats& a, const TensorStats& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_TRUE(a.histogram == b.histogram);
  EXPECT_TRUE(a.f16 == b.f16);
  EXPECT_TRUE(a.bf16 == b.bf16);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_EQ(a.absmax, b.absmax);
  EXPECT_EQ(a.min_nonzero_abs, b.min_nonzero_abs);
}

TEST(NumericsMerge, OverStepsEqualsStatsOfTheConcatenation) {
  const std::vector<double> a = random_values(70000, DType::f32, 1);
  const std::vector<double> b = random_values(1000, DType::f32, 2);
  const std::vector<double> c = {kNaN, kNaN};  // a step with no finite value
  std::vector<double> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());

  TensorStats merged;
  merge(merged, stats_of(c));
  merge(merged, stats_of(a));
  merge(merged, stats_of(b));
  const TensorStats whole = stats_of(all);
  EXPECT_EQ(merged.tensors, 3);
  expect_same_counts_and_extremes(merged, whole);
  EXPECT_EQ(merged.histogram.total(), static_cast<std::int64_t>(all.size()));
}

TEST(NumericsMerge, MomentsReweightExactly) {
  // Small integers: every sum is exact, so the merged moments equal those of the
  // concatenation bit for bit, and both equal the hand values.
  const std::vector<double> a = {1, 2, 3, 4};
  const std::vector<double> b = {-6, 8};
  TensorStats merged = stats_of(a);
  merge(merged, stats_of(b));
  EXPECT_EQ(merged.mean, 12.0 / 6.0);
  EXPECT_EQ(merged.rms, std::sqrt(130.0 / 6.0));
  EXPECT_EQ(merged.min, -6.0);
  EXPECT_EQ(merged.max, 8.0);
  EXPECT_EQ(merged.dynamic_range_log2, 3.0);
  const TensorStats whole = stats_of({1, 2, 3, 4, -6, 8});
  EXPECT_EQ(merged.mean, whole.mean);
  EXPECT_EQ(merged.rms, whole.rms);
}

// ---- thread-count independence ----

bool bit_equal(double x, double y) {
  return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

TEST(NumericsThreads, OneAndTwoThreadsGiveBitIdenticalStats) {
  const int saved = num_threads();
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 100.0);
  std::vector<double> v(400000);
  for (double& x : v) x = normal(rng);
  const Tensor t = Tensor::from(v, {400000});
  set_num_threads(1);
  const TensorStats one = compute_stats(t);
  const double swamp_one = swamped_fraction(t, t, DType::bf16);
  set_num_threads(2);
  const TensorStats two = compute_stats(t);
  const double swamp_two = swamped_fraction(t, t, DType::bf16);
  set_num_threads(saved);
  expect_same_counts_and_extremes(one, two);
  for (const auto member : {&TensorStats::sum, &TensorStats::sum_squares, &TensorStats::mean,
                            &TensorStats::rms, &TensorStats::dynamic_range_log2})
    EXPECT_TRUE(bit_equal(one.*member, two.*member));
  EXPECT_TRUE(bit_equal(swamp_one, swamp_two));
}

// ---- readiness ----

TEST(NumericsReadiness, FractionsOfAConstructedTensor) {
  // f16: overflow 70000, -1e5, 3e38; underflow 1e-9, 1e-40, 1e-45; subnormal 1e-6.
  // bf16: 3e38 is below its max; 1e-40 is a bf16 subnormal, 1e-45 (f32's 2^-149) is
  // below 2^-134 and underflows.
  const TensorStats s =
      stats_of({70000.0, -1e5, 1e-9, 1e-6, 1.0, 2.0, 0.0, 3e38, 1e-40, 1e-45});
  const Readiness r = readiness(s);
  EXPECT_DOUBLE_EQ(r.overflow_fraction_f16, 0.3);
  EXPECT_DOUBLE_EQ(r.underflow_fraction_f16, 0.3);
  EXPECT_DOUBLE_EQ(r.subnormal_fraction_f16, 0.1);
  EXPECT_DOUBLE_EQ(r.overflow_fraction_bf16, 0.0);
  EXPECT_DOUBLE_EQ(r.underflow_fraction_bf16, 0.1);
  EXPECT_DOUBLE_EQ(r.subnormal_fraction_bf16, 0.1);
  const Readiness none = readiness(TensorStats{});
  EXPECT_EQ(none.overflow_fraction_f16, 0.0);
}

// ---- update swamping ----

double swamped(double w, double dw, DType param, DType weight_dtype = DType::f32) {
  return swamped_fraction(Tensor::from(std::vector<double>{w}, {1}, weight_dtype),
                          Tensor::from(std::vector<double>{dw}, {1}), param);
}

TEST(NumericsSwamping, Bf16HandCases) {
  // bf16 near 1: ulp above 1 is 2^-7, below 1 it is 2^-8.
  EXPECT_EQ(swamped(1.0, 1e-3, DType::bf16), 1.0);
  EXPECT_EQ(swamped(1.0, 1e-2, DType::bf16), 0.0);
  EXPECT_EQ(swamped(1.0, std::ldexp(1.0, -8), DType::bf16), 1.0);  // tie, even is 1
  EXPECT_EQ(swamped(1.0, std::ldexp(1.0, -8) + std::ldexp(1.0, -20), DType::bf16), 0.0);
  EXPECT_EQ(swamped(1.0, -std::ldexp(1.0, -9), DType::bf16), 1.0);  // tie, even is 1
  EXPECT_EQ(swamped(1.0, -std::ldexp(1.0, -9) - std::ldexp(1.0, -20), DType::bf16), 0.0);
  // The weight is taken in the parameter's dtype: 1.001 is 1 in bf16.
  EXPECT_EQ(swamped(1.001, 1e-3, DType::bf16), 1.0);
}

TEST(NumericsSwamping, OtherDtypes) {
  EXPECT_EQ(swamped(1.0, 1e-8, DType::f32), 1.0);  // below 2^-24, half an f32 ulp
  EXPECT_EQ(swamped(1.0, 1e-7, DType::f32), 0.0);
  EXPECT_EQ(swamped(2048.0, 0.5, DType::f16), 1.0);  // f16 ulp at 2048 is 2
  EXPECT_EQ(swamped(2048.0, 1.5, DType::f16), 0.0);
  EXPECT_EQ(swamped(1.0, 1e-17, DType::f64, DType::f64), 1.0);  // below 2^-53
  EXPECT_EQ(swamped(1.0, 1e-15, DType::f64, DType::f64), 0.0);
}

TEST(NumericsSwamping, FractionOfNonzeroUpdates) {
  const std::int64_t n = 200000;
  std::vector<double> w(static_cast<std::size_t>(n), 1.0), dw(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < dw.size(); ++i) dw[i] = (i % 4 == 0) ? 1e-3 : (i % 4 == 1) ? 1e-2 : 0.0;
  EXPECT_EQ(swamped_fraction(Tensor::from(w, {n}, DType::bf16), Tensor::from(dw, {n}),
                             DType::bf16),
            0.5);
  EXPECT_EQ(swamped_fraction(Tensor::ones({3}), Tensor::zeros({3}), DType::bf16), 0.0);
  EXPECT_THROW(swamped_fraction(Tensor::ones({3}), Tensor::zeros({4}), DType::bf16),
               std::invalid_argument);
  EXPECT_THROW(swamped_fraction(Tensor::ones({3}), Tensor::zeros({3}), DType::i64),
               std::invalid_argument);
}

// ---- sampling ----

TEST(NumericsSampler, EveryNAmongTheFirstK) {
  const Sampler all;
  for (std::int64_t s = 0; s < 10; ++s) EXPECT_TRUE(all.take(s));
  EXPECT_FALSE(all.take(-1));
  const Sampler every3(3);
  EXPECT_TRUE(every3.take(0));
  EXPECT_FALSE(every3.take(1));
  EXPECT_FALSE(every3.take(2));
  EXPECT_TRUE(every3.take(3));
  EXPECT_TRUE(every3.take(3000));
  const Sampler first5(1, 5);
  EXPECT_TRUE(first5.take(4));
  EXPECT_FALSE(first5.take(5));
  const Sampler both(2, 5);
  std::vector<std::int64_t> taken;
  for (std::int64_t s = 0; s < 10; ++s)
    if (both.take(s)) taken.push_back(s);
  EXPECT_EQ(taken, (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_THROW(Sampler(0), std::invalid_argument);
}

TEST(NumericsTable, AggregatesSampledStepsByKey) {
  NumericsTable table;
  table.sampler = Sampler(2);
  const Tensor out = Tensor::from(std::vector<double>{70000.0, 1.0, 1e-9}, {3});
  const Tensor grad = Tensor::from(std::vector<double>{1e-9, -1e-9}, {2});
  int added = 0;
  for (std::int64_t step = 0; step < 6; ++step) {
    added += table.add("fc1.linear#3/output", out, step) ? 1 : 0;
    table.add("fc1.linear#3/grad", grad, step);
  }
  EXPECT_EQ(added, 3);
  ASSERT_EQ(table.stats.size(), 2u);
  const TensorStats& o = table.stats.at("fc1.linear#3/output");
  EXPECT_EQ(o.tensors, 3);
  EXPECT_EQ(o.count, 9);
  EXPECT_EQ(o.histogram.total(), 9);
  EXPECT_EQ(o.f16.overflow, 3);
  const TensorStats& g = table.stats.at("fc1.linear#3/grad");
  EXPECT_EQ(g.f16.underflow, 6);
  EXPECT_EQ(g.bf16.underflow, 0);
}

}  // namespace
}  // namespace ampcheck::inspector
