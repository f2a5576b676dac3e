// The user's own PyTorch script run under ampcheck's recorder (recorder/, docs/recorder.md):
// what `ampcheck record` and `bisect-nan --script` start. The recorder is injected at the
// interpreter's start (its bootstrap folder first on PYTHONPATH, its options in
// AMPCHECK_RECORD_* variables), so the script runs unmodified and its exit code is its
// own; the recorder writes ampcheck's report JSON at the interpreter's exit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "reports/report.h"

namespace ampcheck::cli {

// The recorder's bootstrap folder (…/ampcheck_recorder/_bootstrap): AMPCHECK_RECORDER (the
// folder holding the ampcheck_recorder package) when set, else the source tree this
// binary was built from, else an installed package as `python` finds it. Throws
// UsageError naming the fix when none is found.
std::string recorder_bootstrap(const std::string& python);

// The Python interpreter a command starts: its first word when that is one (python,
// python3.11, /venv/bin/python), else "python3".
std::string python_of(const std::vector<std::string>& command);

struct RecordRequest {
  // The command as words (`record -- python train.py`), or one shell line for `sh -c`
  // (`bisect-nan --script "python train.py --steps 50"`).
  std::vector<std::string> argv;
  std::string shell;
  std::string inspect = "stats";
  std::vector<std::string> fp32_ops, fp32_modules, allow_inf;
  double max_skipped = 0.05;
  std::int64_t stats_every = 1;
  std::string listen = "auto";  // the steps heard op by op: auto or all (recorder.py, LISTEN_POLICIES)
  // record --kernels N: steps 2..N+1 under PyTorch's profiler, its Chrome trace written to
  // kernels_out (a rank's beside it: NAME.rankR.json); 0: none.
  std::int64_t kernels = 0;
  std::string kernels_out;
  std::optional<std::uint64_t> seed;  // AMPCHECK_RECORD_SEED: torch.manual_seed at torch's import
  bool amp_off = false;  // AMPCHECK_RECORD_AMP=off: the script's fp32 twin (recorder/ampcheck_recorder/twin.py)
  std::int64_t seed_offset = 0;  // AMPCHECK_RECORD_SEED_OFFSET: the script's own seeds shifted by this (twin.py)
  // bisect-nan --script's trials of the cures that are no op (recorder/ampcheck_recorder/twin.py):
  // AMPCHECK_RECORD_FP32_OPTIMIZER_STATE=on keeps the script's casts to 16 bits inside the
  // optimizer's step in fp32; AMPCHECK_RECORD_FP32_MASTER_WEIGHTS=on keeps its model in fp32
  // and runs it under autocast at the dtype it cast the model to.
  bool fp32_optimizer_state = false, fp32_master_weights = false;
  // AMPCHECK_RECORD_TWIN_DUMP / _AGAINST (recorder/ampcheck_recorder/probe.py): the fp32 twin
  // keeps samples of its first step's forward there; the AMP run sets its own beside them.
  std::string twin_dump, twin_against;
  // Where the script's standard output and error go: inherited (""), or appended to this
  // file (bisect-nan's trials, whose output is not the user's to read).
  std::string output_file;
  bool stdout_to_stderr = false;  // --json: the script's prints must not mix with the JSON
};

struct Recording {
  int exit_code = 0;             // the script's exit status; 128 + N when signal N ended it
  bool started = false;         // the command could be started at all
  std::optional<std::string> report;  // the report's bytes; none when the recorder wrote none
  // A job a launcher started (torchrun ...): each rank's report's bytes, by rank; empty for
  // a lone process. A rank that wrote none has an empty string.
  std::vector<std::string> rank_reports;
  std::string why_no_report;    // then: the reason, naming the fix
};

// Runs the request with the recorder injected and waits for it. Ctrl-C reaches the script
// (the terminal's process group) and the recorder writes the steps run, marked
// interrupted; a SIGTERM to ampcheck alone is passed on to the script. A command that
// cannot be started (not on PATH) throws UsageError.
Recording record_process(const RecordRequest& request);

// A recording read: the report (the model the C++ side reads) and the bytes the recorder
// wrote (which keep the recorder's own fields). No report throws UsageError with the
// reason; a report that cannot be read throws std::runtime_error (a recorder bug).
struct RecordedRun {
  reports::Report report;
  std::string json;
  int exit_code = 0;
  // A job a launcher started: each rank's own recording, in rank order, and the above is
  // the job's: the first failed rank's report (else rank 0's) with the ranks' consensus
  // (`distributed`, inspector/consensus.h) and a verdict that includes it.
  std::vector<RecordedRun> ranks;
  bool script_failed() const;  // a non-zero exit, or an uncaught exception (run.script_outcome)
  bool run_failed() const;     // the verdict: failed or gradient_underflow
};
RecordedRun recorded_run(const RecordRequest& request);

// The fix in PyTorch's terms, as the recorder writes it (`python -m ampcheck_recorder
// advice`): its keep_fp32 helper and the plain-PyTorch form (autocast disabled, inputs
// .float()) for these op types and module paths, on `device` ("cpu", "cuda"). Throws
// UsageError when the recorder cannot be run.
// `report_json`, when given, is the recording the fix is for: its modules outside the model
// and the script's own casts into fp16/bf16 shape the advice.
std::string recorder_advice(const std::string& python, const std::vector<std::string>& ops,
                            const std::vector<std::string>& modules, const std::string& device,
                            const std::string& report_json = "");

// A scratch folder (in TMPDIR), removed with it.
struct ScratchFolder {
  std::filesystem::path dir;
  ScratchFolder();
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
};

// Splits a shell line into words as sh would for plain words and quotes (no expansion):
// what names the interpreter of a --script line.
std::vector<std::string> shell_words(const std::string& line);

// The ops (granularity "type") or module paths ("instance") that produced the run's NaN/Inf,
// first occurrence each.
std::vector<std::string> producer_keys(const reports::Report& r, const std::string& granularity);

// Where two runs of the unchanged script first differ, in a few words; "" when they agree
// (the same bytes, or the same steps, losses, scales, verdict and producers).
std::string first_difference(const RecordedRun& a, const RecordedRun& b);

// A scratch file for the output of a script's runs that is not the user's to read (the
// trials' prints), removed with it. Throws UsageError naming `command` when none can be made.
struct ScratchLog {
  std::string path;
  explicit ScratchLog(const std::string& command);
  ~ScratchLog();
  ScratchLog(const ScratchLog&) = delete;
  ScratchLog& operator=(const ScratchLog&) = delete;
};

}  // namespace ampcheck::cli
