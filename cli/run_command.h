// `ampcheck run`: trains a sample under the AMP settings asked for, with the inspector
// attached, ends with a summary a person reads in ten seconds, and writes the reports
// asked for (JSON, HTML, Chrome trace).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/run_options.h"
#include "inspector/inspector.h"
#include "reports/chrome_trace.h"
#include "reports/report.h"

namespace ampcheck::cli {

// Exit 0: healthy; 1: the inspector found a real failure (a non-finite forward value, a
// collapsing scale, too many skipped steps); 130 (kInterrupted): Ctrl-C or SIGTERM
// stopped it, the reports of the steps run are written; bad options throw UsageError.
Command add_run_command(CLI::App& app);

// One instrumented training run, as `run` does it and `bisect-nan` repeats it: the
// report of it (summary and verdict included) and whether it failed.
struct InstrumentedRun {
  reports::Report report;
  bool failed = false;
  std::string failure;  // what failed first, in a few words
  std::vector<reports::TraceSpan> spans;  // with keep_spans
  std::vector<std::string> fp8_failed_layers;  // --fp8: the layers whose casts failed the run, first first
};

// Calls whose kernel ran in fp8 (fp8_linear's), over every op type of a report.
std::int64_t fp8_calls(const reports::Report& report);
struct RunSetup {
  std::string command = "run";
  inspector::Mode mode = inspector::Mode::full;
  // Full mode: statistics and local errors every N-th step, and on the N steps after each
  // step whose gradients held Inf/NaN (inspector::InspectorOptions); 1: every step.
  std::int64_t inspect_every = 1;
  int glog_level = 0;
  std::ostream* glog = nullptr;
  bool keep_spans = false;
  double max_skipped_fraction = 0.05;  // more skipped updates than this fails the run
  std::string progress_label;  // "" for none
  // Asked after each training step but the last: true stops the training there, and the
  // report is marked interrupted with the steps run (the CLI's is InterruptScope's, so
  // that nothing below the CLI knows of signals). Unset: every step runs.
  std::function<bool()> stop;
};
InstrumentedRun instrumented_run(const RunArgs& args, const Resolved& resolved, const RunSetup& setup,
                                 std::ostream& err);

// The verdict of a finished report (summary.verdict and verdict_text).
void set_verdict(reports::Report& report, bool inspected_trace, bool failed, const std::string& failure);

// Marks `report` interrupted and narrows its verdict to what was seen: a failure seen
// stays "failed" (it happened); anything else becomes "interrupted", whose text says
// "interrupted after N of M steps" and what the steps run showed. The signal is
// interrupt_signal_name()'s.
void mark_interrupted(reports::Report& report, std::int64_t steps_run, std::int64_t steps_requested,
                      std::int64_t bisect_run = 0);

}  // namespace ampcheck::cli
