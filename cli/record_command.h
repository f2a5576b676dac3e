// `ampcheck record -- CMD ARGS...`: the user's own PyTorch training script, unmodified, run
// with ampcheck's recorder injected (cli/recorder_process.h, docs/recorder.md); the same
// summary `run` prints, and the JSON and HTML reports, of their real run.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

// Exit 0: the run is healthy; 1: the run failed (a NaN producer, a collapsing scale, ...);
// 2: bad usage, or no recording (the command not found, PyTorch not importable, the
// recorder could not start: the message says which); 3: the recorder stopped on its own
// error; 4 (kScriptFailed): the script itself failed (its exit code and error are
// printed, the steps it ran are reported); 130: interrupted.
Command add_record_command(CLI::App& app);

}  // namespace ampcheck::cli
