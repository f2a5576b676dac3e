// `ampcheck bisect-nan`: where the first non-finite value comes from, and the smallest
// set of op types (or op instances: module paths) to run in fp32 so that the run becomes
// healthy, found by delta debugging with one full training run per trial.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

// Exit 0: a fix was found (or the run was healthy as configured); 1: no black list of
// the candidates made it healthy; 130 (kInterrupted): Ctrl-C or SIGTERM stopped a run,
// the report holds the trials judged before it and claims no fix; bad options throw
// UsageError.
Command add_bisect_command(CLI::App& app);

}  // namespace ampcheck::cli
