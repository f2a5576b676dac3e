// The local (shadow) error against truths known by construction: an op that computes in
// f32 and rounds once sits at the rounding floor; a K=4096 GEMM accumulated in f32 stays
// far below what fp16 accumulation would lose; error inherited from rounded inputs is
// not counted; worst() ordering; the recompute leaves batch_norm's running statistics
// alone; sampling every N steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "inspector/shadow.h"

namespace ampcheck::inspector {
namespace {

// f16 round-to-nearest-even of a finite double in the f16 normal and subnormal range,
// written independently of the engine's conversion: 11 significant bits, and no finer
// spacing than 2^-24.
double round_f16(double x) {
  if (x == 0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int ulp_exponent = std::max(e - 11, -24);
  return std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exponent)), ulp_exponent);
}

// ||a - b|| / ||b||
double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / n);
}

std::vector<double> rounded_f16(const std::vector<double>& v) {
  std::vector<double> r;
  for (double x : v) r.push_back(round_f16(x));
  return r;
}

class Attached {
 public:
  explicit Attached(Observer* o) : o_(o) { add_observer(o_); }
  ~Attached() { remove_observer(o_); }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  Observer* o_;
};

struct CountOps : Observer {
  int ends = 0;
  void on_op_end(const OpEvent&) override { ++ends; }
};

amp::Policy o3_f16() {
  amp::AmpOptions o;
  o.level = amp::Level::O3;
  o.dtype = DType::f16;
  return amp::Policy(o);
}

TEST(ShadowError, ExpUnderO3SitsAtTheRoundingFloor) {
  Generator gen(3);
  const Tensor x = Tensor::uniform({64, 32}, gen, -4.0, 4.0);  // f32: O3 casts it down
  const amp::Policy policy = o3_f16();
  ShadowError shadow;
  CountOps count;
  Tensor y;
  {
    const Attached a(&shadow), b(&count);
    const amp::Autocast on(&policy);
    y = exp(x);
  }
  // The cast and exp, and nothing from the recompute.
  EXPECT_EQ(count.ends, 2);
  EXPECT_EQ(shadow.casts_skipped(), 1);
  ASSERT_EQ(shadow.records().size(), 1u);
  const ShadowRecord r = shadow.records()[0];
  EXPECT_EQ(r.key(), "exp#0");
  EXPECT_EQ(r.dtype, DType::f16);
  EXPECT_EQ(r.count, 1);
  ASSERT_EQ(y.dtype(), DType::f16);

  // The exact result from the f16 inputs the op ran on, and its rounding, by hand.
  std::vector<double> exact;
  for (double v : x.to(DType::f16).to_f64()) exact.push_back(std::exp(v));
  const double floor = rel_error(rounded_f16(exact), exact);
  EXPECT_NEAR(r.floor_at_worst, floor, 1e-12 * floor);
  EXPECT_NEAR(r.worst_error, rel_error(y.to_f64(), exact), 1e-12 * floor);
  // The kernel rounds its f32 exp once: the floor, give or take an element whose f32
  // result fell on the other side of an f16 rounding boundary.
  EXPECT_NEAR(r.worst_times_floor(), 1.0, 0.02);
  EXPECT_GT(floor, 1e-4);  // 2^-11 / sqrt(3) for uniformly spread mantissas: not vacuous
}

TEST(ShadowError, ReluIsExactAndNonFiniteOutputsAreSkipped) {
  ShadowError shadow;
  const Attached a(&shadow);
  const Tensor x = Tensor::from(std::vector<double>{-1.5, 0.1, 3.3, -0.0, 7e-6}, {5}, DType::f16);
  relu(x);
  exp(Tensor::from(std::vector<double>{20.0, 1.0}, {2}, DType::f16));  // e^20 > 65504: Inf
  const auto records = shadow.records();
  ASSERT_EQ(records.size(), 2u);
  const ShadowRecord& r = records[0].op == Op::relu ? records[0] : records[1];
  const ShadowRecord& e = records[0].op == Op::relu ? records[1] : records[0];
  EXPECT_EQ(r.count, 1);
  EXPECT_EQ(r.worst_error, 0.0);
  EXPECT_EQ(r.floor_at_worst, 0.0);
  EXPECT_EQ(r.max_abs_error, 0.0);
  EXPECT_EQ(r.worst_times_floor(), 1.0);
  EXPECT_EQ(e.count, 0);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_EQ(shadow.nonfinite(), 1);
  EXPECT_EQ(shadow.measured(), 1);
  ASSERT_EQ(shadow.worst(10).size(), 1u);  // the unmeasured exp is not listed
  EXPECT_EQ(shadow.worst(10)[0].op, Op::relu);
}

TEST(ShadowError, LongGemmAccumulatesInF32NotF16) {
  constexpr std::int64_t M = 4, K = 4096, N = 4;
  Generator gen(17);
  const Tensor a = Tensor::uniform({M, K}, gen, 0.5, 1.5, DType::f16);
  const Tensor b = Tensor::uniform({K, N}, gen, 0.5, 1.5, DType::f16);
  ShadowError shadow;
  Tensor y;
  {
    const Attached at(&shadow);
    y = matmul(a, b);
  }
  ASSERT_EQ(y.dtype(), DType::f16);
  ASSERT_EQ(shadow.records().size(), 1u);
  const ShadowRecord r = shadow.records()[0];

  // Products of f16 values have at most 22 significant bits and the sums stay below
  // 2^13, so double sums them exactly; fp16 accumulation rounds every partial sum.
  const std::vector<double> av = a.to_f64(), bv = b.to_f64();
  std::vector<double> exact(M * N), f16_acc(M * N);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double s = 0, h = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = av[static_cast<std::size_t>(i * K + k)] * bv[static_cast<std::size_t>(k * N + j)];
        s += p;
        h = round_f16(h + p);
      }
      exact[static_cast<std::size_t>(i * N + j)] = s;
      f16_acc[static_cast<std::size_t>(i * N + j)] = h;
    }
  const double fp16_accumulation_error = rel_error(f16_acc, exact);
  EXPECT_NEAR(r.worst_error, rel_error(y.to_f64(), exact), 1e-12);
  // Deterministic bound for an f32 sum of positive terms rounded once to f16:
  // u16 + gamma_K (1 + u16), gamma_K = K u32 / (1 - K u32).
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  const double gamma = static_cast<double>(K) * u32 / (1 - static_cast<double>(K) * u32);
  EXPECT_LE(r.worst_error, u16 + gamma * (1 + u16));
  EXPECT_LT(r.worst_error, fp16_accumulation_error / 20);
  EXPECT_LT(r.worst_times_floor(), 1.5);
  RecordProperty("shadow_error", std::to_string(r.worst_error));
  RecordProperty("fp16_accumulation_error", std::to_string(fp16_accumulation_error));
}

TEST(ShadowError, InheritedRoundingIsNotCounted) {
  // 1 + 1e-4 .. 1 + 4e-4 are below half an f16 ulp above 1 (2^-11): O3's casts round them
  // all to 1, and sub(x, 1) is then exact on what it was given.
  const std::vector<double> xs = {1 + 1e-4, 1 + 2e-4, 1 + 3e-4, 1 + 4e-4};
  const Tensor x = Tensor::from(xs, {4});  // f32
  const Tensor one = Tensor::ones({4});
  const amp::Policy policy = o3_f16();
  ShadowError shadow;
  Tensor y;
  {
    const Attached a(&shadow);
    const amp::Autocast on(&policy);
    y = sub(x, one);
  }
  ASSERT_EQ(y.dtype(), DType::f16);
  EXPECT_EQ(shadow.casts_skipped(), 2);
  ASSERT_EQ(shadow.records().size(), 1u);
  const ShadowRecord r = shadow.records()[0];
  EXPECT_EQ(r.op, Op::sub);
  EXPECT_EQ(r.worst_error, 0.0);
  EXPECT_EQ(r.floor_at_worst, 0.0);

  // End to end, against f64 from the original f32 inputs: everything was lost.
  std::vector<double> end_to_end;
  for (double v : x.to_f64()) end_to_end.push_back(v - 1.0);
  EXPECT_DOUBLE_EQ(rel_error(y.to_f64(), end_to_end), 1.0);
}

TEST(ShadowError, WorstListsLargestFirst) {
  // y = 1 * s in f16: the error is that of rounding s, known in closed form.
  const std::vector<double> scalars = {1.0 / 3, 1 + 0.45 * std::ldexp(1.0, -10), 1.0, 0.3};
  const Tensor one = Tensor::ones({1}, DType::f16);
  ShadowError shadow;
  {
    const Attached a(&shadow);
    for (double s : scalars) mul(one, s);
  }
  std::vector<std::pair<double, std::int64_t>> expected;  // (error, occurrence)
  for (std::size_t i = 0; i < scalars.size(); ++i)
    expected.emplace_back(std::abs(round_f16(scalars[i]) - scalars[i]) / scalars[i],
                          static_cast<std::int64_t>(i));
  std::sort(expected.begin(), expected.end(), [](const auto& l, const auto& r) { return l.first > r.first; });
  ASSERT_GT(expected[0].first, expected[1].first);  // distinct, so the order is defined
  ASSERT_GT(expected[1].first, expected[2].first);
  ASSERT_GT(expected[2].first, expected[3].first);

  const auto all = shadow.worst(10);
  ASSERT_EQ(all.size(), 4u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].occurrence, expected[i].second) << i;
    EXPECT_NEAR(all[i].worst_error, expected[i].first, 1e-15) << i;
    EXPECT_EQ(all[i].key(), "mul_scalar#" + std::to_string(expected[i].second));
  }
  const auto top2 = shadow.worst(2);
  ASSERT_EQ(top2.size(), 2u);
  EXPECT_EQ(top2[0].occurrence, all[0].occurrence);
  EXPECT_EQ(top2[1].occurrence, all[1].occurrence);
  EXPECT_TRUE(shadow.worst(0).empty());
}

TEST(ShadowError, RecomputeLeavesBatchNormRunningStatsAlone) {
  Generator gen(5);
  const Tensor x = Tensor::randn({8, 3, 4, 4}, gen, DType::f16, 2.0, 3.0);
  const Tensor w = Tensor::from(std::vector<double>{1.0, 0.5, 2.0}, {3});
  const Tensor b = Tensor::from(std::vector<double>{0.0, 0.1, -0.2}, {3});
  // The same update without any observer: what the running statistics must become.
  Tensor mean_ref = Tensor::zeros({3}), var_ref = Tensor::ones({3});
  batch_norm(x, w, b, mean_ref, var_ref, true);

  Tensor mean = Tensor::zeros({3}), var = Tensor::ones({3});
  ShadowError shadow;
  Tensor y;
  {
    const Attached a(&shadow);
    y = batch_norm(x, w, b, mean, var, true);
  }
  EXPECT_EQ(mean.to_f64(), mean_ref.to_f64());
  EXPECT_EQ(var.to_f64(), var_ref.to_f64());
  EXPECT_NE(mean.to_f64(), Tensor::zeros({3}).to_f64());  // the one update did happen
  ASSERT_EQ(y.dtype(), DType::f16);
  ASSERT_EQ(shadow.records().size(), 1u);
  const ShadowRecord r = shadow.records()[0];
  EXPECT_EQ(r.op, Op::batch_norm);
  EXPECT_EQ(r.count, 1);
  EXPECT_NEAR(r.worst_times_floor(), 1.0, 0.05);  // f32 statistics, one rounding
}

TEST(ShadowError, SamplesEveryNthStepAndKeysPerStep) {
  EXPECT_THROW(ShadowError(ShadowOptions{0}), std::invalid_argument);
  const Tensor x = Tensor::from(std::vector<double>{0.1, 0.7, -2.0}, {3}, DType::f16);
  ShadowError every(ShadowOptions{1}), third(ShadowOptions{3});
  {
    const Attached a(&every), b(&third);
    for (int i = 0; i < 6; ++i) {
      begin_step();
      exp(x);
      end_step();
    }
  }
  // One op per step: occurrences restart each step, so one record either way.
  ASSERT_EQ(every.records().size(), 1u);
  EXPECT_EQ(every.records()[0].key(), "exp#0");
  EXPECT_EQ(every.records()[0].count, 6);
  ASSERT_EQ(third.records().size(), 1u);
  EXPECT_EQ(third.records()[0].count, 2);  // any 6 consecutive steps hold 2 multiples of 3
  EXPECT_EQ(third.measured(), 2);
  EXPECT_EQ(third.records()[0].worst_step % 3, 0);
  // The same inputs each step: the same error each time.
  EXPECT_DOUBLE_EQ(every.records()[0].mean_error, every.records()[0].worst_error);
}

// Range loss against IEEE facts: fp16's smallest subnormal is 2^-24, so 2^-25 is the tie
// that rounds to even 0 and anything above it rounds up; fp16's largest finite value is
// 65504 and 65520 (max + half an ulp) is the tie that rounds to Inf; bfloat16's smallest
// subnormal is 2^-133 and its overflow threshold 2^128 - 2^119, below fp32's largest
// (2^128 - 2^104).
TEST(ShadowRangeLoss, ElementsLostToTheDtypeButHeldByFp32) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(range_loss_of(0, std::ldexp(1.0, -25), DType::f16), RangeLossKind::underflow);
  EXPECT_EQ(range_loss_of(0, -std::ldexp(1.0, -30), DType::f16), RangeLossKind::underflow);
  // Above the tie fp16 holds 2^-24: a stored 0 there is the compute's doing, not the range's.
  EXPECT_FALSE(range_loss_of(0, std::ldexp(1.0, -25) * (1 + std::ldexp(1.0, -20)), DType::f16));
  EXPECT_FALSE(range_loss_of(0, 0, DType::f16));       // relu's 0: exact
  EXPECT_FALSE(range_loss_of(0, 1e-46, DType::f16));   // below fp32's 2^-149 too: fp32 loses it as well
  EXPECT_EQ(range_loss_of(inf, 65520, DType::f16), RangeLossKind::overflow);
  EXPECT_EQ(range_loss_of(-inf, -1e5, DType::f16), RangeLossKind::overflow);
  EXPECT_FALSE(range_loss_of(65504, 65519, DType::f16));  // rounds to max, not Inf
  EXPECT_FALSE(range_loss_of(inf, 1e39, DType::f16));     // beyond fp32's range as well
  EXPECT_FALSE(range_loss_of(inf, inf, DType::f16));      // the exact result is Inf
  EXPECT_EQ(range_loss_of(0, std::ldexp(1.0, -134), DType::bf16), RangeLossKind::underflow);
  EXPECT_FALSE(range_loss_of(0, std::ldexp(1.0, -133), DType::bf16));
  EXPECT_EQ(range_loss_of(inf, 3.4e38, DType::bf16), RangeLossKind::overflow);
  EXPECT_FALSE(range_loss_of(inf, 3.38e38, DType::bf16));

  const RangeLoss r = range_loss({0, 1, 0, inf, 0}, {0, 1, 1e-8, 7e4, 2e-9}, DType::f16);
  EXPECT_EQ(r.underflow, 2);
  EXPECT_EQ(r.first_underflow, 2);
  EXPECT_EQ(r.underflow_value, 1e-8);
  EXPECT_EQ(r.overflow, 1);
  EXPECT_EQ(r.first_overflow, 3);
  EXPECT_EQ(r.overflow_value, 7e4);
}

TEST(ShadowRangeLoss, RecordedPerOpInstanceWithTheFirstValueLost) {
  ShadowError shadow;
  const Attached a(&shadow);
  // sigmoid(-20) = 2.06e-9 and sigmoid(-30) = 9.4e-14 are under 2^-25; 0.5 and 0.88 are not.
  sigmoid(Tensor::from(std::vector<double>{0, -20, 2, -30}, {4}, DType::f16));
  // 3 * 30000 = 90000 > 65520; 1 * 30000 fits.
  mul(Tensor::from(std::vector<double>{1, 3}, {2}, DType::f16), 30000.0);
  relu(Tensor::from(std::vector<double>{-1, 2}, {2}, DType::f16));
  const auto records = shadow.records();
  ASSERT_EQ(records.size(), 3u);
  for (const ShadowRecord& r : records) {
    if (r.op == Op::sigmoid) {
      EXPECT_EQ(r.underflow, 2);
      EXPECT_EQ(r.overflow, 0);
      EXPECT_EQ(r.first_loss_kind, RangeLossKind::underflow);
      const double exact = 1.0 / (1.0 + std::exp(20.0));
      EXPECT_NEAR(r.first_loss_value, exact, 1e-12 * exact);
      EXPECT_EQ(r.count, 1);  // finite: its error is measured too
    } else if (r.op == Op::mul_scalar) {
      EXPECT_EQ(r.underflow, 0);
      EXPECT_EQ(r.overflow, 1);
      EXPECT_EQ(r.first_loss_kind, RangeLossKind::overflow);
      EXPECT_EQ(r.first_loss_value, 90000.0);
      EXPECT_EQ(r.nonfinite, 1);
    } else {
      EXPECT_EQ(r.op, Op::relu);
      EXPECT_EQ(r.underflow + r.overflow, 0);
    }
  }
}

}  // namespace
}  // namespace ampcheck::inspector
