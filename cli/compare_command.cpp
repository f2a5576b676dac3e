#include "cli/compare_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/run_command.h"  // mark_interrupted
#include "cli/run_options.h"
#include "cli/usage_error.h"
#include "engine/hooks.h"
#include "inspector/to_report.h"  // dtype_text
#include "inspector/trace.h"      // Occurrences
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct CompareOptions {
  RunArgs args;
  std::vector<std::string> levels{"O0", "O1", "O2"};
  std::string report, html;
  bool json = false;
};

CLI::App* add_options(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand("compare", "Train at several AMP levels in lock step and compare every op's output");
  add_run_args(cmd, o.args, /*with_level=*/false);
  cmd->add_option("--levels", o.levels, "levels, comma separated; the first (O0 when listed) is the reference")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--report", o.report, "write the JSON report (with its compare section) here");
  cmd->add_option("--html", o.html, "write the HTML report here");
  cmd->add_flag("--json", o.json, "print the JSON report instead of the text");
  return cmd;
}

// The forward outputs of one step, by op instance, in the order they ran.
class OutputCapture : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    if (e.inserted_cast || e.phase != Phase::forward || !e.output || !e.output->defined() ||
        !is_floating(e.output->dtype()))
      return;
    const std::int64_t k = occurrences_.of(e);
    const std::string name = fmt::format("{}/{}#{}", e.module, op_name(e.op), k);
    if (!outputs.count(name)) order.push_back({name, std::string(op_name(e.op)), e.module});
    outputs[name] = e.output->to_f64();
  }
  void clear() {
    outputs.clear();
    occurrences_.reset();
  }
  struct Seen {
    std::string name, type, module;
  };
  std::vector<Seen> order;  // every instance ever seen, first-seen order
  std::map<std::string, std::vector<double>> outputs;

 private:
  inspector::Occurrences occurrences_;
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

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : 0.0;
}

int run_compare(const CompareOptions& o, std::ostream& out, std::ostream& err) {
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
  std::map<std::string, std::vector<std::vector<double>>> errors;  // name -> level -> per step
  std::vector<OutputCapture::Seen> order;
  const std::int64_t steps = base.options.steps;
  std::int64_t ran = 0;
  Progress progress(err, o.args.quiet, "compare", steps);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (std::size_t l = 0; l < n_levels; ++l) {
      captures[l].clear();
      add_observer(&captures[l]);
      try {
        trainers[l]->step();
      } catch (...) {
        remove_observer(&captures[l]);
        throw;
      }
      remove_observer(&captures[l]);
    }
    const OutputCapture& ref = captures.front();
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
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_compare(*options, out, err); }};
}

}  // namespace ampcheck::cli
