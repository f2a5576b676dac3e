#include "cli/diff_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <memory>

#include "cli/exit_codes.h"
#include "cli/usage_error.h"
#include "reports/atomic_file.h"  // write_file_atomically
#include "reports/drift.h"        // compare_reports, DriftRules
#include "reports/json.h"         // read_report
#include "reports/junit.h"        // drift_junit

namespace ampcheck::cli {
namespace {

CLI::App* add_options(CLI::App& app, DiffOptions& o) {
  CLI::App* diff = app.add_subcommand(
      "diff", "Compare a run's report with a baseline's: exit 1 on precision drift (docs/diff.md)");
  diff->add_option("baseline", o.baseline, "the baseline report (ampcheck run --report baseline.json)")
      ->required();
  diff->add_option("current", o.current, "the report of the run to check")->required();
  diff->add_option("--rules", o.rules, "a JSON file of rule values (docs/diff.md); flags override it");
  diff->add_option("--final-loss-rel", o.final_loss_rel,
                   "relative change of the final loss allowed, either way (default 0.05)");
  diff->add_option("--accuracy-drop", o.accuracy_drop, "absolute accuracy drop allowed (default 0.02)");
  diff->add_option("--error-growth", o.error_growth,
                   "factor an op's mean local error may grow by (default 2; needs --inspect full)");
  diff->add_option("--skipped-increase", o.skipped_increase, "more skipped steps allowed (default 0)");
  diff->add_flag("--allow-new-overflow", o.allow_new_overflow,
                 "do not fail on fp16/bf16 overflow or underflow the baseline did not have");
  diff->add_flag("--allow-new-nonfinite", o.allow_new_nonfinite,
                 "do not fail on NaN/Inf the baseline did not have");
  diff->add_flag("--allow-settings-change", o.allow_settings_change,
                 "do not fail when the run settings (level, dtype, model, steps, ...) differ");
  diff->add_flag("--allow-dtype-change", o.allow_dtype_change,
                 "do not fail when op types run in other dtypes");
  diff->add_flag("--json", o.json, "print JSON instead of a table");
  diff->add_option("--junit", o.junit, "also write JUnit XML here (atomically), for CI test reports");
  return diff;
}

reports::Report read(const std::string& path, std::string_view role) {
  try {
    return reports::read_report(path);
  } catch (const reports::ReportError& e) {
    throw UsageError(fmt::format("diff: the {} report: {}", role, e.what()));
  }
}

reports::DriftRules rules(const DiffOptions& o, const CLI::App& diff) {
  reports::DriftRules r;
  try {
    if (!o.rules.empty()) r = reports::load_rules(o.rules);
  } catch (const reports::RulesError& e) {
    throw UsageError(std::string("diff: ") + e.what());
  }
  // A flag given overrides the file; its value is checked on its own so that the error
  // names the flag.
  auto flag = [&](const char* name, auto apply) {
    if (!diff.count(name)) return;
    reports::DriftRules alone;
    apply(alone);
    try {
      reports::validate(alone);
    } catch (const reports::RulesError& e) {
      throw UsageError(fmt::format("diff: {}: {}", name, e.what()));
    }
    apply(r);
  };
  flag("--final-loss-rel", [&](reports::DriftRules& x) { x.final_loss_rel = o.final_loss_rel; });
  flag("--accuracy-drop", [&](reports::DriftRules& x) { x.accuracy_drop = o.accuracy_drop; });
  flag("--error-growth", [&](reports::DriftRules& x) { x.error_growth = o.error_growth; });
  flag("--skipped-increase", [&](reports::DriftRules& x) { x.skipped_increase = o.skipped_increase; });
  if (o.allow_new_overflow) r.new_overflow = false;
  if (o.allow_new_nonfinite) r.new_nonfinite = false;
  if (o.allow_settings_change) r.settings_must_match = false;
  if (o.allow_dtype_change) r.dtype_change = false;
  return r;
}

std::string describe(const reports::Report& r) {
  const auto& i = r.interrupted;
  return fmt::format("{} {} {}, {} steps{}", r.run.model, r.run.level, r.run.dtype, r.run.steps,
                     !i ? "" : i->bisect_run > 1 ? ", bisect-nan search interrupted"
                                                 : fmt::format(", interrupted after {}", i->steps_run));
}

int run_diff(const DiffOptions& o, const CLI::App& diff, std::ostream& out) {
  const reports::Report baseline = read(o.baseline, "baseline");
  const reports::Report current = read(o.current, "current");
  const reports::DriftResult result = reports::compare_reports(baseline, current, rules(o, diff));

  if (!o.junit.empty()) {
    try {
      reports::write_file_atomically(o.junit, reports::drift_junit(result));
    } catch (const reports::WriteError& e) {
      throw UsageError(std::string("diff: --junit: ") + e.what());
    }
  }
  if (o.json) {
    out << reports::drift_json(result);
  } else {
    out << fmt::format("baseline: {} ({})\ncurrent:  {} ({})\n\n", o.baseline, describe(baseline), o.current,
                       describe(current))
        << reports::drift_text(result);
  }
  return result.drifted() ? kCheckFailed : kOk;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto options = std::make_shared<DiffOptions>();
  CLI::App* diff = add_options(app, *options);
  return {diff, [options, diff](std::ostream& out, std::ostream&) { return run_diff(*options, *diff, out); }};
}

}  // namespace ampcheck::cli
