#include "cli/record_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "engine/util/strings.h"  // closest
#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "cli/recorder_process.h"
#include "inspector/profile_check.h"  // check_profiles
#include "profiles/profile_error.h"
#include "profiles/read.h"
#include "cli/run_options.h"  // check_output, write_output
#include "cli/usage_error.h"
#include "reports/drift.h"    // spread_of
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct RecordOptions {
  std::vector<std::string> command;
  std::string inspect = "stats";
  std::string report, html;
  bool json = false;
  std::vector<std::string> fp32_ops, fp32_modules, allow_inf;
  double max_skipped = 0.05;
  std::int64_t stats_every = 1;
  std::string listen = "auto";
  std::int64_t kernels = 0;
  int seeds = 1;
  bool quiet = false;
};

CLI::App* add_options(CLI::App& app, RecordOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "record", "Run your own PyTorch training script with ampcheck's recorder: the op dtype table, the loss scale, "
                "the first NaN's producer, the verdict (docs/recorder.md)");
  cmd->add_option("--inspect", o.inspect, "trace (op dtypes, steps), stats (+ numerics, NaN producers), full (+ an "
                                          "fp32 recompute of each low-precision op)")
      ->capture_default_str();
  cmd->add_option("--report", o.report, "write the JSON report here (docs/report-format.md)");
  cmd->add_option("--html", o.html, "write the HTML report (one self-contained file) here");
  cmd->add_flag("--json", o.json, "print the JSON report instead of the text summary (the script's output goes to stderr)");
  cmd->add_option("--fp32-ops", o.fp32_ops, "op types forced to fp32 inside autocast, comma separated (bmm,softmax)")
      ->delimiter(',');
  cmd->add_option("--fp32-modules", o.fp32_modules, "module paths forced to fp32 inside autocast, comma separated")
      ->delimiter(',');
  cmd->add_option("--allow-inf", o.allow_inf,
                  "op types or module paths whose Inf/-Inf is intended, comma separated: not counted as a failure")
      ->delimiter(',');
  cmd->add_option("--max-skipped", o.max_skipped, "the fraction of updates a healthy run may skip outside the "
                                                  "scaler's probing")
      ->capture_default_str();
  cmd->add_option("--stats-every", o.stats_every, "numerics every N-th step (stats, full)")->capture_default_str();
  cmd->add_option("--kernels", o.kernels,
                  "profile steps 2..N+1 with PyTorch's profiler and read the GPU kernels each op launched as `ampcheck "
                  "kernels` reads a profile: whether the matrix work really ran in fp16/bf16 on tensor cores; the "
                  "profile is written beside --report (NAME.kernels.json) with its analysis (NAME.kernels-check.json)")
      ->capture_default_str();
  cmd->add_option("--listen", o.listen,
                  "the steps heard op by op: auto (the first 4, every power of two, every step after one whose loss or "
                  "gradients were non-finite; a failure on another step is found by running the model's call again) "
                  "or all (every step: exact op counts, the cost of hearing every op)")
      ->capture_default_str();
  cmd->add_option("--seeds", o.seeds,
                  "record the command N times, run k with AMPCHECK_RECORD_SEED=k (the recorder seeds torch, random "
                  "and numpy with it when the script imports torch), and keep the spread of the results for "
                  "`ampcheck diff`; a script that sets its own seed must read it from that variable")
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", o.quiet, "no progress lines");
  cmd->add_option("command", o.command, "the command that trains, after --: python train.py --epochs 1")
      ->expected(-1);
  return cmd;
}

// The words after `record`, before CLI11 parses them: an option of ampcheck's misspelt, or
// a command whose own options (or the interpreter's) came without `--` before it, which
// CLI11 would answer with "The following argument was not expected". Either is a
// UsageError naming the form to use.
void check_record_words(const CLI::App& cmd, const std::vector<std::string>& words) {
  std::vector<std::string> options;  // ampcheck's, before the command
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") return;
    if (w.size() > 1 && w[0] == '-') {
      const std::string name = w.substr(0, w.find('='));
      const CLI::Option* opt = cmd.get_option_no_throw(name);
      if (opt == nullptr) {
        if (name == "-h" || name == "--help") return;
        std::vector<std::string> names;
        for (const CLI::Option* o : cmd.get_options())
          for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
        const std::string_view best = closest(name, std::vector<std::string_view>(names.begin(), names.end()));
        throw UsageError("record: unknown option \"" + name + "\"" +
                         (best.empty() ? std::string() : " (did you mean \"" + std::string(best) + "\"?)") +
                         "; a command's own options come after --: ampcheck record [options] -- python train.py "
                         "[its options]");
      }
      options.push_back(w);
      if (w.find('=') == std::string::npos && opt->get_expected_min() > 0 && i + 1 < words.size())
        options.push_back(words[++i]);
      continue;
    }
    // The command starts here. Words that look like options after it are the command's.
    std::vector<std::string> theirs;
    for (std::size_t j = i + 1; j < words.size() && words[j] != "--"; ++j)
      if (words[j].size() > 1 && words[j][0] == '-') theirs.push_back(words[j]);
    if (theirs.empty()) return;  // plain words: CLI11 takes them as the command
    std::string form = "ampcheck record";
    for (const std::string& o : options) form += " " + o;
    form += " --";
    for (std::size_t j = i; j < words.size(); ++j) form += " " + words[j];
    std::string listed;
    for (const std::string& t : theirs) listed += (listed.empty() ? "" : " ") + t;
    throw UsageError("record: " + listed + (theirs.size() == 1 ? " is" : " are") +
                     " the command's, not ampcheck's: put -- before the command, " + form);
  }
}

constexpr int kMaxSeeds = 20;

// The recorder's bytes with the spread of the other seeds added: the recorder's own
// fields (ops[].aten, ...) stay, which a round trip through the C++ model would drop.
std::string with_spread(const std::string& recorded, const reports::Report& with) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(recorded);
  j["spread"] = nlohmann::ordered_json::parse(reports::to_json(with))["spread"];
  return j.dump(2) + "\n";
}

// NAME.json -> NAME<suffix> (NAME.kernels.json).
std::string sibling(const std::string& report, const std::string& suffix) {
  const auto dot = report.rfind('.');
  const bool has_ext = dot != std::string::npos && report.find('/', dot) == std::string::npos;
  return (has_ext ? report.substr(0, dot) : report) + suffix;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

KernelsCheck check_recorded_kernels(const std::filesystem::path& trace, std::int64_t steps, const std::string& device) {
  KernelsCheck c;
  if (!std::filesystem::exists(trace)) {
    c.text = fmt::format("\nrecord --kernels {}: no profile was written (the run ended before its second step, or the "
                         "profiler could not start: run.kernels_profile.note says why)\n",
                         steps);
    return c;
  }
  try {
    const std::vector<profiles::Profile> all = profiles::read_profiles(trace.string(), {});
    reports::KernelsReport k = inspector::check_profiles(all, {}, "record --kernels");
    k.ampcheck = AMPCHECK_VERSION;
    c.json = reports::to_json(k);
    c.verdict = k.verdict;
    c.verdict_text = k.verdict_text;
    c.text = fmt::format("\nGPU kernels of steps 2-{} (record --kernels, read as ampcheck kernels reads a profile):\n{}",
                         steps + 1, reports::to_text(k, false));
  } catch (const profiles::ProfileError& e) {
    // A CPU run has no GPU kernel to read: said, not a failure of the recording.
    c.text = device == "cpu" ? fmt::format("\nrecord --kernels {}: the run trained on the CPU: its profile of steps "
                                           "2-{} has no GPU kernel to read\n",
                                           steps, steps + 1)
                             : fmt::format("\nrecord --kernels {}: {}\n", steps, e.what());
  }
  return c;
}

namespace {

int run_record(const RecordOptions& o, std::ostream& out, std::ostream& err) {
  if (o.command.empty())
    throw UsageError("record: no command to run; give it after --: ampcheck record -- python train.py [args]");
  if (o.inspect != "trace" && o.inspect != "stats" && o.inspect != "full")
    throw UsageError("record: --inspect \"" + o.inspect + "\" is not a mode; use trace, stats or full");
  if (!(o.max_skipped >= 0 && o.max_skipped <= 1))
    throw UsageError(fmt::format("record: --max-skipped {} is not a fraction in [0, 1]; give e.g. 0.05", o.max_skipped));
  if (o.stats_every < 1) throw UsageError(fmt::format("record: --stats-every {}: give 1 (every step) or more", o.stats_every));
  if (o.kernels < 0 || o.kernels > 1000)
    throw UsageError(fmt::format("record: --kernels {}: give the steps to profile, 1 to 1000 (0: none)", o.kernels));
  if (o.listen != "auto" && o.listen != "all")
    throw UsageError("record: --listen \"" + o.listen + "\" is not a policy; use auto or all");
  if (o.seeds < 1 || o.seeds > kMaxSeeds)
    throw UsageError(fmt::format("record: --seeds {} is out of range: give 1 (one run) to {}", o.seeds, kMaxSeeds));
  check_output("--report", o.report);
  check_output("--html", o.html);

  const InterruptScope interrupt;  // Ctrl-C reaches the script, which writes the steps run
  RecordRequest request;
  request.argv = o.command;
  request.inspect = o.inspect;
  request.fp32_ops = o.fp32_ops;
  request.fp32_modules = o.fp32_modules;
  request.allow_inf = o.allow_inf;
  request.max_skipped = o.max_skipped;
  request.stats_every = o.stats_every;
  request.listen = o.listen;
  // The profile's trace outlives the recording's scratch folder: this one is record's own.
  std::optional<ScratchFolder> kernels_scratch;
  request.kernels = o.kernels;
  if (o.kernels > 0) request.kernels_out = (kernels_scratch.emplace().dir / "trace.json").string();
  request.stdout_to_stderr = o.json;

  std::vector<RecordedRun> runs;
  for (int k = 0; k < o.seeds; ++k) {
    if (o.seeds > 1) {
      request.seed = static_cast<std::uint64_t>(k);
      if (!o.quiet) err << fmt::format("ampcheck record: seed {} ({}/{})\n", k, k + 1, o.seeds);
    }
    runs.push_back(recorded_run(request));
    if (interrupt_requested() || runs.back().report.interrupted || runs.back().script_failed()) break;
  }
  RecordedRun& first = runs.front();
  reports::Report& report = first.report;
  std::string json = first.json;

  const bool interrupted = interrupt_requested() || report.interrupted.has_value() || first.exit_code == 130;
  if (o.seeds > 1 && !interrupted && static_cast<int>(runs.size()) == o.seeds) {
    std::set<std::uint64_t> seeds;
    for (const RecordedRun& r : runs) seeds.insert(r.report.run.seed);
    if (seeds.size() < runs.size())
      throw UsageError(fmt::format(
          "record --seeds {}: the runs trained with the same seed ({}): the script sets its own (torch.manual_seed), "
          "so the spread would be no spread; seed it from the variable ampcheck sets, e.g. "
          "torch.manual_seed(int(os.environ.get(\"AMPCHECK_RECORD_SEED\", 0)))",
          o.seeds, report.run.seed));
    std::vector<reports::Report> all;
    for (const RecordedRun& r : runs) all.push_back(r.report);
    try {
      report.spread = reports::spread_of(all);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format("record --seeds {}: the runs are not of one configuration ({})", o.seeds, e.what()));
    }
    json = with_spread(first.json, report);
  } else if (o.seeds > 1 && !o.quiet) {
    err << fmt::format("ampcheck record: stopped after {} of {} seeds (the script failed or was interrupted): no "
                       "spread recorded\n",
                       runs.size(), o.seeds);
  }

  std::string kernels_text;
  if (kernels_scratch) {
    // Rank 0's profile for a job (each rank profiled its own steps).
    std::filesystem::path trace = kernels_scratch->dir / "trace.json";
    if (!first.ranks.empty()) trace = kernels_scratch->dir / "trace.rank0.json";
    const KernelsCheck check = check_recorded_kernels(trace, o.kernels, report.run.device);
    kernels_text = check.text;
    if (!check.json.empty()) {
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(json);
      j["kernels_check"] = {{"verdict", check.verdict}, {"verdict_text", check.verdict_text}};
      if (!o.report.empty() && j["run"].contains("kernels_profile"))
        j["run"]["kernels_profile"]["file"] = sibling(o.report, ".kernels.json");
      json = j.dump(2) + "\n";
    }
    if (!o.report.empty()) {
      if (std::filesystem::exists(trace)) write_output("--report", sibling(o.report, ".kernels.json"), read_all(trace));
      if (!check.json.empty()) write_output("--report", sibling(o.report, ".kernels-check.json"), check.json);
    }
  }
  if (!o.report.empty()) {
    write_output("--report", o.report, json);
    // A job a launcher started: each rank's own report beside the job's (run.rank1.json).
    const auto dot = o.report.rfind('.');
    const bool has_ext = dot != std::string::npos && o.report.find('/', dot) == std::string::npos;
    for (std::size_t r = 0; r < first.ranks.size(); ++r)
      if (!first.ranks[r].json.empty())
        write_output("--report", (has_ext ? o.report.substr(0, dot) : o.report) + ".rank" + std::to_string(r) +
                                     (has_ext ? o.report.substr(dot) : std::string(".json")),
                     first.ranks[r].json);
  }
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(report));
  out << (o.json ? json : reports::to_text(report) + kernels_text);
  if (interrupted) return kInterrupted;
  if (report.run.recorder_error) {
    err << "ampcheck record: " << reports::recorder_error_text(report.run) << "\n";
    return kInternal;
  }
  if (first.script_failed()) {
    std::string what = reports::script_failure_text(report.run);
    if (what.empty()) what = fmt::format("the script failed: exit code {}", first.exit_code);
    err << fmt::format("ampcheck record: {}; the report holds the {} step{} it ran, and the run's verdict is {}\n",
                       what, report.steps.size(), report.steps.size() == 1 ? "" : "s", report.summary.verdict);
    return kScriptFailed;
  }
  return first.run_failed() ? kCheckFailed : kOk;
}

}  // namespace

Command add_record_command(CLI::App& app) {
  auto options = std::make_shared<RecordOptions>();
  CLI::App* cmd = add_options(app, *options);
  return {cmd, [options](std::ostream& out, std::ostream& err) { return run_record(*options, out, err); },
          [cmd](const std::vector<std::string>& words) { check_record_words(*cmd, words); }};
}

}  // namespace ampcheck::cli
