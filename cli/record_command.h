// `ampcheck record -- CMD ARGS...`: the user's own PyTorch training script, unmodified, run
// with ampcheck's recorder injected (cli/recorder_process.h, docs/recorder.md); the same
// summary `run` prints, and the JSON and HTML reports, of their real run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cli/command.h"

namespace ampcheck::cli {

// record --kernels N: the PyTorch profile of steps 2..N+1 (`trace`, a Chrome trace the
// recorder wrote) read as `ampcheck kernels` reads a profile (profiles/, inspector/
// profile_check.h). `text` is the section record prints (or why there is none: no trace, a
// CPU run's profile without GPU kernels); `json` the KernelsReport, "" when none.
struct KernelsCheck {
  std::string text, json, verdict, verdict_text;
};
KernelsCheck check_recorded_kernels(const std::filesystem::path& trace, std::int64_t steps, const std::string& device);

// Exit 0: the run is healthy; 1: the run failed (a NaN producer, a collapsing scale, ...);
// 2: bad usage, or no recording (the command not found, PyTorch not importable, the
// recorder could not start: the message says which); 3: the recorder stopped on its own
// error; 4 (kScriptFailed): the script itself failed (its exit code and error are
// printed, the steps it ran are reported); 130: interrupted.
Command add_record_command(CLI::App& app);

}  // namespace ampcheck::cli
