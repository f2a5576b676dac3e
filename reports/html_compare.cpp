// Runs beside runs: compare's levels against the reference (per op, where each level's
// difference is born), compare --script's AMP run beside its fp32 twin, and run --seeds'
// spread of outcomes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reports/html_parts.h"

namespace ampcheck::reports::html_impl {

// run --seeds N: each seed's outcome, the training noise `ampcheck diff` allows.
std::string spread_section(const Spread& sp) {
  std::string out = section_open("spread", "Training noise over " + std::to_string(sp.seeds.size()) + " seeds");
  out += note("The same configuration trained with each seed: ampcheck diff judges a run against this spread "
              "(docs/diff.md). The first seed is the run this page shows.");
  Table t({"#seed", "#final loss", "#accuracy", "#skipped steps", "verdict"});
  for (const SeedOutcome& o : sp.seeds)
    t.row({fmt::format("{}", o.seed), num(o.final_loss, 6), percent(o.accuracy, 1), integer(o.skipped_steps), o.verdict});
  out += t.render("seeds");
  if (!sp.low_precision.empty()) {
    out += "<h3>Overflow or underflow seen in some seed</h3>\n";
    Table lp({"op output or tensor", "#f16 overflow", "#f16 underflow", "#bf16 overflow", "#bf16 underflow"});
    for (const LowPrecisionSeen& seen : sp.low_precision)
      lp.row({seen.key, integer(seen.f16.overflow), integer(seen.f16.underflow), integer(seen.bf16.overflow),
              integer(seen.bf16.underflow)});
    out += lp.render("spread-low-precision");
  }
  return out + std::string(kSectionClose);
}

namespace {

// compare --script: the AMP run's loss curve over its fp32 twin's runs, the gap and noise.
std::string twin_section(const Twin& t, const std::optional<std::vector<CompareBirth>>& born) {
  std::string out = section_open("compare", "AMP run beside its fp32 twin");
  out += fmt::format("<p><code>{}</code>, seed {}: the AMP run ({}) and {} fp32 run(s) of the script with AMP off.</p>\n",
                     esc(t.script), t.seed, esc(t.amp_verdict), t.fp32.size());
  out += fmt::format("<p class=\"verdict verdict-{}\"><strong>{}</strong></p>\n", esc(t.verdict), esc(t.verdict_text));
  double lo = 0, hi = 0;
  bool any = false;
  auto points = [&](const std::vector<double>& v) {
    std::vector<std::pair<double, double>> p;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) continue;
      lo = any ? std::min(lo, v[i]) : v[i];
      hi = any ? std::max(hi, v[i]) : v[i];
      any = true;
      p.emplace_back(static_cast<double>(i + 1), v[i]);
    }
    return p;
  };
  const auto amp = points(t.amp_losses);
  std::vector<std::vector<std::pair<double, double>>> twins;
  for (const TwinRun& r : t.fp32) twins.push_back(points(r.losses));
  std::size_t steps = t.amp_losses.size();
  for (const TwinRun& r : t.fp32) steps = std::max(steps, r.losses.size());
  if (any && steps > 1) {
    Axis y;
    y.label = "loss";
    y.lo = lo;
    y.hi = hi > lo ? hi : lo + 1;
    Plot plot("twin-loss", "loss per step", step_axis(1, static_cast<double>(steps)), y);
    plot.series("AMP", kRed, amp);
    plot.legend({"AMP", std::string(kRed), LegendEntry::Kind::line});
    for (std::size_t k = 0; k < twins.size(); ++k) {
      const std::string name = fmt::format("fp32 seed {}", t.fp32[k].seed);
      const std::string_view color = kSeriesColors[k % std::size(kSeriesColors)];
      plot.series(name, color, twins[k]);
      plot.legend({name, std::string(color), LegendEntry::Kind::line});
    }
    if (t.departs_at) plot.vline(static_cast<double>(*t.departs_at), "departure", kRed, "departs", 0);
    out += plot.render();
  }
  if (!t.gap.empty()) {
    Table table({"#step", "#AMP loss", "#gap", "#fp32 noise"});
    const std::size_t n = t.gap.size();
    for (std::size_t k = 0; k <= 10; ++k) {
      const std::size_t i = k * (n - 1) / 10;
      if (k > 0 && i == (k - 1) * (n - 1) / 10) continue;
      table.row({integer(static_cast<std::int64_t>(i + 1)), num(t.amp_losses[i], 5), num(t.gap[i], 3),
                 t.noise.empty() ? std::string("–") : num(t.noise[i], 3)});
    }
    out += table.render("twin-steps");
    out += fmt::format("<p class=\"caption\">gap: the trailing mean over {} step(s) of |AMP - fp32 of the same seed|; "
                       "noise: the same of the largest |fp32 of another seed - fp32 of the same seed|.</p>\n",
                       t.window);
  }
  if (t.gradients && !t.gradients->empty()) {
    out += "<h3>Gradients at the first step</h3>\n";
    Table g({"parameter", "#gradient vs fp32 twin"});
    for (const TwinGradient& x : *t.gradients) g.row({x.parameter, num(x.difference)});
    out += g.render("twin-gradients");
    out += "<p class=\"caption\">each parameter's gradient, as the update received it, against the fp32 twin's from "
           "the same weights and data (relative difference, largest first).</p>\n";
  }
  if (born && !born->empty()) {
    out += "<h3>Where the forward departs from the twin's</h3>\n";
    Table b({"op", "#adds", "#output vs fp32 twin", "#added share"});
    for (const CompareBirth& x : *born) b.row({x.name, num(x.local_error), num(x.output_error), percent(x.share, 0)});
    out += b.render("twin-born");
    out += "<p class=\"caption\">at the first step, from the same weights and data: each op's output against the "
           "fp32 twin's (relative), and what it adds to the largest of its inputs' differences.</p>\n";
  }
  return out + std::string(kSectionClose);
}

}  // namespace

std::string compare_section(const Compare& c) {
  if (c.twin) return twin_section(*c.twin, c.born);
  std::string out = section_open("compare", "Compare levels");
  out += fmt::format("<p>Reference level: <b>{}</b>.</p>\n", esc(c.reference));
  if (!c.runs.empty()) {
    Table t({"level", "#final loss", "#accuracy", "#skipped steps"});
    for (const LevelRun& run : c.runs)
      t.row({run.level, num(run.final_loss, 5), percent(run.accuracy, 1), integer(run.skipped_steps)});
    out += t.render("compare-runs");
  }
  out += "<h3>Relative error per op instance against the reference</h3>\n";
  std::vector<std::string> levels;  // in order of first appearance
  for (const CompareOp& op : c.ops)
    for (const LevelError& e : op.levels)
      if (std::find(levels.begin(), levels.end(), e.level) == levels.end()) levels.push_back(e.level);
  if (c.ops.empty()) {
    out += note("no op errors were compared (numerics off in the compared runs)");
  } else {
    std::vector<std::string> headers = {"op", "type", "module"};
    for (const std::string& level : levels) {
      headers.push_back("#" + level + " mean");
      headers.push_back("#" + level + " worst (step)");
      headers.push_back("#" + level + " growth");
    }
    Table t(std::move(headers));
    for (const CompareOp& op : c.ops) {
      std::vector<std::string> cells = {op.name, op.type, op.module};
      for (const std::string& level : levels) {
        const auto e = std::find_if(op.levels.begin(), op.levels.end(),
                                    [&](const LevelError& le) { return le.level == level; });
        if (e == op.levels.end()) {
          cells.insert(cells.end(), {"–", "–", "–"});
        } else {
          cells.push_back(num(e->mean));
          cells.push_back(fmt::format("{} ({})", num(e->worst), e->worst_step));
          cells.push_back(fmt::format("×{}", num(e->growth, 3)));
        }
      }
      t.row(std::move(cells));
    }
    out += t.render("compare-ops");
    out += "<p class=\"caption\">growth: mean error over the last quarter of the steps over the mean over the "
           "first quarter.</p>\n";
  }
  if (c.born && !c.born->empty()) {
    out += "<h3>Where each level's difference is born</h3>\n";
    Table b({"level", "op", "#own error", "#output vs " + c.reference, "#own share"});
    for (const CompareBirth& x : *c.born)
      b.row({x.level, x.name, num(x.local_error), num(x.output_error), percent(x.share, 0)});
    out += b.render("compare-born");
    out += "<p class=\"caption\">own error: the op's output against its exact f64 result on the inputs it received; "
           "own share: how much of its output's difference from the reference it adds itself, the rest inherited "
           "from its inputs and from a training that took another path.</p>\n";
  }
  out += "<h3>Fastest-growing error</h3>\n";
  if (c.fastest_growing.empty()) {
    out += note("no op's error grew");
  } else {
    out += "<ol class=\"fastest\">\n";
    for (const std::string& name : c.fastest_growing) out += fmt::format("<li>{}</li>\n", esc(name));
    out += "</ol>\n";
  }
  return out + std::string(kSectionClose);
}

}  // namespace ampcheck::reports::html_impl
