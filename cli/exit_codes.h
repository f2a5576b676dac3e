// The exit codes of every ampcheck command (documented in README.md).
#pragma once

namespace ampcheck::cli {

enum ExitCode : int {
  kOk = 0,           // done, nothing wrong found
  kCheckFailed = 1,  // the check ran and found a problem (drift, a NaN with no fix, ...)
  kUsage = 2,        // bad usage or bad input: the message names the thing and the fix
  kInternal = 3,     // a bug or an environment failure inside ampcheck
};

}  // namespace ampcheck::cli
