#include "cli/bisect_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>   // std::remove
#include <cstdlib>  // getenv, mkstemps
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string_view>

#include <unistd.h>  // isatty

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/recorder_process.h"
#include "cli/run_command.h"
#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "engine/ops/registry.h"  // op_info: the AMP category of a candidate
#include "cli/mpi_launch.h"
#include "engine/dist/communicator.h"
#include "inspector/twin.h"  // loss_ops_in_low_precision: the loss as a candidate
#include "reports/advice.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"  // the loss scaler's cure, in the user's framework's keys
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct BisectOptions {
  RunArgs args;
  std::string script;  // --script: the user's own PyTorch command line, run under the recorder
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
  cmd->add_option("--script", o.script,
                  "bisect your own PyTorch script instead of a model: \"python train.py --steps 50\", run under the "
                  "recorder with candidate ops (or modules) forced to fp32 inside autocast (docs/recorder.md)");
  cmd->add_option("--granularity", o.granularity,
                  "search over op types (custom_black_list), op instances (module paths), or, with --fp8, the fp8 "
                  "linear layers to keep out of fp8 (fp8; the default with --fp8)")
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

// A recorded script's candidates that are no op and no module: the weights and the state the
// optimizer keeps, and the loss, the cheaper cures a user means to apply (what compare --script
// names), tried before the ops at either granularity. Each is one where the recording shows its cause:
// parameters stored in 16 bits (the recorder reads swamping for each it sees updated), the
// optimizer's state kept in 16 bits ("weight:exp_avg_sq"), the loss computed in 16 bits. A
// trial of "master weights" keeps the script's model casts in fp32 and runs the model under
// autocast at that dtype, of "optimizer state" the casts to 16 bits inside the optimizer's
// step (recorder/ampcheck_recorder/twin.py), of "the loss" forces the loss's op types.
constexpr std::string_view kMasterWeights = reports::kCureMasterWeights;
constexpr std::string_view kOptimizerState = reports::kCureOptimizerState;
constexpr std::string_view kTheLoss = reports::kCureTheLoss;

bool is_cure(std::string_view c) { return c == kMasterWeights || c == kOptimizerState || c == kTheLoss; }
bool has_cure(const Set& s) { return std::any_of(s.begin(), s.end(), [](const std::string& c) { return is_cure(c); }); }

// A later run that Ctrl-C stopped: a partial run is no verdict on its black list, so the
// search ends there, with the trials before it.
struct SearchInterrupted {
  std::int64_t bisect_run = 0;  // as bisect.runs counts them
  std::int64_t steps_run = 0, steps_requested = 0;
};

// What a trial's run showed, beyond healthy or not: the ops that made Inf/NaN from
// finite inputs (first occurrence of each, in order), to steer the search, and how much
// still ran in low precision.
struct Outcome {
  bool healthy = false;
  std::vector<std::string> producers;  // op types, or module paths at instance granularity
  std::int64_t low_precision_calls = 0, total_calls = 0;
};

// The keys (op type or module) of every producer a report names (each op that made
// Inf/NaN from finite inputs), first occurrence each, in the order they happened.

// The layers a trial of an fp8 search points at: those whose fp8 casts failed it, then the
// modules of the ops that made Inf/NaN, first occurrence each.
std::vector<std::string> fp8_producers(const InstrumentedRun& run) {
  std::vector<std::string> keys = run.fp8_failed_layers;
  for (const std::string& m : producer_keys(run.report, "instance"))
    if (std::find(keys.begin(), keys.end(), m) == keys.end()) keys.push_back(m);
  return keys;
}

// What one trial runs: the training with `set` (op types or module paths) in fp32 on top
// of the user's own lists. Two runners, one search: the engine's training of a model
// (custom_black_list / fp32_modules) and the user's script under the recorder
// (--fp32-ops / --fp32-modules inside autocast).
using TrialRunner = std::function<InstrumentedRun(const Set& set)>;

// The trials of one search: each set run once (cached), counted, judged, listed.
struct Trials {
  const BisectOptions& o;
  TrialRunner runner;
  std::ostream& err;
  double reference_loss = 0;
  std::vector<double> reference_curve;  // the reference run's loss per step
  reports::Bisect& bisect;
  std::map<Set, Outcome> cache;
  // A fix must leave at least this many low-precision op calls: fewer, and "fixed" means
  // "AMP turned off", which a user can do without ampcheck.
  std::int64_t min_low_precision_calls = 1;

  const Outcome& run(const Set& set) {
    if (auto it = cache.find(set); it != cache.end()) return it->second;
    if (bisect.runs >= o.max_runs)
      throw std::length_error(fmt::format("--max-runs {} reached before the search ended", o.max_runs));
    const InstrumentedRun run = runner(set);
    if (const auto& i = run.report.interrupted) throw SearchInterrupted{bisect.runs + 1, i->steps_run, i->steps_requested};
    reports::Trial t;
    t.index = ++bisect.runs;
    t.black_list = set;
    t.skipped_steps = run.report.summary.skipped_steps;
    t.final_loss = run.report.summary.final_loss;
    t.healthy = !run.failed;
    t.reason = run.failure;
    judge_loss(t, run.report.steps);
    if (!o.args.quiet && &err == &std::cerr && isatty_stderr())
      err << fmt::format("bisect trial {}: {} [{}] -> {}\n", t.index,
                         bisect.granularity == "fp8" ? "out of fp8" : "fp32", fmt::join(set, ", "),
                         t.healthy ? "healthy" : "failed");
    bisect.trials.push_back(t);
    Outcome out;
    out.healthy = t.healthy;
    out.producers = bisect.granularity == "fp8" ? fp8_producers(run) : producer_keys(run.report, bisect.granularity);
    out.low_precision_calls = bisect.granularity == "fp8" ? fp8_calls(run.report) : run.report.summary.low_precision_calls;
    out.total_calls = run.report.summary.total_calls;
    return cache[set] = out;
  }
  bool healthy(const Set& set) { return run(set).healthy; }
  // Healthy with enough left in low precision to be a fix rather than AMP off.
  bool acceptable(const Set& set) {
    const Outcome& out = run(set);
    return out.healthy && out.low_precision_calls >= min_low_precision_calls;
  }
  // With --loss-tolerance, a trial that is otherwise healthy also needs a final loss
  // near the fp32 run's; an fp8 trial, a loss curve near the run's without fp8: the mean
  // loss of each tenth of the steps within the tolerance of the reference's (a curve that
  // wanders off and comes back, or lags all along, fails as well as one that ends apart).
  void judge_loss(reports::Trial& t, const std::vector<reports::StepRecord>& steps) const {
    if (!t.healthy || o.loss_tolerance <= 0) return;
    if (bisect.granularity == "fp8" && !reference_curve.empty()) {
      const std::size_t n = std::min(steps.size(), reference_curve.size()), windows = std::min<std::size_t>(10, n);
      double worst = 0, mine = 0, theirs = 0;
      std::size_t from = 0, to = 0;
      for (std::size_t k = 0; k < windows; ++k) {
        const std::size_t a = k * n / windows, b = (k + 1) * n / windows;
        double m = 0, r = 0;
        for (std::size_t i = a; i < b; ++i) {
          m += steps[i].loss;
          r += reference_curve[i];
        }
        m /= static_cast<double>(b - a);
        r /= static_cast<double>(b - a);
        const double rel = std::fabs(m - r) / std::fabs(r);
        if (!(rel <= worst)) {  // a NaN is the worst
          worst = rel;
          mine = m;
          theirs = r;
          from = a + 1;
          to = b;
        }
      }
      if (worst <= o.loss_tolerance) return;
      t.healthy = false;
      t.reason = fmt::format("its loss curve leaves the bf16 (no fp8) run's by {:.3g} over steps {}-{} (mean loss {:.4g} "
                             "vs {:.4g}; relative, per tenth of the steps; tolerance {:g})",
                             worst, from, to, mine, theirs, o.loss_tolerance);
      return;
    }
    const double rel = std::fabs(t.final_loss - reference_loss) / std::fabs(reference_loss);
    if (rel <= o.loss_tolerance) return;
    t.healthy = false;
    t.reason = fmt::format("final loss {:.4g} is {:.3g} away from the {} run's {:.4g} (relative; tolerance {:g})",
                           t.final_loss, rel, bisect.granularity == "fp8" ? "bf16 (no fp8)" : "fp32", reference_loss,
                           o.loss_tolerance);
  }
  static bool isatty_stderr();
};

// The engine's trial: the model trained with `set` in fp32.
TrialRunner engine_runner(const BisectOptions& o, const Resolved& base, const std::string& granularity,
                          std::ostream& err) {
  return [&o, &base, granularity, &err](const Set& set) {
    Resolved r = base;
    if (granularity == "fp8")
      r.options.fp8_keep.insert(r.options.fp8_keep.end(), set.begin(), set.end());
    else if (granularity == "type")
      r.options.amp.custom_black_list.insert(r.options.amp.custom_black_list.end(), set.begin(), set.end());
    else
      r.options.amp.fp32_modules.insert(r.options.amp.fp32_modules.end(), set.begin(), set.end());
    RunSetup setup;
    setup.command = "bisect-nan";
    setup.mode = inspector::Mode::stats;
    setup.max_skipped_fraction = o.max_skipped;
    setup.stop = InterruptScope::stop_predicate();
    return instrumented_run(o.args, r, setup, err);
  };
}

// A recording as a trial's run: failed when its verdict failed, or when the script itself
// failed (forcing a module to fp32 can break a script that assumes fp16 outputs).
InstrumentedRun as_trial(RecordedRun rec) {
  InstrumentedRun run;
  run.failed = rec.run_failed() || rec.script_failed();
  if (rec.script_failed()) {
    run.failure = reports::script_failure_text(rec.report.run);
    if (run.failure.empty()) run.failure = fmt::format("the script failed: exit code {}", rec.exit_code);
  } else if (run.failed) {
    const std::string& v = rec.report.summary.verdict_text;
    run.failure = v.rfind("FAILED: ", 0) == 0 ? v.substr(8) : v;
  }
  run.report = std::move(rec.report);
  if (interrupt_requested() && !run.report.interrupted) {  // stopped in its last step, or before it trained
    reports::Interruption& i = run.report.interrupted.emplace();
    i.signal = std::string(interrupt_signal_name());
    i.steps_run = i.steps_requested = std::max<std::int64_t>(1, static_cast<std::int64_t>(run.report.steps.size()));
  }
  return run;
}

RecordRequest script_request(const BisectOptions& o, const std::string& log) {
  RecordRequest r;
  r.shell = o.script;
  // Every run from the same seed (the recorder's AMPCHECK_RECORD_SEED; a script that seeds
  // itself overrides it): the trials and the fp32 twin then differ only by what they force.
  r.seed = 0;
  r.inspect = "stats";
  r.allow_inf = o.args.allow_inf;
  r.max_skipped = o.max_skipped;
  r.output_file = log;
  return r;
}

// The script's trial: the script recorded with `set` forced to fp32 inside autocast, the
// cures in it applied (`loss_ops`: the op types "the loss" forces). A trial's own numerics
// are never read (the search reads its verdict, losses and producers), so they are
// gathered on its first step only: forcing hears every step, and the statistics of every
// op on every step would cost a trial many times the script's own run.
TrialRunner script_runner(const BisectOptions& o, const std::string& granularity, const std::string& log,
                          const Set& loss_ops) {
  return [&o, granularity, log, loss_ops](const Set& set) {
    RecordRequest r = script_request(o, log);
    r.stats_every = std::numeric_limits<std::int32_t>::max();
    for (const std::string& c : set) {
      if (c == kMasterWeights) {
        r.fp32_master_weights = true;
      } else if (c == kOptimizerState) {
        r.fp32_optimizer_state = true;
      } else if (c == kTheLoss) {
        for (const std::string& op : loss_ops) {
          r.fp32_ops.push_back(op);
          // The recording names aten's op (nll_loss_forward); the script calls F.nll_loss.
          if (op.starts_with("nll_loss")) r.fp32_ops.push_back("nll_loss");
        }
      } else {
        (granularity == "type" ? r.fp32_ops : r.fp32_modules).push_back(c);
      }
    }
    return as_trial(recorded_run(r));
  };
}

// The search for a small set of candidates whose fp32 makes the run healthy, steered by
// what the trials report. Known culprits S start empty; the candidates R are ordered with
// the first run's producers first. While the run with S in fp32 fails:
//   steer:  the first producer of that failing run that is still in R joins S (the op
//           that made the first Inf/NaN is the likeliest cause, and a trial that fixed
//           one site names the next: two independent overflow sites cost two runs);
//   search: otherwise, S + all of R must be healthy (one run), and a binary search over
//           the prefixes of R finds the first element c with S + R[0..c] healthy: c is
//           needed (without it the prefix fails), it joins S, and the rest of the search
//           stays within R[0..c) (a healthy superset is known there).
// The order of R matters only to the binary search: it finds the first prefix that fixes
// the run, so `cures` (a script's master weights, optimizer state, loss) come first, before
// the producers. Then every element of S is tried out once (1-minimality: a steered producer
// may have become unnecessary). For k culprits among n candidates that is at most
// 1 + k (log2 n + 2) + k runs, within 2k log2(n) + 3 for n >= 4: the bound the tests hold.
// `gemm_like`: the candidates AMP is there for (the lower-precision list: matmul, linear,
// conv, bmm), searched last, so that a prefix that fixes the run without them is found
// first and the fix keeps them in low precision.
Set search(const Set& candidates, const Set& cures, const Set& first_producers,
           const std::set<std::string>& gemm_like, Trials& trials, std::string& why_not) {
  // The cures, then the producers, then the other ops, then the GEMM-like ones, each in the
  // order first seen.
  Set r;
  for (const Set* first : {&cures, &first_producers})
    for (const std::string& p : *first)
      if (std::find(candidates.begin(), candidates.end(), p) != candidates.end() &&
          std::find(r.begin(), r.end(), p) == r.end())
        r.push_back(p);
  for (const bool gemm : {false, true})
    for (const std::string& c : candidates)
      if (gemm_like.count(c) == static_cast<std::size_t>(gemm) && std::find(r.begin(), r.end(), c) == r.end())
        r.push_back(c);
  Set s;
  bool superset_known = false;  // S + R is known healthy
  auto with = [](Set a, const Set& b, std::size_t n) {
    a.insert(a.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    return a;
  };
  while (!trials.healthy(s)) {
    const Outcome& failing = trials.run(s);
    const auto steer = std::find_if(failing.producers.begin(), failing.producers.end(), [&](const std::string& p) {
      return std::find(r.begin(), r.end(), p) != r.end();
    });
    if (steer != failing.producers.end()) {
      r.erase(std::find(r.begin(), r.end(), *steer));
      s.push_back(*steer);
      superset_known = false;
      continue;
    }
    if (r.empty()) {
      why_not = "every candidate is in fp32 and the run still fails: the cause is not the low precision of these "
                "ops (check the data, the learning rate, the loss scaling)";
      return {};
    }
    if (!superset_known && !trials.healthy(with(s, r, r.size()))) {
      why_not = "even with every candidate in fp32 the run is not healthy: the cause is not the low precision of "
                "these ops (check the data, the learning rate, the loss scaling)";
      return {};
    }
    std::size_t lo = 0, hi = r.size() - 1;  // S + R[0..hi] is healthy
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (trials.healthy(with(s, r, mid + 1))) hi = mid;
      else lo = mid + 1;
    }
    s.push_back(r[lo]);
    r.resize(lo);  // S + R[0..lo) is healthy now: the rest is within it
    superset_known = true;
  }
  for (std::size_t i = 0; s.size() > 1 && i < s.size();) {
    Set without = s;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (trials.healthy(without)) s = without;
    else ++i;
  }
  return s;
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

// Each name once, in order: several of our ops are one framework op (mul and mul_scalar
// are PyTorch's mul).
Set framework_names(const Set& ops, std::string_view (*name)(Op)) {
  Set out;
  for (const std::string& op : ops) {
    const auto o = op_from_name(op);
    const std::string n = o ? std::string(name(*o)) : op;
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

// "# ampcheck's mul is PaddlePaddle's elementwise_mul" for each name that differs.
std::string renamed(const Set& ops, std::string_view (*name)(Op), std::string_view framework) {
  std::string s;
  for (const std::string& op : ops)
    if (const auto o = op_from_name(op); o && name(*o) != op)
      s += fmt::format("# ampcheck's {} is {}'s {}\n", op, framework, name(*o));
  return s;
}

// Where the culprits ran in the user's exported graph: the ONNX nodes, by module.
std::string onnx_nodes_text(const models::onnx_file::Graph& g, const Set& modules, const Set& ops, bool types) {
  std::string s;
  for (const std::string& m : modules) {
    std::vector<std::string> nodes;
    for (const auto& n : g.nodes) {
      if (models::module_path_of(g, n) != m) continue;
      bool runs = !types;
      for (const std::string& op : ops) runs = runs || !models::nodes_running(g, m, op).empty();
      if (!runs) continue;
      if (types) {
        bool match = false;
        for (const std::string& op : ops)
          for (const auto* r : models::nodes_running(g, m, op)) match = match || r == &n;
        if (!match) continue;
      }
      nodes.push_back("\"" + n.name + "\" (" + n.op_type + ")");
    }
    if (nodes.empty()) continue;
    const bool layer = models::is_framework_module(g, m);
    s += fmt::format("#   {}: ONNX node{} {}\n", layer ? "module " + m : "the top-level forward", nodes.size() > 1 ? "s" : "",
                     fmt::join(nodes, ", "));
  }
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
  const Set culprit_ops(b.suggested_black_list.begin(), b.suggested_black_list.end());
  const Set modules(b.suggested_fp32_modules.begin(), b.suggested_fp32_modules.end());
  // An exported model: where the culprits ran in the user's graph, under their own names.
  std::string where;
  if (base.onnx)
    where = fmt::format("# in your exported graph ({}):\n{}", base.onnx->path,
                        onnx_nodes_text(*base.onnx, modules, culprit_ops, types));
  const std::string framework = base.onnx ? models::producer_framework(*base.onnx) : "";
  if (types) {
    const Set paddle = framework_names(culprit_ops, amp::paddle_op_name);
    s.paddle = fmt::format(
        "# paddle.amp.auto_cast (dygraph), with PaddlePaddle's op names\n{}{}"
        "with paddle.amp.auto_cast(enable=True, custom_black_list={{{}}}, level=\"{}\", dtype=\"{}\"):\n"
        "    loss = model(x)\n",
        renamed(culprit_ops, amp::paddle_op_name, "PaddlePaddle"), framework == "paddle" ? where : "",
        quoted(paddle, "\""), level, dtype);
    s.paddle_fleet = fmt::format(
        "# fleet.DistributedStrategy\n"
        "strategy.amp = True\n"
        "strategy.amp_configs = {{\"custom_black_list\": [{}], \"use_pure_fp16\": {}, \"use_bf16\": {}}}\n",
        quoted(paddle, "\""), level == "O2" || level == "O3" ? "True" : "False",
        dtype == "bfloat16" ? "True" : "False");
  } else {
    s.paddle = "# PaddlePaddle: auto_cast off around the modules, inputs in float32\n" +
               (framework == "paddle" ? where : "") +
               "with paddle.amp.auto_cast(enable=False):\n"
               "    y = module(x.astype(\"float32\"))   # for each of: " + quoted(b.culprits, "") + "\n";
    s.paddle_fleet = "# fleet amp_configs have no per-module list; black-list the op types instead "
                     "(ampcheck bisect-nan --granularity type)\n";
  }
  // PyTorch wraps modules; ops an exported graph ran at its top level have no module of
  // their own, so their code is what autocast must be disabled around.
  Set wrappable;
  for (const std::string& m : modules)
    if (!base.onnx || models::is_framework_module(*base.onnx, m)) wrappable.push_back(m);
  std::string torch;
  if (types)
    torch = fmt::format("# the ops, as PyTorch names them: {}\n", fmt::join(framework_names(culprit_ops, amp::torch_op_name), ", "));
  if (framework != "paddle") torch += where;
  if (wrappable.size() < modules.size())
    torch += "# top-level code has no module to wrap: run it under\n"
             "#   with torch.autocast(device_type=\"cuda\", enabled=False): ... (its inputs .float())\n";
  s.pytorch = torch + (wrappable.empty() ? std::string() : pytorch_snippet(wrappable));
  return s;
}

// An fp8 search's fix: the layers kept out of fp8, as ampcheck's flags and as
// TransformerEngine code (those modules' forward outside fp8_autocast: their GEMMs in the
// autocast dtype).
reports::Suggestion fp8_suggestion(const Resolved& base, const reports::Bisect& b) {
  reports::Suggestion s;
  const Set keep = [&] {
    Set k = base.options.fp8_keep;
    k.insert(k.end(), b.culprits.begin(), b.culprits.end());
    return k;
  }();
  s.ampcheck = fmt::format("--fp8 '{}' --fp8-keep {}\n", amp::to_string(*base.options.fp8), fmt::join(keep, ","));
  s.pytorch = fmt::format(
      "# TransformerEngine: these layers outside fp8 (their GEMMs in the autocast dtype), the rest in fp8\n"
      "with te.fp8_autocast(enabled=True, fp8_recipe=recipe):\n"
      "    ...\n"
      "    with te.fp8_autocast(enabled=False):\n"
      "        y = layer(x)   # for each of: {}\n",
      quoted(b.culprits, "'"));
  const auto* delayed = std::get_if<amp::DelayedScaling>(&*base.options.fp8);
  if (delayed != nullptr && delayed->scaling_factor_compute_algo)
    s.pytorch += fmt::format(
        "# and guard the recipe's scaling_factor_compute_algo as TE's default does (the scale kept where the\n"
        "# amax is 0 or not finite): it makes an infinite scale of a zero amax; instead of\n"
        "#   {}\n"
        "recipe.scaling_factor_compute_algo = lambda amax, scale, fp8_max, recipe: torch.where(\n"
        "    (amax > 0) & torch.isfinite(amax), fp8_max / amax / 2 ** recipe.margin, scale)\n",
        delayed->scaling_factor_compute_algo->text());
  return s;
}

// "; its -Inf masks (mul_scalar in 'Mul', ...) are intended: softmax maps them to 0", or "".
std::string intended_masks_text(const reports::Report& r) {
  if (r.nonfinite.intended.empty()) return {};
  std::vector<std::string> masks;
  for (const reports::IntendedInf& i : r.nonfinite.intended) masks.push_back(fmt::format("{} in '{}'", i.op, i.module));
  return fmt::format("; its -Inf mask{} ({}) {} intended: softmax maps {} to 0, and black-listing ops has nothing to "
                     "fix there",
                     masks.size() == 1 ? "" : "s", fmt::join(masks, ", "), masks.size() == 1 ? "is" : "are",
                     masks.size() == 1 ? "it" : "them");
}

// The run's first failure is a -Inf mask (built from data and constants, or a
// masked_fill) that an op other than softmax read: no op's precision is at fault, so no
// black list is searched. Where the reader made finite values of it (a max), the offer is
// --allow-inf, if that reading is meant; where it made NaN/+Inf, nothing ampcheck can
// allow: the model's use of the mask is what to change.
std::string misread_mask_text(const reports::Report& r) {
  const reports::NonFinite& nf = r.nonfinite;
  if (nf.mask_failures.empty() || !nf.producer || nf.producer->phase != "forward") return {};
  const reports::MaskFailure& m = nf.mask_failures.front();
  if (nf.producer->op != m.op || nf.producer->module != m.module) return {};
  std::string s = fmt::format(
      "the first failure is the -Inf mask {} in '{}' writes (fp16/bf16 rounds a value at the dtype's extreme, such "
      "as torch.finfo(float32).min, to -Inf), read by {} in '{}', {}; black-listing ops would only move where the "
      "mask is rounded, so none is searched",
      m.op, m.module, m.reader, m.reader_module, m.made_non_finite ? "which makes NaN/+Inf of it" : "not a softmax");
  if (!m.made_non_finite)
    return s + fmt::format(". If {} is meant to read the mask, allow it: --allow-inf {}", m.reader,
                           m.module.empty() ? m.op : m.module);
  return s + ". Read the mask with softmax only, or build it from the compute dtype's own minimum "
             "(torch.finfo(torch.float16).min, as the framework does under autocast)";
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
    else if (b.found && b.culprits.empty()) {
      const std::string probing = reports::probing_note(report);
      out << "bisect-nan: the run is healthy as configured; nothing to "
          << (b.granularity == "fp8" ? "keep out of fp8" : "black-list")
          << (probing.empty() ? "" : "; but " + probing) << intended_masks_text(report) << "\n";
    }
    else if (b.found)
      out << fmt::format("bisect-nan: fix found in {} runs: {}\n", b.runs,
                         reports::fix_text(b.culprits, b.granularity == "fp8"));
    else
      out << "bisect-nan: no fix found: " << why_not << "\n";
  }
  if (report.interrupted) return kInterrupted;
  return b.found ? kOk : kCheckFailed;
}

// The cures a recording shows a cause for, in the order they are tried (compare --script's:
// the weights, the optimizer's state, the loss). `loss_ops`: the loss's op types that ran in
// 16 bits.
Set cures_of(const reports::Report& r, const Set& loss_ops) {
  auto any = [&r](bool state) {
    return std::any_of(r.swamping.begin(), r.swamping.end(), [state](const reports::Swamping& s) {
      return (s.parameter.find(':') != std::string::npos) == state;
    });
  };
  Set out;
  if (any(false)) out.emplace_back(kMasterWeights);
  if (any(true)) out.emplace_back(kOptimizerState);
  if (!loss_ops.empty()) out.emplace_back(kTheLoss);
  return out;
}

// The 16-bit dtype a recording computed in most: "bfloat16" or "float16".
std::string low_dtype(const reports::Report& r) {
  std::int64_t fp16 = 0, bf16 = 0;
  for (const reports::OpInstance& op : r.ops) {
    fp16 += op.kernel_dtypes.fp16;
    bf16 += op.kernel_dtypes.bf16;
  }
  return fp16 > bf16 ? "float16" : "bfloat16";
}

// The cures of a found set in PyTorch's words, as their trials applied them.
std::string cures_advice(const Set& culprits, const Set& loss_ops, const std::string& dtype,
                         const std::string& device) {
  auto found = [&culprits](std::string_view c) {
    return std::find(culprits.begin(), culprits.end(), c) != culprits.end();
  };
  const std::string cast = dtype == "float16" ? "half" : "bfloat16";
  std::string s;
  if (found(kMasterWeights))
    s += fmt::format(
        "# fp32 master weights: train the fp32 model under torch.autocast instead of model.{0}()\n"
        "# (the optimizer then updates fp32 weights; autocast computes in {1} where its policy says){2}\n"
        "# model = model.{0}()   <- drop this cast\n"
        "with torch.autocast(device_type=\"{3}\", dtype=torch.{1}):\n"
        "    out = model(x)\n",
        cast, dtype, dtype == "float16" ? ";\n# in float16, scale the loss too (torch.amp.GradScaler)" : "", device);
  if (found(kOptimizerState))
    s += fmt::format(
        "# keep the optimizer's moments in fp32: create its state in the fp32 of the parameter\n"
        "state[\"exp_avg\"] = torch.zeros_like(p)      # not torch.zeros_like(p).to(torch.{0})\n"
        "state[\"exp_avg_sq\"] = torch.zeros_like(p)   # (or torch.optim.AdamW, whose state follows p)\n",
        dtype);
  if (found(kTheLoss)) {
    const bool classes = std::any_of(loss_ops.begin(), loss_ops.end(), [](const std::string& op) {
      return op.starts_with("nll_loss") || op == "log_softmax" || op == "cross_entropy";
    });
    const std::string loss = classes ? "cross_entropy" : loss_ops.front();
    s += fmt::format(
        "# compute the loss in fp32 ({} ran in {}): cast what it reads with .float()\n"
        "loss = F.{}({}.float(), y)   # not F.{}({}.{}(), y)\n",
        fmt::join(loss_ops, ", "), dtype, loss, classes ? "logits" : "pred", loss, classes ? "logits" : "pred", cast);
  }
  return s;
}

// The fix for a script, in PyTorch's terms: the cures in their words, and the ops or modules
// to keep in fp32 as the recorder that ran the trials writes it.
std::string pytorch_advice(const BisectOptions& o, const reports::Bisect& b, const std::string& device,
                           const std::string& recording, const std::string& cures) {
  Set rest;
  for (const std::string& c : b.culprits)
    if (!is_cure(c)) rest.push_back(c);
  if (rest.empty()) return cures;
  const std::string python = python_of(shell_words(o.script));
  return cures + (cures.empty() ? "" : "\n") +
         (b.granularity == "type" ? recorder_advice(python, rest, {}, device, recording)
                                  : recorder_advice(python, {}, rest, device, recording));
}

// What differs between the two kinds of search: how a trial runs, which ops are no
// candidates, the fp32 reference for --loss-tolerance, and the fix in the user's terms.
struct BisectSource {
  TrialRunner runner;
  std::set<std::string> not_candidates;  // op types that are never candidates
  Set cures;  // a recorded script's candidates that are no op (kMasterWeights, ...), first
  std::function<std::vector<double>()> fp32_reference;  // the fp32 (fp8: bf16) run's loss per step (engine only)
  std::function<reports::Suggestion(const reports::Bisect&)> suggest;
};

// The search on the run as configured (`first`), with `src`'s trials: one algorithm for
// the engine's models and the users' scripts.
int bisect_from(const BisectOptions& o, const InstrumentedRun& first, const BisectSource& src, std::ostream& out,
                std::ostream& err) {
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
  b.candidates = src.cures;

  // Candidates: what ran in low precision, in the order first seen. GEMM-like: an op type
  // of the lower-precision list, or a module running one.
  std::map<std::string, std::set<std::string>> modules_of_type;
  std::set<std::string> gemm_like;
  const bool fp8 = o.granularity == "fp8";
  for (const reports::OpInstance& op : report.ops) {
    if (fp8) {  // the layers whose GEMMs ran in fp8
      if (op.phase == "forward" && op.kernel_dtypes.fp8.value_or(0) > 0 && !op.module.empty() &&
          std::find(b.candidates.begin(), b.candidates.end(), op.module) == b.candidates.end())
        b.candidates.push_back(op.module);
      continue;
    }
    if (op.phase != "forward" || src.not_candidates.count(op.type) ||
        op.kernel_dtypes.fp16 + op.kernel_dtypes.bf16 == 0)
      continue;
    const std::string key = o.granularity == "type" ? op.type : op.module;
    if (key.empty()) continue;  // an op outside every module has no module to run in fp32
    if (std::find(b.candidates.begin(), b.candidates.end(), key) == b.candidates.end()) b.candidates.push_back(key);
    modules_of_type[op.type].insert(op.module);
    if (const auto id = op_from_name(op.type); id && op_info(*id).amp == AmpCategory::lower) gemm_like.insert(key);
  }
  // A recorded script's torch.compile'd regions: their forward graphs' ops in fp16/bf16 are
  // candidates too (a forcing trial runs them eagerly, heard: recorder/compiled.py).
  if (!fp8 && report.compiled)
    for (const reports::CompiledRegion& region : *report.compiled)
      for (const reports::CompiledGraph& g : region.graphs) {
        if (g.kind != "forward") continue;
        for (const reports::CompiledOp& op : g.ops) {
          if (src.not_candidates.count(op.op) || (op.dtype != "float16" && op.dtype != "bfloat16")) continue;
          const std::string key = o.granularity == "type" ? op.op : op.module;
          if (key.empty()) continue;
          if (std::find(b.candidates.begin(), b.candidates.end(), key) == b.candidates.end())
            b.candidates.push_back(key);
          modules_of_type[op.op].insert(op.module);
          if (const auto id = op_from_name(op.op); id && op_info(*id).amp == AmpCategory::lower) gemm_like.insert(key);
        }
      }

  Trials trials{o, src.runner, err, 0, {}, b, {}};
  {
    Outcome as_configured;
    as_configured.healthy = !first.failed;
    as_configured.producers = fp8 ? fp8_producers(first) : producer_keys(report, o.granularity);
    as_configured.low_precision_calls = fp8 ? fp8_calls(report) : report.summary.low_precision_calls;
    as_configured.total_calls = report.summary.total_calls;
    trials.cache[{}] = as_configured;
    // "Almost none": fewer than a tenth of the low-precision (fp8) calls the run as configured made.
    trials.min_low_precision_calls = std::max<std::int64_t>(1, as_configured.low_precision_calls / 10);
  }
  std::string why_not;
  if (!first.failed && o.loss_tolerance == 0) {
    b.found = true;  // healthy as configured: nothing to black-list
  } else {
    try {
      if (o.loss_tolerance > 0) {
        trials.reference_curve = src.fp32_reference();
        trials.reference_loss = trials.reference_curve.back();
        b.reference_loss = trials.reference_loss;
        ++b.runs;
        trials.judge_loss(b.trials.front(), report.steps);  // the run as configured, now held to the reference too
        trials.cache[{}].healthy = b.trials.front().healthy;
      }
      if (trials.healthy({})) {
        b.found = true;
      } else if (const std::string mask = misread_mask_text(report); !mask.empty()) {
        why_not = mask;
      } else if (reports::loss_scale_is_the_cure(report)) {
        why_not = "the cause is the loss scaling, not an op's precision, so no black list: " +
                  reports::gradient_underflow_text(report);
      } else if (b.candidates.empty()) {
        why_not = fp8 ? "no linear layer ran in fp8 to keep out of it" : "no op ran in low precision to black-list";
      } else {
        Set found = search(b.candidates, src.cures, fp8 ? fp8_producers(first) : producer_keys(report, o.granularity),
                           gemm_like, trials, why_not);
        // A cure is no AMP turned off even where it leaves little in low precision: the
        // moments or the loss in fp32 are what the 16-bit storage should have been.
        if (!found.empty() && !has_cure(found) && !trials.acceptable(found)) {
          const Outcome& off = trials.run(found);
          why_not = fp8 ? fmt::format("the only fix found, {} out of fp8, leaves {} op calls in fp8: fp8 would be "
                                      "off, which is no fix (check the recipe: its margin, history and format)",
                                      fmt::join(found, ", "), off.low_precision_calls)
                        : fmt::format(
              "the only fix found, {} in fp32, leaves {} of {} op calls in low precision: AMP would be off, which "
              "is no fix (the cause is not a few ops' precision; check the loss scaling and the data)",
              fmt::join(found, ", "), off.low_precision_calls, off.total_calls);
          if (const std::string advice = reports::static_scale_overflow_text(report); !advice.empty())
            why_not += "; " + advice;
          found.clear();
        }
        if (!found.empty()) {
          b.culprits = found;
          b.found = true;
        }
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
    if (fp8) {
      // The layers themselves are the fix (b.culprits): no black list, no fp32 module.
    } else if (o.granularity == "type") {
      std::set<std::string> modules;
      for (const std::string& t : b.culprits) {
        if (is_cure(t)) continue;  // the suggestion says each in the framework's words
        b.suggested_black_list.push_back(t);
        for (const std::string& m : modules_of_type[t])
          if (!m.empty()) modules.insert(m);
      }
      b.suggested_fp32_modules.assign(modules.begin(), modules.end());
    } else {
      for (const std::string& m : b.culprits)
        if (!is_cure(m)) b.suggested_fp32_modules.push_back(m);
    }
    if (!b.culprits.empty()) b.suggestion = src.suggest(b);
  }

  return finish_bisect(o, report, why_not, out);
}

void check_search_options(const BisectOptions& o) {
  if (o.granularity != "type" && o.granularity != "instance" && o.granularity != "fp8")
    throw UsageError("--granularity \"" + o.granularity +
                     "\": use type (op types), instance (module paths) or fp8 (the layers of an fp8 run)");
  if (!(o.max_skipped >= 0 && o.max_skipped < 1))
    throw UsageError(fmt::format("--max-skipped {} is not a fraction in [0, 1)", o.max_skipped));
  if (!(o.loss_tolerance >= 0)) throw UsageError(fmt::format("--loss-tolerance {} must be >= 0", o.loss_tolerance));
  if (o.max_runs < 2) throw UsageError(fmt::format("--max-runs {} is too few: at least 2", o.max_runs));
  check_output("--report", o.report);
  check_output("--html", o.html);
}

int run_bisect_engine(const BisectOptions& o, std::ostream& out, std::ostream& err) {
  if (o.args.nproc > 1 && !dist::launched_by_mpi()) return launch_under_mpi(o.args.nproc, err);
  check_search_options(o);
  const Resolved base = resolve(o.args);
  const bool fp8 = o.granularity == "fp8";
  if (fp8 && !base.options.fp8)
    throw UsageError("--granularity fp8 searches the linear layers of an fp8 run: give --fp8 RECIPE too");
  if (!o.args.quiet) err << base.device_notice;
  if (base.options.amp.level == amp::Level::O0)
    throw UsageError("bisect-nan needs an AMP level (O1, O2 or O3): at O0 nothing runs in low precision");

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
  const InstrumentedRun first = instrumented_run(o.args, base, setup, err);

  BisectSource src;
  src.runner = engine_runner(o, base, o.granularity, err);
  src.not_candidates = {"cast"};
  src.fp32_reference = [&]() {
    // The fp32 reference the final loss is held to.
    RunSetup ref_setup;
    ref_setup.command = "bisect-nan";
    ref_setup.mode = inspector::Mode::off;
    ref_setup.stop = InterruptScope::stop_predicate();
    Resolved ref = base;
    if (fp8) {
      ref.options.fp8.reset();  // the same run in bf16/fp16: what fp8 must keep up with
      ref.options.fp8_keep.clear();
    } else {
      ref.options = with_level(base.options, amp::Level::O0);
    }
    const InstrumentedRun fp32 = instrumented_run(o.args, ref, ref_setup, err);
    if (const auto& i = fp32.report.interrupted) throw SearchInterrupted{2, i->steps_run, i->steps_requested};
    std::vector<double> curve;
    for (const reports::StepRecord& s : fp32.report.steps) curve.push_back(s.loss);
    return curve;
  };
  src.suggest = [&](const reports::Bisect& b) { return fp8 ? fp8_suggestion(base, b) : suggestion(base, b); };
  return bisect_from(o, first, src, out, err);
}

int run_bisect_script(const BisectOptions& o, const CLI::App& cmd, std::ostream& out, std::ostream& err) {
  for (const char* engine_only : {"--model", "--data", "--loss", "--output", "--level", "--dtype", "--steps", "--batch",
                                  "--lr", "--seed", "--config", "--white", "--black", "--device", "--nproc",
                                  "--dp-reduce-dtype", "--dp-no-inf-reduce", "--cupti", "--fp8", "--fp8-keep",
                                  "--fp8-amax-group"})
    if (cmd.count(engine_only) > 0)
      throw UsageError(fmt::format("bisect-nan --script: {} sets ampcheck's own training, and the script trains with "
                                   "its own settings: drop {} (or bisect an exported model with --model instead)",
                                   engine_only, engine_only));
  if (shell_words(o.script).empty()) throw UsageError("bisect-nan --script: the command is empty; give \"python train.py\"");
  check_search_options(o);
  const InterruptScope interrupt;
  const ScratchLog log("bisect-nan --script");

  // The script as written, twice: a trial is judged against a run that repeats itself, or
  // a fix could be chance.
  if (!o.args.quiet) err << "bisect-nan: recording the script as written\n";
  RecordedRun first = recorded_run(script_request(o, log.path));
  if (first.report.run.framework && *first.report.run.framework == "paddle")
    throw UsageError(
        "bisect-nan --script: this is a PaddlePaddle script, whose ops the recorder cannot force to fp32 one by one "
        "(Paddle has no hook below its layers); give candidates to paddle.amp.auto_cast(custom_black_list={...}) "
        "yourself, or bisect the model's ONNX export (paddle.onnx.export; ampcheck bisect-nan --model "
        "model.onnx), which names the black list in Paddle's op names. Its recording: ampcheck record -- " +
        o.script);
  const bool stopped = interrupt_requested() || first.report.interrupted.has_value();
  if (!stopped) {
    if (first.script_failed() && first.report.steps.empty())
      throw UsageError("bisect-nan --script: " + reports::script_failure_text(first.report.run) +
                       " before it trained a step; fix the script first (its output: " + log.path + ")");
    if (!o.args.quiet) err << "bisect-nan: recording it again: the runs must agree\n";
    const RecordedRun again = recorded_run(script_request(o, log.path));
    if (!interrupt_requested()) {
      if (const std::string diff = first_difference(first, again); !diff.empty())
        throw UsageError(fmt::format(
            "bisect-nan --script: two runs of the unchanged script differ ({}), so no trial could tell a fix from "
            "chance; make the run repeat itself: seed it (torch.manual_seed(0), random.seed(0), numpy.random.seed(0)), "
            "use deterministic kernels (torch.use_deterministic_algorithms(True); on CUDA also "
            "CUBLAS_WORKSPACE_CONFIG=:4096:8), and load the data in a fixed order (DataLoader(num_workers=0), or a "
            "seeded generator= and worker_init_fn)",
            diff));
    }
  }
  const std::string device = first.report.run.device.empty() ? "cuda" : first.report.run.device;

  BisectSource src;
  const Set loss_ops = inspector::loss_ops_in_low_precision(first.report.ops);
  src.cures = cures_of(first.report, loss_ops);
  src.runner = script_runner(o, o.granularity, log.path, loss_ops);
  // --loss-tolerance: the reference is the script's fp32 twin (compare --script's), recorded
  // once from the same seeding as the trials.
  src.fp32_reference = [&o, &log, &err]() {
    if (!o.args.quiet) err << "bisect-nan: recording the script's fp32 twin (AMP off), the loss to come within\n";
    RecordRequest r = script_request(o, log.path);
    r.amp_off = true;
    r.inspect = "trace";
    const RecordedRun twin = recorded_run(r);
    if (const auto& i = twin.report.interrupted) throw SearchInterrupted{2, i->steps_run, i->steps_requested};
    std::vector<double> losses;
    for (const reports::StepRecord& st : twin.report.steps) losses.push_back(st.loss);
    if (losses.empty() || !std::isfinite(losses.back()) || losses.back() == 0)
      throw UsageError("bisect-nan --script --loss-tolerance: the script's fp32 twin " +
                       (losses.empty() ? std::string("trained no step")
                                       : fmt::format("ended at loss {}", losses.back())) +
                       ", which no relative tolerance can be measured against; drop --loss-tolerance");
    return losses;
  };
  // Data movement is no candidate: it computes nothing whose precision matters.
  src.not_candidates = {"cast", "reshape", "permute", "slice", "expand", "clone"};
  // The loss's op types are "the loss" (one candidate, its cure said in the loss's words).
  if (o.granularity == "type") src.not_candidates.insert(loss_ops.begin(), loss_ops.end());
  const std::string recording = first.json;  // the unchanged script's: its modules and casts shape the advice
  const std::string dtype = low_dtype(first.report);
  src.suggest = [&](const reports::Bisect& b) {
    reports::Suggestion s;
    s.pytorch = pytorch_advice(o, b, device, recording, cures_advice(b.culprits, loss_ops, dtype, device));
    return s;
  };
  InstrumentedRun as_configured = as_trial(std::move(first));
  as_configured.report.run.command = "bisect-nan";
  return bisect_from(o, as_configured, src, out, err);
}

int run_bisect(const BisectOptions& o, const CLI::App& cmd, std::ostream& out, std::ostream& err) {
  if (!o.script.empty()) return run_bisect_script(o, cmd, out, err);
  // An fp8 run (--fp8, or the model's or config's "fp8"): its layers are what to search,
  // unless told otherwise.
  if (cmd.count("--granularity") > 0 || !resolve(o.args).options.fp8) return run_bisect_engine(o, out, err);
  BisectOptions fp8 = o;
  fp8.granularity = "fp8";
  return run_bisect_engine(fp8, out, err);
}

}  // namespace

bool Trials::isatty_stderr() { return ::isatty(2) != 0; }

Command add_bisect_command(CLI::App& app) {
  auto options = std::make_shared<BisectOptions>();
  CLI::App* cmd = add_options(app, *options);
  return {cmd, [options, cmd](std::ostream& out, std::ostream& err) { return run_bisect(*options, *cmd, out, err); }};
}

}  // namespace ampcheck::cli
