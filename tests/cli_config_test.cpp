// `ampcheck config simulate`: the loss-scale history of a config's scaler for a found_inf
// sequence. The expected histories are worked out by hand from each framework's
// documented rule (PyTorch: torch/amp/grad_scaler.py, _amp_update_scale_; Paddle:
// paddle/amp/grad_scaler.py, AmpScaler._update), not taken from the command's output;
// bench/peers/ checks the same command against the real GradScalers on 200+ random cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using nlohmann::json;

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

struct Step {
  double scale_after;
  bool found_inf, skipped;
};

std::vector<Step> simulate(const std::string& config, const std::string& found_inf) {
  const testing::CliResult r = testing::run_cli({"config", "simulate", config, "--found-inf", found_inf, "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<Step> steps;
  const json doc = json::parse(r.out);  // kept: a range-for over parse(...).at() would dangle
  for (const json& s : doc.at("steps")) {
    const json& v = s.at("scale_after");
    steps.push_back({v.is_string() ? (v == "inf" ? INFINITY : NAN) : v.get<double>(), s.at("found_inf").get<bool>(),
                     s.at("skipped").get<bool>()});
  }
  return steps;
}

TEST(CliConfigSimulate, PyTorchGrowsAfterEachIntervalOfCleanStepsAndBacksOffOnEachInf) {
  const std::string config = write_config(
      "torch_scaler.json",
      R"({"framework": "pytorch", "grad_scaler": {"init_scale": 4, "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": 2}})");
  // By hand: x2 after 2 clean steps in a row (the tracker resets on growth and on Inf),
  // x0.5 and a skipped step on every Inf.
  const std::vector<double> expected = {4, 8, 4, 4, 2, 1, 1, 2, 2, 4};
  const std::vector<Step> steps = simulate(config, "0010110000");
  ASSERT_EQ(steps.size(), expected.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].scale_after, expected[i]) << "step " << i + 1;
    const bool inf = i == 2 || i == 4 || i == 5;
    EXPECT_EQ(steps[i].found_inf, inf) << "step " << i + 1;
    EXPECT_EQ(steps[i].skipped, inf) << "step " << i + 1;
  }
}

// PyTorch's rule, written from torch/amp/grad_scaler.py (_amp_update_scale_, the CPU and
// CUDA kernels alike): on Inf/NaN the float32 scale is multiplied by backoff_factor and
// the growth tracker reset; otherwise the tracker counts the clean step, and on reaching
// growth_interval the scale is multiplied by growth_factor (kept only when finite) and
// the tracker reset. The scale after each step.
std::vector<float> torch_rule(float scale, float growth, float backoff, int interval, const std::string& found_inf) {
  std::vector<float> after;
  int tracker = 0;
  for (char c : found_inf) {
    if (c == '1') {
      scale *= backoff;
      tracker = 0;
    } else if (++tracker == interval) {
      if (std::isfinite(scale * growth)) scale *= growth;
      tracker = 0;
    }
    after.push_back(scale);
  }
  return after;
}

TEST(CliConfigSimulate, FlatGradScalerArgumentsGiveTorchsHistory) {
  // GradScaler(init_scale=1024, growth_factor=3, backoff_factor=0.25, growth_interval=3,
  // enabled=True), its arguments pasted flat, without "framework" or "grad_scaler".
  const std::string config = write_config(
      "torch_flat.json",
      R"({"init_scale": 1024, "growth_factor": 3, "backoff_factor": 0.25, "growth_interval": 3, "enabled": true})");
  // By hand: x3 on the third clean step in a row, x0.25 and a skipped step on each Inf.
  const std::vector<double> by_hand = {1024, 1024, 3072, 768, 768, 768, 192, 192, 192, 576};
  const std::vector<Step> first = simulate(config, "0001001000");
  ASSERT_EQ(first.size(), by_hand.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].scale_after, by_hand[i]) << "step " << i + 1;
  // A longer sequence against the rule itself, with runs of Inf and of clean steps.
  const std::string found_inf = "000000110000000001000100000000000011110000000000";
  const std::vector<float> rule = torch_rule(1024, 3, 0.25, 3, found_inf);
  const std::vector<Step> steps = simulate(config, found_inf);
  ASSERT_EQ(steps.size(), rule.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].scale_after, static_cast<double>(rule[i])) << "step " << i + 1;
    EXPECT_EQ(steps[i].skipped, found_inf[i] == '1') << "step " << i + 1;
  }
  // enabled=False: GradScaler scales nothing (get_scale() is 1.0 throughout) and its
  // step(optimizer) is a plain optimizer.step(): no step is skipped, Inf or not.
  const std::string off = write_config("torch_flat_off.json", R"({"init_scale": 1024, "enabled": false})");
  for (const Step& s : simulate(off, "0101")) {
    EXPECT_EQ(s.scale_after, 1.0);
    EXPECT_FALSE(s.skipped);
  }
}

TEST(CliConfigSimulate, PaddleLowersOnlyAfterDecrEveryNInfSteps) {
  const std::string config = write_config(
      "paddle_scaler.json",
      R"({"framework": "paddle", "init_loss_scaling": 1024, "incr_ratio": 2, "decr_ratio": 0.5,
          "incr_every_n_steps": 3, "decr_every_n_nan_or_inf": 2, "use_dynamic_loss_scaling": true})");
  // By hand: 3 clean steps -> x2; 2 Inf steps in a row -> x0.5 (a clean step in between
  // resets the count); every Inf step is skipped.
  const std::vector<double> expected = {1024, 1024, 2048, 2048, 2048, 2048, 1024, 1024};
  const std::vector<Step> steps = simulate(config, "00010110");
  ASSERT_EQ(steps.size(), expected.size());
  for (std::size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].scale_after, expected[i]) << "step " << i + 1;
}

TEST(CliConfigSimulate, AScaleThatGrewToInfMakesEveryLaterStepNonFinite) {
  // float32's largest power of two is 2^127: Paddle multiplies it by 2 and holds inf,
  // after which every scaled gradient is Inf, so every step is skipped; PyTorch refuses
  // a growth whose result is not finite.
  const std::string paddle = write_config(
      "paddle_inf.json",
      R"({"framework": "paddle", "init_loss_scaling": 1.7014118346046923e38, "incr_ratio": 2, "decr_ratio": 0.5,
          "incr_every_n_steps": 1, "decr_every_n_nan_or_inf": 1, "use_dynamic_loss_scaling": true})");
  const std::vector<Step> p = simulate(paddle, "000");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(std::isinf(p[0].scale_after));
  EXPECT_FALSE(p[0].skipped);
  for (int i : {1, 2}) {
    EXPECT_TRUE(std::isinf(p[i].scale_after));
    EXPECT_TRUE(p[i].found_inf && p[i].skipped) << "step " << i + 1;
  }
  const std::string torch = write_config(
      "torch_inf.json",
      R"({"framework": "pytorch", "grad_scaler": {"init_scale": 1.7014118346046923e38, "growth_interval": 1}})");
  for (const Step& s : simulate(torch, "000")) EXPECT_EQ(s.scale_after, std::ldexp(1.0, 127));
}

TEST(CliConfigSimulate, TheTextTableNamesTheBehaviourAndEachStep) {
  const std::string config = write_config(
      "torch_text.json", R"({"framework": "pytorch", "grad_scaler": {"init_scale": 8, "growth_interval": 5}})");
  const testing::CliResult r = testing::run_cli({"config", "simulate", config, "--found-inf", "01"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(testing::has(r.out, "loss scaling: pytorch")) << r.out;
  EXPECT_TRUE(testing::has(r.out, "inf")) << r.out;
  EXPECT_TRUE(testing::has(r.out, "growth_tracker=")) << r.out;
}

TEST(CliConfigSimulate, BadInputExits2NamingTheFix) {
  const std::string config =
      write_config("torch_bad.json", R"({"framework": "pytorch", "grad_scaler": {"init_scale": 8}})");
  testing::CliResult r = testing::run_cli({"config", "simulate", config, "--found-inf", "01a"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(testing::has(r.err, "character 3 is 'a'")) << r.err;
  r = testing::run_cli({"config", "simulate", "/nonexistent_dir_ampcheck/amp.json", "--found-inf", "01"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(testing::has(r.err, "amp.json")) << r.err;
  r = testing::run_cli({"config", "simulate", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(testing::has(r.err, "--found-inf")) << r.err;
}

// A number beyond a double, a syntax error, a scale power beyond float32: exit 2 with the
// file, the position where there is one, and the fix, never an internal error.
TEST(CliConfigSimulate, BadJsonExits2NamingTheFilePositionAndFix) {
  const std::string text = R"({"init_loss_scaling": 1e999})";
  const std::string overflow = write_config("paddle_overflow.json", text);
  testing::CliResult r = testing::run_cli({"config", "simulate", overflow, "--found-inf", "01"});
  EXPECT_EQ(r.code, 2) << r.err;
  const std::string column = std::to_string(text.find("1e999") + 1);
  EXPECT_EQ(r.err.rfind("ampcheck: " + overflow + ": line 1, column " + column + ": the number 1e999 is too large", 0),
            0u)
      << r.err;
  EXPECT_TRUE(testing::has(r.err, "write a finite number")) << r.err;

  const std::string comma = write_config("torch_comma.json", "{\n  \"init_scale\": 8,\n  \"growth_interval\": 2,\n}\n");
  r = testing::run_cli({"config", "explain", comma});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("ampcheck: " + comma + ": line 4, column 1: not valid JSON: a comma before the closing '}'", 0),
            0u)
      << r.err;

  const std::string power =
      write_config("ds_power.json", R"({"fp16": {"enabled": true, "initial_scale_power": 200}})");
  r = testing::run_cli({"config", "simulate", power, "--found-inf", "0"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(testing::has(r.err, "fp16.initial_scale_power: 200 is not an integer in [-149, 127]")) << r.err;
}

}  // namespace
}  // namespace ampcheck
