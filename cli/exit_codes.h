// The exit codes of every ampcheck command (documented in README.md).
#pragma once

namespace ampcheck::cli {

enum ExitCode : int {
  kOk = 0,           // done, nothing wrong found
  kCheckFailed = 1,  // the check ran and found a problem (drift, a NaN with no fix, ...)
  kUsage = 2,        // bad usage or bad input: the message names the thing and the fix
  kInternal = 3,     // a bug or an environment failure inside ampcheck
  // record, bisect-nan --script: the user's own script failed (an uncaught exception, a
  // non-zero exit); the steps it ran are still reported, with its exit code and error.
  kScriptFailed = 4,
  // Ctrl-C (SIGINT) or SIGTERM stopped the training: the reports of the steps run were
  // written, marked interrupted. main() then ends by the signal (cli/interrupt.h), which
  // a shell shows as 128 + its number: 130 for Ctrl-C.
  kInterrupted = 130,
};

}  // namespace ampcheck::cli
