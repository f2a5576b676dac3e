#include "cli/bisect_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include <unistd.h>  // isatty

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/run_command.h"
#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct BisectOptions {
  RunArgs args;
  std::string granularity = "type";
  double max_skipped = 0.05;
  double loss_tolerance = 0;
  std::int64_t max_runs = 64;
  std::string report, html;
  bool json = false;
};

CLI::App* add_options(CLI::App& app, BisectOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "bisect-nan", "Find the op producing the first NaN/Inf and a minimal black list that makes the run healthy");
  add_run_args(cmd, o.args);
  cmd->add_option("--granularity", o.granularity, "search over op types (custom_black_list) or op instances (module paths)")
      ->capture_default_str();
  cmd->add_option("--max-skipped", o.max_skipped, "healthy runs skip at most this fraction of the updates")
      ->capture_default_str();
  cmd->add_option("--loss-tolerance", o.loss_tolerance,
                  "also require |final loss - fp32 final loss| / |fp32 final loss| <= this (0: not checked)")
      ->capture_default_str();
  cmd->add_option("--max-runs", o.max_runs, "give up after this many trial runs")->capture_default_str();
  cmd->add_option("--report", o.report, "write the JSON report (with its bisect section) here");
  cmd->add_option("--html", o.html, "write the HTML report here");
  cmd->add_flag("--json", o.json, "print the JSON report instead of the text");
  return cmd;
}

using Set = std::vector<std::string>;  // candidates, in the order first seen

// A later run that Ctrl-C stopped: a partial run is no verdict on its black list, so the
// search ends there, with the trials before it.
struct SearchInterrupted {
  std::int64_t bisect_run = 0;  // as bisect.runs counts them
  std::int64_t steps_run = 0, steps_requested = 0;
};

// One trial: the run with `set` in fp32 on top of the user's lists.
struct Trials {
  const BisectOptions& o;
  const Resolved& base;
  std::ostream& err;
  double reference_loss = 0;
  reports::Bisect& bisect;
  std::map<Set, bool> cache;

  bool healthy(const Set& set) {
    if (auto it = cache.find(set); it != cache.end()) return it->second;
    if (bisect.runs >= o.max_runs)
      throw std::length_error(fmt::format("--max-runs {} reached before the search ended", o.max_runs));
    Resolved r = base;
    if (bisect.granularity == "type")
      r.options.amp.custom_black_list.insert(r.options.amp.custom_black_list.end(), set.begin(), set.end());
    else
      r.options.amp.fp32_modules.insert(r.options.amp.fp32_modules.end(), set.begin(), set.end());
    RunSetup setup;
    setup.command = "bisect-nan";
    setup.mode = inspector::Mode::stats;
    setup.max_skipped_fraction = o.max_skipped;
    setup.stop = InterruptScope::stop_predicate();
    const InstrumentedRun run = instrumented_run(o.args, r, setup, err);
    if (const auto& i = run.report.interrupted) throw SearchInterrupted{bisect.runs + 1, i->steps_run, i->steps_requested};
    reports::Trial t;
    t.index = ++bisect.runs;
    t.black_list = set;
    t.skipped_steps = run.report.summary.skipped_steps;
    t.final_loss = run.report.summary.final_loss;
    t.healthy = !run.failed;
    t.reason = run.failure;
    judge_loss(t);
    if (!o.args.quiet && &err == &std::cerr && isatty_stderr())
      err << fmt::format("bisect trial {}: fp32 [{}] -> {}\n", t.index, fmt::join(set, ", "),
                         t.healthy ? "healthy" : "failed");
    bisect.trials.push_back(t);
    return cache[set] = t.healthy;
  }
  // With --loss-tolerance, a trial that is otherwise healthy also needs a final loss
  // near the fp32 run's.
  void judge_loss(reports::Trial& t) const {
    if (!t.healthy || o.loss_tolerance <= 0) return;
    const double rel = std::fabs(t.final_loss - reference_loss) / std::fabs(reference_loss);
    if (rel <= o.loss_tolerance) return;
    t.healthy = false;
    t.reason = fmt::format("final loss {:.4g} is {:.3g} away from the fp32 run's {:.4g} (relative; tolerance {:g})",
                           t.final_loss, rel, reference_loss, o.loss_tolerance);
  }
  static bool isatty_stderr();
};

// Zeller's ddmin, for the property "black-listing this set makes the run healthy":
// returns a subset that is healthy and from which no single part of the final split can
// be removed (1-minimal once the split reaches single elements).
Set ddmin(Set c, Trials& trials) {
  std::size_t n = 2;
  while (c.size() >= 2) {
    const std::size_t parts = std::min(n, c.size());
    std::vector<Set> split(parts);
    for (std::size_t i = 0; i < c.size(); ++i) split[i * parts / c.size()].push_back(c[i]);
    bool reduced = false;
    for (const Set& part : split)
      if (trials.healthy(part)) {
        c = part;
        n = 2;
        reduced = true;
        break;
      }
    if (!reduced && parts > 2)
      for (std::size_t i = 0; i < parts && !reduced; ++i) {
        Set complement;
        for (std::size_t j = 0; j < parts; ++j)
          if (j != i) complement.insert(complement.end(), split[j].begin(), split[j].end());
        if (trials.healthy(complement)) {
          c = complement;
          n = std::max<std::size_t>(parts - 1, 2);
          reduced = true;
        }
      }
    if (reduced) continue;
    if (parts >= c.size()) break;
    n = std::min(c.size(), 2 * parts);
  }
  return c;
}

// The first non-finite value's producer (its op type or module), when it is a
// candidate: tried alone before the search, since several single ops can each be a fix
// (black-listing what feeds an overflowing op can keep it in fp32 too) and the producer
// is the one a user expects to hear about.
std::string prime_suspect(const reports::Bisect& b) {
  if (!b.producer) return {};
  const std::string key = b.granularity == "type" ? b.producer->op : b.producer->module;
  return std::find(b.candidates.begin(), b.candidates.end(), key) != b.candidates.end() ? key : std::string();
}

std::string quoted(const Set& s, const char* quote) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + std::string(quote) + x + quote;
  return out;
}

// The PyTorch form: autocast has no per-op list, so the modules run with autocast off
// and their floating inputs (and, under O2's model.half(), their weights) in fp32.
std::string pytorch_snippet(const Set& modules) {
  std::string s =
      "# PyTorch's autocast has no per-op black list: run these modules in fp32.\n"
      "import torch\n\n"
      "class Fp32(torch.nn.Module):\n"
      "    def __init__(self, module):\n"
      "        super().__init__()\n"
      "        self.module = module.float()\n\n"
      "    def forward(self, *args):\n"
      "        with torch.autocast(device_type=\"cuda\", enabled=False):\n"
      "            return self.module(*(a.float() if torch.is_floating_point(a) else a for a in args))\n\n";
  s += "for path in [" + quoted(modules, "\"") + "]:\n";
  s += "    parent, _, name = path.rpartition(\".\")\n"
       "    owner = model.get_submodule(parent) if parent else model\n"
       "    setattr(owner, name, Fp32(model.get_submodule(path)))\n";
  return s;
}

reports::Suggestion suggestion(const Resolved& base, const reports::Bisect& b) {
  reports::Suggestion s;
  amp::Config c;
  c.amp = base.options.amp;
  c.scaling = base.options.scaling;
  const bool types = b.granularity == "type";
  if (types)
    c.amp.custom_black_list.insert(c.amp.custom_black_list.end(), b.culprits.begin(), b.culprits.end());
  else
    c.amp.fp32_modules.insert(c.amp.fp32_modules.end(), b.culprits.begin(), b.culprits.end());
  s.ampcheck = amp::to_json(c);
  const std::string level(amp::level_name(base.options.amp.level));
  const std::string dtype = base.options.amp.dtype == DType::bf16 ? "bfloat16" : "float16";
  if (types) {
    s.paddle = fmt::format(
        "# paddle.amp.auto_cast (dygraph); op names as ampcheck names them, most match PaddlePaddle's\n"
        "with paddle.amp.auto_cast(enable=True, custom_black_list={{{}}}, level=\"{}\", dtype=\"{}\"):\n"
        "    loss = model(x)\n",
        quoted(b.suggested_black_list, "\""), level, dtype);
    s.paddle_fleet = fmt::format(
        "# fleet.DistributedStrategy\n"
        "strategy.amp = True\n"
        "strategy.amp_configs = {{\"custom_black_list\": [{}], \"use_pure_fp16\": {}, \"use_bf16\": {}}}\n",
        quoted(b.suggested_black_list, "\""), level == "O2" || level == "O3" ? "True" : "False",
        dtype == "bfloat16" ? "True" : "False");
  } else {
    s.paddle = "# PaddlePaddle: auto_cast off around the modules, inputs in float32\n"
               "with paddle.amp.auto_cast(enable=False):\n"
               "    y = module(x.astype(\"float32\"))   # for each of: " + quoted(b.culprits, "") + "\n";
    s.paddle_fleet = "# fleet amp_configs have no per-module list; black-list the op types instead "
                     "(ampcheck bisect-nan --granularity type)\n";
  }
  s.pytorch = pytorch_snippet(b.suggested_fp32_modules);
  return s;
}

// Writes the reports, prints the text and the outcome, returns the exit code.
int finish_bisect(const BisectOptions& o, const reports::Report& report, const std::string& why_not,
                  std::ostream& out) {
  const reports::Bisect& b = *report.bisect;
  if (!o.report.empty()) write_output("--report", o.report, reports::to_json(report));
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(report));
  if (o.json) {
    out << reports::to_json(report);
  } else {
    out << reports::to_text(report);
    if (const auto& i = report.interrupted)
      out << fmt::format("bisect-nan: interrupted{} during {}, after {} of {} steps: the search did not finish, "
                         "so no fix is claimed; {}\n",
                         i->signal.empty() ? "" : " by " + i->signal,
                         i->bisect_run == 1 ? "the run as configured" : fmt::format("run {}", i->bisect_run),
                         i->steps_run, i->steps_requested,
                         b.trials.empty() ? "no run was judged"
                                          : fmt::format("the {} trial(s) judged before are above", b.trials.size()));
    else if (b.found && b.culprits.empty())
      out << "bisect-nan: the run is healthy as configured; nothing to black-list\n";
    else if (b.found)
      out << fmt::format("bisect-nan: fix found in {} runs: run {} in fp32\n", b.runs, fmt::join(b.culprits, ", "));
    else
      out << "bisect-nan: no fix found: " << why_not << "\n";
  }
  if (report.interrupted) return kInterrupted;
  return b.found ? kOk : kCheckFailed;
}

int run_bisect(const BisectOptions& o, std::ostream& out, std::ostream& err) {
  if (o.granularity != "type" && o.granularity != "instance")
    throw UsageError("--granularity \"" + o.granularity + "\": use type (op types) or instance (module paths)");
  if (!(o.max_skipped >= 0 && o.max_skipped < 1))
    throw UsageError(fmt::format("--max-skipped {} is not a fraction in [0, 1)", o.max_skipped));
  if (!(o.loss_tolerance >= 0)) throw UsageError(fmt::format("--loss-tolerance {} must be >= 0", o.loss_tolerance));
  if (o.max_runs < 2) throw UsageError(fmt::format("--max-runs {} is too few: at least 2", o.max_runs));
  const Resolved base = resolve(o.args);
  if (base.options.amp.level == amp::Level::O0)
    throw UsageError("bisect-nan needs an AMP level (O1, O2 or O3): at O0 nothing runs in low precision");
  check_output("--report", o.report);
  check_output("--html", o.html);

  // Ctrl-C stops the run in progress after its step; the report keeps the trials judged
  // before it, marked interrupted, and the command exits 130.
  const InterruptScope interrupt;

  // The unmodified run, traced: the producer and the candidates.
  RunSetup setup;
  setup.command = "bisect-nan";
  setup.mode = inspector::Mode::stats;
  setup.max_skipped_fraction = o.max_skipped;
  setup.progress_label = "bisect: the run as configured";
  setup.stop = InterruptScope::stop_predicate();
  InstrumentedRun first = instrumented_run(o.args, base, setup, err);
  reports::Report report = first.report;
  reports::Bisect& b = report.bisect.emplace();
  b.granularity = o.granularity;
  b.producer = report.nonfinite.producer;
  b.max_skipped_fraction = o.max_skipped;
  b.loss_tolerance = o.loss_tolerance;
  b.runs = 1;
  if (report.interrupted) {
    // Not judged: a partial run says nothing of the steps it did not run.
    report.interrupted->bisect_run = 1;
    return finish_bisect(o, report, "", out);
  }
  b.trials.push_back({1, {}, !first.failed, first.failure, report.summary.skipped_steps, report.summary.final_loss});

  // Candidates: what ran in low precision, in the order first seen.
  std::map<std::string, std::set<std::string>> modules_of_type;
  for (const reports::OpInstance& op : report.ops) {
    if (op.phase != "forward" || op.type == "cast" || op.kernel_dtypes.fp16 + op.kernel_dtypes.bf16 == 0) continue;
    const std::string key = o.granularity == "type" ? op.type : op.module;
    if (key.empty()) continue;  // an op outside every module has no module to run in fp32
    if (std::find(b.candidates.begin(), b.candidates.end(), key) == b.candidates.end()) b.candidates.push_back(key);
    modules_of_type[op.type].insert(op.module);
  }

  Trials trials{o, base, err, 0, b, {}};
  trials.cache[{}] = !first.failed;
  std::string why_not;
  if (!first.failed && o.loss_tolerance == 0) {
    b.found = true;  // healthy as configured: nothing to black-list
  } else {
    try {
      if (o.loss_tolerance > 0) {
        // The fp32 reference the final loss is held to.
        RunSetup ref_setup;
        ref_setup.command = "bisect-nan";
        ref_setup.mode = inspector::Mode::off;
        ref_setup.stop = InterruptScope::stop_predicate();
        Resolved ref = base;
        ref.options = with_level(base.options, amp::Level::O0);
        const InstrumentedRun fp32 = instrumented_run(o.args, ref, ref_setup, err);
        if (const auto& i = fp32.report.interrupted) throw SearchInterrupted{b.runs + 1, i->steps_run, i->steps_requested};
        trials.reference_loss = fp32.report.summary.final_loss;
        b.reference_loss = trials.reference_loss;
        ++b.runs;
        trials.judge_loss(b.trials.front());  // the run as configured, now held to the reference too
        trials.cache[{}] = b.trials.front().healthy;
      }
      if (trials.healthy({})) {
        b.found = true;
      } else if (b.candidates.empty() || !trials.healthy(b.candidates)) {
        why_not = b.candidates.empty() ? "no op ran in low precision to black-list"
                                       : "even with every candidate in fp32 the run is not healthy: the cause is "
                                         "not the low precision of these ops (check the data, the learning rate, the "
                                         "loss scaling)";
      } else if (const std::string suspect = prime_suspect(b); !suspect.empty() && trials.healthy({suspect})) {
        b.culprits = {suspect};  // the op that made the first non-finite value, alone, is a fix
        b.found = true;
      } else {
        b.culprits = ddmin(b.candidates, trials);
        b.found = true;
      }
    } catch (const std::length_error& e) {
      why_not = e.what();
    } catch (const SearchInterrupted& i) {
      b.found = false;
      b.culprits.clear();
      mark_interrupted(report, i.steps_run, i.steps_requested, i.bisect_run);
    }
  }
  if (b.found) {
    if (o.granularity == "type") {
      b.suggested_black_list = b.culprits;
      std::set<std::string> modules;
      for (const std::string& t : b.culprits)
        for (const std::string& m : modules_of_type[t])
          if (!m.empty()) modules.insert(m);
      b.suggested_fp32_modules.assign(modules.begin(), modules.end());
    } else {
      b.suggested_fp32_modules = b.culprits;
    }
    if (!b.culprits.empty()) b.suggestion = suggestion(base, b);
  }

  return finish_bisect(o, report, why_not, out);
}

}  // namespace

bool Trials::isatty_stderr() { return ::isatty(2) != 0; }

Command add_bisect_command(CLI::App& app) {
  auto options = std::make_shared<BisectOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_bisect(*options, out, err); }};
}

}  // namespace ampcheck::cli
