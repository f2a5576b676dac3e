// The top of the run's page and its training curves: the header (verdict, summary cards,
// the run's settings), the loss curve (one per level under compare) and the loss-scale
// history with its skipped steps and their causes.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "reports/advice.h"  // probing_note, skip_reading_text
#include "reports/html_parts.h"
#include "reports/text.h"  // recorded_text, script_failure_text, recorder_error_text, sampling_text

namespace ampcheck::reports::html_impl {
namespace {

std::string verdict_class(const std::string& verdict) {
  for (std::string_view known : {"healthy", "failed", "gradient_underflow", "amp_off", "reference", "unchecked", "interrupted"})
    if (verdict == known) return std::string(known);
  return "unknown";
}

}  // namespace

std::string header(const Report& r) {
  const RunInfo& run = r.run;
  const Summary& s = r.summary;
  std::string out = fmt::format("<header>\n<h1>ampcheck {} — {}</h1>\n", esc(run.command), esc(run.model));
  if (!run.model_description.empty()) out += fmt::format("<p class=\"sub\">{}</p>\n", esc(run.model_description));
  if (const std::string rec = recorded_text(run); !rec.empty())
    out += fmt::format("<p class=\"sub\" id=\"recorded\">{}</p>\n", esc(rec));
  if (const std::string f = script_failure_text(run); !f.empty())
    out += fmt::format("<p class=\"sub\" id=\"script-failed\"><strong>{}</strong> (the report holds the {} step{} it "
                       "ran)</p>\n",
                       esc(f), r.steps.size(), r.steps.size() == 1 ? "" : "s");
  if (const std::string e = recorder_error_text(run); !e.empty())
    out += fmt::format("<p class=\"sub\" id=\"recorder-error\">{}</p>\n", esc(e));
  // The tag names the kind unless the line already starts with it ("FAILED: ...").
  const std::string tag = s.verdict.empty() ? "no verdict" : s.verdict;
  const bool tag_in_text = s.verdict_text.size() >= tag.size() &&
                           std::equal(tag.begin(), tag.end(), s.verdict_text.begin(), [](char a, char b) {
                             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
                           });
  out += fmt::format("<div class=\"verdict verdict-{}\" id=\"verdict\">{}{}</div>\n", verdict_class(s.verdict),
                     tag_in_text ? "" : fmt::format("<span class=\"verdict-tag\">{}</span> ", esc(tag)),
                     esc(s.verdict_text));
  // Interrupted: how far the page's numbers go. `own`: the stopped training is the one the
  // page shows (not a later bisect-nan run), so its steps are the steps run.
  const bool own = r.interrupted && r.interrupted->bisect_run <= 1;
  if (r.interrupted) {
    const Interruption& i = *r.interrupted;
    const std::string by = i.signal.empty() ? "" : ", by " + i.signal;
    out += fmt::format("<div class=\"interrupted\" id=\"interrupted\">{}</div>\n",
                       esc(own ? fmt::format("Interrupted after {} of {} steps{}: this page covers those steps only.",
                                             i.steps_run, i.steps_requested, by)
                               : fmt::format("bisect-nan run {} was interrupted after {} of {} steps{}: the search "
                                             "did not finish; the run shown and the trials listed are complete.",
                                             i.bisect_run, i.steps_run, i.steps_requested, by)));
  }
  const std::int64_t steps_shown = own ? r.interrupted->steps_run : run.steps;

  const std::vector<std::pair<std::string, std::string>> cards = {
      {"loss", fmt::format("{} → {}", num(s.initial_loss, 5), num(s.final_loss, 5))},
      {"accuracy", std::isnan(s.accuracy) ? std::string("not measured") : percent(s.accuracy, 1)},
      {"skipped steps", fmt::format("{} of {}", s.skipped_steps, steps_shown)},
      {"final loss scale", num(s.final_loss_scale, 6)},
      {"low-precision calls", fmt::format("{} of {} ({})", s.low_precision_calls, s.total_calls,
                                          percent(static_cast<double>(s.low_precision_calls),
                                                  static_cast<double>(s.total_calls)))}};
  out += "<div class=\"cards\">\n";
  for (const auto& [k, v] : cards)
    out += fmt::format("<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>\n", esc(k),
                       esc(v));
  out += "</div>\n";

  const AmpSettings& amp = run.amp;
  const std::vector<std::pair<std::string, std::string>> info = {
      {"model", run.model},
      {"parameters", integer(run.parameters)},
      {"level", run.level},
      {"dtype", run.dtype},
      {"device", run.device},
      {"steps", own ? fmt::format("{} of {} (interrupted)", r.interrupted->steps_run, run.steps) : integer(run.steps)},
      {"batch", integer(run.batch)},
      {"seed", fmt::format("{}", run.seed)},
      {"optimizer", fmt::format("{} (lr {})", run.optimizer, num(run.lr, 6))},
      {"inspect", run.inspect_every ? run.inspect + ": " + sampling_text(run) : run.inspect},
      {"semantics", amp.semantics},
      {"config file", amp.config_file.empty() ? "(none)" : amp.config_file},
      {"custom white list", list_or_none(amp.custom_white_list)},
      {"custom black list", list_or_none(amp.custom_black_list)},
      {"fp32 modules", list_or_none(amp.fp32_modules)},
      {"loss scaling", fmt::format("{} (initial {})", amp.loss_scaling, num(amp.init_loss_scaling, 6))},
      {"ampcheck", run.versions.ampcheck},
      {"build", run.versions.build},
      {"schema", r.schema_version}};
  out += "<dl class=\"info\">\n";
  for (const auto& [k, v] : info) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(v));
  out += "</dl>\n</header>\n";
  return out;
}

std::string loss_section(const Report& r) {
  std::string out = section_open("loss", "Loss");
  struct Curve {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (step, loss)
  };
  std::vector<Curve> curves;
  if (r.compare && !r.compare->runs.empty()) {
    for (const LevelRun& run : r.compare->runs) {
      Curve c{run.level, {}};
      for (std::size_t i = 0; i < run.losses.size(); ++i) c.points.emplace_back(static_cast<double>(i), run.losses[i]);
      curves.push_back(std::move(c));
    }
  } else if (!r.steps.empty()) {
    Curve c{r.run.level.empty() ? std::string("loss") : r.run.level, {}};
    for (const StepRecord& s : r.steps) c.points.emplace_back(static_cast<double>(s.step), s.loss);
    curves.push_back(std::move(c));
  }
  double first = 0, last = 0, lo = 0, hi = 0;
  bool any_x = false, any_y = false, all_positive = true;
  for (const Curve& c : curves) {
    for (const auto& [x, y] : c.points) {
      first = any_x ? std::min(first, x) : x;
      last = any_x ? std::max(last, x) : x;
      any_x = true;
      if (!std::isfinite(y)) continue;
      lo = any_y ? std::min(lo, y) : y;
      hi = any_y ? std::max(hi, y) : y;
      any_y = true;
      all_positive = all_positive && y > 0;
    }
  }
  if (!any_x) return out + note("no optimizer steps were recorded, so there is no loss curve") + std::string(kSectionClose);

  Axis y;
  y.label = "loss";
  const bool log_y = any_y && all_positive && hi / lo > 100;
  if (log_y) {
    y.scale = Scale::log10;
    y.label = "loss (log scale)";
    y.lo = std::pow(10.0, std::floor(std::log10(lo)));
    y.hi = std::pow(10.0, std::ceil(std::log10(hi)));
  } else if (any_y) {
    const double pad = hi > lo ? 0.05 * (hi - lo) : std::max(0.1 * std::abs(hi), 0.5);
    y.lo = lo - pad;
    y.hi = hi + pad;
  }
  Plot plot("loss-curve", curves.size() > 1 ? "Loss per level" : "Loss", step_axis(first, last), y);
  bool any_nonfinite = false;
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const std::string_view color = kSeriesColors[i % std::size(kSeriesColors)];
    std::vector<std::pair<double, double>> finite;
    for (const auto& [x, v] : curves[i].points) {
      if (std::isfinite(v)) {
        finite.emplace_back(x, v);
      } else {
        plot.top_tick(x, "nonfinite", kRed, fmt::format("{} step {}: loss {}", curves[i].name, x, num(v)));
        any_nonfinite = true;
      }
    }
    plot.series(curves[i].name, color, finite);
    if (curves.size() > 1) plot.legend({curves[i].name, std::string(color), LegendEntry::Kind::line});
  }
  if (any_nonfinite) plot.legend({"non-finite loss", std::string(kRed), LegendEntry::Kind::swatch});
  out += plot.render();
  if (curves.size() > 1)
    out += fmt::format("<p class=\"caption\">One curve per level, run in lock step (reference: {}).</p>\n",
                       esc(r.compare->reference));
  if (log_y) out += "<p class=\"caption\">The loss spans more than two decades: log scale.</p>\n";
  return out + std::string(kSectionClose);
}

std::string loss_scale_section(const Report& r) {
  std::string out = section_open("loss-scale-history", "Loss-scale history");
  std::vector<std::pair<double, double>> points;
  double lo = 0, hi = 0;
  for (const StepRecord& s : r.steps) {
    if (!std::isfinite(s.loss_scale) || s.loss_scale <= 0) continue;
    lo = points.empty() ? s.loss_scale : std::min(lo, s.loss_scale);
    hi = points.empty() ? s.loss_scale : std::max(hi, s.loss_scale);
    points.emplace_back(static_cast<double>(s.step), s.loss_scale);
  }
  if (points.empty())
    return out + note("no loss scale was recorded (no optimizer steps)") + std::string(kSectionClose);

  Axis y;
  y.label = "loss scale (log2)";
  y.scale = Scale::log2;
  // An octave of room on each side keeps the markers off the frame.
  y.lo = std::exp2(std::floor(std::log2(lo)) - 1);
  y.hi = std::exp2(std::ceil(std::log2(hi)) + 1);
  const auto [first, last] = std::minmax_element(points.begin(), points.end());
  Plot plot("loss-scale", "Loss scale per step", step_axis(first->first, last->first), y);
  plot.series("loss scale", kSeriesColors[0], points, /*step=*/true);
  plot.legend({"loss scale", std::string(kSeriesColors[0]), LegendEntry::Kind::line});
  bool any_skipped = false, any_inf = false;
  // A skipped step's cause, by step (a run of one scaler update per step).
  std::map<std::int64_t, const SkippedUpdate*> skip_at;
  for (const SkippedUpdate& u : r.nonfinite.skips) skip_at[u.update] = &u;
  for (const StepRecord& s : r.steps) {
    if (!std::isfinite(s.loss_scale) || s.loss_scale <= 0) continue;
    const double x = static_cast<double>(s.step);
    if (s.skipped) {
      const auto it = skip_at.find(s.step);
      plot.marker(x, s.loss_scale, "skipped", kRed,
                  fmt::format("step {}: skipped (found inf), scale {}{}", s.step, num(s.loss_scale, 6),
                              it == skip_at.end() ? std::string()
                                                  : "; " + skip_reading_text(it->second->reading) + ": " + it->second->text));
      any_skipped = true;
    } else if (s.found_inf) {
      plot.marker(x, s.loss_scale, "found-inf", kOrange,
                  fmt::format("step {}: found inf, step taken, scale {}", s.step, num(s.loss_scale, 6)));
      any_inf = true;
    }
  }
  if (any_skipped) plot.legend({"skipped step", std::string(kRed), LegendEntry::Kind::marker});
  if (any_inf) plot.legend({"found inf (not skipped)", std::string(kOrange), LegendEntry::Kind::marker});
  out += plot.render();
  out += fmt::format("<p class=\"caption\">{} of {} steps skipped; final scale {}.</p>\n", r.summary.skipped_steps,
                     r.steps.size(), num(r.summary.final_loss_scale, 6));
  if (r.nonfinite.probing) out += fmt::format("<p class=\"note\" id=\"probing\">{}</p>\n", esc(probing_note(r)));
  if (!r.nonfinite.skips.empty()) {
    // Every skipped update with its reading (the one rule, docs/inspector.md) and its cause.
    Table t({"#update", "#scale before", "#scale after", "reading", "cause"});
    for (const SkippedUpdate& u : r.nonfinite.skips)
      t.row({integer(u.update), num(u.scale_before, 6), num(u.scale_after, 6), skip_reading_text(u.reading), u.text});
    out += "<h3>Skipped updates</h3>\n" + t.render("skipped-updates");
  }
  return out + std::string(kSectionClose);
}

}  // namespace ampcheck::reports::html_impl
