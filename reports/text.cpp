#include "reports/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <map>
#include <cmath>
#include <string_view>

#include "reports/advice.h"
#include "reports/text_table.h"

namespace ampcheck::reports {
namespace {

// PaddlePaddle prints float32 as "float" and float64 as "double" (DataTypeToString).
std::string_view paddle_name(const std::string& dtype) {
  if (dtype == "float32") return "float";
  if (dtype == "float64") return "double";
  return dtype;
}

std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : fmt::format("{}", v); }
// Four decimals while they show at least three significant digits; a smaller loss (a
// weighted one: 1.09e-06) keeps four significant digits instead of printing 0.0000.
std::string loss(double v) {
  if (!std::isfinite(v)) return fmt::format("{}", v);
  return v == 0 || std::fabs(v) >= 0.1 ? fmt::format("{:.4f}", v) : fmt::format("{:.4g}", v);
}

struct RangeRow {
  std::string key;
  const Numerics* n;
};

std::string range_section(const Report& r, std::size_t top) {
  std::vector<RangeRow> rows;
  for (const OpInstance& o : r.ops)
    for (const NamedNumerics& nn : o.numerics) rows.push_back({o.name + ":" + nn.role, &nn.numerics});
  for (const TensorNumerics& t : r.tensors) rows.push_back({t.key, &t.numerics});
  std::erase_if(rows, [](const RangeRow& row) {
    const Numerics& n = *row.n;
    return n.f16.overflow + n.f16.underflow + n.bf16.overflow + n.bf16.underflow + n.nan + n.pos_inf + n.neg_inf == 0;
  });
  if (rows.empty()) return {};
  std::stable_sort(rows.begin(), rows.end(),
                   [](const RangeRow& a, const RangeRow& b) { return f16_out_of_range(*a.n) > f16_out_of_range(*b.n); });
  if (rows.size() > top) rows.resize(top);
  auto fraction = [](std::int64_t k, const Numerics& n) {
    return fmt::format("{:.3g}", n.count ? static_cast<double>(k) / static_cast<double>(n.count) : 0.0);
  };
  TextTable t({"tensor", "non-finite", "f16 overflow", "f16 underflow", "bf16 overflow", "bf16 underflow"});
  t.align(0, TextTable::Align::left);
  for (const RangeRow& row : rows) {
    const Numerics& n = *row.n;
    t.add_row({row.key, fraction(n.nan + n.pos_inf + n.neg_inf, n), fraction(n.f16.overflow, n), fraction(n.f16.underflow, n), fraction(n.bf16.overflow, n),
               fraction(n.bf16.underflow, n)});
  }
  return "Tensors with values outside the low-precision range (fraction of elements):\n" + t.render();
}

std::string error_section(const Report& r, std::size_t top) {
  std::vector<const OpInstance*> rows;
  for (const OpInstance& o : r.ops)
    if (o.local_error && o.local_error->count > 0) rows.push_back(&o);
  if (rows.empty()) return {};
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpInstance* a, const OpInstance* b) { return a->local_error->worst > b->local_error->worst; });
  if (rows.size() > top) rows.resize(top);
  TextTable t({"op instance", "dtype", "mean rel error", "worst rel error", "x rounding floor", "step"});
  t.align(0, TextTable::Align::left);
  for (const OpInstance* o : rows) {
    const LocalError& e = *o->local_error;
    const double times = e.floor_at_worst > 0 ? e.worst / e.floor_at_worst : (e.worst > 0 ? INFINITY : 1.0);
    t.add_row({o->name, o->out, fmt::format("{:.3g}", e.mean), fmt::format("{:.3g}", e.worst),
               fmt::format("{:.3g}", times), std::to_string(e.worst_step)});
  }
  return "Worst local (shadow) errors of low-precision ops, against an f64 recompute:\n" + t.render();
}

std::string outputs_text(const NanEvent& e) {
  std::string s;
  if (e.out_nan) s += fmt::format(" {} NaN", e.out_nan);
  if (e.out_pos_inf) s += fmt::format(" {} +Inf", e.out_pos_inf);
  if (e.out_neg_inf) s += fmt::format(" {} -Inf", e.out_neg_inf);
  return s;
}

// A producer, its inputs' ranges and what low precision lost on the way, each line
// indented by `indent`.
std::string event_text(const NanEvent& e, const std::string& indent) {
  std::string s = fmt::format("{} in module '{}', {}, step {}: output{}\n", e.op, e.module, e.phase, e.step, outputs_text(e));
  for (const TensorRange& in : e.inputs) {
    std::string shape;
    for (std::int64_t d : in.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    s += fmt::format("{}  {} {} [{}]: min {}, max {}, absmax {}\n", indent, in.role, in.dtype, shape, number(in.min),
                     number(in.max), number(in.absmax));
  }
  for (const LostValue& l : e.lost) s += fmt::format("{}  {}\n", indent, lost_text(e, l));
  return s;
}

std::string nonfinite_section(const Report& r) {
  const NonFinite& nf = r.nonfinite;
  if (nf.events_checked == 0 && nf.updates == 0) return {};
  // A report of 1.2 or older has the first producer only.
  const std::vector<NanEvent> producers =
      !nf.producers.empty() ? nf.producers : nf.producer ? std::vector<NanEvent>{*nf.producer} : std::vector<NanEvent>{};
  std::string s = "Non-finite values: ";
  s += !producers.empty() ? "first produced by " + event_text(producers.front(), "")
       : nf.skips.empty()  ? "no op produced one\n"
                           : "no op produced one outside the skipped updates (their causes are listed with the loss scale)\n";
  for (std::size_t i = 1; i < producers.size(); ++i) s += "  also produced by " + event_text(producers[i], "  ");
  if (nf.propagator_events > 0) {
    s += fmt::format("  carried on by {} op calls (", nf.propagator_events);
    for (std::size_t i = 0; i < nf.propagators.size(); ++i)
      s += fmt::format("{}{} x{}", i ? ", " : "", nf.propagators[i].first, nf.propagators[i].second);
    s += ")\n";
  }
  for (const IntendedInf& i : nf.intended)
    s += fmt::format("  intended, not a failure: {} in module '{}' wrote {} -Inf in {} calls; {}\n", i.op, i.module,
                     i.values, i.events, i.reason);
  for (const FailureRun& g : failure_runs(nf.failures))
    s += fmt::format("  failure: {} at step {}: {}{}\n", g.first.kind, g.first.step, g.first.detail, more_text(g));
  return s;
}

// Op instances that lost values to the low-precision range (--inspect full).
std::string range_loss_section(const Report& r, std::size_t top) {
  std::vector<const OpInstance*> rows;
  for (const OpInstance& o : r.ops)
    if (o.range_loss) rows.push_back(&o);
  if (rows.empty()) return {};
  std::stable_sort(rows.begin(), rows.end(), [](const OpInstance* a, const OpInstance* b) {
    return a->range_loss->underflow + a->range_loss->overflow > b->range_loss->underflow + b->range_loss->overflow;
  });
  if (rows.size() > top) rows.resize(top);
  TextTable t({"op instance", "dtype", "underflow", "overflow", "first lost"});
  t.align(0, TextTable::Align::left).align(4, TextTable::Align::left);
  for (const OpInstance* o : rows) {
    const RangeLoss& l = *o->range_loss;
    t.add_row({o->name, o->out, std::to_string(l.underflow), std::to_string(l.overflow),
               fmt::format("{} -> {} at step {}", value_text(l.first_value),
                           l.first_kind == "overflow" ? (l.first_value > 0 ? "+Inf" : "-Inf") : "0", l.first_step)});
  }
  return "Values lost to the low-precision range (exact results fp32 holds, stored as 0 or Inf), in elements:\n" +
         t.render();
}

std::string scaler_section(const Report& r) {
  if (r.steps.empty()) return {};
  std::vector<std::int64_t> skipped;
  for (const StepRecord& s : r.steps)
    if (s.skipped) skipped.push_back(s.step);
  std::string s = fmt::format("Loss scale: {} -> {}", number(r.steps.front().loss_scale), number(r.summary.final_loss_scale));
  std::int64_t probing = 0;
  for (const SkippedUpdate& u : r.nonfinite.skips) probing += is_probing_reading(u.reading);
  if (r.nonfinite.updates > 0)
    s += fmt::format(", {} of {} updates skipped ({} the scaler probing for its scale, {} counted)", r.nonfinite.skipped,
                     r.nonfinite.updates, probing, r.nonfinite.skipped - probing);
  s += "\n";
  constexpr std::size_t kListed = 10;
  for (std::size_t i = 0; i < std::min(kListed, r.nonfinite.skips.size()); ++i) {
    const SkippedUpdate& u = r.nonfinite.skips[i];
    s += fmt::format("  update {} skipped (scale {} -> {}, {}): {}\n", u.update, number(u.scale_before),
                     number(u.scale_after), skip_reading_text(u.reading), u.text);
  }
  if (r.nonfinite.skips.size() > kListed) s += fmt::format("  ... {} skipped updates in all\n", r.nonfinite.skips.size());
  if (!skipped.empty() && r.nonfinite.skips.empty()) {
    s += "  skipped steps:";
    constexpr std::size_t kShown = 20;
    for (std::size_t i = 0; i < std::min(kShown, skipped.size()); ++i) s += fmt::format(" {}", skipped[i]);
    if (skipped.size() > kShown) s += fmt::format(" ... ({} in all)", skipped.size());
    s += "\n";
  }
  if (r.nonfinite.probing) {
    const ScalerProbing& p = *r.nonfinite.probing;
    s += fmt::format("  updates {}-{}: the scaler probing down from its initial scale{}; {}\n", p.first_update,
                     p.last_update, p.excused ? " (left out of the skipped fraction)" : "", probing_note(r));
  }
  return s;
}

// What an interrupted report covers, in the words the verdict line uses.
std::string interrupted_section(const Report& r) {
  if (!r.interrupted) return {};
  const Interruption& i = *r.interrupted;
  const std::string by = i.signal.empty() ? "" : ", by " + i.signal;
  if (i.bisect_run > 1)
    return fmt::format("  bisect-nan run {} was interrupted after {} of {} steps{}: the search did not finish; "
                       "the run as configured and the trials listed are complete\n",
                       i.bisect_run, i.steps_run, i.steps_requested, by);
  return fmt::format("  interrupted after {} of {} steps{}: everything below covers those steps only\n", i.steps_run,
                     i.steps_requested, by);
}

}  // namespace

std::string fix_text(const std::vector<std::string>& culprits, bool fp8) {
  std::vector<std::string> parts, ops;
  for (const std::string& c : culprits) {
    if (fp8) ops.push_back(c);
    else if (c == kCureMasterWeights) parts.push_back("keep fp32 master weights");
    else if (c == kCureOptimizerState) parts.push_back("keep the optimizer's state in fp32");
    else if (c == kCureTheLoss) parts.push_back("compute the loss in fp32");
    else ops.push_back(c);
  }
  if (!ops.empty())
    parts.push_back(fp8 ? fmt::format("keep {} out of fp8", fmt::join(ops, ", "))
                        : fmt::format("run {} in fp32", fmt::join(ops, ", ")));
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text;
}

namespace {

std::string bisect_section(const Bisect& b, bool interrupted) {
  const bool fp8 = b.granularity == "fp8";  // the layers kept out of fp8, not ops in fp32
  std::string s = fmt::format("Bisection over {} ({} candidates, {} runs):\n",
                              fp8 ? "fp8 layers" : b.granularity == "instance" ? "op instances" : "op types",
                              b.candidates.size(), b.runs);
  TextTable t({"trial", fp8 ? "kept out of fp8" : "fp32 (black-listed)", "result", "skipped", "final loss"});
  t.align(1, TextTable::Align::left).align(2, TextTable::Align::left);
  for (const Trial& tr : b.trials) {
    std::string list;
    for (const std::string& x : tr.black_list) list += (list.empty() ? "" : ",") + x;
    t.add_row({std::to_string(tr.index), list.empty() ? "(none)" : list, tr.healthy ? "healthy" : "FAILED: " + tr.reason,
               std::to_string(tr.skipped_steps), number(tr.final_loss)});
  }
  s += t.render() + "\n";
  if (!b.found && interrupted) return s + "The search was interrupted before it ended: no fix is claimed.\n";
  if (!b.found) return s + (fp8 ? "No set of layers kept out of fp8 made the run healthy.\n" : "No black list made the run healthy.\n");
  if (b.culprits.empty())
    return s + (fp8 ? "The run is healthy as configured: nothing to keep out of fp8.\n"
                    : "The run is healthy as configured: nothing to run in fp32.\n");
  std::string culprits;
  s += "Minimal fix: " + fix_text(b.culprits, fp8) + "\n\n";
  // A recorded script's fix is in its own framework's terms only.
  if (!b.suggestion.ampcheck.empty())
    s += std::string(fp8 ? "ampcheck run:\n" : "ampcheck config (--config):\n") + b.suggestion.ampcheck + "\n";
  if (!b.suggestion.paddle.empty() || !b.suggestion.paddle_fleet.empty())
    s += "PaddlePaddle:\n" + b.suggestion.paddle + "\n" + b.suggestion.paddle_fleet + "\n";
  s += "PyTorch:\n" + b.suggestion.pytorch;
  return s;
}

// Parameters stored in 16 bits and updated there (no fp32 master): the share of their moving
// elements whose update rounded away, largest first.
std::string swamping_section(const Report& r, std::size_t top) {
  if (r.swamping.empty()) return {};
  std::vector<const Swamping*> rows;
  for (const Swamping& w : r.swamping) rows.push_back(&w);
  std::stable_sort(rows.begin(), rows.end(), [](const Swamping* a, const Swamping* b) { return a->fraction > b->fraction; });
  TextTable t({"parameter", "updates", "lost to rounding"});
  t.align(0, TextTable::Align::left);
  for (std::size_t i = 0; i < rows.size() && i < top; ++i)
    t.add_row({rows[i]->parameter, std::to_string(rows[i]->updates), fmt::format("{:.1f}%", 100 * rows[i]->fraction)});
  return "Updates lost to rounding (tensors stored in 16 bits and updated there: parameters without fp32 master "
         "weights, and optimizer state as NAME:KEY; the mean share of the elements with a nonzero gradient whose "
         "value did not move):\n" +
         t.render();
}

// compare --script: the AMP run's loss curve beside its fp32 twin's, at a few steps.
std::string twin_section(const Twin& t) {
  std::string s = fmt::format("AMP run beside its fp32 twin ({}; seed {}, {} fp32 run(s), trailing means over {} "
                              "step(s)):\n  {}\n",
                              t.script, t.seed, t.fp32.size(), t.window, t.verdict_text);
  const std::size_t steps = t.gap.size();
  if (steps == 0) return s;
  std::vector<std::string> headers = {"step", "AMP loss"};
  for (const TwinRun& r : t.fp32) headers.push_back(fmt::format("fp32 seed {}", r.seed));
  headers.push_back("gap");
  if (!t.noise.empty()) headers.push_back("fp32 noise");
  TextTable table(headers);
  // The first step, every tenth of the run, the departure and the last.
  std::vector<std::size_t> rows;
  for (std::size_t k = 0; k <= 10; ++k) rows.push_back(k * (steps - 1) / 10);
  if (t.departs_at) rows.push_back(static_cast<std::size_t>(*t.departs_at - 1));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (const std::size_t i : rows) {
    if (i >= steps) continue;
    std::vector<std::string> row = {std::to_string(i + 1), number(t.amp_losses[i])};
    for (const TwinRun& r : t.fp32) row.push_back(i < r.losses.size() ? number(r.losses[i]) : "-");
    row.push_back(fmt::format("{:.3g}", t.gap[i]));
    if (!t.noise.empty()) row.push_back(fmt::format("{:.3g}", t.noise[i]));
    table.add_row(row);
  }
  s += table.render();
  if (t.gradients && !t.gradients->empty()) {
    TextTable g({"parameter", "gradient vs fp32 twin"});
    g.align(0, TextTable::Align::left);
    const std::size_t shown = std::min<std::size_t>(t.gradients->size(), 8);
    for (std::size_t i = 0; i < shown; ++i)
      g.add_row({(*t.gradients)[i].parameter, fmt::format("{:.3g}", (*t.gradients)[i].difference)});
    s += fmt::format("\nGradients at the first step against the fp32 twin's (same weights, same data; relative "
                     "difference, largest first{}):\n",
                     shown < t.gradients->size() ? fmt::format(", {} of {}", shown, t.gradients->size()) : "") +
         g.render();
  }
  return s;
}

std::string compare_section(const Compare& c) {
  if (c.twin) {
    std::string s = twin_section(*c.twin);
    if (c.born && !c.born->empty()) {
      TextTable b({"op instance", "adds", "output vs fp32 twin", "added share"});
      b.align(0, TextTable::Align::left);
      for (const CompareBirth& x : *c.born)
        b.add_row({x.name, fmt::format("{:.3g}", x.local_error), fmt::format("{:.3g}", x.output_error),
                   fmt::format("{:.0f}%", 100 * x.share)});
      s += "\nWhere the AMP run's forward departs from its twin's at the first step (same weights, same data): the "
           "ops that add the most to their inputs' relative difference from the twin's:\n" +
           b.render();
    }
    return s;
  }
  std::string s = fmt::format("Levels in lock step (same seed, same data), errors against {}:\n", c.reference);
  TextTable runs({"level", "loss start", "loss end", "accuracy", "skipped"});
  for (const LevelRun& r : c.runs)
    runs.add_row({r.level, r.losses.empty() ? "-" : number(r.losses.front()), number(r.final_loss),
                  fmt::format("{:.1f}%", 100 * r.accuracy), std::to_string(r.skipped_steps)});
  s += runs.render() + "\n";
  std::vector<std::string> headers = {"op instance"};
  const std::size_t levels = c.ops.empty() ? 0 : c.ops.front().levels.size();
  for (std::size_t i = 0; i < levels; ++i) {
    const std::string& l = c.ops.front().levels[i].level;
    headers.push_back(l + " mean");
    headers.push_back(l + " worst");
    headers.push_back(l + " growth");
  }
  TextTable t(headers);
  t.align(0, TextTable::Align::left);
  std::size_t shown = 0;
  for (const std::string& name : c.fastest_growing) {
    if (++shown > 12) break;
    const auto it = std::find_if(c.ops.begin(), c.ops.end(), [&](const CompareOp& o) { return o.name == name; });
    if (it == c.ops.end()) continue;
    std::vector<std::string> row = {name};
    for (const LevelError& e : it->levels) {
      row.push_back(fmt::format("{:.3g}", e.mean));
      row.push_back(fmt::format("{:.3g}", e.worst));
      row.push_back(fmt::format("{:.3g}x", e.growth));
    }
    t.add_row(row);
  }
  s += "Op outputs' relative error, fastest growing first (growth: last quarter of the steps over the first):\n";
  s += t.render();
  if (c.born && !c.born->empty()) {
    TextTable b({"level", "op instance", "own error", "output vs " + c.reference, "own share"});
    b.align(1, TextTable::Align::left);
    for (const CompareBirth& x : *c.born)
      b.add_row({x.level, x.name, fmt::format("{:.3g}", x.local_error), fmt::format("{:.3g}", x.output_error),
                 fmt::format("{:.0f}%", 100 * x.share)});
    s += fmt::format("\nWhere each level's difference is born: the ops with the largest own error (their output "
                     "against their exact f64 result on the inputs they received), beside their output's difference "
                     "from {} (own share: how much of it the op adds itself; the rest it inherited):\n",
                     c.reference) +
         b.render();
    const bool born_in_an_op = std::any_of(c.born->begin(), c.born->end(), [](const CompareBirth& x) {
      return x.share >= 0.5;
    });
    if (!born_in_an_op)
      s += "\nNo op adds half of its output's difference itself: the difference is inherited, from rounding the "
           "values into the low precision (the casts, whose error is that rounding) and from a training that took "
           "another path.\n";
  }
  return s;
}

}  // namespace

double f16_out_of_range(const Numerics& n) {
  const std::int64_t bad = n.f16.overflow + n.f16.underflow + n.nan + n.pos_inf + n.neg_inf;
  return n.count ? static_cast<double>(bad) / static_cast<double>(n.count) : 0.0;
}

// The seeds of `run --seeds N`: each one's outcome, then the range diff allows.
std::string spread_section(const Report& r) {
  if (!r.spread || r.spread->seeds.empty()) return {};
  const Spread& sp = *r.spread;
  std::string s = fmt::format("Training noise over {} seeds (what `ampcheck diff` allows against this report):\n",
                              sp.seeds.size());
  s += fmt::format("  {:>6}  {:>12}  {:>9}  {:>8}  {}\n", "seed", "final loss", "accuracy", "skipped", "verdict");
  double lo = 0, hi = 0, sum = 0, acc_lo = 0, acc_hi = 0;
  std::size_t n = 0;
  for (const SeedOutcome& o : sp.seeds) {
    s += fmt::format("  {:>6}  {:>12}  {:>8.1f}%  {:>8}  {}\n", o.seed, number(o.final_loss), 100 * o.accuracy,
                     o.skipped_steps, o.verdict);
    if (!std::isfinite(o.final_loss)) continue;
    lo = n == 0 ? o.final_loss : std::min(lo, o.final_loss);
    hi = n == 0 ? o.final_loss : std::max(hi, o.final_loss);
    acc_lo = n == 0 ? o.accuracy : std::min(acc_lo, o.accuracy);
    acc_hi = n == 0 ? o.accuracy : std::max(acc_hi, o.accuracy);
    sum += o.final_loss;
    ++n;
  }
  if (n > 0)
    s += fmt::format("  final loss {} .. {} (mean {}), accuracy {:.1f}% .. {:.1f}%; {} op outputs or tensors "
                     "overflowed or underflowed fp16/bf16 in some seed\n",
                     number(lo), number(hi), number(sum / static_cast<double>(n)), 100 * acc_lo, 100 * acc_hi,
                     sp.low_precision.size());
  return s;
}

// The GPU time per op type with its tensor-core share, then the kernel check's line and
// each finding on its own line: `run`'s CUPTI section and `kernels`' profile sections.
std::string kernel_check_text(const Kernels& k) {
  auto ms = [](std::int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) * 1e-6); };
  auto share = [](std::int64_t part, std::int64_t whole) {
    return whole > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole))
                     : std::string("-");
  };
  std::string s;
  TextTable t({"op type", "launches", "ms", "matrix ms", "on tensor cores"});
  t.align(0, TextTable::Align::left);
  for (const KernelTypeRow& row : k.by_type)
    t.add_row({row.type, std::to_string(row.launches), ms(row.total_ns), row.matrix_ns ? ms(row.matrix_ns) : "-",
               share(row.tensor_core_ns, row.matrix_ns)});
  s += t.render("  ");
  const std::int64_t warnings = k.warnings();
  s += fmt::format("  kernel check: {} op instances' GEMMs and convolutions checked against the AMP policy; {} "
                   "warning{}{}\n",
                   k.instances_checked, warnings, warnings == 1 ? "" : "s",
                   k.kernels_unread ? fmt::format(" ({} kernels' names do not say their precision)", k.kernels_unread)
                                    : std::string());
  for (const KernelFinding& f : k.findings) s += "  " + f.severity + ": " + f.text + "\n";
  return s;
}

// 1.4: the GPU kernels (CUDA runs with CUPTI): tensor-core share of the matrix work per
// op type, then each finding of the kernel check on its own line.
std::string kernels_section(const Report& r) {
  if (!r.kernels) return {};
  const Kernels& k = *r.kernels;
  if (!k.traced) return "GPU kernels: not traced: " + k.not_traced + "\n";
  auto ms = [](std::int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) * 1e-6); };
  auto share = [](std::int64_t part, std::int64_t whole) {
    return whole > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole))
                     : std::string("-");
  };
  std::int64_t total = 0, matrix = 0, tensor = 0;
  for (const KernelTypeRow& t : k.by_type) {
    total += t.total_ns;
    matrix += t.matrix_ns;
    tensor += t.tensor_core_ns;
  }
  std::string s = fmt::format(
      "GPU kernels (CUPTI): {} kernels, {} copies, {} memsets; {} on op calls, {} the inspector's own, {} outside any "
      "op{}; {} ms of kernels, {} of it matrix work, {} of that on tensor cores\n",
      k.kernels, k.memcpys, k.memsets, k.attributed, k.inspector, k.unattributed,
      k.dropped + k.invalid > 0 ? fmt::format(", {} dropped or unreadable", k.dropped + k.invalid) : "", ms(total),
      ms(matrix) + " ms", share(tensor, matrix));
  s += kernel_check_text(k);
  for (const std::string& e : k.errors) s += "  CUPTI error: " + e + "\n";
  return s;
}

std::string paddle_operator_table(const std::vector<OpTypeRow>& rows, const std::vector<InsertedCasts>& casts) {
  // Column widths and fills as _print_operator_stats prints them (its print() joins
  // the header's pieces with single spaces).
  std::string out = fmt::format("<{:-^120}>\n", " op list ");
  out += fmt::format("<{:-^40} | {:-^17} | {:-^17} | {:-^17} | {:-^17}>\n", " Op Name ", " FP16 Calls ",
                     " BF16 Calls ", " FP32 Calls", " Other Calls ");
  for (const OpTypeRow& r : rows)
    out += fmt::format("  {:<40}|  {:<17}|  {:<17}|  {:<17}|  {:<17}\n", r.type, r.calls.fp16, r.calls.bf16,
                       r.calls.fp32, r.calls.other);
  out += fmt::format("<{:-^120}>\n", fmt::format(" op count: {} ", rows.size()));
  // Paddle counts its AMP casts as transfer_dtype rows; here they are kept apart, so
  // the rows above are the model's own ops.
  std::int64_t total = 0;
  for (const InsertedCasts& c : casts) total += c.calls;
  out += fmt::format("  inserted casts (AMP policy, not in the rows above): {}", total);
  std::string sep = " (";
  for (const InsertedCasts& c : casts) {
    out += fmt::format("{}{} -> {}: {}", sep, paddle_name(c.from), paddle_name(c.to), c.calls);
    sep = ", ";
  }
  if (!casts.empty()) out += ")";
  return out + "\n";
}

// mpirun -np N: whether the ranks agreed, and where they did not.
std::string distributed_section(const Report& r) {
  if (!r.distributed) return "";
  const Distributed& d = *r.distributed;
  // A job recorded rank by rank (ampcheck record -- torchrun ...) says what it compared.
  const bool recorded = d.compared_params.has_value() || r.rank.has_value();
  std::string s = fmt::format(
      "Data parallel: {} ranks ({}), {}: {}\n", d.world_size, d.runtime,
      d.found_inf_reduced ? "found_inf reduced over the ranks before each skip decision"
      : recorded && r.run.amp.loss_scaling == "static"
          ? "no loss scaler"
      : recorded ? "found_inf not reduced over the ranks (each rank's GradScaler decided from its own gradients)"
                 : "found_inf NOT reduced (--dp-no-inf-reduce: each rank acted on its own)",
      d.in_agreement ? "all in agreement (the same decision, scale and parameters at every step)"
                     : "the ranks did NOT agree");
  if (d.compared_params)
    s += fmt::format("  parameters compared across the ranks: {} replica(s){}\n", *d.compared_params,
                     d.sharded_params && *d.sharded_params > 0
                         ? fmt::format("; {} differ before the first update (shards each rank holds alone): not "
                                       "compared",
                                       *d.sharded_params)
                         : std::string());
  else if (recorded)
    s += "  parameters not compared: no rank checksummed them (no optimizer step was seen)\n";
  for (std::size_t i = 0; i < d.local_overflows.size();) {
    // One line per step: the ranks whose own gradients overflowed, before the reduction.
    std::size_t j = i;
    std::string who;
    while (j < d.local_overflows.size() && d.local_overflows[j].step == d.local_overflows[i].step) {
      const RankOverflow& o = d.local_overflows[j++];
      who += fmt::format("{}rank {} ({})", who.empty() ? "" : ", ", o.rank, o.tensor.empty() ? "a parameter" : o.tensor);
    }
    s += fmt::format("  step {}: local gradients overflowed on {}{}\n", d.local_overflows[i].step, who,
                     j - i == 1 && d.world_size > 1 ? ", alone" : "");
    i = j;
  }
  for (const RankDisagreement& x : d.disagreements) s += fmt::format("  step {}: {}\n", x.step, x.detail);
  if (d.first_divergence > 0) s += fmt::format("  diverged from step {}: {}\n", d.first_divergence, d.divergence);
  for (const DistributedFinding& f : d.findings)
    s += fmt::format("  {}step {}: {}\n", f.failure ? "FAILURE: " : "", f.step, f.detail);
  constexpr std::size_t kCollectiveRows = 8;
  for (std::size_t i = 0; i < d.collectives.size() && i < kCollectiveRows; ++i) {
    const CollectiveRow& c = d.collectives[i];
    s += fmt::format("  collective {} ({}) in {}, {}{}{}: {} call(s), {} elements{}\n", c.op, c.dtype, c.phase,
                     c.module.empty() ? std::string("outside any module") : "'" + c.module + "'",
                     c.function.empty() ? "" : ", autograd.Function " + c.function, "", c.calls, c.elements,
                     c.ranks ? fmt::format(" on {} rank(s)", *c.ranks) : std::string());
  }
  if (d.collectives.size() > kCollectiveRows)
    s += fmt::format("  ... {} more kinds of collective in the report\n", d.collectives.size() - kCollectiveRows);
  for (const RankSummary& k : d.ranks)
    s += recorded ? fmt::format("  rank {}: {} skipped update(s), replicas' checksum {}\n", k.rank, k.skipped,
                                k.final_checksum)
                  : fmt::format("  rank {}: {} rows, {} local overflow(s), {} skipped update(s), parameters {}\n",
                                k.rank, k.rows, k.local_overflows, k.skipped, k.final_checksum);
  return s;
}

// torch.compile's regions in a recorded run: their calls, what their graphs compute by
// dtype, and what running them again eagerly found.
std::string compiled_section(const Report& r) {
  if (!r.compiled || r.compiled->empty()) return "";
  std::string s = "Compiled by torch.compile (run compiled, unheard op by op; read from the graphs Inductor made):\n";
  for (const CompiledRegion& c : *r.compiled) {
    const std::string name = c.region.empty() ? "the model" : "'" + c.region + "'";
    s += fmt::format("  {}: {} call(s), {} backward run(s), {} graph(s)\n", name, c.calls, c.backward_calls,
                     c.graphs.size());
    for (const CompiledGraph& g : c.graphs) {
      std::map<std::string, std::int64_t> by_dtype;
      std::int64_t total = 0;
      for (const CompiledOp& op : g.ops) {
        if (op.op == "cast" || op.op == "cast_grad") continue;
        by_dtype[op.dtype.empty() ? "-" : op.dtype] += op.count;
        total += op.count;
      }
      std::string dtypes;
      for (const auto& [dtype, n] : by_dtype) dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", n, dtype);
      s += fmt::format("    {} graph: {} op call(s) a run ({})\n", g.kind, total, dtypes);
    }
    if (c.graphs.empty())
      s += "    its graphs were not seen (a backend other than Inductor): TORCH_COMPILE_DISABLE=1 records it eagerly\n";
    for (const CompiledReplay& x : c.replays)
      s += fmt::format("    recorded again eagerly at step {} ({}): {}\n", x.step, x.why, x.found);
  }
  return s;
}

// fp8: one line per scaled tensor: its format, the steps, the amax and scale they spanned,
// and the worst step's saturated and flushed shares; then the findings.
std::string fp8_section(const Report& r) {
  if (!r.fp8) return "";
  const Fp8Training& f = *r.fp8;
  std::string s = fmt::format("fp8: {} layer{} in fp8 with {}{}\n", f.layers.size(), f.layers.size() == 1 ? "" : "s",
                              f.recipe, f.kept.empty() ? "" : fmt::format("; kept out: {}", fmt::join(f.kept, ", ")));
  const auto pct = [](std::int64_t part, std::int64_t whole) {
    return whole > 0 ? fmt::format("{:.3g}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : std::string("-");
  };
  const auto share = [](std::int64_t part, std::int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  for (const Fp8TensorRecord& t : f.tensors) {
    if (t.steps.empty()) continue;  // the reader holds every per-step array to the steps' length
    std::size_t sat = 0, flush = 0;
    for (std::size_t i = 0; i < t.steps.size(); ++i) {
      if (share(t.saturated[i], t.count[i]) > share(t.saturated[sat], t.count[sat])) sat = i;
      if (share(t.flushed[i], t.count[i] - t.zero[i]) > share(t.flushed[flush], t.count[flush] - t.zero[flush])) flush = i;
    }
    s += fmt::format("  {} {} ({}): {} steps, amax {} .. {}, last scale {}; saturated at worst {} (step {}), flushed at "
                     "worst {} of the nonzero (step {})\n",
                     t.layer, t.tensor, t.format, t.steps.size(), number(*std::min_element(t.amax.begin(), t.amax.end())),
                     number(*std::max_element(t.amax.begin(), t.amax.end())), number(t.scale.back()),
                     pct(t.saturated[sat], t.count[sat]), t.steps[sat], pct(t.flushed[flush], t.count[flush] - t.zero[flush]),
                     t.steps[flush]);
  }
  for (const Fp8FindingRecord& x : f.findings) s += fmt::format("  {}: {}\n", x.failure ? "FAILURE" : "warning", x.text);
  return s;
}

std::string sampling_text(const RunInfo& run) {
  if (!run.inspect_every) return {};
  const std::int64_t n = *run.inspect_every;
  return fmt::format("statistics and local errors on steps {}, {}, {}, ... and on the {} steps after each step whose "
                     "gradients held Inf/NaN",
                     n, 2 * n, 3 * n, n);
}

std::string recorded_text(const RunInfo& run) {
  if (!run.framework) return {};
  const std::string& f = *run.framework;
  std::string s = "recorded in " + std::string(f == "pytorch" ? "PyTorch" : f == "paddle" ? "PaddlePaddle" : f);
  if (run.framework_version && !run.framework_version->empty()) s += " " + *run.framework_version;
  if (run.script && !run.script->empty()) {
    s += " from " + *run.script;
    if (run.script_args)
      for (const std::string& a : *run.script_args)
        s += " " + (a.empty() || a.find_first_of(" \t'\"") != std::string::npos ? "'" + a + "'" : a);
  }
  return s;
}

std::string script_failure_text(const RunInfo& run) {
  if (!run.script_outcome) return {};
  const ScriptOutcome& o = *run.script_outcome;
  const bool exited_badly = o.exit_code && *o.exit_code != 0;
  if (!exited_badly && o.error.empty()) return {};
  std::string s = "the script failed:";
  if (o.exit_code) s += fmt::format(" exit code {}", *o.exit_code);
  if (!o.error.empty()) s += (o.exit_code ? ", " : " ") + o.error;
  return s;
}

std::string recorder_error_text(const RunInfo& run) {
  if (!run.recorder_error) return {};
  return "the recorder stopped early (" + *run.recorder_error + "): the steps after it were not seen";
}

std::string shares_text(const std::vector<PrecisionShare>& shares, std::int64_t whole) {
  std::string s;
  for (const PrecisionShare& x : shares) {
    if (whole <= 0) break;
    const double pct = 100.0 * static_cast<double>(x.ns) / static_cast<double>(whole);
    const std::string where = x.tensor_cores == "yes" ? "TC" : x.tensor_cores == "no" ? "CUDA" : "?";
    s += fmt::format("{}{} {} {}", s.empty() ? "" : ", ", x.precision, where,
                     pct >= 1 || pct == 0 ? fmt::format("{:.0f}%", pct) : fmt::format("{:.1f}%", pct));
  }
  return s.empty() ? "-" : s;
}

namespace {

std::string kernels_ms(std::int64_t ns) {
  const double v = static_cast<double>(ns) * 1e-6;
  return v >= 100 ? fmt::format("{:.0f}", v) : v >= 1 ? fmt::format("{:.2f}", v) : fmt::format("{:.3f}", v);
}

// A duration in the unit that shows it: "12 ns", "3.5 us", "0.42 ms", "38 ms".
std::string duration_text(std::int64_t ns) {
  const double v = static_cast<double>(ns) * 1e-6;
  if (ns < 1000) return fmt::format("{} ns", ns);
  if (v < 0.1) return fmt::format("{:.1f} us", v * 1e3);
  return v >= 100 ? fmt::format("{:.0f} ms", v) : v >= 10 ? fmt::format("{:.1f} ms", v) : fmt::format("{:.2f} ms", v);
}

std::string dims_text(const std::vector<std::vector<std::int64_t>>& dims) {
  std::string s;
  for (const auto& d : dims) {
    s += s.empty() ? "[" : ", [";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    s += "]";
  }
  return s;
}

std::string rank_text(const ProfileRank& r, bool per_instance) {
  std::string s = fmt::format("ampcheck kernels: {}\n  {}{}{}\n", r.source, r.format,
                              r.rank >= 0 ? fmt::format(", rank {}", r.rank) : std::string(),
                              r.devices.empty() ? std::string() : ", " + r.devices.front() +
                                                                       (r.devices.size() > 1 ? fmt::format(" (x{} listed)", r.devices.size()) : ""));
  s += fmt::format("  expected: {}{}\n", r.expect, r.expect_note.empty() ? "" : " (" + r.expect_note + ")");
  if (!r.no_links.empty()) {
    s += fmt::format("  kernels: {} ({} ms); which op launched them cannot be said: {}\n", r.kernels,
                     kernels_ms(r.kernel_ns), r.no_links);
  } else {
    s += fmt::format("  kernels: {} ({} ms); attributed to the op that launched them: {} ({} ms, {} of the {} ms whose "
                     "launch is in the profile{})\n",
                     r.kernels, kernels_ms(r.kernel_ns), r.attributed, kernels_ms(r.attributed_ns),
                     r.launched_ns > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(r.attributed_ns) /
                                                                   static_cast<double>(r.launched_ns))
                                       : std::string("-"),
                     kernels_ms(r.launched_ns),
                     r.by_external_id ? fmt::format("; {} through External id", r.by_external_id) : std::string());
  }
  for (const Unattributable& u : r.unattributable) {
    if (u.reason == "the format has no launch links") continue;
    std::string top;
    for (std::size_t i = 0; i < u.top.size() && i < 3; ++i) top += (i ? "; " : "") + u.top[i];
    s += fmt::format("  unattributable, {}: {} kernels, {} ms ({})\n", u.reason, u.kernels, kernels_ms(u.ns), top);
  }
  for (const std::string& n : r.notes) s += "  note: " + n + "\n";
  s += fmt::format("  matrix work (GEMM, GEMV, convolution, attention): {} ms: {}\n", kernels_ms(r.matrix_ns),
                   shares_text(r.shares, r.matrix_ns));
  TextTable t({"op type", "calls", "launches", "ms", "matrix ms", "precision x tensor cores", "policy"});
  t.align(0, TextTable::Align::left).align(5, TextTable::Align::left).align(6, TextTable::Align::left);
  constexpr std::size_t kTypeRows = 25;
  for (std::size_t i = 0; i < r.types.size() && i < kTypeRows; ++i) {
    const ProfileOp& o = r.types[i];
    t.add_row({o.name, std::to_string(o.calls), std::to_string(o.launches), kernels_ms(o.total_ns),
               o.matrix_ns ? kernels_ms(o.matrix_ns) : "-", shares_text(o.shares, o.matrix_ns),
               o.policy.empty() ? "-" : o.policy + (o.expected.empty() ? "" : " -> " + o.expected)});
  }
  s += "  GPU time per op type" +
       (r.types.size() > kTypeRows ? fmt::format(" (the {} largest of {})", kTypeRows, r.types.size()) : std::string()) +
       ":\n" + t.render("  ");
  const std::int64_t warnings = r.check.warnings();
  s += fmt::format("  kernel check: {} op instances' GEMMs, convolutions and attention checked against {}; {} "
                   "warning{}{}\n",
                   r.check.instances_checked, r.expect, warnings, warnings == 1 ? "" : "s",
                   r.check.kernels_unread
                       ? fmt::format(" ({} kernels' names do not say their precision)", r.check.kernels_unread)
                       : std::string());
  for (const KernelFinding& f : r.check.findings) s += "  " + f.severity + ": " + f.text + "\n";
  if (!r.cost_text.empty()) s += "  " + r.cost_text + "\n";
  for (const FallbackCost& c : r.fallbacks)
    s += fmt::format("    {}: {}{}\n", c.op, duration_text(c.gpu_ns),
                     c.at_rate_ns >= 0 ? fmt::format(", ~{} at {}", duration_text(c.at_rate_ns), c.rate)
                                       : std::string(", not estimated"));
  if (!r.counters.empty()) {
    s += fmt::format("  Nsight Compute counters: {} kernels measured; {} disagree with what their names say\n",
                     r.counters.size(), r.counter_disagreements);
    for (const CounterCheck& c : r.counters)
      if (!c.agrees)
        s += fmt::format("    DISAGREES: {}: the name says tensor cores {} ({}), the counters {} ({}) [{}]\n",
                         c.kernel, c.name_tensor_cores, c.name_precision, c.counters_tensor_cores,
                         c.counters_precision.empty() ? "-" : c.counters_precision, c.metrics);
  }
  if (per_instance && !r.instances.empty()) {
    TextTable i({"op instance", "calls", "ms", "matrix ms", "precision x tensor cores", "input dims", "input types"});
    i.align(0, TextTable::Align::left).align(4, TextTable::Align::left).align(5, TextTable::Align::left)
        .align(6, TextTable::Align::left);
    for (const ProfileOp& o : r.instances) {
      std::string types;
      for (const std::string& x : o.input_types) types += (types.empty() ? "" : ", ") + x;
      i.add_row({o.name, std::to_string(o.calls), kernels_ms(o.total_ns), o.matrix_ns ? kernels_ms(o.matrix_ns) : "-",
                 shares_text(o.shares, o.matrix_ns), dims_text(o.input_dims), types});
    }
    s += "  GPU time per op instance:\n" + i.render("  ");
  }
  s += "  verdict: " + r.verdict_text + "\n";
  return s;
}

}  // namespace

std::string to_text(const KernelsReport& report, bool per_instance) {
  std::string s;
  for (std::size_t i = 0; i < report.ranks.size(); ++i) {
    if (i) s += "\n";
    s += rank_text(report.ranks[i], per_instance);
  }
  if (!report.differences.empty()) {
    s += "\nWhat differs between the ranks:\n";
    for (const RankDifference& d : report.differences) {
      std::string each;
      for (std::size_t i = 0; i < d.per_rank.size(); ++i)
        each += fmt::format("{}{}: {}", i ? "; " : "", report.ranks[i].rank >= 0 ? fmt::format("rank {}", report.ranks[i].rank)
                                                                                   : fmt::format("profile {}", i + 1),
                            d.per_rank[i]);
      s += "  " + d.what + ": " + each + "\n";
    }
  }
  if (report.ranks.size() > 1) s += "\nverdict: " + report.verdict_text + "\n";
  return s;
}

// "1-4, 8, 16": step numbers in runs.
std::string step_ranges(const std::vector<std::int64_t>& steps) {
  std::string out;
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(steps[i]) +
           (j > i ? (j == i + 1 ? ", " : "-") + std::to_string(steps[j]) : std::string());
    i = j + 1;
  }
  return out;
}

std::string to_text(const Report& r, std::size_t top) {
  const RunInfo& run = r.run;
  std::string s = fmt::format("ampcheck {}: {} ({} parameters)\n", run.command, run.model_description, run.parameters);
  if (const std::string rec = recorded_text(run); !rec.empty()) s += "  " + rec + "\n";
  if (const std::string f = script_failure_text(run); !f.empty())
    s += fmt::format("  {} (the report holds the {} step{} it ran)\n", f, r.steps.size(), r.steps.size() == 1 ? "" : "s");
  if (const std::string e = recorder_error_text(run); !e.empty()) s += "  " + e + "\n";
  std::string batch = std::to_string(run.batch);
  if (run.fixed_batch)
    batch += run.batch == *run.fixed_batch ? " (fixed by the export)"
                                          : fmt::format(" ({} rows per rank, fixed by the export)", *run.fixed_batch);
  if (run.micro_batches) batch += fmt::format(" x {} micro-batches per step", *run.micro_batches);
  std::string lr = number(run.lr);
  if (const auto& l = run.lr_schedule)
    lr += fmt::format(" ({}{} at step 1, peak {} at step {}, {} at the last)", l->scheduler,
                      l->scheduler.empty() ? number(l->first) : ": " + number(l->first), number(l->peak), l->peak_step,
                      number(l->last));
  s += fmt::format("  {} {}, {} semantics, {} steps, batch {}, {} lr {}, seed {}, device {}\n", run.level, run.dtype,
                   run.amp.semantics, run.steps, batch, run.optimizer, lr, run.seed, run.device);
  if (run.listened_steps && static_cast<std::int64_t>(run.listened_steps->size()) < run.steps)
    s += fmt::format("  op calls heard on {} of the {} steps ({}: steps {}); every step's loss, loss scale and gradients "
                     "read, a failure on the others heard by running the model's call again (--listen all hears "
                     "every step)\n",
                     run.listened_steps->size(), run.steps, run.listen.value_or("auto"), step_ranges(*run.listened_steps));
  if (const std::string sampled = sampling_text(run); !sampled.empty()) s += "  " + sampled + "\n";
  if (const auto& m = run.device_memory)
    s += fmt::format("  GPU memory: peak {:.1f} MiB in tensors, {:.1f} MiB reserved; {} cudaMalloc calls, cache hits {} of {}\n",
                     static_cast<double>(m->peak_allocated_bytes) / (1 << 20),
                     static_cast<double>(m->peak_reserved_bytes) / (1 << 20), m->device_allocations, m->cache_hits,
                     m->cache_hits + m->cache_misses);
  s += interrupted_section(r);
  const Summary& sum = r.summary;
  if (!r.steps.empty())
    s += fmt::format("  loss {} -> {}, training accuracy {}, skipped steps {} of {}, final loss scale {} ({})\n",
                     loss(sum.initial_loss), loss(sum.final_loss),
                     std::isnan(sum.accuracy) ? std::string("not measured") : fmt::format("{:.1f}%", 100 * sum.accuracy),
                     sum.skipped_steps,
                     r.steps.size(), number(sum.final_loss_scale), run.amp.loss_scaling);
  s += "\n";
  if (!r.op_types.empty()) s += paddle_operator_table(r.op_types, r.inserted_casts) + "\n";
  if (const std::string k = kernels_section(r); !k.empty()) s += k + "\n";
  for (const std::string& part : {scaler_section(r), nonfinite_section(r), range_section(r, top),
                                  range_loss_section(r, top), error_section(r, top), swamping_section(r, top)})
    if (!part.empty()) s += part + "\n";
  if (r.bisect) s += bisect_section(*r.bisect, r.interrupted.has_value()) + "\n";
  if (r.compare) s += compare_section(*r.compare) + "\n";
  if (r.spread) s += spread_section(r) + "\n";
  if (r.compiled) s += compiled_section(r) + "\n";
  if (r.distributed) s += distributed_section(r) + "\n";
  if (r.fp8) s += fp8_section(r) + "\n";
  return s + "verdict: " + sum.verdict_text + "\n";
}

}  // namespace ampcheck::reports
