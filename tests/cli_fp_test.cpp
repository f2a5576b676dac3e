// `ampcheck fp` in-process: what a user sees, the JSON, and every kind of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using Result = testing::CliResult;
using testing::has;
Result run(std::vector<std::string> args) { return testing::run_cli(std::move(args)); }

TEST(CliFp, AcceptanceValuesInF16) {
  const Result r = run({"fp", "65504", "65519", "65520", "6e-8", "3e-8", "1e-8", "--dtype", "f16", "--device", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  // one line per value, in order, with the stored value and the class
  std::istringstream lines(r.out);
  std::vector<std::string> rows;
  for (std::string l; std::getline(lines, l);)
    if (has(l, " f16 ")) rows.push_back(l);
  ASSERT_EQ(rows.size(), 6u) << r.out;
  EXPECT_TRUE(has(rows[0], "65504 ") && has(rows[0], "normal")) << rows[0];
  EXPECT_TRUE(has(rows[1], "65504 ") && has(rows[1], "normal")) << rows[1];
  EXPECT_TRUE(has(rows[2], "inf") && has(rows[2], "overflow -> inf")) << rows[2];
  EXPECT_TRUE(has(rows[3], "5.9604644775390625e-08") && has(rows[3], "subnormal")) << rows[3];
  EXPECT_TRUE(has(rows[4], "5.9604644775390625e-08") && has(rows[4], "subnormal")) << rows[4];
  EXPECT_TRUE(has(rows[5], " 0 ") && has(rows[5], "underflow -> 0")) << rows[5];
}

TEST(CliFp, JsonHasEveryFieldAndNonFiniteAsStrings) {
  const Result r = run({"fp", "65520", "0.1", "--json", "--device", "cpu"});  // default f16 and bf16
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["values"].size(), 2u);
  const auto& inf = j["values"][0]["results"][0];
  EXPECT_EQ(inf["dtype"], "f16");
  EXPECT_EQ(inf["stored"], "inf");
  EXPECT_EQ(inf["class"], "overflow -> inf");
  EXPECT_EQ(inf["hex"], "0x7c00");
  const auto& bf = j["values"][0]["results"][1];
  EXPECT_EQ(bf["dtype"], "bf16");
  EXPECT_EQ(bf["stored"], 65536.0);  // 65520 in bf16: spacing 256 at 2^15, 65520/256 = 255.9375
  const auto& tenth = j["values"][1]["results"][0];
  EXPECT_EQ(tenth["stored"], 1638.0 / 16384.0);
  EXPECT_EQ(tenth["shortest"], "0.1");
  EXPECT_EQ(tenth["exponent"], -4);
  EXPECT_EQ(tenth["mantissa_field"], 614);
}

TEST(CliFp, LimitsTableAndJson) {
  const Result t = run({"fp", "--limits"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_TRUE(has(t.out, "65504")) << t.out;
  EXPECT_TRUE(has(t.out, "bfloat16")) << t.out;
  const Result j = run({"fp", "--limits", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  for (const auto& d : doc["dtypes"]) {
    if (d["dtype"] == "f16") {
      EXPECT_EQ(d["max"], 65504.0);
      EXPECT_EQ(d["min_subnormal"], std::ldexp(1.0, -24));
    }
  }
}

TEST(CliFp, Fp8FormatsShowTheCastAndTheSaturatingCast) {
  // What ml_dtypes makes of these (tests/data/fp8): 464 is the tie between E4M3's 448
  // (mantissa 110) and the NaN code, to even: 448; 465 is beyond it: NaN, or 448 when
  // saturating. E5M2: 61440 is the tie between 57344 and Inf, to even: Inf; 61439 is 57344.
  const Result r = run({"fp", "464", "465", "61439", "61440", "--json", "-d", "float8_e4m3fn,e5m2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto at = [&](int value, int format) { return j["values"][value]["results"][format]; };
  EXPECT_EQ(at(0, 0)["dtype"], "e4m3");
  EXPECT_EQ(at(0, 0)["stored"], 448.0);
  EXPECT_EQ(at(0, 0)["hex"], "0x7e");
  EXPECT_EQ(at(0, 0)["bits"], "0 1111 110");
  EXPECT_EQ(at(1, 0)["stored"], "nan");
  EXPECT_EQ(at(1, 0)["class"], "overflow -> nan");
  EXPECT_EQ(at(1, 0)["saturating"], 448.0);
  EXPECT_EQ(at(2, 1)["dtype"], "e5m2");
  EXPECT_EQ(at(2, 1)["stored"], 57344.0);
  EXPECT_EQ(at(3, 1)["stored"], "inf");
  EXPECT_EQ(at(3, 1)["class"], "overflow -> inf");
  EXPECT_EQ(at(3, 1)["saturating"], 57344.0);
  const Result t = run({"fp", "1000", "-d", "e4m3"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_TRUE(has(t.out, "overflow -> nan (saturating: 448)")) << t.out;
  const Result l = run({"fp", "--limits", "--json"});
  const auto limits = nlohmann::json::parse(l.out)["fp8"];
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0]["max"], 448.0);
  EXPECT_EQ(limits[0]["min_subnormal"], std::ldexp(1.0, -9));
  EXPECT_EQ(limits[1]["max"], 57344.0);
  EXPECT_EQ(limits[1]["min_subnormal"], std::ldexp(1.0, -16));
}

// MXFP8, worked by hand: a block whose largest |value| is 300 takes the E4M3 scale 2^0
// (300 / 448 <= 1; E8M0 code 127) and the E5M2 scale 2^-7 (300 / 57344 ~ 2^-7.6); 1e-4 is
// below half E4M3's smallest subnormal 2^-9 and flushes, 0.01 is E4M3's subnormal 5 x 2^-9,
// and in E5M2, scaled by 2^7, 1e-4 becomes 0.0128 ~ 7 x 2^-9 (E5M2 normal 1.75 x 2^-7),
// read back as 7 x 2^-16.
TEST(CliFp, MxAmaxShowsAValueInAnMxfp8BlockOfThatLargestValue) {
  const Result r = run({"fp", "1e-4", "0.01", "300", "--mx-amax", "300", "-d", "e4m3,e5m2", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto mx = nlohmann::json::parse(r.out)["mxfp8"];
  EXPECT_EQ(mx["block_amax"], 300.0);
  ASSERT_EQ(mx["values"].size(), 6u);  // e4m3's three, then e5m2's
  EXPECT_EQ(mx["values"][0]["e8m0"], 127);
  EXPECT_EQ(mx["values"][0]["stored"], 0.0);
  EXPECT_EQ(mx["values"][1]["stored"], 5 * std::ldexp(1.0, -9));
  EXPECT_EQ(mx["values"][2]["stored"], 288.0);  // 300 between 288 and 320, nearer 288
  EXPECT_EQ(mx["values"][3]["format"], "e5m2");
  EXPECT_EQ(mx["values"][3]["e8m0"], 127 - 7);
  EXPECT_EQ(mx["values"][3]["stored"], 7 * std::ldexp(1.0, -16));
  const Result text = run({"fp", "1e-4", "--mx-amax", "300"});  // e4m3 where -d names no fp8 format
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(has(text.out, "In an MXFP8 block whose largest |value| is 300")) << text.out;
  EXPECT_TRUE(has(text.out, "flushed to 0")) << text.out;
  const Result larger = run({"fp", "500", "--mx-amax", "300"});
  EXPECT_EQ(larger.code, 2);
  EXPECT_TRUE(has(larger.err, "--mx-amax 300 is the largest |value| of the block, but 500 is larger")) << larger.err;
  const Result inf = run({"fp", "1", "--mx-amax", "inf"});
  EXPECT_EQ(inf.code, 2);
  EXPECT_TRUE(has(inf.err, "--mx-amax inf: a block's largest |value| is a finite float32 number")) << inf.err;
}

TEST(CliFp, NegativeNumbersAndDtypeAliases) {
  const Result r = run({"fp", "--device", "cpu", "-d", "half,bfloat16,float", "--", "-2.5", "1e-8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "-2.5")) << r.out;
  EXPECT_TRUE(has(r.out, " f32 ")) << r.out;
}

TEST(CliFp, BadInputIsNamedWithExitCode2) {
  struct Case { std::vector<std::string> args; std::string says; };
  const Case cases[] = {
      {{"fp", "12abc"}, "cannot read \"12abc\" as a number"},
      {{"fp", "1e999"}, "beyond the range of f64"},
      {{"fp", "1", "--dtype", "flaot16"}, "did you mean \"float16\"?"},
      {{"fp", "1", "--dtype", "int64"}, "is not a floating-point dtype; use f16, bf16, f32 or f64"},
      {{"fp"}, "give one or more values"},
      {{"fp", "1", "--limits"}, "--limits takes no values"},
      {{"fp", "1", "--device", "tpu"}, "\"tpu\" is not a device"},
      {{"fp", "1", "--output", "/nonexistent_dir_ampcheck/x.json"}, "does not exist"},
      {{"fp", "1", "--bogus"}, "--bogus"},
      {{"frobnicate"}, "frobnicate"},
      {{}, "ampcheck"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.says;
    EXPECT_TRUE(has(r.err, c.says)) << "expected \"" << c.says << "\" in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(CliFp, OutputFileIsWrittenWhole) {
  const auto path = std::filesystem::temp_directory_path() / "ampcheck_cli_fp_out.json";
  std::filesystem::remove(path);
  const Result r = run({"fp", "1", "--json", "--device", "cpu", "-o", path.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["values"][0]["results"][0]["stored"], 1.0);
  std::filesystem::remove(path);
}

TEST(CliFp, DeviceChoiceMatchesTheMachine) {
  // --device cuda without a usable GPU is a usage error naming the fix; with one, the
  // values come from the GPU and equal the CPU's.
  const Result cpu = run({"fp", "0.1", "65520", "--json", "--device", "cpu"});
  const Result gpu = run({"fp", "0.1", "65520", "--json", "--device", "cuda"});
  if (gpu.code == 0) {
    auto a = nlohmann::json::parse(cpu.out), b = nlohmann::json::parse(gpu.out);
    EXPECT_EQ(b["device"], "cuda");
    EXPECT_EQ(a["values"], b["values"]);
  } else {
    EXPECT_EQ(gpu.code, 2);
    EXPECT_TRUE(has(gpu.err, "--device cpu")) << gpu.err;
  }
}

TEST(Cli, VersionAndHelp) {
  const Result v = run({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_TRUE(has(v.out, "ampcheck 0.")) << v.out;
  const Result h = run({"fp", "--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_TRUE(has(h.out, "--limits")) << h.out;
}

}  // namespace
}  // namespace ampcheck
