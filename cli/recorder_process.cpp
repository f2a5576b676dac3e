#include "cli/recorder_process.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <fcntl.h>     // open flags for posix_spawn_file_actions_addopen
#include <signal.h>    // kill
#include <spawn.h>     // posix_spawnp
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // environ

#include "cli/interrupt.h"
#include "cli/usage_error.h"
#include "inspector/consensus.h"  // consensus_of_recordings
#include "reports/json.h"  // from_json

extern char** environ;

namespace ampcheck::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBootstrapOut = "AMPCHECK_RECORD_OUT";

fs::path bootstrap_in(const fs::path& root) { return root / "ampcheck_recorder" / "_bootstrap"; }
bool is_bootstrap(const fs::path& b) {
  std::error_code ec;
  return fs::is_regular_file(b / "sitecustomize.py", ec);
}

// The environment as "NAME=value" strings, with `drop` removed and `set` applied.
std::vector<std::string> environment(const std::vector<std::pair<std::string, std::string>>& set,
                                     bool drop_record_variables) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (drop_record_variables && name.rfind("AMPCHECK_RECORD_", 0) == 0) continue;
    bool replaced = false;
    for (const auto& [n, v] : set) replaced = replaced || n == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [n, v] : set) env.push_back(n + "=" + v);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A child with the given environment and file actions; returns its pid, or the errno of
// a failed start.
struct Spawned {
  pid_t pid = -1;
  int error = 0;
};
Spawned spawn(std::vector<std::string> argv, std::vector<std::string> env, const posix_spawn_file_actions_t* actions) {
  std::vector<char*> a = pointers(argv), e = pointers(env);
  Spawned s;
  s.error = posix_spawnp(&s.pid, a[0], actions, nullptr, a.data(), e.data());
  return s;
}

// Waits for the child, polling so that a SIGTERM to ampcheck alone (a CI runner's
// cancel) is passed on; Ctrl-C reaches the child from the terminal itself.
int wait_for(pid_t pid) {
  bool forwarded = false;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return 128;
    if (!forwarded && interrupt_requested() && interrupt_signal_name() == "SIGTERM") {
      kill(pid, SIGTERM);
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs argv with its output into `log`; returns the exit code (-1: could not start).
int run_logged(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const Spawned s = spawn(argv, env, &actions);
  posix_spawn_file_actions_destroy(&actions);
  if (s.error != 0) return -1;
  return wait_for(s.pid);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  const auto cut = t.rfind('\n');
  return cut == std::string::npos ? t : t.substr(cut + 1);
}

// The last `lines` lines of `text`.
std::string tail(const std::string& text, std::size_t lines) {
  std::size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  for (std::size_t n = 0; n < lines; ++n) {
    if (at == 0) return text;
    const auto cut = text.rfind('\n', at - 1);
    if (cut == std::string::npos) return text;
    at = cut;
  }
  return text.substr(at + 1);
}

using Scratch = ScratchFolder;

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

// Why the recorder wrote no report: neither PyTorch nor PaddlePaddle importable by the
// script's python, the script ending before it imported its framework, or never importing it.
std::string why_no_report(const std::string& python, const std::vector<std::string>& env, const Scratch& scratch,
                          int exit_code, const std::string& output) {
  std::vector<std::string> probe_env;
  for (const std::string& e : env)
    if (e.rfind(std::string(kBootstrapOut) + "=", 0) != 0) probe_env.push_back(e);
  const std::string log = (scratch.dir / "probe.log").string();
  const int probe = run_logged({python, "-c", "import torch"}, probe_env, log);
  if (probe == -1)
    return fmt::format("the recorder wrote no report, and {} (the script's python) cannot be started to see why: "
                       "give the interpreter by its path, e.g. -- /path/to/venv/bin/python train.py",
                       python);
  if (probe != 0) {
    const std::string torch_error = last_line(read_file(log));
    const std::string paddle_log = (scratch.dir / "probe-paddle.log").string();
    if (run_logged({python, "-c", "import paddle"}, probe_env, paddle_log) != 0)
      return fmt::format("PyTorch cannot be imported by {} ({}), nor PaddlePaddle: install the framework the "
                         "script trains with for that interpreter (pip install torch) or run the script with the "
                         "python that has it",
                         python, torch_error);
  }
  const std::string said = last_line(output);
  const std::string recorder_said =
      output.find("ampcheck recorder: not recording") != std::string::npos
          ? "; the recorder said: " + last_line(output.substr(output.find("ampcheck recorder: not recording")))
          : "";
  if (!recorder_said.empty()) return "the recorder could not start" + recorder_said;
  if (exit_code != 0)
    return fmt::format("the script ended with exit code {} before the recorder could write a report (it starts at "
                       "the script's `import torch` or `import paddle`){}",
                       exit_code, said.empty() ? "" : "; its last words: " + said);
  return "the script never imported torch or paddle: the recorder starts at the script's import of its framework, "
         "so there was no PyTorch or PaddlePaddle run to record (is this the training script?)";
}

}  // namespace

std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < line.size()) word += line[++i];
      else word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

std::string python_of(const std::vector<std::string>& command) {
  // Environment assignments a shell line starts with (VAR=value python ...) are not the command.
  for (const std::string& w : command) {
    if (w.find('=') != std::string::npos && w.find('/') == std::string::npos) continue;
    const std::string base = fs::path(w).filename().string();
    return base.rfind("python", 0) == 0 ? w : std::string("python3");
  }
  return "python3";
}

std::string recorder_bootstrap(const std::string& python) {
  if (const char* env = std::getenv("AMPCHECK_RECORDER"); env && *env) {
    const fs::path b = bootstrap_in(env);
    if (!is_bootstrap(b))
      throw UsageError(fmt::format("AMPCHECK_RECORDER={} holds no recorder ({} is missing): give the folder that "
                                   "holds the ampcheck_recorder package (recorder/ in ampcheck's source)",
                                   env, (b / "sitecustomize.py").string()));
    return fs::absolute(b).string();
  }
#ifdef AMPCHECK_RECORDER_DIR
  if (const fs::path b = bootstrap_in(AMPCHECK_RECORDER_DIR); is_bootstrap(b)) return b.string();
#endif
  // An installed copy (pip install ./recorder): the package says where its bootstrap is.
  Scratch scratch;
  const std::string log = (scratch.dir / "bootstrap.log").string();
  const std::vector<std::string> env = environment({}, true);
  if (run_logged({python, "-m", "ampcheck_recorder", "bootstrap-path"}, env, log) == 0) {
    const fs::path b = last_line(read_file(log));
    if (is_bootstrap(b)) return b.string();
  }
  throw UsageError(fmt::format(
      "the recorder for PyTorch is not found: neither this build's source tree nor {} has it; install it into the "
      "script's environment (pip install ./recorder, from ampcheck's source) or set AMPCHECK_RECORDER to the recorder "
      "folder",
      python));
}

Recording record_process(const RecordRequest& r) {
  const std::vector<std::string> words = r.shell.empty() ? r.argv : shell_words(r.shell);
  if (words.empty()) throw UsageError("record: no command to run; give it after --: ampcheck record -- python train.py");
  const std::string python = python_of(words);
  const std::string bootstrap = recorder_bootstrap(python);
  Scratch scratch;
  const fs::path out = scratch.dir / "report.json";
  const char* old_path = std::getenv("PYTHONPATH");
  std::vector<std::pair<std::string, std::string>> set = {
      {"PYTHONPATH", bootstrap + (old_path && *old_path ? ":" + std::string(old_path) : std::string())},
      {kBootstrapOut, out.string()},
      {"AMPCHECK_RECORD_INSPECT", r.inspect},
      {"AMPCHECK_RECORD_FP32_OPS", joined(r.fp32_ops)},
      {"AMPCHECK_RECORD_FP32_MODULES", joined(r.fp32_modules)},
      {"AMPCHECK_RECORD_ALLOW_INF", joined(r.allow_inf)},
      {"AMPCHECK_RECORD_MAX_SKIPPED", fmt::format("{}", r.max_skipped)},
      {"AMPCHECK_RECORD_STATS_EVERY", std::to_string(r.stats_every)},
      {"AMPCHECK_RECORD_LISTEN", r.listen},
      {"AMPCHECK_RECORD_KERNELS", std::to_string(r.kernels)},
      {"AMPCHECK_RECORD_KERNELS_OUT", r.kernels_out},
  };
  if (r.seed) set.emplace_back("AMPCHECK_RECORD_SEED", std::to_string(*r.seed));
  if (r.amp_off) set.emplace_back("AMPCHECK_RECORD_AMP", "off");
  if (r.seed_offset != 0) set.emplace_back("AMPCHECK_RECORD_SEED_OFFSET", std::to_string(r.seed_offset));
  if (r.fp32_optimizer_state) set.emplace_back("AMPCHECK_RECORD_FP32_OPTIMIZER_STATE", "on");
  if (r.fp32_master_weights) set.emplace_back("AMPCHECK_RECORD_FP32_MASTER_WEIGHTS", "on");
  if (!r.twin_dump.empty()) set.emplace_back("AMPCHECK_RECORD_TWIN_DUMP", r.twin_dump);
  if (!r.twin_against.empty()) set.emplace_back("AMPCHECK_RECORD_TWIN_AGAINST", r.twin_against);
  // AMPCHECK_RECORD_OWNER (the recording process's id) is the recorder's own: an inherited
  // one would make the script's process think it is a child and not record.
  std::vector<std::string> env = environment(set, true);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!r.output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, r.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  } else if (r.stdout_to_stderr) {
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
  }
  std::vector<std::string> argv = r.shell.empty() ? r.argv : std::vector<std::string>{"/bin/sh", "-c", r.shell};
  const Spawned s = spawn(argv, env, &actions);
  posix_spawn_file_actions_destroy(&actions);
  if (s.error == ENOENT)
    throw UsageError(fmt::format("record: command not found: \"{}\" (not on PATH); give the interpreter that runs the "
                                 "script, e.g. ampcheck record -- python3 train.py",
                                 argv[0]));
  if (s.error != 0)
    throw UsageError(fmt::format("record: cannot start \"{}\": {}", argv[0], std::strerror(s.error)));

  Recording rec;
  rec.started = true;
  rec.exit_code = wait_for(s.pid);
  // The ranks of a job a launcher started write report.rankN.json (recorder/ranks.py).
  for (const auto& entry : fs::directory_iterator(scratch.dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("report.rank", 0) != 0 || entry.path().extension() != ".json") continue;
    const std::string digits = name.substr(11, name.size() - 11 - 5);
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::size_t rank = static_cast<std::size_t>(std::stoul(digits));
    if (rec.rank_reports.size() <= rank) rec.rank_reports.resize(rank + 1);
    rec.rank_reports[rank] = read_file(entry.path());
  }
  if (fs::exists(out)) {
    rec.report = read_file(out);
  } else if (!rec.rank_reports.empty()) {
    // The launcher recorded nothing of its own: the job is its ranks'.
  } else if (const fs::path why = fs::path(out.string() + ".why"); fs::exists(why)) {
    // The recorder's own reason (ampcheck_recorder/inject.py, not_recording).
    rec.why_no_report = "the recorder could not start; the recorder said: " + last_line(read_file(why));
  } else {
    const std::string output = r.output_file.empty() ? std::string() : tail(read_file(r.output_file), 20);
    // `sh -c` answers 127 for a command it cannot find.
    if (!r.shell.empty() && rec.exit_code == 127 && output.find("not found") != std::string::npos)
      rec.why_no_report = fmt::format("the script's command was not found: {}", last_line(output));
    else
      rec.why_no_report = why_no_report(python, env, scratch, rec.exit_code, output);
  }
  return rec;
}

std::string recorder_advice(const std::string& python, const std::vector<std::string>& ops,
                            const std::vector<std::string>& modules, const std::string& device,
                            const std::string& report_json) {
  const fs::path root = fs::path(recorder_bootstrap(python)).parent_path().parent_path();
  const char* old_path = std::getenv("PYTHONPATH");
  const std::vector<std::string> env = environment(
      {{"PYTHONPATH", root.string() + (old_path && *old_path ? ":" + std::string(old_path) : std::string())}}, true);
  Scratch scratch;
  const std::string log = (scratch.dir / "advice.txt").string();
  std::vector<std::string> argv = {python, "-m", "ampcheck_recorder", "advice", "--device", device};
  if (!ops.empty()) argv.insert(argv.end(), {"--fp32-ops", joined(ops)});
  if (!modules.empty()) argv.insert(argv.end(), {"--fp32-modules", joined(modules)});
  if (!report_json.empty()) {
    const std::string report = (scratch.dir / "report.json").string();
    std::ofstream(report, std::ios::binary) << report_json;
    argv.insert(argv.end(), {"--report", report});
  }
  const int code = run_logged(argv, env, log);
  const std::string text = read_file(log);
  if (code != 0)
    throw UsageError(fmt::format("the recorder's advice failed ({} -m ampcheck_recorder advice, exit {}): {}", python,
                                 code, last_line(text)));
  return text;
}

namespace {
// A mkdtemp/mkstemps template in TMPDIR (else /tmp): "<folder>/<name>".
std::string temp_template(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  return (tmp && *tmp ? std::string(tmp) : std::string("/tmp")) + "/" + name;
}
}  // namespace

ScratchFolder::ScratchFolder() {
  std::string templ = temp_template("ampcheck-record-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr)
    throw UsageError(fmt::format("record: cannot make a scratch folder {} ({}); set TMPDIR to a writable folder",
                                 templ, std::strerror(errno)));
  dir = templ;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

bool RecordedRun::script_failed() const {
  if (exit_code != 0) return true;
  const auto& o = report.run.script_outcome;
  return o && ((o->exit_code && *o->exit_code != 0) || !o->error.empty());
}

bool RecordedRun::run_failed() const {
  return report.summary.verdict == "failed" || report.summary.verdict == "gradient_underflow";
}

namespace {

RecordedRun read_recording(std::string json, int exit_code, const std::string& what) {
  RecordedRun out;
  out.exit_code = exit_code;
  out.json = std::move(json);
  try {
    out.report = reports::from_json(out.json, what);
  } catch (const reports::ReportError& e) {
    throw std::runtime_error("the recorder wrote a report ampcheck cannot read (a recorder bug): " +
                             std::string(e.what()));
  }
  return out;
}

// The recorder, inside the script, saw its exception but not its exit status: the status
// is ampcheck's to add (the report and its text say both). Ctrl-C (130) is an
// interruption, said apart.
void add_exit_status(RecordedRun& out, int exit_code) {
  reports::ScriptOutcome& outcome = out.report.run.script_outcome ? *out.report.run.script_outcome
                                                                  : out.report.run.script_outcome.emplace();
  if (exit_code != 0 && exit_code != 130 && !outcome.exit_code) {
    outcome.exit_code = exit_code;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(out.json);
    j["run"]["script_outcome"]["exit_code"] = exit_code;
    if (!j["run"]["script_outcome"].contains("error")) j["run"]["script_outcome"]["error"] = outcome.error;
    out.json = j.dump(2) + "\n";
  } else if (!out.report.run.script_outcome->exit_code && outcome.error.empty()) {
    out.report.run.script_outcome.reset();  // nothing to say: as the recorder wrote it
  }
}

// The job of a launcher's ranks: the first failed rank's recording (else rank 0's) with the
// ranks' consensus added, its verdict failed when they disagreed.
RecordedRun job_of(std::vector<RecordedRun> ranks, int exit_code) {
  std::vector<std::int64_t> missing;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].json.empty()) missing.push_back(static_cast<std::int64_t>(r));
  std::size_t source = ranks.size();
  for (std::size_t r = 0; r < ranks.size() && source == ranks.size(); ++r)
    if (!ranks[r].json.empty() && ranks[r].run_failed()) source = r;
  for (std::size_t r = 0; r < ranks.size() && source == ranks.size(); ++r)
    if (!ranks[r].json.empty()) source = r;
  RecordedRun job = ranks[source];
  job.exit_code = exit_code;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(job.json);
  std::string failure;
  if (missing.empty() && ranks.size() > 1) {
    std::vector<reports::Report> reports;
    for (const RecordedRun& r : ranks) reports.push_back(r.report);
    try {
      job.report.distributed = inspector::consensus_of_recordings(reports);
      failure = inspector::consensus_failure(*job.report.distributed);
      j["distributed"] = nlohmann::ordered_json::parse(reports::to_json(job.report))["distributed"];
    } catch (const std::invalid_argument& e) {
      failure = std::string("the ranks' reports are not of one job (") + e.what() + ")";
    }
  } else if (!missing.empty()) {
    std::string who;
    for (std::int64_t r : missing) who += (who.empty() ? "" : ", ") + std::to_string(r);
    failure = "rank" + std::string(missing.size() > 1 ? "s " : " ") + who +
              " wrote no report (the process ended before its interpreter's exit): the job cannot be compared rank "
              "by rank";
  }
  if (failure.empty() && job.report.distributed && job.report.summary.verdict != "failed" &&
      job.report.summary.verdict != "gradient_underflow") {
    const reports::Distributed& d = *job.report.distributed;
    job.report.summary.verdict_text += fmt::format(
        "; {} ranks in agreement{}", d.world_size,
        !d.compared_params ? std::string()
        : *d.compared_params > 0
            ? fmt::format(" ({} replicated parameter(s) identical at every step)", *d.compared_params)
            : std::string(" (their parameters are shards, each rank's own: the same decisions and scales compared)"));
    j["summary"]["verdict_text"] = job.report.summary.verdict_text;
  }
  if (!failure.empty()) {
    reports::Summary& s = job.report.summary;
    const bool was_failed = s.verdict == "failed" || s.verdict == "gradient_underflow";
    std::string before = s.verdict_text;
    if (before.rfind("FAILED: ", 0) == 0) before = before.substr(8);
    s.verdict_text = "FAILED: " + failure + (was_failed ? "; then " + before : "") +
                     (source != 0 ? " (on rank " + std::to_string(source) + ")" : "");
    s.verdict = "failed";
    j["summary"]["verdict"] = s.verdict;
    j["summary"]["verdict_text"] = s.verdict_text;
  }
  job.json = j.dump(2) + "\n";
  add_exit_status(job, exit_code);
  job.ranks = std::move(ranks);
  return job;
}

}  // namespace

RecordedRun recorded_run(const RecordRequest& request) {
  Recording rec = record_process(request);
  if (!rec.report && !rec.rank_reports.empty()) {
    std::vector<RecordedRun> ranks;
    for (std::size_t r = 0; r < rec.rank_reports.size(); ++r)
      ranks.push_back(rec.rank_reports[r].empty()
                          ? RecordedRun{}
                          : read_recording(std::move(rec.rank_reports[r]), rec.exit_code,
                                           "rank " + std::to_string(r) + "'s report"));
    return job_of(std::move(ranks), rec.exit_code);
  }
  if (!rec.report) throw UsageError("no recording: " + rec.why_no_report);
  RecordedRun out = read_recording(std::move(*rec.report), rec.exit_code, "the recorder's report");
  add_exit_status(out, rec.exit_code);
  return out;
}

std::vector<std::string> producer_keys(const reports::Report& r, const std::string& granularity) {
  std::vector<std::string> keys;
  auto add = [&](const reports::NanEvent& e) {
    const std::string key = granularity == "type" ? e.op : e.module;
    if (!key.empty() && std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  };
  for (const reports::NanEvent& e : r.nonfinite.producers) add(e);
  if (r.nonfinite.producer) add(*r.nonfinite.producer);  // a report of an earlier minor: the first only
  return keys;
}

// Where two runs of the unchanged script first differ, in a few words; "" when they agree
// (the same bytes, or the same steps, losses, scales, verdict and producers).
std::string first_difference(const RecordedRun& a, const RecordedRun& b) {
  if (a.json == b.json) return {};
  const reports::Report &x = a.report, &y = b.report;
  if (x.steps.size() != y.steps.size())
    return fmt::format("{} steps, then {}", x.steps.size(), y.steps.size());
  for (std::size_t i = 0; i < x.steps.size(); ++i) {
    const reports::StepRecord &s = x.steps[i], &t = y.steps[i];
    const bool same_loss = s.loss == t.loss || (std::isnan(s.loss) && std::isnan(t.loss));
    if (!same_loss) return fmt::format("the loss at step {}: {} vs {}", s.step, s.loss, t.loss);
    if (s.loss_scale != t.loss_scale || s.skipped != t.skipped)
      return fmt::format("the loss scaler at step {}: scale {} {}, then {} {}", s.step, s.loss_scale,
                         s.skipped ? "skipped" : "stepped", t.loss_scale, t.skipped ? "skipped" : "stepped");
  }
  if (x.summary.verdict != y.summary.verdict)
    return fmt::format("the verdict: {}, then {}", x.summary.verdict, y.summary.verdict);
  if (producer_keys(x, "type") != producer_keys(y, "type") || producer_keys(x, "instance") != producer_keys(y, "instance"))
    return "the ops that produced the first NaN/Inf";
  return {};
}

ScratchLog::ScratchLog(const std::string& command) {
  const std::string wanted = temp_template("ampcheck-script-XXXXXX.log");
  std::string templ = wanted;
  const int fd = mkstemps(templ.data(), 4);
  if (fd < 0)
    throw UsageError(fmt::format("{}: cannot make a scratch file {} ({}); set TMPDIR to a writable folder", command,
                                 wanted, std::strerror(errno)));
  ::close(fd);
  path = templ;
}
ScratchLog::~ScratchLog() { std::remove(path.c_str()); }

}  // namespace ampcheck::cli
