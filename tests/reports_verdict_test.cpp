// The verdict a report ends with (cli/run_command.h set_verdict) and the cures it names
// (reports/advice.h): scaler probing is healthy with a note in the words of the run's
// framework, gradient underflow has its own verdict, intended -Inf is said to be so.
// The scales in the expectations are powers of two worked out here by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "reports/advice.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// A healthy O1 run of 200 steps whose first 23 updates probed from 2^24 down to 2^13.
Report probing_report(const std::string& semantics, const std::string& scaler) {
  Report r = testing::sample_report(false, false);
  r.run.level = "O1";
  r.run.amp.semantics = semantics;
  r.run.amp.loss_scaling = scaler;
  r.nonfinite = NonFinite{};
  r.nonfinite.updates = 200;
  r.nonfinite.skipped = 23;
  r.nonfinite.absorbed = 23;
  r.nonfinite.probing = ScalerProbing{1, 23, 23, 16777216.0, 8192.0, 8192.0, true};
  r.summary.skipped_steps = 23;
  return r;
}

TEST(ReportVerdict, ScalerProbingIsHealthyWithTheCureInTheRunsFramework) {
  Report r = probing_report("pytorch", "pytorch");
  cli::set_verdict(r, true, false, "");
  EXPECT_EQ(r.summary.verdict, "healthy");
  EXPECT_TRUE(has(r.summary.verdict_text,
                  "; 23 of 200 steps were skipped while the loss scaler came down from 2^24 to 2^13: start it lower "
                  "(PyTorch GradScaler(init_scale=8192))"))
      << r.summary.verdict_text;

  r = probing_report("paddle", "paddle");
  cli::set_verdict(r, true, false, "");
  EXPECT_TRUE(has(r.summary.verdict_text, "(Paddle GradScaler(init_loss_scaling=8192), or init_loss_scaling: 8192 in amp_configs)"))
      << r.summary.verdict_text;

  r = probing_report("deepspeed", "deepspeed");
  cli::set_verdict(r, true, false, "");
  EXPECT_TRUE(has(r.summary.verdict_text, "(DeepSpeed \"fp16\": {\"initial_scale_power\": 13})")) << r.summary.verdict_text;

  // ampcheck's own form: its key, and the frameworks' since the model's is not known.
  r = probing_report("ampcheck", "pytorch");
  cli::set_verdict(r, true, false, "");
  EXPECT_TRUE(has(r.summary.verdict_text,
                  "(ampcheck config \"loss_scaling\": {\"behaviour\": \"pytorch\", \"init_scale\": 8192}; PyTorch "
                  "GradScaler(init_scale=8192), Paddle init_loss_scaling=8192, DeepSpeed initial_scale_power=13)"))
      << r.summary.verdict_text;

  // Later skips took the scale lower still: start there.
  r.nonfinite.probing->suggested_scale = 2048;
  cli::set_verdict(r, true, false, "");
  EXPECT_TRUE(has(r.summary.verdict_text, "came down from 2^24 to 2^13 (later 2^11): start it lower (ampcheck config "
                                          "\"loss_scaling\": {\"behaviour\": \"pytorch\", \"init_scale\": 2048};"))
      << r.summary.verdict_text;

  // Probing within the skipped fraction needs no note: the verdict counts the skips.
  r.nonfinite.probing->excused = false;
  cli::set_verdict(r, true, false, "");
  EXPECT_FALSE(has(r.summary.verdict_text, "came down")) << r.summary.verdict_text;
}

TEST(ReportVerdict, GradientUnderflowIsItsOwnVerdict) {
  Report r = testing::sample_report(false, false);
  r.run.level = "O1";
  r.run.amp.semantics = "ampcheck";
  r.run.amp.loss_scaling = "static";
  r.nonfinite = NonFinite{};
  ZeroGradients& z = r.nonfinite.zero_gradients.emplace();
  z.first_step = 1;
  z.steps = 200;
  z.stepped = 200;
  z.dtype = "float16";
  // The largest lost gradient 1.1e-8 needs 2^-14 / 1.1e-8 = 5549, so 2^13.
  z.scale_needed = 8192;
  r.nonfinite.failures = {{"gradient_underflow", 1, "every parameter gradient was 0"}};
  cli::set_verdict(r, true, true, "gradients underflow");
  EXPECT_EQ(r.summary.verdict, "gradient_underflow");
  EXPECT_EQ(r.summary.verdict_text,
            "FAILED: gradients underflow: every parameter gradient was 0 in float16 from step 1 (200 of 200 steps); "
            "enable dynamic loss scaling or raise the scale to at least 2^13 (ampcheck config \"loss_scaling\": "
            "{\"behaviour\": \"pytorch\", \"init_scale\": 8192}; PyTorch GradScaler(init_scale=8192), Paddle "
            "GradScaler(init_loss_scaling=8192, use_dynamic_loss_scaling=True))");

  // A static scale in a PyTorch configuration: the PyTorch cure alone.
  r.run.amp.semantics = "pytorch";
  cli::set_verdict(r, true, true, "gradients underflow");
  EXPECT_TRUE(has(r.summary.verdict_text, "(PyTorch GradScaler(init_scale=8192), enabled (it is dynamic))"))
      << r.summary.verdict_text;

  // With a non-finite failure as well, the run failed for that.
  r.nonfinite.failures.push_back({"forward_non_finite", 3, "log made -Inf"});
  cli::set_verdict(r, true, true, "non-finite values first produced by log");
  EXPECT_EQ(r.summary.verdict, "failed");
  EXPECT_EQ(r.summary.verdict_text, "FAILED: non-finite values first produced by log");

  // A static scale set below the floor made the underflow: still its own verdict.
  r.nonfinite.failures.back() = {"scale_below_floor", 1, "scale 1e-07 below the floor 1"};
  cli::set_verdict(r, true, true, "scale 1e-07 below the floor 1");
  EXPECT_EQ(r.summary.verdict, "gradient_underflow");
  EXPECT_TRUE(loss_scale_is_the_cure(r));

  // An interrupted run keeps the failure it saw.
  r.nonfinite.failures.pop_back();
  cli::set_verdict(r, true, true, "gradients underflow");
  cli::mark_interrupted(r, 5, 200);
  EXPECT_EQ(r.summary.verdict, "gradient_underflow");
}

// Gradients that overflow at a static scale are skipped on every step: one failure per
// update, listed once with the count, and the cure is a dynamic scaler.
TEST(ReportVerdict, GradientsOverflowingAStaticScaleGetADynamicScaler) {
  Report r = testing::sample_report(false, false);
  r.run.level = "O1";
  r.run.amp.semantics = "paddle";
  r.run.amp.loss_scaling = "static";
  r.run.amp.init_loss_scaling = 1;
  r.nonfinite = NonFinite{};
  for (std::int64_t step = 1; step <= 30; ++step)
    r.nonfinite.failures.push_back({"gradient_not_absorbed", step, "step skipped but the scale did not react"});
  r.nonfinite.failures.push_back({"skipped_fraction", 30, "30 of 30 updates skipped (1 > 0.05)"});
  EXPECT_FALSE(loss_scale_is_the_cure(r));  // no zero gradients: the scale is too high, not too low
  cli::set_verdict(r, true, true, "step skipped but the scale did not react");
  EXPECT_EQ(r.summary.verdict, "failed");
  EXPECT_TRUE(has(r.summary.verdict_text,
                  "; the loss scale is static (1): gradients that overflow float16 at it are skipped forever; a dynamic "
                  "scaler backs off until they fit (Paddle GradScaler(init_loss_scaling=32768, "
                  "use_dynamic_loss_scaling=True))"))
      << r.summary.verdict_text;

  const std::vector<FailureRun> runs = failure_runs(r.nonfinite.failures);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].first.step, 1);
  EXPECT_EQ(runs[0].more, 29);
  EXPECT_EQ(more_text(runs[0]), "; and 29 more, the last at step 30");
  EXPECT_EQ(more_text(runs[1]), "");

  // A dynamic scaler, or a non-finite forward value, is another story: no such advice.
  r.run.amp.loss_scaling = "pytorch";
  cli::set_verdict(r, true, true, "x");
  EXPECT_FALSE(has(r.summary.verdict_text, "static")) << r.summary.verdict_text;
  r.run.amp.loss_scaling = "static";
  r.nonfinite.failures.push_back({"forward_non_finite", 3, "exp made +Inf"});
  cli::set_verdict(r, true, true, "x");
  EXPECT_FALSE(has(r.summary.verdict_text, "static")) << r.summary.verdict_text;
}

TEST(ReportVerdict, IntendedMinusInfIsSaidToBeSo) {
  Report r = testing::sample_report(false, false);
  r.run.level = "O0";
  r.nonfinite.failures.clear();
  cli::set_verdict(r, true, false, "");
  EXPECT_EQ(r.summary.verdict, "reference");
  EXPECT_EQ(r.summary.verdict_text,
            "healthy fp32 reference run; 96 intended -Inf (masks softmax maps to 0) not counted as failures");
}

TEST(ReportVerdict, ScaleTextIsAPowerOfTwoWhenItIsOne) {
  EXPECT_EQ(scale_text(16777216.0), "2^24");
  EXPECT_EQ(scale_text(1.0), "2^0");
  EXPECT_EQ(scale_text(0.5), "2^-1");
  EXPECT_EQ(scale_text(1000.0), "1000");
}

}  // namespace
}  // namespace ampcheck::reports
