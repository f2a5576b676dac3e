// The text summary (reports/text.h) of an interrupted report: how far the run got, in
// the words a person looks for, and no claim about the steps not run.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reports/text.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ReportText, CompleteRunSaysNothingOfInterruption) {
  const std::string text = to_text(testing::sample_report(false, false));
  EXPECT_FALSE(has(text, "interrupted")) << text;
}

// One failure per update (a static scale skipping every step) is one line with a count.
TEST(ReportText, FailuresOfOneKindAreOneLine) {
  Report r = testing::sample_report(false, false);
  r.nonfinite.failures.clear();
  for (std::int64_t step = 1; step <= 30; ++step)
    r.nonfinite.failures.push_back({"gradient_not_absorbed", step, "step skipped but the scale did not react"});
  r.nonfinite.failures.push_back({"skipped_fraction", 30, "30 of 30 updates skipped (1 > 0.05)"});
  const std::string text = to_text(r);
  EXPECT_TRUE(has(text, "failure: gradient_not_absorbed at step 1: step skipped but the scale did not react; and 29 "
                        "more, the last at step 30\n"))
      << text;
  EXPECT_FALSE(has(text, "gradient_not_absorbed at step 2")) << text;
  EXPECT_TRUE(has(text, "failure: skipped_fraction at step 30: 30 of 30 updates skipped (1 > 0.05)\n")) << text;
}

// A recorded run (ampcheck record) names its framework and script, says how the script
// failed apart from the run's verdict, and an accuracy it never measured as such.
TEST(ReportText, RecordedRunNamesFrameworkScriptAndItsFailure) {
  Report r = testing::sample_report(false, false);
  r.run.command = "record";
  r.run.framework = "pytorch";
  r.run.framework_version = "2.15.0";
  r.run.script = "train.py";
  r.run.script_args = std::vector<std::string>{"--steps", "5", "a b"};
  r.summary.accuracy = std::numeric_limits<double>::quiet_NaN();
  std::string text = to_text(r);
  EXPECT_TRUE(has(text, "\n  recorded in PyTorch 2.15.0 from train.py --steps 5 'a b'\n")) << text;
  EXPECT_TRUE(has(text, "training accuracy not measured")) << text;
  EXPECT_FALSE(has(text, "the script failed")) << text;

  r.run.script_outcome = ScriptOutcome{1, "RuntimeError: boom"};
  text = to_text(r);
  EXPECT_TRUE(has(text, fmt::format("  the script failed: exit code 1, RuntimeError: boom (the report holds the {} steps "
                                    "it ran)\n",
                                    r.steps.size())))
      << text;
  r.run.script_outcome = ScriptOutcome{0, ""};  // ended normally: nothing to say
  EXPECT_FALSE(has(to_text(r), "the script failed"));
  EXPECT_EQ(recorded_text(testing::sample_report(false, false).run), "");  // an engine run
}

TEST(ReportText, InterruptedRunSaysHowFarUnderTheSettings) {
  Report r = testing::sample_report(false, false);
  r.run.steps = 10;
  r.interrupted = Interruption{"SIGINT", 4, 10, 0};
  const std::string text = to_text(r);
  // Right under the settings line, before the numbers it qualifies.
  const std::size_t settings = text.find("10 steps, batch 60");
  const std::size_t banner = text.find("\n  interrupted after 4 of 10 steps, by SIGINT: everything below covers "
                                       "those steps only\n");
  const std::size_t loss = text.find("  loss ");
  ASSERT_NE(settings, std::string::npos) << text;
  ASSERT_NE(banner, std::string::npos) << text;
  ASSERT_NE(loss, std::string::npos) << text;
  EXPECT_LT(settings, banner);
  EXPECT_LT(banner, loss);
  EXPECT_TRUE(has(text, "skipped steps 1 of 4")) << text;  // of the steps run

  r.interrupted->signal = "";  // stopped by an embedding program, not a signal
  EXPECT_TRUE(has(to_text(r), "\n  interrupted after 4 of 10 steps: everything below")) << to_text(r);
}

TEST(ReportText, InterruptedBisectClaimsNoFix) {
  Report r = testing::sample_report(true, false);
  r.bisect->found = false;
  r.bisect->culprits.clear();
  const std::string complete = to_text(r);
  EXPECT_TRUE(has(complete, "No black list made the run healthy.")) << complete;
  r.interrupted = Interruption{"SIGTERM", 2, 4, 3};
  const std::string text = to_text(r);
  EXPECT_TRUE(has(text, "bisect-nan run 3 was interrupted after 2 of 4 steps, by SIGTERM: the search did not "
                        "finish; the run as configured and the trials listed are complete"))
      << text;
  EXPECT_TRUE(has(text, "The search was interrupted before it ended: no fix is claimed.")) << text;
  EXPECT_FALSE(has(text, "No black list made the run healthy.")) << text;
}

TEST(ReportText, SmallLossesKeepTheirDigits) {
  Report r = testing::sample_report(false, false);
  r.summary.initial_loss = 1.0986;  // four decimals show five digits
  r.summary.final_loss = 1.09e-06;  // a loss weighted by 1e-6: 0.0000 would hide it
  const std::string text = to_text(r);
  EXPECT_TRUE(has(text, "loss 1.0986 -> 1.09e-06,")) << text;
  r.summary.final_loss = 0.015;
  EXPECT_TRUE(has(to_text(r), "loss 1.0986 -> 0.015,")) << to_text(r);
  r.summary.final_loss = 0;
  EXPECT_TRUE(has(to_text(r), "loss 1.0986 -> 0.0000,")) << to_text(r);
}

TEST(ReportText, EveryProducerIsListedWithWhatLowPrecisionLost) {
  const std::string text = to_text(testing::sample_report(false, false));
  EXPECT_TRUE(has(text, "Non-finite values: first produced by linear in module 'fc1', forward, step 0: output 12 +Inf\n"))
      << text;
  EXPECT_TRUE(has(text, "  linear in 'fc1' produced +Inf: its result 70000 overflowed float16 (largest finite "
                        "65504), which fp32 holds (12 values, step 0)\n"))
      << text;
  EXPECT_TRUE(has(text, "  also produced by log in module 'head', forward, step 2: output 5 -Inf\n")) << text;
  EXPECT_TRUE(has(text, "    log in 'head' produced -Inf <- its input 0 came from sigmoid in 'gate', which flushed "
                        "3e-09 to 0 in float16 (smallest subnormal 5.96e-08; 5 values, step 2)\n"))
      << text;
  EXPECT_TRUE(has(text, "  intended, not a failure: masked_fill in module 'attn' wrote 96 -Inf in 4 calls; -inf mask: "
                        "softmax maps it to 0\n"))
      << text;
}

TEST(ReportText, RangeLossAndProbingAreShown) {
  Report r = testing::sample_report(false, false);
  r.run.amp.semantics = "pytorch";
  r.run.amp.loss_scaling = "pytorch";
  const std::string text = to_text(r);
  EXPECT_TRUE(has(text, "Values lost to the low-precision range")) << text;
  EXPECT_TRUE(has(text, "70000 -> +Inf at step 0")) << text;
  EXPECT_TRUE(has(text, "  updates 1-1: the scaler probing down from its initial scale; 1 of 4 steps were skipped while "
                        "the loss scaler came down from 2^15 to 2^14: start it lower (PyTorch "
                        "GradScaler(init_scale=16384))\n"))
      << text;
}

// 1.4: a GPU run's kernels: the tensor-core share per op type and each finding, a line each.
TEST(ReportText, GpuKernelsSectionShowsTheShareAndEveryFinding) {
  const std::string text = to_text(testing::gpu_report(), 8);
  EXPECT_NE(text.find("GPU kernels (CUPTI): 60 kernels, 8 copies, 2 memsets; 48 on op calls, 12 the inspector's own, "
                      "10 outside any op"),
            std::string::npos)
      << text;
  // 40 of the 220 us of matrix work ran on tensor cores.
  EXPECT_NE(text.find("0.220 ms of it matrix work, 18.2% of that on tensor cores"), std::string::npos) << text;
  EXPECT_NE(text.find("kernel check: 3 op instances' GEMMs and convolutions checked against the AMP policy; 1 warning "
                      "(1 kernels' names do not say their precision)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  warning: stem.conv/conv2d#0 (forward): the policy ran it in float16"), std::string::npos);
  EXPECT_NE(text.find("  note: dw/conv2d#0 (forward)"), std::string::npos);
  EXPECT_LT(text.find("GPU kernels (CUPTI)"), text.find("verdict: "));
  // A CPU report has no such section; a GPU run CUPTI could not trace says why.
  EXPECT_EQ(to_text(testing::sample_report(false, false), 8).find("GPU kernels"), std::string::npos);
  Report untraced = testing::sample_report(false, false);
  untraced.kernels.emplace().not_traced = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
  EXPECT_NE(to_text(untraced, 8).find("GPU kernels: not traced: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), std::string::npos);
}

}  // namespace
}  // namespace ampcheck::reports

namespace ampcheck::reports {
namespace {

// bisect-nan's found fix in words: the cures a script's search tries said as the cures they
// are (not "run master weights in fp32"), the ops as before.
TEST(ReportText, AFixSaysEachCureInItsOwnWordsAndTheOpsAsOps) {
  EXPECT_EQ(fix_text({"square"}, false), "run square in fp32");
  EXPECT_EQ(fix_text({"l1", "l2"}, true), "keep l1, l2 out of fp8");
  EXPECT_EQ(fix_text({std::string(kCureMasterWeights)}, false), "keep fp32 master weights");
  EXPECT_EQ(fix_text({std::string(kCureOptimizerState), std::string(kCureTheLoss), "2", "fc1"}, false),
            "keep the optimizer's state in fp32, compute the loss in fp32 and run 2, fc1 in fp32");
}

}  // namespace
}  // namespace ampcheck::reports
