// `ampcheck diff`: a run's report against a baseline's, the CI gate for precision drift
// (reports/drift.h; docs/diff.md).
#pragma once

#include <cstdint>
#include <string>

#include "cli/command.h"

namespace ampcheck::cli {

struct DiffOptions {
  std::string baseline, current;  // report files (ampcheck run --report)
  std::string rules;              // a rules file; "" for the defaults
  // Each overrides the rules file when given on the command line.
  double final_loss_rel = 0, accuracy_drop = 0, error_growth = 0;
  std::int64_t skipped_increase = 0;
  bool allow_new_overflow = false, allow_new_nonfinite = false;
  bool allow_settings_change = false, allow_dtype_change = false;
  bool json = false;
  std::string junit;  // write JUnit XML here; "" for none
};

Command add_diff_command(CLI::App& app);

}  // namespace ampcheck::cli
