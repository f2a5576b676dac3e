// `ampcheck diff` in-process: exit codes 0 (no drift), 1 (drift), 2 (bad input), the
// flags over the rules file, --json and the JUnit file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "reports/json.h"
#include "tests/cli_harness.h"
#include "tests/report_fixture.h"

namespace ampcheck {
namespace {

namespace fs = std::filesystem;
using Result = testing::CliResult;
using testing::has;

class CliDiff : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ampcheck_diff_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    baseline_ = write("baseline.json", testing::sample_report(false, false));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const reports::Report& r) {
    const fs::path p = dir_ / name;
    reports::write_report(p, r);
    return p.string();
  }
  std::string write_text(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static Result run(std::vector<std::string> args) {
    args.insert(args.begin(), "diff");
    return testing::run_cli(std::move(args));
  }
  // The fixture with a final loss 10% above the baseline's.
  std::string worse_loss() {
    reports::Report r = testing::sample_report(false, false);
    r.summary.final_loss *= 1.1;
    return write("current.json", r);
  }

  fs::path dir_;
  std::string baseline_;
};

TEST_F(CliDiff, IdenticalRunsPass) {
  const std::string current = write("current.json", testing::sample_report(false, false));
  const Result r = run({baseline_, current});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "no drift")) << r.out;
  EXPECT_TRUE(has(r.out, "summary.final_loss")) << r.out;
}

TEST_F(CliDiff, LevelChangeDrifts) {
  reports::Report o1 = testing::sample_report(false, false);
  o1.run.level = "O1";
  o1.op_types[0].calls = {0, 0, 12, 0, {}};  // linear ran fp32 at O1
  const std::string base = write("o1.json", o1);
  const Result r = run({base, baseline_});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "DRIFT")) << r.out;
  EXPECT_TRUE(has(r.out, "run.level")) << r.out;
  EXPECT_TRUE(has(r.out, "dtype_change")) << r.out;
  EXPECT_EQ(run({base, baseline_, "--allow-settings-change", "--allow-dtype-change"}).code, 0);
}

TEST_F(CliDiff, FlagsAndRulesFile) {
  const std::string current = worse_loss();
  EXPECT_EQ(run({baseline_, current}).code, 1);
  EXPECT_EQ(run({baseline_, current, "--final-loss-rel", "0.2"}).code, 0);
  const std::string loose = write_text("loose.json", R"({"final_loss_rel": 0.2})");
  EXPECT_EQ(run({baseline_, current, "--rules", loose}).code, 0);
  // the flag wins over the file
  const Result strict = run({baseline_, current, "--rules", loose, "--final-loss-rel", "0.05"});
  EXPECT_EQ(strict.code, 1) << strict.out;
}

TEST_F(CliDiff, AllowFlags) {
  reports::Report clean = testing::sample_report(false, false);
  clean.nonfinite = {};
  const std::string base = write("clean.json", clean);
  EXPECT_EQ(run({base, baseline_}).code, 1);
  EXPECT_EQ(run({base, baseline_, "--allow-new-nonfinite"}).code, 0);

  reports::Report skips = testing::sample_report(false, false);
  skips.summary.skipped_steps += 2;
  const std::string more = write("skips.json", skips);
  EXPECT_EQ(run({baseline_, more, "--skipped-increase", "1"}).code, 1);
  EXPECT_EQ(run({baseline_, more, "--skipped-increase", "2"}).code, 0);
}

TEST_F(CliDiff, JsonOutput) {
  const Result r = run({baseline_, worse_loss(), "--json"});
  ASSERT_EQ(r.code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["drifted"], true);
  EXPECT_EQ(j["failing"], 1);
  EXPECT_EQ(j["findings"][0]["rule"], "final_loss_rel");
}

TEST_F(CliDiff, JunitFile) {
  const fs::path xml = dir_ / "drift.xml";
  const Result r = run({baseline_, worse_loss(), "--junit", xml.string()});
  ASSERT_EQ(r.code, 1) << r.err;
  const std::string text = read(xml);
  EXPECT_TRUE(has(text, "<testsuite name=\"ampcheck diff\"")) << text;
  EXPECT_TRUE(has(text, "failures=\"1\"")) << text;
  EXPECT_TRUE(has(text, "name=\"final_loss_rel: summary.final_loss\"")) << text;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 3);  // no temporary left
  // a JUnit file in a missing directory is bad input
  const Result missing = run({baseline_, baseline_, "--junit", (dir_ / "nope" / "drift.xml").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "nope")) << missing.err;
}

TEST_F(CliDiff, BadInputIsExitTwo) {
  const Result missing = run({baseline_, (dir_ / "missing.json").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "missing.json")) << missing.err;
  EXPECT_TRUE(has(missing.err, "current report")) << missing.err;

  const std::string not_report = write_text("notes.json", R"({"hello": "world"})");
  const Result wrong = run({not_report, baseline_});
  EXPECT_EQ(wrong.code, 2);
  EXPECT_TRUE(has(wrong.err, "baseline report")) << wrong.err;

  const std::string typo = write_text("rules.json", R"({"final_los_rel": 0.1})");
  const Result rules = run({baseline_, baseline_, "--rules", typo});
  EXPECT_EQ(rules.code, 2);
  EXPECT_TRUE(has(rules.err, "did you mean \"final_loss_rel\"?")) << rules.err;
  const Result no_rules = run({baseline_, baseline_, "--rules", (dir_ / "none.json").string()});
  EXPECT_EQ(no_rules.code, 2);
  EXPECT_TRUE(has(no_rules.err, "none.json")) << no_rules.err;

  EXPECT_EQ(run({baseline_, baseline_, "--error-growth", "0.5"}).code, 2);
  EXPECT_EQ(run({baseline_, baseline_, "--final-loss-rel", "-1"}).code, 2);
  EXPECT_EQ(run({baseline_}).code, 2);  // CURRENT missing
}

}  // namespace
}  // namespace ampcheck
