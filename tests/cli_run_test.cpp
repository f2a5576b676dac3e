// `ampcheck run` in-process: the summary, the verdict, the reports it writes, and bad options.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using Result = testing::CliResult;
using testing::has;
Result run(std::vector<std::string> args) { return testing::run_cli(std::move(args)); }

TEST(CliRun, O2RunSaysAmpIsOnAndShowsTheOpTable) {
  const Result r = run({"run", "--model", "mlp", "--level", "O2", "--steps", "30"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "O2 float16")) << r.out;
  EXPECT_TRUE(has(r.out, "  linear ")) << r.out;  // a row of the operator stats table
  EXPECT_TRUE(has(r.out, "verdict: healthy: AMP is on")) << r.out;
  const Result ref = run({"run", "--model", "mlp", "--level", "O0", "--steps", "5", "--inspect", "stats"});
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_TRUE(has(ref.out, "verdict: healthy fp32 reference run")) << ref.out;
}

TEST(CliRun, BadOptionsAreNamedWithExitCode2) {
  struct Case { std::vector<std::string> args; std::string says; };
  const Case cases[] = {
      {{"run", "--model", "mpl"}, "unknown model \"mpl\" (did you mean \"mlp\"?)"},
      {{"run", "--level", "O5"}, "--level \"O5\" is not a level"},
      {{"run", "--dtype", "float32"}, "float16 or bfloat16"},
      {{"run", "--black", "sofmax"}, "did you mean \"softmax\"?"},
      {{"run", "--inspect", "everything"}, "--inspect \"everything\""},
      {{"run", "--steps", "0"}, "--steps must be positive"},
      {{"run", "--config", "/nonexistent/amp.json"}, "/nonexistent/amp.json"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.says << "\n" << r.err;
    EXPECT_TRUE(has(r.err, c.says)) << "expected \"" << c.says << "\" in: " << r.err;
  }
}

}  // namespace
}  // namespace ampcheck
