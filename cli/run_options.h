// The training options `run`, `bisect-nan` and `compare` share, their parsing into the
// engine's settings (bad values become UsageError naming the option and the fix), and
// the report's run section that records them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <ostream>
#include <string>
#include <vector>

#include "reports/report.h"
#include "models/runner.h"

namespace CLI {
class App;
}

namespace ampcheck::cli {

// Unset optionals take the model file's value (its "train" and "amp" blocks), else the
// defaults below.
struct RunArgs {
  static constexpr std::string_view kLevel = "O2", kDtype = "float16";
  std::string model = "mlp";  // a sample's name, a model file's or an ONNX file's path
  models::ModelOverrides overrides;  // --data, --loss, --output
  std::optional<std::string> level, dtype;
  std::optional<std::int64_t> steps, batch;
  std::optional<double> lr;
  std::uint64_t seed = 0;
  std::string config;  // an AMP config file in any framework's key names
  std::vector<std::string> white, black;
  std::vector<std::string> allow_inf;  // op names or module paths whose Inf/-Inf is intended
  std::string device = "auto";
  std::string cupti = "on";  // on a GPU, with the op trace: the kernels each op ran (CUPTI)
  int nproc = 1;                  // --nproc N: start under mpirun with N ranks
  bool dp_no_inf_reduce = false;
  std::string dp_reduce_dtype = "float32";  // --dp-reduce-dtype float32|grad  // debug: each rank acts on its own found_inf (breaks the consensus)
  std::string fp8;                    // --fp8 RECIPE: TransformerEngine's constructor text
  std::vector<std::string> fp8_keep;  // --fp8-keep: linear layers kept out of fp8
  int fp8_amax_group = 0;             // --fp8-amax-group N (debug: the wrong amax reduction group)
  bool quiet = false;
};

// Adds the shared options to `cmd` (`with_level`: compare takes --levels instead).
void add_run_args(CLI::App* cmd, RunArgs& args, bool with_level = true);

// What the options ask for, checked: the model file's defaults, a config file's settings
// in place of the model's "amp" block, then the command line's on top; and the AMP
// settings' semantics ("ampcheck", "paddle", ...).
struct Resolved {
  models::RunOptions options;
  // An ONNX model's graph (null for samples and model files of nodes): bisect-nan names
  // the culprits' nodes in it and speaks its exporter's op names.
  std::shared_ptr<const models::onnx_file::Graph> onnx;
  std::string semantics = "ampcheck";
  // Whose Inf/-Inf is intended (the model file's, the config's and --allow-inf): op names
  // and module paths, for the inspector's NaN watch.
  std::vector<std::string> allowed_ops, allowed_modules;
  // The one line --device auto writes when a CUDA build finds no GPU ("" otherwise): the
  // command prints it once on stderr, unless --quiet.
  std::string device_notice;
  // --cupti on and the run on the GPU: the inspector (trace mode and above) traces the
  // kernels through CUPTI.
  bool cupti = false;
};
Resolved resolve(const RunArgs& args);
// The same with another level (compare, and bisect's fp32 reference).
models::RunOptions with_level(models::RunOptions options, amp::Level level);

// The report's run section for these settings and the trainer's numbers.
reports::RunInfo run_info(const std::string& command, const RunArgs& args, const Resolved& r,
                          const models::RunResult& result, const std::string& inspect);

// Writes a report file the user asked for with `option` (atomically); a failure is the
// user's to fix: UsageError naming the option, the path and the system's reason. A
// second Ctrl-C during the write ends the process once the file is in place
// (cli/interrupt.h), so it leaves neither half a report nor a temporary file.
// Refuses an output path that cannot be written (exit 2 naming the option), before a run
// that would only fail at its end.
// The AMP options of a command that does not train (ops, infer): the config file's, then
// --level, --dtype and the custom lists over them; an empty level or dtype keeps the
// config's (or the default's). Bad values throw UsageError naming the option.
amp::AmpOptions amp_options_of(const std::string& config, const std::string& level, const std::string& dtype,
                               const std::vector<std::string>& white, const std::vector<std::string>& black);

void check_output(const std::string& option, const std::string& path);
void write_output(const std::string& option, const std::string& path, const std::string& content);

// A progress line on a terminal: "\r<label> [####......] 12/200 <text>", on `err` only
// when it is standard error, a terminal, and not --quiet; done() ends the line.
class Progress {
 public:
  Progress(std::ostream& err, bool quiet, std::string label, std::int64_t total);
  ~Progress();
  void update(std::int64_t done, const std::string& text = {});
  void done();

 private:
  std::ostream& err_;
  bool enabled_;
  bool open_ = false;
  std::string label_;
  std::int64_t total_;
};

}  // namespace ampcheck::cli
