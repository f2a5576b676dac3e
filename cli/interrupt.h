// Ctrl-C (SIGINT) and SIGTERM during the commands that train (run, bisect-nan, compare).
// The process-level concern lives here, in the CLI: the training loop only sees a stop
// predicate (RunSetup::stop), and the engine installs no signal handler.
//
// - The first signal only sets a flag (async-signal-safe). The training stops after the
//   step it is in, the command writes its reports marked interrupted and prints its
//   summary, and the process ends with kInterrupted: main() re-raises the signal with its
//   default action, so a shell sees 130 for Ctrl-C (143 for SIGTERM) and a script or
//   loop around ampcheck stops too.
// - A second one (either signal) ends the process at once, by that signal. While a report
//   file is being written (ReportWrite) it waits for that one file to be in place, so it
//   never leaves a half-written report nor the atomic writer's temporary file.
// - SIGTERM is treated like Ctrl-C: a CI runner cancels a job with it and the reports of
//   the steps run are worth keeping.
// - A signal ignored when ampcheck started (a background job of a shell without job
//   control) stays ignored, as the shell meant.
#pragma once

#include <functional>
#include <string_view>

namespace ampcheck::cli {

// While one is alive, SIGINT and SIGTERM are handled as above; its destructor restores
// what was there before. One at a time (a second throws std::logic_error).
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  // The stop predicate for RunSetup::stop: true once a signal arrived.
  static std::function<bool()> stop_predicate();
};

// True once SIGINT or SIGTERM arrived in the current (or last) InterruptScope.
bool interrupt_requested();
// "SIGINT" or "SIGTERM" once one arrived, else "".
std::string_view interrupt_signal_name();

// Around the write of one report file: a second signal that arrives meanwhile ends the
// process right after the file is in place (or its write failed and cleaned up).
class ReportWrite {
 public:
  ReportWrite();
  ~ReportWrite();
  ReportWrite(const ReportWrite&) = delete;
  ReportWrite& operator=(const ReportWrite&) = delete;
};

// For main(), after a command returned kInterrupted: flushes stdout and stderr, then ends
// the process by the signal that interrupted it (its default action). Returns only when
// there was none (a command stopped by something else) or it could not be raised.
void end_by_interrupting_signal();

}  // namespace ampcheck::cli
