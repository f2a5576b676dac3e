// The text summary (reports/text.h) of an interrupted report: how far the run got, in
// the words a person looks for, and no claim about the steps not run.
#include <gtest/gtest.h>

#include <string>

#include "reports/text.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ReportText, CompleteRunSaysNothingOfInterruption) {
  const std::string text = to_text(testing::sample_report(false, false));
  EXPECT_FALSE(has(text, "interrupted")) << text;
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

}  // namespace
}  // namespace ampcheck::reports
