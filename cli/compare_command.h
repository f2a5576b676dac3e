// `ampcheck compare --levels O0,O1,O2`: the same model, seed and data trained at several
// AMP levels in lock step; per op instance, each level's output error against the
// reference level (O0 when listed), averaged and worst over the steps, the loss curves
// side by side, and the ops whose error grows fastest.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

// Exit 0; 1 when a level's loss became non-finite; 130 (kInterrupted): Ctrl-C or SIGTERM
// stopped it after a lock step, the report covers the steps run; bad options throw
// UsageError.
Command add_compare_command(CLI::App& app);

}  // namespace ampcheck::cli
