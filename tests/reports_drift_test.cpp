// Drift between two in-memory reports (reports/drift.h): each rule on a hand-made change
// of the fixture report, the rules file and its errors, and the renderings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/drift.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

namespace fs = std::filesystem;

Report sample() { return testing::sample_report(false, false); }

std::vector<Finding> failing(const DriftResult& r) {
  std::vector<Finding> out;
  for (const Finding& f : r.findings)
    if (f.failing) out.push_back(f);
  return out;
}

const Finding* find(const DriftResult& r, std::string_view rule, std::string_view subject) {
  for (const Finding& f : r.findings)
    if (f.rule == rule && f.subject == subject) return &f;
  return nullptr;
}

std::string dump(const DriftResult& r) { return drift_text(r); }

OpInstance& op(Report& r, std::string_view name) {
  for (OpInstance& o : r.ops)
    if (o.name == name) return o;
  throw std::logic_error("no op " + std::string(name));
}

TEST(Drift, IdenticalReportsHaveNoFailingFinding) {
  const DriftResult r = compare_reports(sample(), sample(), DriftRules{});
  EXPECT_FALSE(r.drifted()) << dump(r);
  EXPECT_EQ(r.failing(), 0u);
  // every rule ran: the fixture is a full-mode run with numerics and local errors
  EXPECT_EQ(r.checked, std::vector<std::string>(rule_names().begin(), rule_names().end()));
  // the summary numbers are shown even when nothing changed
  const Finding* loss = find(r, "final_loss_rel", "summary.final_loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->baseline, "0.8125");
  EXPECT_EQ(loss->current, "0.8125");
  EXPECT_FALSE(loss->failing);
  EXPECT_NE(find(r, "accuracy_drop", "summary.accuracy"), nullptr);
  EXPECT_NE(find(r, "skipped_increase", "summary.skipped_steps"), nullptr);
  EXPECT_EQ(r.findings.size(), 3u) << dump(r);
  EXPECT_NE(dump(r).find("no drift"), std::string::npos) << dump(r);
}

TEST(Drift, LevelChangeFailsOnSettingsAndDtypes) {
  // The baseline ran O1: layer_norm stayed fp32 (black list) and linear ran fp16; at O2
  // (the fixture) everything but the custom black list runs fp16.
  Report baseline = sample();
  baseline.run.level = "O1";
  baseline.op_types.push_back({"layer_norm", {0, 0, 4, 0, {}}});
  Report current = sample();
  current.op_types.push_back({"layer_norm", {4, 0, 0, 0, {}}});
  const DriftResult r = compare_reports(baseline, current, DriftRules{});
  EXPECT_TRUE(r.drifted());
  const Finding* level = find(r, "settings_must_match", "run.level");
  ASSERT_NE(level, nullptr) << dump(r);
  EXPECT_TRUE(level->failing);
  EXPECT_EQ(level->baseline, "O1");
  EXPECT_EQ(level->current, "O2");
  const Finding* ln = find(r, "dtype_change", "layer_norm");
  ASSERT_NE(ln, nullptr) << dump(r);
  EXPECT_TRUE(ln->failing);
  EXPECT_EQ(ln->baseline, "fp32 4");
  EXPECT_EQ(ln->current, "fp16 4");
  EXPECT_EQ(failing(r).size(), 2u) << dump(r);

  DriftRules lenient;
  lenient.settings_must_match = false;
  lenient.dtype_change = false;
  const DriftResult allowed = compare_reports(baseline, current, lenient);
  EXPECT_FALSE(allowed.drifted()) << dump(allowed);
  EXPECT_NE(find(allowed, "dtype_change", "layer_norm"), nullptr);  // still shown
}

// An interrupted run is the same report with fewer steps behind it: against a complete
// baseline (all else equal) it is not like for like, and only settings_must_match says so.
TEST(Drift, InterruptedRunAgainstACompleteBaselineFailsOnSettings) {
  Report current = sample();
  current.interrupted = Interruption{"SIGINT", 3, 4, 0};
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  EXPECT_TRUE(r.drifted()) << dump(r);
  const std::vector<Finding> fails = failing(r);  // held: front() of a temporary would dangle
  ASSERT_EQ(fails.size(), 1u) << dump(r);
  const Finding& f = fails.front();
  EXPECT_EQ(f.rule, "settings_must_match");
  EXPECT_EQ(f.subject, "interrupted");
  EXPECT_EQ(f.baseline, "no");
  EXPECT_EQ(f.current, "after 3 of 4 steps");
  // Either way round, and against one interrupted elsewhere.
  EXPECT_TRUE(compare_reports(current, sample(), DriftRules{}).drifted());
  Report elsewhere = sample();
  elsewhere.interrupted = Interruption{"SIGTERM", 2, 4, 0};
  EXPECT_TRUE(compare_reports(elsewhere, current, DriftRules{}).drifted());
  // Two runs stopped at the same step saw the same steps (the signal does not matter).
  Report same = sample();
  same.interrupted = Interruption{"SIGTERM", 3, 4, 0};
  const DriftResult alike = compare_reports(same, current, DriftRules{});
  EXPECT_FALSE(alike.drifted()) << dump(alike);
  EXPECT_EQ(find(alike, "settings_must_match", "interrupted"), nullptr);
  // Allowed: listed, not failing.
  DriftRules lenient;
  lenient.settings_must_match = false;
  const DriftResult allowed = compare_reports(sample(), current, lenient);
  EXPECT_FALSE(allowed.drifted()) << dump(allowed);
  ASSERT_NE(find(allowed, "settings_must_match", "interrupted"), nullptr);
}

TEST(Drift, DtypeChangeToBf16AndOpTypesAppearingOrVanishing) {
  Report baseline = sample();
  Report current = sample();
  current.run.dtype = "bfloat16";
  current.op_types[0].calls = {0, 9, 3, 0, {}};  // linear: fp16 9 -> bf16 9
  current.op_types.erase(current.op_types.begin() + 2);  // softmax gone
  current.op_types.push_back({"cast", {0, 12, 0, 0, {}}});
  const DriftResult r = compare_reports(baseline, current, DriftRules{});
  for (const char* subject : {"linear", "softmax", "cast"}) {
    const Finding* f = find(r, "dtype_change", subject);
    ASSERT_NE(f, nullptr) << subject << "\n" << dump(r);
    EXPECT_TRUE(f->failing) << subject;
  }
  EXPECT_EQ(find(r, "dtype_change", "softmax")->current, "absent");
  EXPECT_TRUE(find(r, "settings_must_match", "run.dtype")->failing);
}

TEST(Drift, SameDtypeMixWithMoreCallsIsInformative) {
  Report current = sample();
  current.op_types[0].calls = {18, 0, 6, 0, {}};  // linear: twice the calls, same 3:1 mix
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  const Finding* f = find(r, "dtype_change", "linear");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_FALSE(f->failing);
  EXPECT_FALSE(r.drifted());
}

TEST(Drift, FinalLossTenPercentUp) {
  Report current = sample();
  current.summary.final_loss = 0.8125 * 1.1;
  const DriftResult strict = compare_reports(sample(), current, DriftRules{});
  EXPECT_TRUE(strict.drifted());
  const Finding* f = find(strict, "final_loss_rel", "summary.final_loss");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->failing);
  EXPECT_NE(f->detail.find("+10%"), std::string::npos) << f->detail;

  DriftRules loose;
  loose.final_loss_rel = 0.2;
  const DriftResult ok = compare_reports(sample(), current, loose);
  EXPECT_FALSE(ok.drifted()) << dump(ok);
  EXPECT_FALSE(find(ok, "final_loss_rel", "summary.final_loss")->failing);
}

TEST(Drift, FinalLossDownBeyondToleranceAndNonFiniteLoss) {
  Report current = sample();
  current.summary.final_loss = 0.8125 * 0.9;  // a baseline the run no longer resembles
  EXPECT_TRUE(compare_reports(sample(), current, DriftRules{}).drifted());
  current.summary.final_loss = std::numeric_limits<double>::quiet_NaN();
  DriftRules loose;
  loose.final_loss_rel = 100;
  EXPECT_TRUE(compare_reports(sample(), current, loose).drifted());
  Report nan_baseline = current;  // both NaN: unchanged
  EXPECT_FALSE(find(compare_reports(nan_baseline, current, DriftRules{}), "final_loss_rel", "summary.final_loss")->failing);
}

TEST(Drift, ValuesThatPrintAlikeGetAllTheirDigits) {
  Report current = sample();
  current.summary.final_loss = 0.8125 + 1e-9;  // within tolerance, but not the same number
  const DriftResult result = compare_reports(sample(), current, DriftRules{});
  const Finding* f = find(result, "final_loss_rel", "summary.final_loss");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->baseline, f->current);
  EXPECT_FALSE(f->failing);
}

// A recorded run measures no accuracy unless its script says one ("nan"): two such runs
// are not a drop (NaN != NaN must not read as a change), and neither is a measured
// accuracy against a baseline without one; a NaN against a measured baseline is lost.
TEST(Drift, AccuracyNotMeasuredIsNotChecked) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Report base = sample(), current = sample();
  base.summary.accuracy = nan;
  current.summary.accuracy = nan;
  const DriftResult both = compare_reports(base, current, DriftRules{});
  const Finding* f = find(both, "accuracy_drop", "summary.accuracy");
  ASSERT_NE(f, nullptr) << dump(both);
  EXPECT_FALSE(f->failing);
  EXPECT_EQ(f->detail.rfind("not checked: both runs' accuracy is nan", 0), 0u) << f->detail;
  EXPECT_FALSE(both.drifted()) << dump(both);

  current.summary.accuracy = 0.5;  // measured now, not before: nothing to drop from
  EXPECT_FALSE(find(compare_reports(base, current, DriftRules{}), "accuracy_drop", "summary.accuracy")->failing);

  base.summary.accuracy = 0.64;  // measured before, lost now
  current.summary.accuracy = nan;
  EXPECT_TRUE(find(compare_reports(base, current, DriftRules{}), "accuracy_drop", "summary.accuracy")->failing);
}

TEST(Drift, AccuracyDropAndSkippedSteps) {
  Report current = sample();
  current.summary.accuracy = 0.64 - 0.03;
  EXPECT_TRUE(find(compare_reports(sample(), current, DriftRules{}), "accuracy_drop", "summary.accuracy")->failing);
  current.summary.accuracy = 0.64 - 0.01;
  EXPECT_FALSE(compare_reports(sample(), current, DriftRules{}).drifted());
  current.summary.accuracy = 0.9;  // a rise is not a drop
  EXPECT_FALSE(compare_reports(sample(), current, DriftRules{}).drifted());

  Report skips = sample();
  skips.summary.skipped_steps = 2;  // the fixture skipped 1
  EXPECT_TRUE(find(compare_reports(sample(), skips, DriftRules{}), "skipped_increase", "summary.skipped_steps")->failing);
  DriftRules one;
  one.skipped_increase = 1;
  EXPECT_FALSE(compare_reports(sample(), skips, one).drifted());
}

TEST(Drift, NewOverflowFailsAndOldOverflowDoesNot) {
  Report baseline = sample();
  op(baseline, "fc1/linear#0").numerics[0].numerics.f16.overflow = 0;  // the fixture's current has 2
  const DriftResult r = compare_reports(baseline, sample(), DriftRules{});
  const Finding* f = find(r, "new_overflow", "fc1/linear#0 out: f16 overflow");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_TRUE(f->failing);
  EXPECT_EQ(f->baseline, "0");
  EXPECT_EQ(f->current, "2");
  EXPECT_EQ(failing(r).size(), 1u) << dump(r);

  DriftRules allow;
  allow.new_overflow = false;
  EXPECT_FALSE(compare_reports(baseline, sample(), allow).drifted());

  // more of what the baseline already had: shown, not failing
  Report more = sample();
  op(more, "fc1/linear#0").numerics[0].numerics.f16.overflow = 5;
  const DriftResult grown = compare_reports(sample(), more, DriftRules{});
  ASSERT_NE(find(grown, "new_overflow", "fc1/linear#0 out: f16 overflow"), nullptr);
  EXPECT_FALSE(grown.drifted()) << dump(grown);
}

TEST(Drift, NewUnderflowOnATensorAndInBf16) {
  Report current = sample();
  current.tensors[0].numerics.bf16.underflow = 7;  // param:fc1.weight; none in the fixture
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  const Finding* f = find(r, "new_overflow", "param:fc1.weight: bf16 underflow");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_TRUE(f->failing);
}

TEST(Drift, OverflowNotCheckedWithoutNumerics) {
  Report baseline = sample();
  baseline.run.inspect = "trace";
  baseline.tensors.clear();
  for (OpInstance& o : baseline.ops) o.numerics.clear(), o.local_error.reset();
  DriftRules no_settings;
  no_settings.settings_must_match = false;
  const DriftResult r = compare_reports(baseline, sample(), no_settings);
  EXPECT_FALSE(r.drifted()) << dump(r);
  EXPECT_EQ(std::count(r.checked.begin(), r.checked.end(), "new_overflow"), 0);
  EXPECT_EQ(std::count(r.checked.begin(), r.checked.end(), "error_growth"), 0);
  const Finding* f = find(r, "new_overflow", "-");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_NE(f->detail.find("not checked"), std::string::npos);
}

TEST(Drift, DtypesNotCheckedWithoutTheTable) {
  Report baseline = sample();
  baseline.run.inspect = "off";
  baseline.op_types.clear();
  Report current = baseline;
  const DriftResult r = compare_reports(baseline, current, DriftRules{});
  EXPECT_FALSE(r.drifted()) << dump(r);
  EXPECT_EQ(std::count(r.checked.begin(), r.checked.end(), "dtype_change"), 0);
  ASSERT_NE(find(r, "dtype_change", "-"), nullptr) << dump(r);
  EXPECT_NE(dump(r).find("skip  dtype_change"), std::string::npos) << dump(r);
}

TEST(Drift, NewNonFinite) {
  Report baseline = sample();
  baseline.nonfinite.producer.reset();
  baseline.nonfinite.failures.clear();
  const DriftResult r = compare_reports(baseline, sample(), DriftRules{});
  const Finding* producer = find(r, "new_nonfinite", "nonfinite.producer");
  ASSERT_NE(producer, nullptr) << dump(r);
  EXPECT_TRUE(producer->failing);
  EXPECT_EQ(producer->baseline, "none");
  EXPECT_EQ(producer->current, "linear in fc1 (forward, step 0)");
  const Finding* failures = find(r, "new_nonfinite", "nonfinite.failures");
  ASSERT_NE(failures, nullptr);
  EXPECT_TRUE(failures->failing);
  EXPECT_EQ(failures->current, "forward_non_finite at step 0");

  DriftRules allow;
  allow.new_nonfinite = false;
  EXPECT_FALSE(compare_reports(baseline, sample(), allow).drifted());
  // gone since the baseline: good news, shown
  const DriftResult fixed = compare_reports(sample(), baseline, DriftRules{});
  EXPECT_FALSE(fixed.drifted()) << dump(fixed);
  EXPECT_NE(find(fixed, "new_nonfinite", "nonfinite.producer"), nullptr);
}

TEST(Drift, ErrorGrowth) {
  Report current = sample();
  op(current, "fc1/linear#0").local_error->mean = 2.4e-4 * 3;
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  const Finding* f = find(r, "error_growth", "fc1/linear#0");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_TRUE(f->failing);
  EXPECT_NE(f->detail.find("x3"), std::string::npos) << f->detail;

  op(current, "fc1/linear#0").local_error->mean = 2.4e-4 * 1.5;
  const DriftResult within = compare_reports(sample(), current, DriftRules{});
  ASSERT_NE(find(within, "error_growth", "fc1/linear#0"), nullptr);
  EXPECT_FALSE(within.drifted()) << dump(within);

  DriftRules loose;
  loose.error_growth = 4;
  op(current, "fc1/linear#0").local_error->mean = 2.4e-4 * 3;
  EXPECT_FALSE(compare_reports(sample(), current, loose).drifted());
}

TEST(Drift, AnOpNewlyInLowPrecisionFails) {
  // softmax left the custom black list: it is measured now, and was not before
  Report current = sample();
  op(current, "/softmax#0").local_error = LocalError{4, 0, 1e-3, 5e-4, 2e-3, 5e-4, 1, 0.01};
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  const Finding* f = find(r, "error_growth", "/softmax#0");
  ASSERT_NE(f, nullptr) << dump(r);
  EXPECT_TRUE(f->failing);
  EXPECT_EQ(f->baseline, "not measured");
  // and the other way round it is only shown
  const DriftResult back = compare_reports(current, sample(), DriftRules{});
  ASSERT_NE(find(back, "error_growth", "/softmax#0"), nullptr);
  EXPECT_FALSE(find(back, "error_growth", "/softmax#0")->failing);
}

TEST(Drift, FindingsAreOrderedByRuleThenSubject) {
  Report baseline = sample();
  baseline.run.level = "O1";
  baseline.run.seed = 8;
  baseline.nonfinite = {};
  op(baseline, "fc1/linear#0").numerics[0].numerics.f16.overflow = 0;
  Report current = sample();
  current.op_types[0].calls = {0, 0, 12, 0, {}};
  current.summary.final_loss = 2;
  const DriftResult a = compare_reports(baseline, current, DriftRules{});
  const DriftResult b = compare_reports(baseline, current, DriftRules{});
  EXPECT_EQ(drift_json(a), drift_json(b));
  auto index = [](const std::string& rule) {
    return std::find(rule_names().begin(), rule_names().end(), rule) - rule_names().begin();
  };
  for (std::size_t i = 1; i < a.findings.size(); ++i) {
    const Finding &p = a.findings[i - 1], &n = a.findings[i];
    EXPECT_TRUE(index(p.rule) < index(n.rule) || (p.rule == n.rule && p.subject <= n.subject))
        << p.rule << " " << p.subject << " / " << n.rule << " " << n.subject;
  }
  EXPECT_EQ(a.findings.front().subject, "run.level");  // settings first, alphabetical
  EXPECT_EQ(a.findings[1].subject, "run.seed");
}

TEST(Drift, JsonAndTextRendering) {
  Report current = sample();
  current.summary.final_loss = 1.0;
  const DriftResult r = compare_reports(sample(), current, DriftRules{});
  const auto j = nlohmann::json::parse(drift_json(r));
  EXPECT_EQ(j["drifted"], true);
  EXPECT_EQ(j["failing"], 1);
  EXPECT_EQ(j["rules"]["final_loss_rel"], 0.05);
  EXPECT_EQ(j["rules"]["skipped_increase"], 0);
  ASSERT_EQ(j["findings"].size(), r.findings.size());
  EXPECT_EQ(j["findings"][0]["rule"], "final_loss_rel");
  EXPECT_EQ(j["findings"][0]["failing"], true);
  const std::string text = drift_text(r);
  EXPECT_NE(text.find("DRIFT: 1 failing finding (final_loss_rel)"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL"), std::string::npos) << text;
}

TEST(DriftRulesFile, DefaultsAreWhatTheDocsSay) {
  const DriftRules d;
  EXPECT_TRUE(d.settings_must_match);
  EXPECT_TRUE(d.dtype_change);
  EXPECT_EQ(d.final_loss_rel, 0.05);
  EXPECT_EQ(d.accuracy_drop, 0.02);
  EXPECT_EQ(d.error_growth, 2.0);
  EXPECT_TRUE(d.new_overflow);
  EXPECT_TRUE(d.new_nonfinite);
  EXPECT_EQ(d.skipped_increase, 0);
}

TEST(DriftRulesFile, ReadsEveryKeyAndKeepsDefaultsForTheRest) {
  const DriftRules r = rules_from_json(R"({"final_loss_rel": 0.2, "new_overflow": false,
                                           "skipped_increase": 3, "error_growth": 4})",
                                       "rules.json");
  EXPECT_EQ(r.final_loss_rel, 0.2);
  EXPECT_FALSE(r.new_overflow);
  EXPECT_EQ(r.skipped_increase, 3);
  EXPECT_EQ(r.error_growth, 4.0);
  EXPECT_EQ(r.accuracy_drop, 0.02);
  EXPECT_TRUE(r.new_nonfinite);
  const DriftRules all = rules_from_json(R"({"settings_must_match": false, "dtype_change": false,
      "accuracy_drop": 0.1, "new_nonfinite": false})", "rules.json");
  EXPECT_FALSE(all.settings_must_match);
  EXPECT_FALSE(all.dtype_change);
  EXPECT_EQ(all.accuracy_drop, 0.1);
  EXPECT_FALSE(all.new_nonfinite);
}

std::string rules_error(std::string_view text) {
  try {
    rules_from_json(text, "ci/rules.json");
  } catch (const RulesError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DriftRulesFile, ErrorsNameTheFileTheKeyAndTheFix) {
  const std::string unknown = rules_error(R"({"final_los_rel": 0.1})");
  EXPECT_NE(unknown.find("ci/rules.json"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown rule \"final_los_rel\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("did you mean \"final_loss_rel\"?"), std::string::npos) << unknown;
  const std::string dashed = rules_error(R"({"error-growth": 3})");
  EXPECT_NE(dashed.find("did you mean \"error_growth\"?"), std::string::npos) << dashed;
  const std::string far = rules_error(R"({"colour": "red"})");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("rules: settings_must_match"), std::string::npos) << far;

  const std::string type = rules_error(R"({"final_loss_rel": "5%"})");
  EXPECT_NE(type.find("\"final_loss_rel\" must be a number"), std::string::npos) << type;
  const std::string flag = rules_error(R"({"new_overflow": 1})");
  EXPECT_NE(flag.find("\"new_overflow\" must be true or false"), std::string::npos) << flag;
  const std::string whole = rules_error(R"({"skipped_increase": 1.5})");
  EXPECT_NE(whole.find("\"skipped_increase\" must be a whole number"), std::string::npos) << whole;
  const std::string range = rules_error(R"({"error_growth": 0.5})");
  EXPECT_NE(range.find("error_growth must be a factor >= 1"), std::string::npos) << range;
  const std::string negative = rules_error(R"({"accuracy_drop": -0.1})");
  EXPECT_NE(negative.find("accuracy_drop"), std::string::npos) << negative;
  EXPECT_NE(rules_error("[1, 2]").find("JSON object"), std::string::npos);
  EXPECT_NE(rules_error("{").find("line 1, column 2: not valid JSON"), std::string::npos);
  EXPECT_NE(rules_error(R"({"error_growth": 1e999})").find("line 1, column 18: the number 1e999"), std::string::npos);
}

TEST(DriftRulesFile, LoadsAFileAndNamesAMissingOne) {
  const fs::path dir = fs::temp_directory_path() /
                       ("ampcheck_rules_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  const fs::path path = dir / "rules.json";
  std::ofstream(path) << R"({"accuracy_drop": 0.05})";
  EXPECT_EQ(load_rules(path).accuracy_drop, 0.05);
  try {
    load_rules(dir / "missing.json");
    ADD_FAILURE() << "expected RulesError";
  } catch (const RulesError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(DriftRulesFile, CompareRejectsRulesOutOfRange) {
  DriftRules bad;
  bad.final_loss_rel = -1;
  EXPECT_THROW(compare_reports(sample(), sample(), bad), RulesError);
}

}  // namespace
}  // namespace ampcheck::reports

namespace ampcheck::reports {
namespace {

// ---- Training noise: the spread of `run --seeds N`, and other seeds without one ----

namespace noise {

// The definitions of docs/diff.md, "Training noise", computed here from the numbers.
double sample_sd(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size() - 1));
}

// The fixture run with another seed and other outcomes.
Report seeded(std::uint64_t seed, double final_loss, double accuracy, std::int64_t skipped) {
  Report r = sample();
  r.run.seed = seed;
  r.summary.final_loss = final_loss;
  r.summary.accuracy = accuracy;
  r.summary.skipped_steps = skipped;
  return r;
}

// A baseline recorded with seeds 7, 8, 9 (the fixture's seed is 7).
Report with_spread() {
  std::vector<Report> runs = {seeded(7, 1.0, 0.90, 1), seeded(8, 1.2, 0.86, 3), seeded(9, 0.9, 0.88, 2)};
  op(runs[1], "fc1/linear#0").numerics[0].numerics.f16.underflow = 11;  // only seed 8 saw it
  Report base = runs[0];
  base.spread = spread_of(runs);
  return base;
}

}  // namespace noise

TEST(DriftNoise, SpreadOfHoldsEachSeedAndTheLargestCounts) {
  std::vector<Report> runs = {noise::seeded(7, 1.0, 0.90, 1), noise::seeded(8, 1.2, 0.86, 3)};
  op(runs[1], "fc1/linear#0").numerics[0].numerics.f16.underflow = 11;
  op(runs[0], "fc1/linear#0").local_error->mean = 0.01;
  op(runs[1], "fc1/linear#0").local_error->mean = 0.03;
  const Spread sp = spread_of(runs);
  ASSERT_EQ(sp.seeds.size(), 2u);
  EXPECT_EQ(sp.seeds[0].seed, 7u);
  EXPECT_EQ(sp.seeds[1].seed, 8u);
  EXPECT_EQ(sp.seeds[1].final_loss, 1.2);
  EXPECT_EQ(sp.seeds[1].accuracy, 0.86);
  EXPECT_EQ(sp.seeds[1].skipped_steps, 3);
  const auto seen = std::find_if(sp.low_precision.begin(), sp.low_precision.end(),
                                 [](const LowPrecisionSeen& s) { return s.key == "fc1/linear#0 out"; });
  ASSERT_NE(seen, sp.low_precision.end());
  EXPECT_EQ(seen->f16.underflow, 11);
  EXPECT_EQ(seen->f16.overflow, 2);  // the fixture's own 2, in both seeds
  const auto err = std::find_if(sp.local_error.begin(), sp.local_error.end(),
                                [](const LocalErrorSeen& e) { return e.name == "fc1/linear#0"; });
  ASSERT_NE(err, sp.local_error.end());
  EXPECT_EQ(err->mean, 0.03);
  EXPECT_THROW(spread_of({sample()}), std::invalid_argument);
  Report other_level = noise::seeded(8, 1, 1, 0);
  other_level.run.level = "O1";
  EXPECT_THROW(spread_of({sample(), other_level}), std::invalid_argument);
}

TEST(DriftNoise, FinalLossIsJudgedAgainstTheSeedsWidenedByTwoSd) {
  const Report base = noise::with_spread();
  const double sd = noise::sample_sd({1.0, 1.2, 0.9});
  const double w = std::max(0.05 * 1.0, 2 * sd);  // the rule's 5% of the baseline, or 2 sd
  const double edge = 1.2 + w;
  // just inside and just outside the upper edge, and the same below the lowest seed
  for (const auto& [loss, fails] : std::vector<std::pair<double, bool>>{
           {edge * (1 - 1e-9), false}, {edge * (1 + 1e-6), true}, {(0.9 - w) * (1 + 1e-6), false}, {(0.9 - w) * (1 - 1e-6), true}}) {
    const DriftResult r = compare_reports(base, noise::seeded(11, loss, 0.9, 1), DriftRules{});
    const Finding* f = find(r, "final_loss_rel", "summary.final_loss");
    ASSERT_NE(f, nullptr) << dump(r);
    EXPECT_EQ(f->failing, fails) << loss << ": " << dump(r);
    EXPECT_EQ(r.noise.source, "spread");
  }
  // +15% against the baseline's own seed fails without the spread, passes with it
  EXPECT_TRUE(find(compare_reports(sample(), noise::seeded(7, 0.8125 * 1.15, 0.9, 1), DriftRules{}), "final_loss_rel",
                   "summary.final_loss")
                  ->failing);
}

TEST(DriftNoise, AccuracyAndSkippedStepsAgainstTheSeeds) {
  const Report base = noise::with_spread();
  const double floor = 0.86 - std::max(0.02, 2 * noise::sample_sd({0.90, 0.86, 0.88}));
  EXPECT_FALSE(find(compare_reports(base, noise::seeded(11, 1.0, floor + 1e-9, 1), DriftRules{}), "accuracy_drop",
                    "summary.accuracy")
                   ->failing);
  EXPECT_TRUE(find(compare_reports(base, noise::seeded(11, 1.0, floor - 1e-6, 1), DriftRules{}), "accuracy_drop",
                   "summary.accuracy")
                  ->failing);
  // the seeds skipped up to 3: 3 passes, 4 fails (skipped_increase 0)
  EXPECT_FALSE(find(compare_reports(base, noise::seeded(11, 1.0, 0.9, 3), DriftRules{}), "skipped_increase",
                    "summary.skipped_steps")
                   ->failing);
  EXPECT_TRUE(find(compare_reports(base, noise::seeded(11, 1.0, 0.9, 4), DriftRules{}), "skipped_increase",
                   "summary.skipped_steps")
                  ->failing);
}

TEST(DriftNoise, OverflowSomeSeedSawIsNotNew) {
  const Report base = noise::with_spread();
  Report current = noise::seeded(11, 1.0, 0.9, 1);
  op(current, "fc1/linear#0").numerics[0].numerics.f16.underflow = 4;  // seed 8 saw 11
  const DriftResult seen = compare_reports(base, current, DriftRules{});
  EXPECT_FALSE(seen.drifted()) << dump(seen);
  // an underflow no seed saw is listed, not judged (which values underflow moves with the
  // seed); an overflow no seed saw is drift
  current.tensors[0].numerics.bf16.underflow = 3;
  const DriftResult under = compare_reports(base, current, DriftRules{});
  const Finding* u = find(under, "new_overflow", "param:fc1.weight: bf16 underflow");
  ASSERT_NE(u, nullptr) << dump(under);
  EXPECT_FALSE(u->failing);
  current.tensors[0].numerics.bf16.overflow = 2;
  const DriftResult over = compare_reports(base, current, DriftRules{});
  const Finding* f = find(over, "new_overflow", "param:fc1.weight: bf16 overflow");
  ASSERT_NE(f, nullptr) << dump(over);
  EXPECT_TRUE(f->failing);
  // the same seed and no spread: a new underflow is drift, as before
  Report same = sample();
  same.tensors[0].numerics.bf16.underflow = 3;
  EXPECT_TRUE(find(compare_reports(sample(), same, DriftRules{}), "new_overflow", "param:fc1.weight: bf16 underflow")->failing);
}

TEST(DriftNoise, AnotherSeedWithoutASpreadUsesTheLossScatterOfTheLastSteps) {
  // Twelve steps each, so the tail is 10 steps (at least 10, else a quarter).
  auto with_losses = [](std::uint64_t seed, const std::vector<double>& losses) {
    Report r = sample();
    r.run.seed = seed;
    r.steps.clear();
    for (std::size_t i = 0; i < losses.size(); ++i) r.steps.push_back({static_cast<std::int64_t>(i), losses[i], 1, false, false, {}, {}, {}, {}});
    r.summary.final_loss = losses.back();
    r.summary.accuracy = seed == 7 ? 0.95 : 0.50;  // a drop no rule may judge without a spread
    r.summary.skipped_steps = seed == 7 ? 0 : 5;
    return r;
  };
  const std::vector<double> b = {9, 9, 1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0};
  const double sd = noise::sample_sd({1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0});
  std::vector<double> inside = b, outside = b;
  inside.back() = 1.0 + 3 * sd * 0.999;
  outside.back() = 1.0 + 3 * sd * 1.01;
  // the current run's own tail scatter must not exceed the baseline's for this check
  inside[10] = outside[10] = 1.2;
  const DriftResult in = compare_reports(with_losses(7, b), with_losses(8, inside), DriftRules{});
  EXPECT_EQ(in.noise.source, "jitter");
  EXPECT_NEAR(in.noise.loss_sd, std::max(sd, noise::sample_sd(std::vector<double>(inside.end() - 10, inside.end()))), 1e-12);
  const Finding* seed = find(in, "settings_must_match", "run.seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_FALSE(seed->failing);
  const DriftResult out = compare_reports(with_losses(7, b), with_losses(8, outside), DriftRules{});
  const double allowed_in = 3 * in.noise.loss_sd, allowed_out = 3 * out.noise.loss_sd;
  EXPECT_EQ(find(in, "final_loss_rel", "summary.final_loss")->failing, !(inside.back() - 1.0 <= allowed_in)) << dump(in);
  EXPECT_EQ(find(out, "final_loss_rel", "summary.final_loss")->failing, !(outside.back() - 1.0 <= allowed_out)) << dump(out);
  // accuracy, skipped steps and overflow are listed, not judged
  for (const DriftResult* r : {&in, &out}) {
    EXPECT_FALSE(find(*r, "accuracy_drop", "summary.accuracy")->failing);
    EXPECT_FALSE(find(*r, "skipped_increase", "summary.skipped_steps")->failing);
    EXPECT_EQ(std::count(r->checked.begin(), r->checked.end(), "accuracy_drop"), 0);
    EXPECT_EQ(std::count(r->checked.begin(), r->checked.end(), "new_overflow"), 0);
  }
  // a collapse is still drift: the loss far beyond the scatter
  std::vector<double> broken = b;
  broken.back() = 9;
  EXPECT_TRUE(compare_reports(with_losses(7, b), with_losses(8, broken), DriftRules{}).drifted());
}

TEST(DriftNoise, TheSameSeedWithoutASpreadAllowsNoNoise) {
  const DriftResult r = compare_reports(sample(), sample(), DriftRules{});
  EXPECT_EQ(r.noise.source, "none");
  EXPECT_NE(drift_text(r).find("noise: no training noise allowed"), std::string::npos) << dump(r);
  const nlohmann::json j = nlohmann::json::parse(drift_json(r));
  EXPECT_EQ(j.at("noise").at("source"), "none");
}

}  // namespace
}  // namespace ampcheck::reports
