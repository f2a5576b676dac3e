// `ampcheck fp8-scale` in-process. The expected scales are worked by hand from TE's
// delayed-scaling rule (scale = fp8_max / max(amax history window) / 2^margin, the window
// the last amax_history_len steps, a zero amax keeping the scale) and its current-scaling
// rule (fp8_max / amax of the tensor itself), not read from the command's own output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using Result = testing::CliResult;
using testing::has;
Result run(std::vector<std::string> args) { return testing::run_cli(std::move(args)); }

nlohmann::json json_of(const Result& r) { return nlohmann::json::parse(r.out); }

TEST(CliFp8Scale, AnAmaxJumpPastTheDelayedScaleSaturatesAtItsStep) {
  // History of 4, E4M3 (448): step 1 casts with the initial scale 1; afterwards 448 / the
  // window's max. Steps 1-3 see amax 1, so steps 2-4 cast with 448; step 4's amax 3 meets
  // 448 * 3 = 1344 > 448: saturation. Then 448/3 until the 3 leaves the window.
  const Result r = run({"fp8-scale", "--recipe", "DelayedScaling(fp8_format=Format.E4M3, amax_history_len=4)",
                        "--amax", "1,1,1,3,1,1,1,1,1", "--json"});
  ASSERT_EQ(r.code, 1) << r.err << r.out;
  const auto j = json_of(r);
  const std::vector<double> want_scale = {1, 448, 448, 448, 448.0f / 3.0f, 448.0f / 3.0f, 448.0f / 3.0f,
                                          448.0f / 3.0f, 448};
  ASSERT_EQ(j["steps"].size(), want_scale.size());
  for (std::size_t i = 0; i < want_scale.size(); ++i)
    EXPECT_FLOAT_EQ(j["steps"][i]["scale"].get<float>(), static_cast<float>(want_scale[i])) << "step " << i + 1;
  EXPECT_EQ(j["steps"][3]["status"], "saturates");
  EXPECT_EQ(j["saturating_steps"], 1);
  EXPECT_EQ(j["first_saturating_step"], 4);
  EXPECT_EQ(j["format"], "e4m3");
  EXPECT_TRUE(has(j["verdict"].get<std::string>(), "the scale came from the history's amax 1")) << j["verdict"];
}

TEST(CliFp8Scale, MostRecentFollowsTheAmaxAndAMarginLeavesHeadroom) {
  // most_recent: the scale follows the last amax, so a doubling still saturates once...
  Result r = run({"fp8-scale", "--recipe",
                  "DelayedScaling(fp8_format=Format.E4M3, amax_history_len=16, amax_compute_algo=\"most_recent\")",
                  "--amax", "1,2,2", "--json"});
  ASSERT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(json_of(r)["first_saturating_step"], 2);
  // ...a margin of 1 (scale halved) holds it: 448 / 1 / 2 = 224, and 2 x 224 = 448 fits.
  r = run({"fp8-scale", "--recipe", "DelayedScaling(margin=1, fp8_format=Format.E4M3, amax_history_len=16)",
           "--amax", "1,2,2", "--json"});
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_DOUBLE_EQ(json_of(r)["steps"][1]["scale"].get<double>(), 224.0);
  EXPECT_TRUE(has(json_of(r)["verdict"].get<std::string>(), "no step saturates"));
}

TEST(CliFp8Scale, GradientsUnderHybridAreE5m2AndCurrentScalingNeverSaturates) {
  Result r = run({"fp8-scale", "--recipe", "DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=2)", "--role",
                  "grad_output", "--amax", "1,1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json_of(r)["format"], "e5m2");
  EXPECT_DOUBLE_EQ(json_of(r)["steps"][1]["scale"].get<double>(), 57344.0);
  r = run({"fp8-scale", "--recipe", "Float8CurrentScaling(fp8_format=Format.E4M3)", "--amax", "1,1000,1e-3", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FLOAT_EQ(json_of(r)["steps"][1]["scale"].get<float>(), 448.0f / 1000.0f);
  EXPECT_EQ(json_of(r)["saturating_steps"], 0);
}

TEST(CliFp8Scale, AZeroAmaxKeepsTheScaleAndTheTableSaysSo) {
  const Result r = run({"fp8-scale", "--recipe", "DelayedScaling(fp8_format=Format.E4M3, amax_history_len=1)",
                        "--amax", "2,0,2"});
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "role: input -> e4m3 (max 448)")) << r.out;
  EXPECT_TRUE(has(r.out, "zero")) << r.out;
  EXPECT_TRUE(has(r.out, "no step saturates")) << r.out;
}

TEST(CliFp8Scale, AmaxesFromAFile) {
  const auto path = std::filesystem::temp_directory_path() / "ampcheck_fp8_scale_amax.txt";
  {
    std::ofstream f(path);
    f << "# step amaxes\n1\n1 1\n3,1\n";
  }
  const Result r = run({"fp8-scale", "--recipe", "DelayedScaling(fp8_format=Format.E4M3, amax_history_len=4)",
                        "--amax-file", path.string(), "--json"});
  std::filesystem::remove(path);
  ASSERT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(json_of(r)["steps"].size(), 5u);
  EXPECT_EQ(json_of(r)["first_saturating_step"], 4);
}

TEST(CliFp8Scale, BadInputIsAUsageErrorNamingTheThing) {
  Result r = run({"fp8-scale", "--amax", "1,x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "cannot read \"x\" as an amax")) << r.err;
  r = run({"fp8-scale", "--amax", "-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "is negative")) << r.err;
  r = run({"fp8-scale"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "no amax to follow")) << r.err;
  r = run({"fp8-scale", "--recipe", "DelayedScaling(amax_history=4)", "--amax", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "amax_history")) << r.err;
  r = run({"fp8-scale", "--recipe", "MXFP8BlockScaling()", "--amax", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "block of 32")) << r.err;
  EXPECT_TRUE(has(r.err, "--mx-amax")) << r.err;
  r = run({"fp8-scale", "--role", "bias", "--amax", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--role bias")) << r.err;
  r = run({"fp8-scale", "--amax-file", "/no/such/amax.txt"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "/no/such/amax.txt")) << r.err;
  r = run({"fp8-scale", "--amax-file", std::filesystem::temp_directory_path().string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "is a folder")) << r.err;
  // A file larger than --max-memory allows is refused before it is read.
  const auto big = std::filesystem::temp_directory_path() / "ampcheck_fp8_scale_big.txt";
  {
    std::ofstream f(big);
    for (int i = 0; i < 100000; ++i) f << "1.5\n";
  }
  r = run({"--max-memory", "64K", "fp8-scale", "--amax-file", big.string()});
  std::filesystem::remove(big);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "too large to read")) << r.err;
}

}  // namespace
}  // namespace ampcheck
