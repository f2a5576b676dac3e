// Precision drift: a run's report against a baseline's, under rules a CI job can keep in
// a file. Runs are bit-reproducible (same seed, inputs and backend => the same report),
// so two runs of an unchanged setup give no failing finding; the rules say how much a
// changed setup (code, kernels, AMP policy) may move the numbers. docs/diff.md documents
// each rule and the exit codes of `ampcheck diff`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reports/report.h"

namespace ampcheck::reports {

// A rules file or value that cannot be used: names the file, the key and the fix.
class RulesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a current run may differ from its baseline by. The member names are the keys of a
// rules file and the `rule` of each finding.
struct DriftRules {
  // The run settings (command, model, level, dtype, device, seed, steps, batch, lr,
  // optimizer, inspect mode, AMP lists and loss scaling) must be equal: CI compares like
  // for like, and a baseline recorded under other settings no longer says anything. An
  // interrupted run (Report::interrupted) differs from a complete one here too.
  bool settings_must_match = true;
  // The per-op-type dtype table (calls per kernel dtype) must keep its mix: an op type
  // that ran fp16 and now runs fp32, or the reverse, or one that appears or disappears.
  bool dtype_change = true;
  // |current - baseline| / |baseline| of summary.final_loss allowed, either way: 5% is
  // well above the jitter of an unchanged kernel and well below a real regression.
  double final_loss_rel = 0.05;
  // Absolute drop of summary.accuracy (in [0, 1]) allowed: 2 points.
  double accuracy_drop = 0.02;
  // Per op instance (matched by name): current local_error.mean / baseline's allowed. An
  // op measured now but not in the baseline (it newly runs in low precision) fails too.
  // Checked when both runs used --inspect full (the only mode that measures it).
  double error_growth = 2.0;
  // An op output or tensor whose fp16/bf16 overflow or underflow count was 0 in the
  // baseline and is not now fails.
  bool new_overflow = true;
  // A current run with a non-finite producer or failures fails when the baseline had none.
  bool new_nonfinite = true;
  // Allowed increase of summary.skipped_steps: 0, since a reproducible run skips exactly
  // the steps it skipped before.
  std::int64_t skipped_increase = 0;
};

// The rule names in the order findings are listed.
const std::vector<std::string_view>& rule_names();

// Rules from a JSON object of rule names to values; keys not given keep their defaults.
// `source` names the text in errors. Throws RulesError: not a JSON object, an unknown key
// (with the closest rule name), a value of the wrong type or out of range (naming the key).
DriftRules rules_from_json(std::string_view text, std::string_view source);
// Reads a rules file; a missing or unreadable file is a RulesError naming it.
DriftRules load_rules(const std::filesystem::path& path);
// Throws RulesError naming the first rule whose value is out of range.
void validate(const DriftRules& rules);

// One observation: a rule's verdict on one subject (an op type, an op instance, a
// setting, a summary value). Values are formatted as text, ready to print.
struct Finding {
  std::string rule;     // a rule name
  std::string subject;  // "summary.final_loss", "run.level", "linear", "fc1/linear#0 out f16"
  std::string baseline, current;
  std::string detail;   // why it fails, or why it does not
  bool failing = false;
};

// How much the numbers move by training noise alone, which the rules allow on top of
// their own tolerance (docs/diff.md, "Training noise"):
//   spread: a report's `spread` (run --seeds N), the baseline's or else the current's;
//   jitter: the seeds differ and neither report has a spread: the final loss is one draw
//           of the loss the last steps scatter around, so their spread stands for it;
//   none:   the same seed and no spread: the runs are bit-reproducible, so the numbers
//           must be reproduced within the rules alone.
struct Noise {
  std::string source = "none";  // "spread", "jitter", "none"
  std::string description;      // one line for the output
  std::vector<std::uint64_t> seeds;  // spread: the seeds measured
  // The final loss: spread: min, max and standard deviation over the seeds; jitter: the
  // standard deviation of the last `tail_steps` step losses (the larger of the two runs').
  double loss_min = 0, loss_max = 0, loss_sd = 0;
  std::int64_t tail_steps = 0;
  double accuracy_min = 0, accuracy_sd = 0;  // spread only
  std::int64_t skipped_max = 0;              // spread only
};

struct DriftResult {
  DriftRules rules;                  // as applied
  Noise noise;                       // the training noise the numbers were judged against
  std::vector<std::string> checked;  // the rules evaluated, in rule_names() order
  // Failing and informative, ordered by rule (rule_names()), then subject, then detail.
  std::vector<Finding> findings;
  bool drifted() const;
  std::size_t failing() const;
};

// The spread of runs of one configuration that differ only in their seed, the first being
// the report's own run (`ampcheck run --seeds N`). Throws std::invalid_argument for fewer
// than two runs or runs of other settings.
Spread spread_of(const std::vector<Report>& runs);

// Only what differs is listed, plus the summary numbers (loss, accuracy, skipped steps),
// which always are, so that a reader sees them. A rule switched off still lists what it
// saw, as informative findings.
DriftResult compare_reports(const Report& baseline, const Report& current, const DriftRules& rules);

// A table of the findings and a last line with the verdict.
std::string drift_text(const DriftResult& result);
// {"ampcheck_diff": 1, "drifted": ..., "failing": N, "rules": {...}, "checked": [...],
//  "findings": [{rule, subject, baseline, current, detail, failing}]}, indented by 2.
std::string drift_json(const DriftResult& result);

}  // namespace ampcheck::reports
