#include "cli/compare_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/recorder_process.h"  // recorded_run, first_difference: the script and its twin
#include "cli/run_command.h"  // mark_interrupted
#include "cli/run_options.h"
#include "cli/usage_error.h"
#include "engine/hooks.h"
#include "inspector/to_report.h"  // dtype_text
#include "inspector/shadow.h"     // ShadowError: each op's own error
#include "inspector/trace.h"      // Occurrences
#include "inspector/twin.h"       // compare_with_twin
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

namespace fs = std::filesystem;

struct CompareOptions {
  RunArgs args;
  std::vector<std::string> levels{"O0", "O1", "O2"};
  std::string report, html;
  bool json = false;
  std::string script;  // compare --script: the script beside its fp32 twin
  int seeds = 3;       // the twin's runs, from --seed (the AMP run's) on
};
constexpr int kMaxTwinSeeds = 16;

CLI::App* add_options(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand("compare", "Train at several AMP levels in lock step and compare every op's output");
  add_run_args(cmd, o.args, /*with_level=*/false);
  cmd->add_option("--levels", o.levels, "levels, comma separated; the first (O0 when listed) is the reference")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--report", o.report, "write the JSON report (with its compare section) here");
  cmd->add_option("--html", o.html, "write the HTML report here");
  cmd->add_flag("--json", o.json, "print the JSON report instead of the text");
  cmd->add_option("--script", o.script,
                  "your own PyTorch script, as one command line (\"python train.py --steps 200\"): recorded as it is "
                  "and beside its fp32 twin (the same script with autocast and the GradScaler disabled and its casts "
                  "to float16/bfloat16 kept in float32), from the same seeds; the verdict says whether the AMP run "
                  "stays within fp32's own seed-to-seed noise or departs from it, and from which step");
  cmd->add_option("--seeds", o.seeds,
                  "with --script: the fp32 twin's runs, seeds S..S+N-1 from --seed S (AMPCHECK_RECORD_SEED, which the recorder "
                  "gives torch, random and numpy at import; the k-th run also shifts every seed the script sets itself "
                  "by k); their spread is the yardstick")
      ->capture_default_str();
  return cmd;
}

// The forward outputs of one step, by op instance, in the order they ran; and for each
// instance the instances that made its inputs (through the casts the policy inserted), and
// its output's dtype, for where a level's first step leaves the reference's.
class OutputCapture : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    if (e.phase != Phase::forward || !e.output || !e.output->defined() || !is_floating(e.output->dtype())) return;
    if (e.inserted_cast) {  // its result was made by whatever made its input
      if (e.inputs && !e.inputs->empty())
        if (const std::string* from = maker((*e.inputs)[0])) made_by_[key(*e.output)] = *from;
      return;
    }
    const std::int64_t k = occurrences_.of(e);
    const std::string name = fmt::format("{}/{}#{}", e.module, op_name(e.op), k);
    if (!outputs.count(name)) {
      order.push_back({name, std::string(op_name(e.op)), e.module});
      std::vector<std::string>& from = inputs_of[name];
      if (e.inputs)
        for (const Tensor& t : *e.inputs)
          if (const std::string* m = maker(t)) from.push_back(*m);
      dtype_of[name] = e.output->dtype();
    }
    outputs[name] = e.output->to_f64();
    // A widening cast adds nothing: what it returns was made where its input was.
    std::string made = name;
    if (e.op == Op::cast && e.inputs && !e.inputs->empty() && (*e.inputs)[0].defined() &&
        is_floating((*e.inputs)[0].dtype()) && info(e.output->dtype()).bits > info((*e.inputs)[0].dtype()).bits)
      if (const std::string* from = maker((*e.inputs)[0])) made = *from;
    made_by_[key(*e.output)] = made;
  }
  void clear() {
    outputs.clear();
    inputs_of.clear();
    made_by_.clear();
    occurrences_.reset();
  }
  struct Seen {
    std::string name, type, module;
  };
  std::vector<Seen> order;  // every instance ever seen, first-seen order
  std::map<std::string, std::vector<double>> outputs;
  std::map<std::string, std::vector<std::string>> inputs_of;  // this step's first call's
  std::map<std::string, DType> dtype_of;

 private:
  // A tensor by its first element's address and its element count: an address a freed
  // output left and a tensor of another size took is not taken for that output.
  using Key = std::pair<const void*, std::int64_t>;
  static Key key(const Tensor& t) { return {t.raw(), t.numel()}; }
  const std::string* maker(const Tensor& t) const {
    if (!t.defined()) return nullptr;
    const auto it = made_by_.find(key(t));
    return it == made_by_.end() ? nullptr : &it->second;
  }
  inspector::Occurrences occurrences_;
  std::map<Key, std::string> made_by_;
};

double relative_error(const std::vector<double>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    num += (y[i] - ref[i]) * (y[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

// A level's first step beside the reference's (compare --script's rule, inspector/twin.h):
// each op's output's difference, the largest of its inputs' (the ops that made them), and
// what it adds over them.
std::vector<inspector::TwinDifference> beside_reference(const OutputCapture& level, const OutputCapture& ref) {
  std::vector<inspector::TwinDifference> out;
  auto difference = [&](const std::string& name) {
    const auto a = level.outputs.find(name), b = ref.outputs.find(name);
    if (a == level.outputs.end() || b == ref.outputs.end() || a->second.size() != b->second.size())
      return std::numeric_limits<double>::quiet_NaN();
    return relative_error(a->second, b->second);
  };
  for (const OutputCapture::Seen& seen : level.order) {
    const double output = difference(seen.name);
    if (std::isnan(output)) continue;  // another path than the reference's
    inspector::TwinDifference d{seen.name, inspector::dtype_text(level.dtype_of.at(seen.name)), 0.0, output, ""};
    if (const auto it = level.inputs_of.find(seen.name); it != level.inputs_of.end())
      for (const std::string& from : it->second)
        if (const double in = difference(from); !std::isnan(in) && (in > d.input || d.from.empty())) {
          d.input = std::max(d.input, in);
          d.from = from;
        }
    out.push_back(std::move(d));
  }
  return out;
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : 0.0;
}

// The files of the twin's probe (recorder/ampcheck_recorder/probe.py), beside the scratch
// log and removed with the comparison.
struct TwinProbeFiles {
  std::string samples;
  explicit TwinProbeFiles(const std::string& log) : samples(log + ".twin-probe.pt") {}
  ~TwinProbeFiles() {
    std::error_code ec;
    fs::remove(samples, ec);
    fs::remove(samples + ".births.json", ec);
  }
  TwinProbeFiles(const TwinProbeFiles&) = delete;
  TwinProbeFiles& operator=(const TwinProbeFiles&) = delete;
  // The AMP run's differences from the twin, op by op; none when it wrote none (a run that
  // stopped before its first step, a script whose first step took another path).
  struct Births {
    std::vector<inspector::TwinDifference> ops;
    std::vector<reports::TwinGradient> gradients;  // largest first
  };
  Births births() const {
    Births b;
    std::ifstream in(samples + ".births.json");
    if (!in) return b;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("ops") || !j["ops"].is_array()) return b;
    // Each field read as what it must be (a field of another type is as good as absent).
    auto number = [](const nlohmann::json& o, const char* key) {  // null: not finite
      return o.contains(key) && o[key].is_number() ? o[key].get<double>() : std::numeric_limits<double>::infinity();
    };
    auto text = [](const nlohmann::json& o, const char* key) {
      return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
    };
    if (j.contains("gradients") && j["gradients"].is_array())
      for (const nlohmann::json& g : j["gradients"])
        if (g.is_object() && g.contains("parameter") && g["parameter"].is_string())
          b.gradients.push_back({g["parameter"].get<std::string>(), number(g, "difference")});
    std::stable_sort(b.gradients.begin(), b.gradients.end(),
                     [](const reports::TwinGradient& x, const reports::TwinGradient& y) {
                       return x.difference > y.difference;
                     });
    std::vector<inspector::TwinDifference>& out = b.ops;
    for (const nlohmann::json& op : j["ops"]) {
      if (!op.is_object() || !op.contains("name") || !op["name"].is_string()) continue;
      out.push_back({op["name"].get<std::string>(), text(op, "dtype"), number(op, "input"), number(op, "output"),
                     text(op, "from"),
                     op.contains("own") && op["own"].is_number() ? op["own"].get<double>()
                                                                  : std::numeric_limits<double>::quiet_NaN()});
    }
    return b;
  }
};

// compare --script: the script as written (twice: the runs must repeat themselves), then its
// fp32 twin --seeds times; inspector/twin.h judges the AMP run against the twin's spread.
int run_compare_script(const CompareOptions& o, const CLI::App& cmd, std::ostream& out, std::ostream& err) {
  for (const char* engine_only : {"--model", "--data", "--loss", "--levels", "--steps", "--batch", "--lr", "--config",
                                  "--white", "--black", "--device", "--dtype", "--nproc"})
    if (cmd.get_option_no_throw(engine_only) != nullptr && cmd.count(engine_only) > 0)
      throw UsageError(fmt::format("compare --script: {} sets ampcheck's own training, and the script trains with "
                                   "its own settings: drop {} (or compare levels on an exported model with --model)",
                                   engine_only, engine_only));
  if (shell_words(o.script).empty()) throw UsageError("compare --script: the command is empty; give \"python train.py\"");
  if (o.seeds < 1 || o.seeds > kMaxTwinSeeds)
    throw UsageError(fmt::format("compare --script: --seeds {} is out of range: give 1 to {} (2 or more give a "
                                 "yardstick)",
                                 o.seeds, kMaxTwinSeeds));
  check_output("--report", o.report);
  check_output("--html", o.html);
  const InterruptScope interrupt;
  const ScratchLog log("compare --script");
  const std::uint64_t seed0 = o.args.seed;
  auto request = [&](bool amp_off, std::uint64_t seed) {
    RecordRequest r;
    // Run k of the twin: seed S + k at import, and the script's own seeds shifted by k (a
    // script that seeds itself with a constant, as most do, still trains from another seed).
    r.seed_offset = static_cast<std::int64_t>(seed - seed0);
    r.shell = o.script;
    r.inspect = amp_off ? "trace" : "stats";
    r.allow_inf = o.args.allow_inf;
    r.output_file = log.path;
    r.seed = seed;
    r.amp_off = amp_off;
    return r;
  };
  auto stopped = [&](const RecordedRun& r) { return interrupt_requested() || r.report.interrupted.has_value(); };
  auto losses = [](const RecordedRun& r) {
    std::vector<double> v;
    for (const reports::StepRecord& s : r.report.steps) v.push_back(s.loss);
    return v;
  };
  if (!o.args.quiet) err << fmt::format("compare: recording the script as written (seed {})\n", seed0);
  RecordedRun amp = recorded_run(request(false, seed0));
  if (amp.script_failed() && amp.report.steps.empty())
    throw UsageError("compare --script: " + reports::script_failure_text(amp.report.run) +
                     " before it trained a step; fix the script first (its output: " + log.path + ")");
  std::vector<reports::TwinRun> fp32;
  // The twin of the AMP run's seed keeps samples of its first step's forward; the AMP run's
  // second recording (the determinism check's) sets its own beside them (probe.py).
  const TwinProbeFiles probe(log.path);
  TwinProbeFiles::Births beside_twin;
  if (!stopped(amp)) {
    if (!o.args.quiet) err << fmt::format("compare: recording its fp32 twin, seed {} (1/{})\n", seed0, o.seeds);
    RecordRequest first_twin = request(true, seed0);
    first_twin.twin_dump = probe.samples;
    first_twin.inspect = "stats";  // the probe listens where the op-by-op watch does
    const RecordedRun twin0 = recorded_run(first_twin);
    if (!stopped(twin0)) fp32.push_back({seed0, losses(twin0)});
  }
  if (!stopped(amp) && !fp32.empty()) {
    if (!o.args.quiet) err << "compare: recording the script again: the runs must agree\n";
    RecordRequest second = request(false, seed0);
    if (fs::exists(probe.samples)) second.twin_against = probe.samples;
    const RecordedRun again = recorded_run(second);
    beside_twin = probe.births();
    if (!interrupt_requested())
      if (const std::string diff = first_difference(amp, again); !diff.empty())
        throw UsageError(fmt::format(
            "compare --script: two runs of the unchanged script differ ({}), so no gap from its fp32 twin could be "
            "told from chance; make the run repeat itself: seed it from AMPCHECK_RECORD_SEED or leave the seeding to "
            "the recorder, use deterministic kernels (torch.use_deterministic_algorithms(True)), and load the data in "
            "a fixed order",
            diff));
    for (int k = 1; k < o.seeds && !interrupt_requested(); ++k) {
      const std::uint64_t seed = seed0 + static_cast<std::uint64_t>(k);
      if (!o.args.quiet) err << fmt::format("compare: recording its fp32 twin, seed {} ({}/{})\n", seed, k + 1, o.seeds);
      const RecordedRun twin = recorded_run(request(true, seed));
      if (stopped(twin)) break;
      fp32.push_back({seed, losses(twin)});
    }
    if (fp32.size() >= 2 && !interrupt_requested())
      for (std::size_t k = 1; k < fp32.size(); ++k)
        if (fp32[k].losses == fp32.front().losses)
          throw UsageError(fmt::format(
              "compare --script: the fp32 twin trained alike with seeds {} and {}, though ampcheck seeded it and "
              "shifted every seed the script sets (torch.manual_seed, random.seed, numpy.random.seed): its "
              "randomness comes from a source ampcheck does not seed (a torch.Generator the script seeds itself, a "
              "seed read from a file), so the spread would be no spread; seed that source from the variable ampcheck "
              "sets, e.g. torch.manual_seed(int(os.environ.get(\"AMPCHECK_RECORD_SEED\", 0)))",
              fp32.front().seed, fp32[k].seed));
  }
  reports::Report report = amp.report;
  report.run.command = "compare";
  reports::Compare& c = report.compare.emplace();
  c.reference = "fp32";
  inspector::TwinEvidence evidence;
  evidence.swamping = amp.report.swamping;
  evidence.beside_twin = beside_twin.ops;
  evidence.loss_ops = inspector::loss_ops_in_low_precision(amp.report.ops);
  for (const reports::OpInstance& op : amp.report.ops)
    if (!evidence.loss_ops.empty() && op.phase == "forward" &&
        std::find(evidence.loss_ops.begin(), evidence.loss_ops.end(), op.type) != evidence.loss_ops.end()) {
      evidence.loss_dtype = op.kernel_dtypes.bf16 > 0 ? "bfloat16" : "float16";
      break;
    }
  c.twin = inspector::compare_with_twin(o.script, seed0, losses(amp), amp.report.summary.verdict, std::move(fp32),
                                       evidence);
  if (!beside_twin.gradients.empty()) c.twin->gradients = beside_twin.gradients;
  const reports::Twin& t = *c.twin;
  if (t.verdict == "departs") {  // the forward's ops beside the twin's, for the report's table
    const std::vector<inspector::TwinDifference> ranked = inspector::ranked_beside_twin(beside_twin.ops);
    if (!ranked.empty()) {
      std::vector<reports::CompareBirth>& born = c.born.emplace();
      for (std::size_t i = 0; i < ranked.size() && i < 8; ++i) born.push_back(inspector::as_birth(ranked[i]));
    }
  }
  reports::LevelRun amp_run;
  amp_run.level = "amp";
  amp_run.losses = t.amp_losses;
  amp_run.final_loss = t.amp_losses.empty() ? 0.0 : t.amp_losses.back();
  amp_run.skipped_steps = amp.report.summary.skipped_steps;
  c.runs.push_back(amp_run);
  for (const reports::TwinRun& r : t.fp32) {
    reports::LevelRun run;
    run.level = fmt::format("fp32 seed {}", r.seed);
    run.losses = r.losses;
    run.final_loss = r.losses.empty() ? 0.0 : r.losses.back();
    c.runs.push_back(run);
  }
  // The headline is the comparison's; the AMP run's own verdict stays beside it.
  report.summary.verdict_text = t.verdict_text + " (the AMP run alone: " + report.summary.verdict_text + ")";
  if (interrupt_requested() && !report.interrupted) {
    reports::Interruption& i = report.interrupted.emplace();
    i.signal = std::string(interrupt_signal_name());
    i.steps_run = i.steps_requested = static_cast<std::int64_t>(report.steps.size());
  }
  if (!o.report.empty()) write_output("--report", o.report, reports::to_json(report));
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(report));
  out << (o.json ? reports::to_json(report) : reports::to_text(report));
  if (report.interrupted) return kInterrupted;
  return t.verdict == "departs" ? kCheckFailed : kOk;
}

int run_compare(const CompareOptions& o, const CLI::App& cmd, std::ostream& out, std::ostream& err) {
  if (!o.script.empty()) return run_compare_script(o, cmd, out, err);
  if (cmd.count("--seeds") > 0)
    throw UsageError("compare: --seeds is --script's (the fp32 twin's runs); levels train in lock step from --seed");
  if (o.levels.size() < 2) throw UsageError("--levels needs at least two levels, e.g. O0,O1,O2");
  std::vector<amp::Level> levels;
  for (const std::string& l : o.levels) {
    const auto level = amp::parse_level(l);
    if (!level) throw UsageError("--levels: \"" + l + "\" is not a level; use O0, O1, O2 or O3");
    if (std::find(levels.begin(), levels.end(), *level) != levels.end())
      throw UsageError("--levels: " + l + " is listed twice");
    levels.push_back(*level);
  }
  // The reference: O0 when listed, else the first.
  if (auto it = std::find(levels.begin(), levels.end(), amp::Level::O0); it != levels.end())
    std::rotate(levels.begin(), it, it + 1);
  RunArgs args = o.args;
  args.level = std::string(amp::level_name(levels.front() == amp::Level::O0 ? levels.back() : levels.front()));
  const Resolved base = resolve(args);
  if (!args.quiet) err << base.device_notice;
  check_output("--report", o.report);
  check_output("--html", o.html);
  // Ctrl-C stops after the step every level is in (the levels stay in lock step), then
  // reports the steps run and exits 130.
  const InterruptScope interrupt;

  std::vector<std::unique_ptr<models::Trainer>> trainers;
  try {
    for (amp::Level l : levels) trainers.push_back(std::make_unique<models::Trainer>(with_level(base.options, l)));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::size_t n_levels = levels.size();
  std::vector<OutputCapture> captures(n_levels);
  // Each compared level's own error per op (its output against its exact f64 result on the
  // inputs it received): where its difference from the reference is born.
  std::vector<inspector::ShadowError> shadows(n_levels);
  std::map<std::string, std::vector<std::vector<double>>> errors;  // name -> level -> per step
  std::vector<OutputCapture::Seen> order;
  std::vector<std::vector<inspector::TwinDifference>> first_step(n_levels);
  const std::int64_t steps = base.options.steps;
  std::int64_t ran = 0;
  Progress progress(err, o.args.quiet, "compare", steps);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (std::size_t l = 0; l < n_levels; ++l) {
      captures[l].clear();
      add_observer(&captures[l]);
      if (l > 0) add_observer(&shadows[l]);
      try {
        trainers[l]->step();
      } catch (...) {
        remove_observer(&captures[l]);
        if (l > 0) remove_observer(&shadows[l]);
        throw;
      }
      remove_observer(&captures[l]);
      if (l > 0) remove_observer(&shadows[l]);
    }
    const OutputCapture& ref = captures.front();
    if (step == 0)  // every level from the same weights and data: each op beside the reference's
      for (std::size_t l = 1; l < n_levels; ++l)
        first_step[l] = beside_reference(captures[l], ref);
    for (const OutputCapture::Seen& seen : ref.order)
      if (std::none_of(order.begin(), order.end(), [&](const auto& s) { return s.name == seen.name; }))
        order.push_back(seen);
    for (const auto& [name, y_ref] : ref.outputs) {
      auto& per_level = errors[name];
      per_level.resize(n_levels - 1);
      for (std::size_t l = 1; l < n_levels; ++l) {
        const auto it = captures[l].outputs.find(name);
        if (it == captures[l].outputs.end() || it->second.size() != y_ref.size()) continue;
        per_level[l - 1].push_back(relative_error(it->second, y_ref));
      }
    }
    progress.update(ran = step + 1);
    if (ran < steps && interrupt_requested()) break;
  }
  progress.done();

  reports::Report report;
  std::string level_list;
  for (amp::Level l : levels) level_list += (level_list.empty() ? "" : ",") + std::string(amp::level_name(l));
  reports::Compare& c = report.compare.emplace();
  c.reference = std::string(amp::level_name(levels.front()));
  bool diverged = false;
  for (std::size_t l = 0; l < n_levels; ++l) {
    trainers[l]->evaluate();
    const models::RunResult& r = trainers[l]->result();
    reports::LevelRun run;
    run.level = std::string(amp::level_name(levels[l]));
    for (const models::StepResult& s : r.steps) run.losses.push_back(s.loss);
    run.final_loss = r.steps.back().loss;
    run.accuracy = r.accuracy;
    run.skipped_steps = r.skipped;
    diverged = diverged || !std::isfinite(run.final_loss);
    c.runs.push_back(run);
  }
  std::vector<std::pair<double, std::string>> growth;
  for (const OutputCapture::Seen& seen : order) {
    const auto& per_level = errors[seen.name];
    reports::CompareOp op{seen.name, seen.type, seen.module, {}};
    double fastest = 0;
    for (std::size_t l = 1; l < n_levels; ++l) {
      const std::vector<double>& e = per_level[l - 1];
      if (e.empty()) continue;
      reports::LevelError le;
      le.level = std::string(amp::level_name(levels[l]));
      le.mean = mean(e, 0, e.size());
      const auto worst = std::max_element(e.begin(), e.end());
      le.worst = *worst;
      le.worst_step = static_cast<std::int64_t>(worst - e.begin()) + 1;
      const std::size_t quarter = std::max<std::size_t>(1, e.size() / 4);
      const double first = mean(e, 0, quarter), last = mean(e, e.size() - quarter, e.size());
      le.growth = first > 0 ? last / first : (last > 0 ? std::numeric_limits<double>::infinity() : 1.0);
      fastest = std::max(fastest, le.growth);
      op.levels.push_back(le);
    }
    if (op.levels.empty()) continue;
    growth.emplace_back(fastest, seen.name);
    c.ops.push_back(std::move(op));
  }
  std::stable_sort(growth.begin(), growth.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [g, name] : growth) c.fastest_growing.push_back(name);
  std::vector<reports::CompareBirth>& born = c.born.emplace();
  std::string born_text;  // the first level's birthplace, in compare --script's words
  for (std::size_t l = 1; l < n_levels; ++l) {
    const std::string level(amp::level_name(levels[l]));
    std::map<std::string, double> own;  // op instance name as compared -> mean own error
    for (const inspector::ShadowRecord& r : shadows[l].records())
      if (r.count > 0) own[fmt::format("{}/{}#{}", r.module, op_name(r.op), r.occurrence)] = r.mean_error;
    std::vector<inspector::OpDifference> diffs;
    for (const reports::CompareOp& op : c.ops)
      for (const reports::LevelError& e : op.levels)
        if (e.level == level)
          if (const auto it = own.find(op.name); it != own.end()) diffs.push_back({op.name, it->second, e.mean});
    for (reports::CompareBirth& b : inspector::where_born(level, std::move(diffs), 5)) born.push_back(std::move(b));
    // The rule compare --script applies to a script's first step: the op that adds the most
    // to its inputs' difference from the reference, its own error the shadow's.
    for (inspector::TwinDifference& d : first_step[l])
      if (const auto it = own.find(d.name); it != own.end()) d.own = it->second;
    if (const std::vector<inspector::TwinDifference> ranked = inspector::ranked_beside_twin(first_step[l]);
        !ranked.empty() && born_text.empty())
      born_text = fmt::format("{}'s difference from {} is {}", level, amp::level_name(levels.front()),
                              inspector::forward_birth_text(ranked.front(), fmt::format("{}'s", amp::level_name(levels.front())),
                                                            inspector::BirthOf::model));
  }

  // The run section and summary describe the comparison; the last level's numbers.
  const models::RunResult& last = trainers.back()->result();
  report.run = run_info("compare", args, base, last, "off");
  report.run.level = level_list;
  report.run.dtype = inspector::dtype_text(base.options.amp.dtype);
  report.summary.initial_loss = last.steps.front().loss;
  report.summary.final_loss = last.steps.back().loss;
  report.summary.accuracy = last.accuracy;
  report.summary.skipped_steps = last.skipped;
  report.summary.final_loss_scale = last.final_scale;
  const reports::CompareOp* worst_op = nullptr;
  const reports::LevelError* worst_err = nullptr;
  for (const reports::CompareOp& op : c.ops)
    for (const reports::LevelError& e : op.levels)
      if (!worst_err || e.worst > worst_err->worst) worst_op = &op, worst_err = &e;
  report.summary.verdict = diverged ? "failed" : "healthy";
  report.summary.verdict_text =
      diverged ? "FAILED: a level's loss became non-finite (run it alone with `ampcheck run` or `bisect-nan`)"
      : worst_op
          ? fmt::format("compared {} against {}: worst output error {:.3g} ({} at {}, step {}); fastest growing: {}",
                        level_list, c.reference, worst_err->worst, worst_op->name, worst_err->level,
                        worst_err->worst_step, c.fastest_growing.front())
          : "compared " + level_list + ": no op outputs to compare";
  if (!born_text.empty()) report.summary.verdict_text += "; " + born_text;
  if (ran < steps) mark_interrupted(report, ran, steps);

  if (!o.report.empty()) write_output("--report", o.report, reports::to_json(report));
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(report));
  out << (o.json ? reports::to_json(report) : reports::to_text(report));
  if (report.interrupted) return kInterrupted;
  return diverged ? kCheckFailed : kOk;
}

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto options = std::make_shared<CompareOptions>();
  CLI::App* cmd = add_options(app, *options);
  return {cmd, [options, cmd](std::ostream& out, std::ostream& err) { return run_compare(*options, *cmd, out, err); }};
}

}  // namespace ampcheck::cli
