// The AMP run against its fp32 twin (inspector/twin.h), on loss curves written here: the
// expected step of each departure worked out by hand below from the definition (trailing
// means over a tenth of the steps; the gap above the other seeds' spread to the end).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "inspector/twin.h"

namespace ampcheck::inspector {
namespace {

// fp32 of the AMP run's seed: 10 - 0.1 t over 20 steps (t from 1).
std::vector<double> base_curve() {
  std::vector<double> v;
  for (int t = 1; t <= 20; ++t) v.push_back(10 - 0.1 * t);
  return v;
}
std::vector<double> shifted(std::vector<double> v, double by) {
  for (double& x : v) x += by;
  return v;
}
std::vector<reports::TwinRun> three_seeds() {
  return {{0, base_curve()}, {1, shifted(base_curve(), 0.2)}, {2, shifted(base_curve(), -0.2)}};
}

TEST(Twin, ARunThatTracksItsTwinCloserThanAnotherSeedStaysWithinTheNoise) {
  const reports::Twin t = compare_with_twin("python train.py", 0, shifted(base_curve(), 0.01), "healthy", three_seeds());
  EXPECT_EQ(t.verdict, "within_noise") << t.verdict_text;
  EXPECT_EQ(t.window, 2);  // 20 steps / 10
  ASSERT_EQ(t.gap.size(), 20u);
  EXPECT_NEAR(t.gap.back(), 0.01, 1e-12);
  EXPECT_NEAR(t.noise.back(), 0.2, 1e-12);
  EXPECT_FALSE(t.departs_at.has_value());
}

TEST(Twin, AGapThatGrowsPastTheSeedsSpreadAndStaysDepartsWhereItPassedIt) {
  // AMP = fp32 until step 9, then 0.1 (t - 9) above it: raw gaps 0.1, 0.2, 0.3, ... from
  // step 10; trailing means over 2 steps: 0.05 at 10, 0.15 at 11, 0.25 at 12, 0.35 at 13 >
  // 1.5 x 0.2 (the margin over the seeds' spread), and above it to the end: the departure
  // starts at step 13.
  std::vector<double> amp = base_curve();
  for (int t = 10; t <= 20; ++t) amp[t - 1] += 0.1 * (t - 9);
  const reports::Twin t = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds());
  EXPECT_EQ(t.verdict, "departs") << t.verdict_text;
  ASSERT_TRUE(t.departs_at.has_value());
  EXPECT_EQ(*t.departs_at, 13);
  EXPECT_NE(t.verdict_text.find("from step 13"), std::string::npos) << t.verdict_text;
  // At the last step: raw gaps 1.0 and 1.1, mean 1.05, against a spread of 0.2: 5.2x.
  EXPECT_NE(t.verdict_text.find("5.2x"), std::string::npos) << t.verdict_text;
}

TEST(Twin, ARunThatIsOnlyLikeAnotherSeedIsNotCalledDeparted) {
  // An AMP run as far from its twin as one more seed would be (1.2x the farthest other
  // seed's 0.2, for the whole run): the farthest of the runs, but within the 1.5x margin.
  const reports::Twin t = compare_with_twin("python train.py", 0, shifted(base_curve(), 0.24), "healthy", three_seeds());
  EXPECT_EQ(t.verdict, "within_noise") << t.verdict_text;
  EXPECT_FALSE(t.departs_at.has_value());
}

TEST(Twin, AGapThatClosesAgainIsTheNoiseItLooksLike) {
  std::vector<double> amp = base_curve();
  for (int t = 5; t <= 8; ++t) amp[t - 1] += 1.0;  // away for four steps, back after
  const reports::Twin t = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds());
  EXPECT_EQ(t.verdict, "within_noise") << t.verdict_text;
  EXPECT_NE(t.verdict_text.find("came back"), std::string::npos) << t.verdict_text;
}

TEST(Twin, ALossTheAmpRunLostDepartsAtThatStep) {
  std::vector<double> amp = base_curve();
  amp[6] = std::numeric_limits<double>::quiet_NaN();
  amp[7] = std::numeric_limits<double>::infinity();
  const reports::Twin t = compare_with_twin("python train.py", 0, amp, "failed", three_seeds());
  EXPECT_EQ(t.verdict, "departs");
  ASSERT_TRUE(t.departs_at.has_value());
  EXPECT_EQ(*t.departs_at, 7);
  EXPECT_EQ(t.gap.size(), 6u);  // the steps before it
}

TEST(Twin, OneFp32RunIsNoYardstickAndSaysHowToGetOne) {
  const reports::Twin t =
      compare_with_twin("python train.py", 0, shifted(base_curve(), 0.5), "healthy", {{0, base_curve()}});
  EXPECT_EQ(t.verdict, "no_yardstick");
  EXPECT_TRUE(t.noise.empty());
  EXPECT_NE(t.verdict_text.find("--seeds 2"), std::string::npos) << t.verdict_text;
}

TwinEvidence evidence(std::vector<reports::Swamping> swamping) {
  TwinEvidence e;
  e.swamping = std::move(swamping);
  return e;
}

TEST(Twin, ADepartureIsBornWhereAParametersUpdatesWereLostToRounding) {
  std::vector<double> amp = base_curve();
  for (int t = 10; t <= 20; ++t) amp[t - 1] += 0.1 * (t - 9);
  // 0.weight lost 83% of its moving elements' updates, 2.bias 11% (under the quarter named).
  const std::vector<reports::Swamping> swamping = {{"0.weight", 9, 0.83}, {"2.bias", 9, 0.11}};
  const reports::Twin t = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), evidence(swamping));
  EXPECT_EQ(t.verdict, "departs");
  EXPECT_NE(t.cause.find("0.weight (83% over 9 update(s))"), std::string::npos) << t.cause;
  EXPECT_EQ(t.cause.find("2.bias"), std::string::npos) << t.cause;
  EXPECT_NE(t.cause.find("fp32 master weights"), std::string::npos) << t.cause;
  EXPECT_NE(t.verdict_text.find(t.cause), std::string::npos);
  // Adam's moments kept in bf16 beside fp32 weights: the state is named, and its cure.
  const reports::Twin moments = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(),
                                                  evidence({{"0.weight:exp_avg_sq", 20, 0.97}}));
  EXPECT_NE(moments.cause.find("0.weight:exp_avg_sq (97% over 20 update(s))"), std::string::npos) << moments.cause;
  EXPECT_NE(moments.cause.find("Keep the optimizer's state in fp32"), std::string::npos) << moments.cause;
  EXPECT_EQ(moments.cause.find("master weights"), std::string::npos) << moments.cause;
  // Nothing named where nothing lost a quarter: said, with the search that looks further.
  const reports::Twin none =
      compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), evidence({{"2.bias", 9, 0.11}}));
  EXPECT_TRUE(none.cause.empty());
  EXPECT_NE(none.verdict_text.find("--loss-tolerance"), std::string::npos) << none.verdict_text;
  // A run within the noise names no cause, whatever rounded.
  const reports::Twin healthy =
      compare_with_twin("python train.py", 0, shifted(base_curve(), 0.01), "healthy", three_seeds(), evidence(swamping));
  EXPECT_TRUE(healthy.cause.empty());
}

TEST(Twin, TheCausesComeInTheOrderTheirCureIsCheapestWithTheirFigures) {
  std::vector<double> amp = base_curve();
  for (int t = 10; t <= 20; ++t) amp[t - 1] += 0.1 * (t - 9);
  // The loss in bfloat16 alone: named with its ops and the cure in PyTorch's words.
  inspector::TwinEvidence loss;
  loss.loss_ops = {"log_softmax", "nll_loss_forward"};
  loss.loss_dtype = "bfloat16";
  const reports::Twin l = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), loss);
  EXPECT_EQ(l.cause.find("born in the loss: it was computed in bfloat16 (log_softmax, nll_loss_forward)"), 0u)
      << l.cause;
  EXPECT_NE(l.cause.find("F.cross_entropy(logits.float(), targets)"), std::string::npos) << l.cause;
  // An op of the forward where the difference grows: its output's and its inputs' figures.
  // A LayerNorm in fp32 over a float16 linear's outputs: the cure is where its input was made.
  inspector::TwinEvidence op;
  op.beside_twin = {{"lin1/linear#0", "float16", 0.0001, 0.0005, ""},
                    {"norm/layer_norm#0", "float32", 0.0005, 0.5, "lin1/linear#0"},
                    {"head/linear#0", "float16", 0.5, 0.502, "norm/layer_norm#0"}};
  const reports::Twin o = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), op);
  EXPECT_NE(o.cause.find("born in the forward at norm/layer_norm#0"), std::string::npos) << o.cause;
  EXPECT_NE(o.cause.find("its output is 50% from the fp32 twin's where its inputs were at most 0.05%"),
            std::string::npos)
      << o.cause;
  EXPECT_NE(o.cause.find("keep_fp32(model, modules=['lin1'])"), std::string::npos) << o.cause;
  // An op that ran in 16 bits and added the difference itself: kept in fp32 itself.
  op.beside_twin = {{"attn/softmax#0", "bfloat16", 0.002, 0.3, "attn/matmul#0", 0.29}};
  EXPECT_NE(compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), op)
                .cause.find("keep_fp32(model, modules=['attn'])"),
            std::string::npos);
  // A LayerNorm that ran in float16 (CPU autocast's policy) but computes as it should: its own
  // rounding is small, what it adds is its float16 input's rounding made large.
  op.beside_twin = {{"norm/layer_norm#0", "float16", 0.0001, 0.48, "lin1/linear#0", 0.0004}};
  EXPECT_NE(compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), op)
                .cause.find("keep_fp32(model, modules=['lin1'])"),
            std::string::npos);
  // Under kBornNamed added (inherited, or rounding alone): no op named.
  op.beside_twin = {{"head/linear#0", "float16", 0.5, 0.502, "norm/layer_norm#0"}};
  EXPECT_TRUE(compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), op).cause.empty());
  // All at once: the state first (weights, then moments), the loss, then the op.
  inspector::TwinEvidence all;
  all.beside_twin = {{"norm/layer_norm#0", "float32", 0.0005, 0.5, "lin1/linear#0"}};
  all.swamping = {{"0.weight:exp_avg_sq", 20, 0.97}, {"0.weight", 20, 0.5}};
  all.loss_ops = loss.loss_ops;
  all.loss_dtype = "bfloat16";
  const std::string c = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds(), all).cause;
  const std::size_t weights = c.find("born in the weights"), state = c.find("born in the optimizer's state"),
                    in_loss = c.find("born in the loss"), forward = c.find("born in the forward");
  EXPECT_EQ(weights, 0u) << c;
  EXPECT_LT(weights, state);
  EXPECT_LT(state, in_loss);
  EXPECT_LT(in_loss, forward);
  EXPECT_NE(forward, std::string::npos) << c;
}

TEST(Twin, AModelFilesBirthIsCuredByItsOpTypeOnTheBlackList) {
  const TwinDifference amplified{"norm/layer_norm#0", "float32", 0.0003, 0.2, "shift/add_scalar#0", 1e-7};
  const std::string m = forward_birth_text(amplified, "O0's", BirthOf::model);
  EXPECT_NE(m.find("born in the forward at norm/layer_norm#0"), std::string::npos) << m;
  EXPECT_NE(m.find("its output is 20% from O0's where its inputs were at most 0.03% from theirs"), std::string::npos)
      << m;
  EXPECT_NE(m.find("(--black add_scalar)"), std::string::npos) << m;
  EXPECT_EQ(m.find("keep_fp32"), std::string::npos) << m;
  // Outside every module a script's cure names the op type.
  const TwinDifference own{"/softmax#0", "bfloat16", 0.001, 0.3, "/matmul#0", 0.29};
  EXPECT_NE(forward_birth_text(own, "the fp32 twin's", BirthOf::script).find("keep_fp32(model, ops=['softmax'])"),
            std::string::npos);
}

TEST(Twin, TheLossIsInLowPrecisionWhereALossOpRanThere) {
  auto op = [](std::string type, std::string module, std::int64_t bf16, std::int64_t fp32) {
    reports::OpInstance o;
    o.name = module + "/" + type + "#0";
    o.type = std::move(type);
    o.module = std::move(module);
    o.phase = "forward";
    o.kernel_dtypes.bf16 = bf16;
    o.kernel_dtypes.fp32 = fp32;
    return o;
  };
  // F.cross_entropy(logits.bfloat16(), y) as it runs: log_softmax, then nll_loss.
  EXPECT_EQ(inspector::loss_ops_in_low_precision(
                {op("linear", "2", 11, 0), op("log_softmax", "", 11, 0), op("nll_loss_forward", "", 11, 0)}),
            (std::vector<std::string>{"log_softmax", "nll_loss_forward"}));
  // A log_softmax the model ends with, the loss (mse) in fp32: no loss in low precision.
  EXPECT_TRUE(inspector::loss_ops_in_low_precision({op("log_softmax", "head", 11, 0), op("mse_loss", "", 0, 11)})
                  .empty());
  EXPECT_EQ(inspector::loss_ops_in_low_precision({op("mse_loss", "", 5, 0)}), (std::vector<std::string>{"mse_loss"}));
}

TEST(Twin, TheStepsComparedAreThoseBothRan) {
  std::vector<double> amp = base_curve();
  amp.resize(12);
  const reports::Twin t = compare_with_twin("python train.py", 0, amp, "healthy", three_seeds());
  EXPECT_EQ(t.gap.size(), 12u);
  EXPECT_EQ(t.noise.size(), 12u);
  EXPECT_EQ(t.window, 1);
}

TEST(WhereBorn, OpsRankByTheirOwnErrorAndTheShareIsOwnOverOutput) {
  // Written from the definition: ranked by own error, share = own / output capped at 1, an op
  // whose own error was not measured (0) or not finite left out.
  const std::vector<reports::CompareBirth> b = where_born(
      "O2", {{"a/linear#0", 1e-3, 4e-3}, {"b/softmax#0", 5e-3, 5e-3}, {"c/relu#0", 0.0, 1e-2},
             {"d/sum#0", std::numeric_limits<double>::infinity(), 1.0}, {"e/exp#0", 2e-3, 1e-3}},
      3);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].name, "b/softmax#0");
  EXPECT_DOUBLE_EQ(b[0].share, 1.0);
  EXPECT_EQ(b[1].name, "e/exp#0");
  EXPECT_DOUBLE_EQ(b[1].share, 1.0);  // 2e-3 / 1e-3, capped
  EXPECT_EQ(b[2].name, "a/linear#0");
  EXPECT_DOUBLE_EQ(b[2].share, 0.25);
  for (const reports::CompareBirth& x : b) EXPECT_EQ(x.level, "O2");
}

}  // namespace
}  // namespace ampcheck::inspector
