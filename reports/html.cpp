#include "reports/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "reports/advice.h"
#include "reports/text.h"  // recorded_text, script_failure_text, shares_text, sampling_text

namespace ampcheck::reports {
namespace {

// ---------------------------------------------------------------------------------------
// Text. Every string that comes from the report goes through esc(); numbers go through
// fmt with a fixed precision so that the page is byte-identical for equal reports.

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Significant digits, "nan" / "inf" / "-inf" for the non-finite values the model allows.
std::string num(double v, int significant = 4) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.{}g}", v, significant);
}

std::string integer(std::int64_t v) { return fmt::format("{}", v); }

std::string percent(double part, double whole) {
  if (whole <= 0) return "–";
  return fmt::format("{:.1f}%", 100.0 * part / whole);
}

// SVG coordinates: one decimal is finer than a pixel.
std::string px(double v) { return fmt::format("{:.1f}", v); }

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::string list_or_none(const std::vector<std::string>& items) {
  return items.empty() ? std::string("(none)") : join(items, ", ");
}

std::string note(std::string_view text) { return fmt::format("<p class=\"note\">{}</p>\n", esc(text)); }

// ---------------------------------------------------------------------------------------
// Tables: cells are text (escaped here); numeric columns are right-aligned and sort as
// numbers.

class Table {
 public:
  // A header starting with '#' marks a numeric column (the '#' is not shown).
  explicit Table(std::vector<std::string> headers) {
    for (auto& h : headers) {
      const bool numeric = !h.empty() && h[0] == '#';
      numeric_.push_back(numeric);
      headers_.push_back(numeric ? h.substr(1) : h);
    }
  }
  Table& row(std::vector<std::string> cells) {
    cells.resize(headers_.size());
    rows_.push_back(std::move(cells));
    return *this;
  }
  bool empty() const { return rows_.empty(); }
  std::string render(std::string_view id = "") const {
    std::string out = id.empty() ? std::string("<table class=\"sortable\">\n")
                                 : fmt::format("<table class=\"sortable\" id=\"{}\">\n", esc(id));
    out += "<thead><tr>";
    for (std::size_t c = 0; c < headers_.size(); ++c)
      out += fmt::format("<th{}>{}</th>", numeric_[c] ? " class=\"num\"" : "", esc(headers_[c]));
    out += "</tr></thead>\n<tbody>\n";
    for (const auto& r : rows_) {
      out += "<tr>";
      for (std::size_t c = 0; c < r.size(); ++c)
        out += fmt::format("<td{}>{}</td>", numeric_[c] ? " class=\"num\"" : "", esc(r[c]));
      out += "</tr>\n";
    }
    out += "</tbody></table>\n";
    return out;
  }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

// ---------------------------------------------------------------------------------------
// Plotting: one helper for every plot. Elements are added in data coordinates; the axes
// map them to pixels (linear, log10 or log2). Each element kind has its own layer so that
// the drawing order does not depend on the order of the calls.

enum class Scale { linear, log10, log2 };

struct Axis {
  std::string label;
  Scale scale = Scale::linear;
  double lo = 0, hi = 1;  // data units (> 0 on a log axis)
  bool integer = false;   // automatic ticks on integers only
  std::vector<std::pair<double, std::string>> ticks;  // replaces the automatic ticks
  std::string tick_class = "tick-label";
  std::size_t max_label_chars = 0;  // 0: no limit; longer labels end in "…" (full in a tooltip)
};

struct Frame {
  double width = 880, height = 300;
  double left = 72, right = 20, top = 30, bottom = 44;
};

struct LegendEntry {
  enum class Kind { line, dashed, marker, swatch };
  std::string label;
  std::string color;
  Kind kind = Kind::line;
};

double transform(Scale s, double v) {
  switch (s) {
    case Scale::log10: return std::log10(v);
    case Scale::log2: return std::log2(v);
    case Scale::linear: break;
  }
  return v;
}

// 1, 2 or 5 times a power of ten, about `target` steps over the range.
double nice_step(double range, int target, bool integer_only) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer_only) step = std::max(1.0, std::round(step));
  return step;
}

std::string power_label(Scale s, int k) {
  if (s == Scale::log2) {
    if (k >= 0 && k <= 24) return integer(std::int64_t{1} << k);
    return fmt::format("2^{}", k);
  }
  if (k >= -3 && k <= 4) return fmt::format("{:g}", std::pow(10.0, k));
  return fmt::format("1e{}", k);
}

std::vector<std::pair<double, std::string>> auto_ticks(const Axis& a) {
  std::vector<std::pair<double, std::string>> ticks;
  if (a.scale == Scale::linear) {
    const double step = nice_step(a.hi - a.lo, 6, a.integer);
    const auto first = static_cast<std::int64_t>(std::ceil(a.lo / step - 1e-9));
    const auto last = static_cast<std::int64_t>(std::floor(a.hi / step + 1e-9));
    for (std::int64_t i = first; i <= last; ++i) {
      const double v = static_cast<double>(i) * step;
      ticks.emplace_back(v, num(v == 0 ? 0.0 : v, 6));
    }
    return ticks;
  }
  const auto first = static_cast<int>(std::ceil(transform(a.scale, a.lo) - 1e-9));
  const auto last = static_cast<int>(std::floor(transform(a.scale, a.hi) + 1e-9));
  const int stride = std::max(1, (last - first + 7) / 8);
  const double base = a.scale == Scale::log2 ? 2.0 : 10.0;
  for (int k = first; k <= last; k += stride) ticks.emplace_back(std::pow(base, k), power_label(a.scale, k));
  if (ticks.size() < 2) {  // less than a decade (an octave): label the ends
    ticks.clear();
    ticks.emplace_back(a.lo, num(a.lo));
    ticks.emplace_back(a.hi, num(a.hi));
  }
  return ticks;
}

class Plot {
 public:
  Plot(std::string id, std::string title, Axis x, Axis y, Frame frame = {})
      : id_(std::move(id)), title_(std::move(title)), x_(std::move(x)), y_(std::move(y)), f_(frame) {}

  double plot_width() const { return f_.width - f_.left - f_.right; }

  // A line through the points in order; `step`: hold each value until the next x.
  void series(std::string_view name, std::string_view color, const std::vector<std::pair<double, double>>& points,
              bool step = false) {
    std::string pts;
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (i) {
        pts += ' ';
        if (step) pts += fmt::format("{},{} ", px(sx(points[i].first)), px(sy(points[i - 1].second)));
      }
      pts += fmt::format("{},{}", px(sx(points[i].first)), px(sy(points[i].second)));
    }
    series_ += fmt::format(
        "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" "
        "points=\"{}\"><title>{}</title></polyline>\n",
        esc(name), color, pts, esc(name));
  }

  void marker(double x, double y, std::string_view cls, std::string_view color, std::string_view tooltip) {
    markers_ += fmt::format(
        "<circle class=\"{}\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\" stroke=\"white\" stroke-width=\"1\">"
        "<title>{}</title></circle>\n",
        cls, px(sx(x)), px(sy(y)), color, esc(tooltip));
  }

  // A short tick hanging from the top edge: a value that cannot be placed on the y axis.
  void top_tick(double x, std::string_view cls, std::string_view color, std::string_view tooltip) {
    const double X = sx(x);
    markers_ += fmt::format(
        "<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\">"
        "<title>{}</title></line>\n",
        cls, px(X), px(f_.top), px(X), px(f_.top + 10), color, esc(tooltip));
  }

  void cell(double x0, double x1, double y0, double y1, std::string_view fill, std::string_view tooltip) {
    const double X0 = sx(x0), X1 = sx(x1), Y0 = sy(y1), Y1 = sy(y0);
    cells_ += fmt::format(
        "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
        px(X0), px(Y0), px(X1 - X0), px(Y1 - Y0), fill, esc(tooltip));
  }

  // A shaded vertical band over the whole height (clipped to the plot).
  void band(double x0, double x1, std::string_view cls, std::string_view fill, std::string_view tooltip) {
    const double X0 = std::clamp(sx(x0), f_.left, f_.width - f_.right);
    const double X1 = std::clamp(sx(x1), f_.left, f_.width - f_.right);
    if (X1 <= X0) return;
    bands_ += fmt::format(
        "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n", cls,
        px(X0), px(f_.top), px(X1 - X0), px(f_.height - f_.top - f_.bottom), fill, esc(tooltip));
  }

  // A labelled vertical reference line; its label sits in the top margin, in `row` 0 or 1
  // (so that close lines do not overlap). A line outside the x range is pointed at from
  // the nearer edge instead of being drawn, its label two rows higher (the top margin
  // needs four label rows when that can happen).
  void vline(double x, std::string_view cls, std::string_view color, std::string_view label, int row) {
    const bool below = x < x_.lo, above = x > x_.hi;
    const double label_y = f_.top - 6 - 12.0 * row - (below || above ? 24 : 0);  // off scale: two rows higher
    if (below || above) {
      lines_ += fmt::format(
          "<text class=\"{} offscale\" data-x=\"{}\" x=\"{}\" y=\"{}\" text-anchor=\"{}\" fill=\"{}\">{}</text>\n",
          cls, num(x, 6), px(below ? f_.left : f_.width - f_.right), px(label_y), below ? "start" : "end", color,
          esc(below ? fmt::format("◀ {} (off scale)", label) : fmt::format("{} (off scale) ▶", label)));
      return;
    }
    const double X = sx(x);
    lines_ += fmt::format(
        "<line class=\"{}\" data-x=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"5 3\"><title>{}</title></line>\n"
        "<text class=\"{} label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n",
        cls, num(x, 6), px(X), px(label_y + 2), px(X), px(f_.height - f_.bottom), color, esc(label), cls, px(X),
        px(label_y), color, esc(label));
  }

  // A labelled horizontal reference line across the plot (a value on the y axis).
  void hline(double y, std::string_view cls, std::string_view color, std::string_view label) {
    const double Y = sy(y);
    lines_ += fmt::format(
        "<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"5 3\"><title>{}</title></line>\n"
        "<text class=\"{} label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"{}\">{}</text>\n",
        cls, px(f_.left), px(Y), px(f_.width - f_.right), px(Y), color, esc(label), cls, px(f_.width - f_.right - 4),
        px(Y - 4), color, esc(label));
  }

  void legend(LegendEntry e) { legend_.push_back(std::move(e)); }

  std::string render() const {
    const double x0 = f_.left, x1 = f_.width - f_.right, y0 = f_.top, y1 = f_.height - f_.bottom;
    std::string out = fmt::format(
        "<svg id=\"{}\" class=\"plot\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" "
        "font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n"
        "<rect class=\"background\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
        id_, px(f_.width), px(f_.height), px(f_.width), px(f_.height), esc(title_), px(x0), px(y0), px(x1 - x0),
        px(y1 - y0));
    out += bands_;
    out += axis_ticks(true);
    out += axis_ticks(false);
    out += cells_;
    out += lines_;
    out += series_;
    out += markers_;
    out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                       "stroke=\"#555555\"/>\n",
                       px(x0), px(y0), px(x1 - x0), px(y1 - y0));
    out += fmt::format("<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       px((x0 + x1) / 2), px(f_.height - 8), esc(x_.label));
    out += fmt::format(
        "<text class=\"axis-label\" x=\"12\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {})\">{}"
        "</text>\n",
        px((y0 + y1) / 2), px((y0 + y1) / 2), esc(y_.label));
    out += render_legend();
    out += "</svg>\n";
    return out;
  }

 private:
  double sx(double x) const { return map(x_, x, f_.left, f_.width - f_.right); }
  double sy(double y) const { return map(y_, y, f_.height - f_.bottom, f_.top); }

  static double map(const Axis& a, double v, double p0, double p1) {
    const double t0 = transform(a.scale, a.lo), t1 = transform(a.scale, a.hi);
    const double t = (transform(a.scale, v) - t0) / (t1 - t0);
    return p0 + std::clamp(t, 0.0, 1.0) * (p1 - p0);
  }

  std::string tick_text(const Axis& a, const std::string& label) const {
    if (a.max_label_chars == 0 || label.size() <= a.max_label_chars) return esc(label);
    std::size_t cut = a.max_label_chars - 1;
    while (cut > 0 && (static_cast<unsigned char>(label[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    return fmt::format("<title>{}</title>{}…", esc(label), esc(label.substr(0, cut)));
  }

  std::string axis_ticks(bool is_x) const {
    const Axis& a = is_x ? x_ : y_;
    const auto ticks = a.ticks.empty() ? auto_ticks(a) : a.ticks;
    std::string out;
    for (const auto& [v, label] : ticks) {
      if (is_x) {
        const double X = sx(v), Y = f_.height - f_.bottom;
        out += fmt::format(
            "<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
            "<text class=\"{}\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            px(X), px(f_.top), px(X), px(Y + 4), a.tick_class, px(X), px(Y + 16), tick_text(a, label));
      } else {
        const double Y = sy(v);
        out += fmt::format(
            "<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
            "<text class=\"{}\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            px(f_.left - 4), px(Y), px(f_.width - f_.right), px(Y), a.tick_class, px(f_.left - 7), px(Y + 4),
            tick_text(a, label));
      }
    }
    return out;
  }

  // One row above the plot, entries side by side.
  std::string render_legend() const {
    std::string out;
    double x = f_.left;
    const double y = 12;
    for (const auto& e : legend_) {
      out += "<g class=\"legend\">";
      switch (e.kind) {
        case LegendEntry::Kind::line:
        case LegendEntry::Kind::dashed:
          out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                             px(x), px(y - 4), px(x + 18), px(y - 4), e.color,
                             e.kind == LegendEntry::Kind::dashed ? " stroke-dasharray=\"5 3\"" : "");
          break;
        case LegendEntry::Kind::marker:
          out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"/>", px(x + 9), px(y - 4), e.color);
          break;
        case LegendEntry::Kind::swatch:
          out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"18\" height=\"10\" fill=\"{}\" stroke=\"#999999\"/>",
                             px(x), px(y - 9), e.color);
          break;
      }
      out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text></g>\n", px(x + 22), px(y), esc(e.label));
      x += 22 + 6.5 * static_cast<double>(e.label.size()) + 14;
    }
    return out;
  }

  std::string id_, title_;
  Axis x_, y_;
  Frame f_;
  std::string bands_, cells_, lines_, series_, markers_;
  std::vector<LegendEntry> legend_;
};

constexpr std::string_view kRed = "#d62728";
constexpr std::string_view kOrange = "#ff7f0e";
constexpr std::string_view kSeriesColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                                              "#bcbd22", "#7f7f7f"};

// Integer steps on x: [first, last], widened when there is a single step.
Axis step_axis(double first, double last) {
  Axis a;
  a.label = "step";
  a.integer = true;
  a.lo = first;
  a.hi = last > first ? last : first + 1;
  return a;
}

// ---------------------------------------------------------------------------------------
// Sections.

std::string section_open(std::string_view id, std::string_view title) {
  return fmt::format("<section id=\"{}\">\n<h2>{}</h2>\n", id, esc(title));
}
constexpr std::string_view kSectionClose = "</section>\n";

std::string verdict_class(const std::string& verdict) {
  for (std::string_view known : {"healthy", "failed", "gradient_underflow", "amp_off", "reference", "unchecked", "interrupted"})
    if (verdict == known) return std::string(known);
  return "unknown";
}

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

// Colour of a count fraction on a log scale: 1e-6 (or less) light, 1 dark.
std::string fraction_color(double fraction, bool alarm) {
  struct Rgb {
    double r, g, b;
  };
  const Rgb blues[] = {{198, 219, 239}, {66, 146, 198}, {8, 48, 107}};
  const Rgb reds[] = {{252, 187, 161}, {239, 59, 44}, {103, 0, 13}};
  const Rgb* stops = alarm ? reds : blues;
  const double t = std::clamp((std::log10(fraction) + 6.0) / 6.0, 0.0, 1.0);
  const int seg = t < 0.5 ? 0 : 1;
  const double u = (t - 0.5 * seg) / 0.5;
  const auto channel = [&](double a, double b) { return static_cast<int>(std::lround(a + (b - a) * u)); };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(stops[seg].r, stops[seg + 1].r),
                     channel(stops[seg].g, stops[seg + 1].g), channel(stops[seg].b, stops[seg + 1].b));
}

// The IEEE limits drawn on the heatmap, as binary exponents (column e holds 2^e <= |x| < 2^(e+1)).
struct RangeLine {
  double exponent;
  std::string_view cls, label;
  int row;
};
constexpr std::string_view kFp16Color = "#d62728";
constexpr std::string_view kBf16Color = "#9467bd";
constexpr RangeLine kRangeLines[] = {
    {-24, "range fp16", "fp16 subnormal min 2^-24", 1},
    {-14, "range fp16", "fp16 normal min 2^-14", 0},
    {16, "range fp16", "fp16 max 65504 ≈ 2^16", 1},
    {-133, "range bf16", "bf16 subnormal min 2^-133", 1},
    {-126, "range bf16", "bf16 normal min 2^-126", 0},
    {128, "range bf16", "bf16 max ≈ 2^128", 0},
};

std::string heatmap_section(const Report& r) {
  std::string out = section_open("exponents", "Exponent histograms per op");
  struct Row {
    std::string label;
    const Histogram* h;
    std::int64_t total;
  };
  std::vector<Row> rows;
  int emin = 0, emax = 0;
  bool any_bin = false;
  for (const OpInstance& op : r.ops) {
    for (const NamedNumerics& n : op.numerics) {
      const Histogram& h = n.numerics.histogram;
      std::int64_t total = h.zero + h.nan + h.pos_inf + h.neg_inf + h.below + h.above;
      for (std::int64_t c : h.counts) total += c;
      if (total == 0) continue;
      rows.push_back({fmt::format("{} {}", op.name, n.role), &h, total});
      if (h.counts.empty()) continue;
      const int lo = h.min_exponent, hi = h.min_exponent + static_cast<int>(h.counts.size()) - 1;
      emin = any_bin ? std::min(emin, lo) : lo;
      emax = any_bin ? std::max(emax, hi) : hi;
      any_bin = true;
    }
  }
  if (rows.empty())
    return out + note("numerics were not recorded: run with --inspect full") + std::string(kSectionClose);

  // The fp16 range is always in view; the f32 exponent range bounds the view.
  const int lo = std::max(-150, std::min(any_bin ? emin : 0, -24) - 2);
  const int hi = std::min(130, std::max(any_bin ? emax : 0, 16) + 2);  // last exponent column
  // The zero and NaN/Inf columns after a gap, wide enough for their labels.
  const double special = std::max(4, (hi - lo) / 14);
  const double zero_col = hi + 2, nonfinite_col = zero_col + special + 1;

  Axis x;
  x.label = "binary exponent e (column e: 2^e ≤ |x| < 2^(e+1))";
  x.lo = lo;
  x.hi = nonfinite_col + special;
  const int step = hi - lo > 80 ? 20 : hi - lo > 40 ? 10 : 5;
  for (int e = lo + ((step - lo % step) % step); e <= hi; e += step) x.ticks.emplace_back(e, integer(e));
  x.ticks.emplace_back(zero_col + special / 2, "zero");
  x.ticks.emplace_back(nonfinite_col + special / 2, "NaN/Inf");

  Axis y;
  y.label = "op instance";
  y.lo = 0;
  y.hi = static_cast<double>(rows.size());
  y.tick_class = "row-label";
  y.max_label_chars = 34;
  for (std::size_t i = 0; i < rows.size(); ++i)
    y.ticks.emplace_back(static_cast<double>(rows.size() - i) - 0.5, rows[i].label);

  Frame frame;
  frame.left = 240;
  frame.top = 70;
  frame.height = frame.top + frame.bottom + 20.0 * static_cast<double>(rows.size());
  Plot plot("exponent-heatmap", "Exponent histograms with the fp16 and bf16 ranges", x, y, frame);

  plot.band(lo, -24, "zone fp16-underflow", "#fdecea", "fp16: flushes to zero below 2^-24");
  plot.band(-24, -14, "zone fp16-subnormal", "#fff6d5", "fp16: subnormal (precision lost) in [2^-24, 2^-14)");
  plot.band(16, hi + 1, "zone fp16-overflow", "#fdecea", "fp16: overflows to Inf at 2^16 and above");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const Histogram& h = *row.h;
    const double y0 = static_cast<double>(rows.size() - i - 1), y1 = y0 + 1;
    const auto total = static_cast<double>(row.total);
    std::vector<std::int64_t> bins(static_cast<std::size_t>(hi - lo + 1), 0);  // folded into the edge columns
    for (std::size_t k = 0; k < h.counts.size(); ++k) {
      const int e = std::clamp(h.min_exponent + static_cast<int>(k), lo, hi);
      bins[static_cast<std::size_t>(e - lo)] += h.counts[k];
    }
    bins.front() += h.below;
    bins.back() += h.above;
    for (std::size_t k = 0; k < bins.size(); ++k) {
      if (bins[k] == 0) continue;
      const int e = lo + static_cast<int>(k);
      const std::string edge = k == 0 ? " or below" : k + 1 == bins.size() ? " or above" : "";
      const double fraction = static_cast<double>(bins[k]) / total;
      plot.cell(e, e + 1, y0, y1, fraction_color(fraction, false),
                fmt::format("{}: 2^{} ≤ |x| < 2^{}{}: {} of {} ({})", row.label, e, e + 1, edge, bins[k], row.total,
                            percent(static_cast<double>(bins[k]), total)));
    }
    if (h.zero > 0)
      plot.cell(zero_col, zero_col + special, y0, y1, fraction_color(static_cast<double>(h.zero) / total, false),
                fmt::format("{}: zero: {} of {} ({})", row.label, h.zero, row.total,
                            percent(static_cast<double>(h.zero), total)));
    const std::int64_t nonfinite = h.nan + h.pos_inf + h.neg_inf;
    if (nonfinite > 0)
      plot.cell(nonfinite_col, nonfinite_col + special, y0, y1, fraction_color(static_cast<double>(nonfinite) / total, true),
                fmt::format("{}: NaN {}, +Inf {}, -Inf {} of {}", row.label, h.nan, h.pos_inf, h.neg_inf, row.total));
  }
  for (const RangeLine& line : kRangeLines)
    plot.vline(line.exponent, line.cls, line.cls == "range fp16" ? kFp16Color : kBf16Color, line.label, line.row);

  for (int decade = -6; decade <= 0; decade += 2)
    plot.legend({fmt::format("{:g}", std::pow(10.0, decade)), fraction_color(std::pow(10.0, decade), false),
                 LegendEntry::Kind::swatch});
  plot.legend({"NaN/Inf", fraction_color(0.01, true), LegendEntry::Kind::swatch});
  plot.legend({"fp16 limits", std::string(kFp16Color), LegendEntry::Kind::dashed});
  plot.legend({"bf16 limits", std::string(kBf16Color), LegendEntry::Kind::dashed});
  out += plot.render();
  out += "<p class=\"caption\">Colour: the fraction of the tensor's values in the column, on a log scale "
         "(swatches above). Shaded: where fp16 flushes to zero, goes subnormal, or overflows. Values beyond "
         "the view are counted in the edge columns.</p>\n";
  return out + std::string(kSectionClose);
}

std::string casts_text(const std::vector<CastCount>& casts) {
  std::vector<std::string> parts;
  for (const CastCount& c : casts)
    parts.push_back(fmt::format("{} {}→{} ×{}", c.slot.empty() ? fmt::format("input {}", c.input) : c.slot, c.from,
                                c.to, c.calls));
  return join(parts, "; ");
}

std::string dtype_section(const Report& r) {
  std::string out = section_open("dtypes", "Op dtypes");
  if (r.op_types.empty() && r.ops.empty())
    return out + note("no op trace was recorded: run with --inspect trace, stats or full") +
           std::string(kSectionClose);
  if (!r.op_types.empty()) {
    out += "<h3>Calls per op type, by the dtype of the kernel that ran</h3>\n";
    Table t({"op type", "#fp16", "#bf16", "#fp32", "#other", "#total", "#low precision"});
    DtypeCounts sum;
    for (const OpTypeRow& row : r.op_types) {
      const DtypeCounts& c = row.calls;
      t.row({row.type, integer(c.fp16), integer(c.bf16), integer(c.fp32), integer(c.other), integer(c.total()),
             percent(static_cast<double>(c.fp16 + c.bf16), static_cast<double>(c.total()))});
      sum.fp16 += c.fp16;
      sum.bf16 += c.bf16;
      sum.fp32 += c.fp32;
      sum.other += c.other;
    }
    t.row({"(all)", integer(sum.fp16), integer(sum.bf16), integer(sum.fp32), integer(sum.other), integer(sum.total()),
           percent(static_cast<double>(sum.fp16 + sum.bf16), static_cast<double>(sum.total()))});
    out += t.render("op-types");
  }
  out += "<h3>Casts inserted by the AMP policy</h3>\n";
  if (r.inserted_casts.empty()) {
    out += note("no casts were inserted");
  } else {
    Table t({"from", "to", "#calls"});
    for (const InsertedCasts& c : r.inserted_casts) t.row({c.from, c.to, integer(c.calls)});
    out += t.render("inserted-casts");
  }
  if (!r.ops.empty()) {
    out += "<h3>Op instances</h3>\n";
    Table t({"name", "phase", "reason", "dtypes in", "compute", "out", "#calls", "casts"});
    for (const OpInstance& op : r.ops)
      t.row({op.name, op.phase, op.reason, join(op.dtypes_in, ", "), op.compute, op.out, integer(op.calls),
             casts_text(op.casts)});
    out += t.render("op-instances");
  }
  return out + std::string(kSectionClose);
}

// One kernel of one op instance, for the kernels section's tables.
struct InstanceKernel {
  std::string instance, type;
  const GpuKernel* kernel = nullptr;
};

bool multiplies_kind(const std::string& kind) {
  return kind == "gemm" || kind == "gemv" || kind == "conv fprop" || kind == "conv dgrad" || kind == "conv wgrad" ||
         kind == "conv" || kind == "attention";
}

// The GPU kernels of a run or of a profile, one code path for both (`run`'s CUPTI records,
// `kernels`' profile): after `intro`, the kernel check's findings, per op type the matrix
// work's split between tensor cores, CUDA cores and kernels whose name does not say (a bar
// each) and by precision, each op instance's kernels, and the work no op launched. `id`
// names the section; with several on a page (a profile per rank) the tables' ids take
// its suffix.
std::string kernels_section(const Kernels& k, const std::vector<InstanceKernel>& rows, std::string_view intro,
                            std::string_view id, std::string_view title, std::string_view what_checked) {
  std::string out = section_open(id, title);
  const std::string suffix = id == "kernels" ? std::string() : "-" + std::string(id);
  if (!k.traced) return out + note("not traced: " + k.not_traced) + std::string(kSectionClose);
  auto ms = [](std::int64_t ns) { return num(static_cast<double>(ns) * 1e-6); };
  const std::int64_t warnings = k.warnings();
  out += std::string(intro);
  out += fmt::format("<p>Kernel check: {} op instances' {} against the AMP policy, <strong>{} warning{}</strong>.</p>\n",
                     k.instances_checked, what_checked, warnings, warnings == 1 ? "" : "s");
  if (!k.findings.empty()) {
    out += "<h3>Kernels that did not do what the AMP policy said</h3>\n<ul class=\"findings\">\n";
    for (const KernelFinding& f : k.findings)
      out += fmt::format("<li class=\"finding-{}\"><strong>{}</strong>: {}</li>\n", esc(f.severity), esc(f.severity),
                         esc(f.text));
    out += "</ul>\n";
  }
  // Tensor-core share of the matrix work per op type.
  std::vector<const KernelTypeRow*> bars;
  std::int64_t widest = 0;
  for (const KernelTypeRow& t : k.by_type)
    if (t.matrix_ns > 0) {
      bars.push_back(&t);
      widest = std::max(widest, t.matrix_ns);
    }
  constexpr std::size_t kBars = 40;
  if (bars.size() > kBars) bars.resize(kBars);
  if (!bars.empty()) {
    out += "<h3>Tensor-core share of the matrix work (GEMMs, convolutions, attention) per op type</h3>\n";
    const double label_w = 200, bar_w = 560, row_h = 22;
    const double height = row_h * static_cast<double>(bars.size()) + 30;
    out += fmt::format("<svg class=\"plot\" viewBox=\"0 0 880 {}\" width=\"880\" height=\"{}\" role=\"img\" "
                       "aria-label=\"tensor-core share per op type\">\n",
                       px(height), px(height));
    double y = 10;
    for (const KernelTypeRow* t : bars) {
      const double scale = bar_w / static_cast<double>(widest);
      const double tc = static_cast<double>(t->tensor_core_ns) * scale, cc = static_cast<double>(t->cuda_core_ns) * scale;
      const double rest = static_cast<double>(t->matrix_ns - t->tensor_core_ns - t->cuda_core_ns) * scale;
      out += fmt::format("<text class=\"tick-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                         px(label_w - 6), px(y + 14), esc(t->type));
      double x = label_w;
      for (const auto& [w, color, what] : {std::tuple{tc, "#2e7d32", "tensor cores"},
                                           std::tuple{cc, "#ef6c00", "CUDA cores"},
                                           std::tuple{rest, "#9e9e9e", "not read from the name"}}) {
        if (w <= 0) continue;
        out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {} ms</title>"
                           "</rect>\n",
                           px(x), px(y), px(w), px(row_h - 6), color, what, num(w / scale * 1e-6));
        x += w;
      }
      out += fmt::format("<text class=\"tick-label\" x=\"{}\" y=\"{}\">{} ms, {} on tensor cores</text>\n", px(x + 6),
                         px(y + 14), ms(t->matrix_ns),
                         percent(static_cast<double>(t->tensor_core_ns), static_cast<double>(t->matrix_ns)));
      y += row_h;
    }
    out += fmt::format("<text class=\"tick-label\" x=\"{}\" y=\"{}\"><tspan fill=\"#2e7d32\">■ tensor cores</tspan> "
                       "<tspan fill=\"#ef6c00\">■ CUDA cores</tspan> <tspan fill=\"#9e9e9e\">■ not read from the "
                       "kernel's name</tspan></text>\n",
                       px(label_w), px(y + 14));
    out += "</svg>\n";
  }
  Table types({"op type", "#launches", "#ms", "#matrix ms", "#tensor-core ms", "#CUDA-core ms", "#on tensor cores"});
  for (const KernelTypeRow& t : k.by_type)
    types.row({t.type, integer(t.launches), ms(t.total_ns), ms(t.matrix_ns), ms(t.tensor_core_ns), ms(t.cuda_core_ns),
               t.matrix_ns ? percent(static_cast<double>(t.tensor_core_ns), static_cast<double>(t.matrix_ns)) : "-"});
  out += "<h3>GPU time per op type</h3>\n" + types.render("kernel-types" + suffix);
  // The matrix work of each op type by the precision its multiplies took, from the kernels.
  std::vector<std::string> order;
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::int64_t>> by_precision;
  for (const InstanceKernel& r : rows) {
    if (!multiplies_kind(r.kernel->kind)) continue;
    if (!by_precision.count(r.type)) order.push_back(r.type);
    by_precision[r.type][{r.kernel->input, r.kernel->tensor_cores}] += r.kernel->total_ns;
  }
  if (!order.empty()) {
    Table precision({"op type", "#matrix ms", "precision x tensor cores"});
    for (const std::string& type : order) {
      std::vector<PrecisionShare> shares;
      std::int64_t whole = 0;
      for (const auto& [key, ns] : by_precision[type]) {
        shares.push_back({key.first, key.second, ns});
        whole += ns;
      }
      std::stable_sort(shares.begin(), shares.end(), [](const PrecisionShare& a, const PrecisionShare& b) {
        return a.ns > b.ns;
      });
      precision.row({type, ms(whole), shares_text(shares, whole)});
    }
    out += "<h3>Matrix work per op type by precision and tensor cores</h3>\n" + precision.render("kernel-precision" + suffix);
  }
  Table kernels({"op instance", "kernel", "#launches", "#ms", "grid", "block", "multiplies", "accumulates",
                 "tensor cores", "kind"});
  auto dims = [](const std::vector<std::int64_t>& d) {
    std::vector<std::string> parts;
    for (const std::int64_t v : d) parts.push_back(std::to_string(v));
    return join(parts, "x");
  };
  for (const InstanceKernel& r : rows) {
    const GpuKernel& g = *r.kernel;
    kernels.row({r.instance, g.name, integer(g.launches), ms(g.total_ns), dims(g.grid), dims(g.block), g.input,
                 g.accumulate, g.tensor_cores, g.kind});
  }
  if (!kernels.empty()) out += "<h3>Kernels per op instance</h3>\n" + kernels.render("op-kernels" + suffix);
  Table outside({"kernel", "launched by", "#launches", "#ms", "kind"});
  for (const OutsideKernel& o : k.outside) outside.row({o.name, o.owner, integer(o.launches), ms(o.total_ns), o.kind});
  if (!outside.empty()) out += "<h3>Kernels outside any op</h3>\n" + outside.render("outside-kernels" + suffix);
  for (const std::string& e : k.errors) out += note("CUPTI error: " + e);
  return out + std::string(kSectionClose);
}

// 1.4: the GPU kernels CUPTI saw, in the shared section.
std::string kernels_section(const Report& r) {
  const Kernels& k = *r.kernels;
  std::vector<InstanceKernel> rows;
  for (const OpInstance& op : r.ops)
    if (op.gpu_kernels)
      for (const GpuKernel& g : *op.gpu_kernels)
        rows.push_back({op.name, op.type + (op.phase == "backward" ? "_grad" : ""), &g});
  const std::string intro =
      fmt::format("<p>{} kernels, {} copies and {} memsets seen through CUPTI: {} on op calls, {} the inspector's "
                  "own, {} outside any op, {} dropped.</p>\n",
                  k.kernels, k.memcpys, k.memsets, k.attributed, k.inspector, k.unattributed, k.dropped + k.invalid);
  return kernels_section(k, rows, intro, "kernels", "GPU kernels", "GEMMs and convolutions");
}

std::string worst_section(const Report& r) {
  std::string out = section_open("worst", "Worst tensors and local errors");
  struct Entry {
    std::string name;
    const Numerics* n;
    std::int64_t score;
  };
  std::vector<Entry> entries;
  for (const OpInstance& op : r.ops)
    for (const NamedNumerics& n : op.numerics)
      entries.push_back({fmt::format("{} {}", op.name, n.role), &n.numerics,
                         n.numerics.f16.overflow + n.numerics.f16.underflow});
  for (const TensorNumerics& t : r.tensors)
    entries.push_back({t.key, &t.numerics, t.numerics.f16.overflow + t.numerics.f16.underflow});
  out += "<h3>Tensors by fp16 overflow + underflow</h3>\n";
  if (entries.empty()) {
    out += note("numerics were not recorded: run with --inspect full");
  } else {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.score > b.score; });
    Table t({"tensor", "#elements", "#fp16 overflow", "#fp16 underflow", "#fp16 subnormal", "#bf16 overflow",
             "#bf16 underflow", "#absmax", "#min |x| ≠ 0", "#range (log2)"});
    constexpr std::size_t kShown = 20;
    for (std::size_t i = 0; i < entries.size() && i < kShown; ++i) {
      const Numerics& n = *entries[i].n;
      t.row({entries[i].name, integer(n.count), integer(n.f16.overflow), integer(n.f16.underflow),
             integer(n.f16.subnormal), integer(n.bf16.overflow), integer(n.bf16.underflow), num(n.absmax),
             num(n.min_nonzero_abs), num(n.dynamic_range_log2, 3)});
    }
    out += t.render("worst-tensors");
    if (entries.size() > kShown)
      out += fmt::format("<p class=\"caption\">{} more not shown.</p>\n", entries.size() - kShown);
  }

  out += "<h3>Local error against an f64 recompute</h3>\n";
  std::vector<const OpInstance*> errs;
  for (const OpInstance& op : r.ops)
    if (op.local_error) errs.push_back(&op);
  if (errs.empty()) {
    out += note("local errors were not measured: run with --inspect full (low-precision forward ops only)");
  } else {
    std::stable_sort(errs.begin(), errs.end(), [](const OpInstance* a, const OpInstance* b) {
      return a->local_error->worst > b->local_error->worst;
    });
    Table t({"op", "#measured", "#skipped (non-finite)", "#mean rel. error", "#mean floor", "#worst",
             "#floor at worst", "#× rounding floor", "#worst step", "#max |error|"});
    for (const OpInstance* op : errs) {
      const LocalError& e = *op->local_error;
      t.row({op->name, integer(e.count), integer(e.nonfinite), num(e.mean), num(e.mean_floor), num(e.worst),
             num(e.floor_at_worst), e.floor_at_worst > 0 ? num(e.worst / e.floor_at_worst, 3) : "–",
             integer(e.worst_step), num(e.max_abs)});
    }
    out += t.render("local-errors");
    out += "<p class=\"caption\">× rounding floor: the worst error over the error that rounding the exact "
           "result to the output dtype alone would make; far above 1 means the op loses more than its "
           "output dtype must.</p>\n";
  }
  std::vector<const OpInstance*> lost;
  for (const OpInstance& op : r.ops)
    if (op.range_loss) lost.push_back(&op);
  if (!lost.empty()) {
    out += "<h3>Values lost to the low-precision range</h3>\n";
    std::stable_sort(lost.begin(), lost.end(), [](const OpInstance* a, const OpInstance* b) {
      return a->range_loss->underflow + a->range_loss->overflow > b->range_loss->underflow + b->range_loss->overflow;
    });
    Table t({"op", "dtype", "#underflow (to 0)", "#overflow (to Inf)", "first lost", "#exact value", "#step"});
    for (const OpInstance* op : lost) {
      const RangeLoss& l = *op->range_loss;
      t.row({op->name, op->out, integer(l.underflow), integer(l.overflow), l.first_kind, num(l.first_value),
             integer(l.first_step)});
    }
    out += t.render("range-loss");
    out += "<p class=\"caption\">Elements whose exact result fp32 holds but the op's output dtype does not: "
           "flushed to 0 or rounded to Inf when stored.</p>\n";
  }
  if (!r.swamping.empty()) {
    out += "<h3>Swamped parameter updates</h3>\n";
    Table t({"parameter", "#updates", "#mean fraction lost"});
    for (const Swamping& s : r.swamping) t.row({s.parameter, integer(s.updates), percent(s.fraction, 1)});
    out += t.render("swamping");
  }
  return out + std::string(kSectionClose);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
  for (std::int64_t d : shape) dims.push_back(integer(d));
  return "[" + join(dims, ", ") + "]";
}

std::string producer_html(const NanEvent& e, std::string_view table_id) {
  std::string out = fmt::format(
      "<p class=\"producer\"><b>{}</b> in module <b>{}</b> at step {} ({}) made NaN {}, +Inf {}, -Inf {} "
      "from finite inputs.</p>\n",
      esc(e.op), esc(e.module.empty() ? "(top level)" : e.module), e.step, esc(e.phase), e.out_nan, e.out_pos_inf,
      e.out_neg_inf);
  for (const LostValue& l : e.lost) out += fmt::format("<p class=\"lost\">{}</p>\n", esc(lost_text(e, l)));
  if (e.inputs.empty()) return out;
  Table t({"input", "dtype", "shape", "#NaN", "#+Inf", "#-Inf", "#min", "#max", "#absmax"});
  for (const TensorRange& in : e.inputs)
    t.row({in.role, in.dtype, shape_text(in.shape), integer(in.nan), integer(in.pos_inf), integer(in.neg_inf),
           num(in.min), num(in.max), num(in.absmax)});
  return out + t.render(table_id);
}

std::string nonfinite_section(const Report& r) {
  const NonFinite& nf = r.nonfinite;
  std::string out = section_open("nonfinite", "Non-finite values");
  out += fmt::format(
      "<p>{} events checked; scaler: {} updates, {} skipped ({} the scaler probing for its scale), {} absorbed.</p>\n",
      nf.events_checked, nf.updates, nf.skipped,
      std::count_if(nf.skips.begin(), nf.skips.end(), [](const SkippedUpdate& u) { return is_probing_reading(u.reading); }),
      nf.absorbed);
  for (const MaskFailure& m : nf.mask_failures)
    out += note(fmt::format("the -Inf mask {} in '{}' writes is read by {} in '{}', {}", m.op, m.module, m.reader,
                            m.reader_module, m.made_non_finite ? "which makes NaN/+Inf of it" : "not a softmax"));
  // A report of 1.2 or older has the first producer only.
  const std::vector<NanEvent> producers =
      !nf.producers.empty() ? nf.producers : nf.producer ? std::vector<NanEvent>{*nf.producer} : std::vector<NanEvent>{};
  if (!producers.empty()) {
    out += "<h3>First producer</h3>\n" + producer_html(producers.front(), "nonfinite-producer");
    if (producers.size() > 1) {
      out += fmt::format("<h3>Also produced by ({} more)</h3>\n", producers.size() - 1);
      for (std::size_t i = 1; i < producers.size(); ++i)
        out += producer_html(producers[i], fmt::format("nonfinite-producer-{}", i + 1));
    }
  } else {
    out += note(nf.events_checked > 0 ? "no op made a non-finite value from finite inputs"
                                      : "non-finite values were not tracked: run with --inspect stats or full");
  }
  if (!nf.propagators.empty()) {
    out += fmt::format("<h3>Propagators ({} events)</h3>\n", nf.propagator_events);
    Table t({"op type", "#events"});
    for (const auto& [type, events] : nf.propagators) t.row({type, integer(events)});
    out += t.render("propagators");
  }
  if (!nf.intended.empty()) {
    out += "<h3>Intended -Inf (not failures)</h3>\n";
    Table t({"op", "module", "#calls", "#-Inf values", "read by", "why"});
    for (const IntendedInf& i : nf.intended)
      t.row({i.op, i.module, integer(i.events), integer(i.values), list_or_none(i.readers), i.reason});
    out += t.render("intended");
  }
  if (nf.zero_gradients) {
    out += "<h3>Gradient underflow</h3>\n" + fmt::format("<p class=\"lost\" id=\"zero-gradients\">{}</p>\n",
                                                          esc(gradient_underflow_text(r)));
    if (nf.zero_gradients->evidence)
      out += fmt::format("<p class=\"lost\">{}</p>\n", esc(flushed_gradient_text(*nf.zero_gradients->evidence)));
  }
  if (!nf.failures.empty()) {
    out += "<h3>Failures</h3>\n";
    Table t({"kind", "#step", "detail"});
    for (const FailureRun& g : failure_runs(nf.failures))
      t.row({g.first.kind, integer(g.first.step), g.first.detail + more_text(g)});
    out += t.render("failures");
  }
  return out + std::string(kSectionClose);
}

std::string bisect_section(const Bisect& b, bool interrupted) {
  std::string out = section_open("bisect", "bisect-nan");
  const std::vector<std::pair<std::string, std::string>> info = {
      {"granularity", b.granularity},
      {"found", b.found ? "yes" : interrupted ? "no: the search was interrupted" : "no"},
      {"culprits", list_or_none(b.culprits)},
      {"suggested black list", list_or_none(b.suggested_black_list)},
      {"suggested fp32 modules", list_or_none(b.suggested_fp32_modules)},
      {"candidates", list_or_none(b.candidates)},
      {"runs", integer(b.runs)},
      {"max skipped fraction", percent(b.max_skipped_fraction, 1)},
      {"loss tolerance", b.loss_tolerance > 0 ? fmt::format("{} of the {} loss {}", percent(b.loss_tolerance, 1),
                                                            b.granularity == "fp8" ? "bf16 (no fp8)" : "fp32",
                                                            num(b.reference_loss, 5))
                                              : std::string("not checked")}};
  out += "<dl class=\"info\">\n";
  for (const auto& [k, v] : info) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(v));
  out += "</dl>\n";
  if (b.producer) out += "<h3>Producer in the unmodified run</h3>\n" + producer_html(*b.producer, "bisect-producer");
  out += "<h3>Trials</h3>\n";
  if (b.trials.empty()) {
    out += note("no trials were run");
  } else {
    Table t({"#trial", "black list", "healthy", "reason", "#skipped steps", "#final loss"});
    for (const Trial& trial : b.trials)
      t.row({integer(trial.index), list_or_none(trial.black_list), trial.healthy ? "yes" : "no", trial.reason,
             integer(trial.skipped_steps), num(trial.final_loss, 5)});
    out += t.render("trials");
  }
  const std::pair<std::string_view, const std::string*> snippets[] = {
      {"ampcheck AMP config", &b.suggestion.ampcheck},
      {"PaddlePaddle auto_cast", &b.suggestion.paddle},
      {"PaddlePaddle fleet strategy", &b.suggestion.paddle_fleet},
      {"PyTorch", &b.suggestion.pytorch}};
  for (const auto& [title, text] : snippets)
    if (!text->empty()) out += fmt::format("<h3>{}</h3>\n<pre class=\"snippet\">{}</pre>\n", esc(title), esc(*text));
  return out + std::string(kSectionClose);
}

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

// compare --script: the AMP run's loss curve over its fp32 twin's runs, the gap and noise.
std::string twin_section(const Twin& t) {
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
  return out + std::string(kSectionClose);
}

std::string compare_section(const Compare& c) {
  if (c.twin) return twin_section(*c.twin);
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

constexpr std::string_view kStyle = R"(<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:960px;padding:16px 20px;color:#222;background:#fafafa}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:1.6em}h3{font-size:1.05em;margin:1.2em 0 .4em}
.sub{color:#555;margin:0 0 .8em}
.verdict{font-size:1.2em;font-weight:600;padding:10px 14px;border-radius:6px;border-left:8px solid;margin:10px 0}
.verdict-tag{text-transform:uppercase;font-size:.8em;letter-spacing:.05em;margin-right:.6em}
.verdict-healthy{background:#e7f6e9;border-color:#2e7d32;color:#1b5e20}
.verdict-failed,.verdict-gradient_underflow{background:#fdecea;border-color:#c62828;color:#8e0000}
.finding-warning{color:#8e0000}.finding-note{color:#555}.finding-failure{color:#d62728;font-weight:bold}
.verdict-amp_off{background:#fff4e0;border-color:#ef6c00;color:#8a3c00}
.verdict-reference{background:#e8f0fb;border-color:#1565c0;color:#0d3c78}
.verdict-unchecked,.verdict-unknown{background:#eeeeee;border-color:#757575;color:#333}
.verdict-interrupted{background:#f3e8fb;border-color:#6a1b9a;color:#4a148c}
.interrupted{padding:8px 14px;border:2px dashed #6a1b9a;border-radius:6px;margin:10px 0;color:#4a148c;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 10px;min-width:120px}
.card .k{font-size:.8em;color:#666}.card .v{font-size:1.1em;font-weight:600}
dl.info{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:.9em}
dl.info dt{color:#666}dl.info dd{margin:0}
nav{font-size:.9em;margin:8px 0}nav a{margin-right:12px}
table{border-collapse:collapse;font-size:.85em;margin:6px 0;background:#fff}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0;cursor:pointer;user-select:none}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#666;font-style:italic}.lost{margin:2px 0 8px 1em;color:#8e0000}.caption{color:#555;font-size:.85em;margin:2px 0 10px}
pre.snippet{background:#f4f4f4;border:1px solid #ddd;padding:8px;overflow-x:auto}
svg.plot{display:block;max-width:100%;height:auto;background:#fff;border:1px solid #e0e0e0;margin:6px 0}
</style>
)";

// Records script errors where the browser test reads them; the page needs no script to
// show its plots.
constexpr std::string_view kErrorHook = R"(<script>
window.onerror = function (message) {
  var el = document.body || document.documentElement;
  var seen = el.dataset.errors ? el.dataset.errors + "\n" : "";
  el.dataset.errors = seen + String(message);
  return false;
};
</script>
)";

// Click a column header to sort its table (numbers as numbers).
constexpr std::string_view kSortScript = R"(<script>
(function () {
  function key(cell) {
    var text = cell.textContent.trim();
    var value = parseFloat(text.replace(/^[×]/, ""));
    return isNaN(value) ? text.toLowerCase() : value;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var column = th.cellIndex;
        var ascending = th.dataset.order !== "asc";
        th.dataset.order = ascending ? "asc" : "desc";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[column]), y = key(b.cells[column]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          var order = x < y ? -1 : x > y ? 1 : 0;
          return ascending ? order : -order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
</script>
)";

}  // namespace

// fp8 training: the findings, the headroom of the tensors they name step by step (amax x
// scale / fp8 max: above 1 the largest values saturate; far below, small values flush), and
// one row per scaled tensor.
// A share of a few values in many: three significant digits (0.0061%), not one decimal.
std::string fp8_share(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return "–";
  return num(100.0 * static_cast<double>(part) / static_cast<double>(whole), 3) + "%";
}

std::string fp8_section(const Fp8Training& f) {
  std::string out = section_open("fp8", "fp8 casts");
  out += fmt::format("<p>{} linear layer{} in fp8 with <code>{}</code>{}.</p>\n", f.layers.size(),
                     f.layers.size() == 1 ? "" : "s", esc(f.recipe),
                     f.kept.empty() ? std::string() : "; kept out: " + esc(join(f.kept, ", ")));
  if (!f.findings.empty()) {
    out += "<ul class=\"findings\">\n";
    for (const Fp8FindingRecord& x : f.findings)
      out += fmt::format("<li class=\"finding-{}\"><strong>{}</strong>: {}</li>\n", x.failure ? "failure" : "warning",
                         x.failure ? "failure" : "warning", esc(x.text));
    out += "</ul>\n";
  }
  // The tensors the findings name (in their order), else the one closest to saturating.
  std::vector<const Fp8TensorRecord*> shown;
  for (const Fp8FindingRecord& x : f.findings)
    for (const Fp8TensorRecord& t : f.tensors)
      if (t.layer == x.layer && t.tensor == x.tensor && std::find(shown.begin(), shown.end(), &t) == shown.end() &&
          shown.size() < std::size(kSeriesColors))
        shown.push_back(&t);
  const auto headroom = [](const Fp8TensorRecord& t, std::size_t i) {
    return t.amax[i] * t.scale[i] / (t.format == "E4M3" ? 448.0 : 57344.0);
  };
  if (shown.empty() && !f.tensors.empty()) {
    const Fp8TensorRecord* top = &f.tensors.front();
    double worst = 0;
    for (const Fp8TensorRecord& t : f.tensors)
      for (std::size_t i = 0; i < t.steps.size(); ++i)
        if (const double h = headroom(t, i); std::isfinite(h) && h > worst) {
          worst = h;
          top = &t;
        }
    shown.push_back(top);
  }
  double lo = 1, hi = 1, first = 0, last = 0;
  bool any = false;
  std::vector<std::vector<std::pair<double, double>>> series(shown.size());
  for (std::size_t k = 0; k < shown.size(); ++k)
    for (std::size_t i = 0; i < shown[k]->steps.size(); ++i) {
      const double h = headroom(*shown[k], i), x = static_cast<double>(shown[k]->steps[i]);
      if (!std::isfinite(h) || h <= 0) continue;
      lo = std::min(lo, h);
      hi = std::max(hi, h);
      first = any ? std::min(first, x) : x;
      last = any ? std::max(last, x) : x;
      any = true;
      series[k].emplace_back(x, h);
    }
  if (any) {
    Axis y;
    y.label = "amax x scale / fp8 max (log2)";
    y.scale = Scale::log2;
    y.lo = std::exp2(std::floor(std::log2(lo)) - 1);
    y.hi = std::exp2(std::ceil(std::log2(hi)) + 1);
    Plot plot("fp8-headroom", "fp8 headroom per step", step_axis(first, last), y);
    plot.hline(1.0, "fp8-max", kRed, "fp8 max: above, values saturate");
    for (std::size_t k = 0; k < shown.size(); ++k) {
      const std::string name = shown[k]->layer + " " + shown[k]->tensor + " (" + shown[k]->format + ")";
      plot.series(name, kSeriesColors[k], series[k]);
      plot.legend({name, std::string(kSeriesColors[k]), LegendEntry::Kind::line});
    }
    out += plot.render();
    out += f.recipe.rfind("MXFP8BlockScaling", 0) == 0
               ? "<p class=\"caption\">Each cast's largest value against the format's, under the scale of its own "
                 "block of 32 (every block has its own power of two, so none reaches above 1); values more than the "
                 "format's range below their block's largest flush to 0.</p>\n"
               : "<p class=\"caption\">Each cast's largest value against the format's: a delayed scale lags a growing "
                 "amax (above 1: the largest values clamp to the fp8 max); far below 1, values under the format's "
                 "smallest subnormal flush to 0. A scale that is not finite (a zero amax's) is not drawn.</p>\n";
  }
  Table t({"layer", "tensor", "format", "#steps", "#amax min", "#amax max", "#last scale", "#worst saturated",
           "#at step", "#worst flushed (of nonzero)", "#at step "});
  for (const Fp8TensorRecord& r : f.tensors) {
    if (r.steps.empty()) continue;
    std::size_t sat = 0, flush = 0;
    const auto share = [](std::int64_t part, std::int64_t whole) {
      return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
    };
    for (std::size_t i = 0; i < r.steps.size(); ++i) {
      if (share(r.saturated[i], r.count[i]) > share(r.saturated[sat], r.count[sat])) sat = i;
      if (share(r.flushed[i], r.count[i] - r.zero[i]) > share(r.flushed[flush], r.count[flush] - r.zero[flush])) flush = i;
    }
    t.row({r.layer, r.tensor, r.format, integer(static_cast<std::int64_t>(r.steps.size())),
           num(*std::min_element(r.amax.begin(), r.amax.end())), num(*std::max_element(r.amax.begin(), r.amax.end())),
           num(r.scale.back(), 6), fp8_share(r.saturated[sat], r.count[sat]), integer(r.steps[sat]),
           fp8_share(r.flushed[flush], r.count[flush] - r.zero[flush]), integer(r.steps[flush])});
  }
  out += t.render("fp8-tensors");
  return out + std::string(kSectionClose);
}

std::string to_html(const Report& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>ampcheck {} — {} {} {}</title>\n", esc(report.run.command), esc(report.run.model),
                     esc(report.run.level), esc(report.summary.verdict));
  out += kStyle;
  out += kErrorHook;
  out += "</head>\n<body>\n";
  out += header(report);

  std::vector<std::pair<std::string_view, std::string_view>> toc = {
      {"loss", "loss"},     {"loss-scale-history", "loss scale"}, {"exponents", "exponents"},
      {"dtypes", "dtypes"}, {"worst", "worst"},                   {"nonfinite", "non-finite"}};
  if (report.kernels) toc.emplace_back("kernels", "kernels");
  if (report.fp8) toc.emplace_back("fp8", "fp8");
  if (report.bisect) toc.emplace_back("bisect", "bisect");
  if (report.compare) toc.emplace_back("compare", "compare");
  out += "<nav>";
  for (const auto& [id, label] : toc) out += fmt::format("<a href=\"#{}\">{}</a>", id, label);
  out += "</nav>\n";

  out += loss_section(report);
  out += loss_scale_section(report);
  out += heatmap_section(report);
  out += dtype_section(report);
  if (report.kernels) out += kernels_section(report);
  if (report.fp8) out += fp8_section(*report.fp8);
  out += worst_section(report);
  out += nonfinite_section(report);
  if (report.bisect) out += bisect_section(*report.bisect, report.interrupted.has_value());
  if (report.compare) out += compare_section(*report.compare);
  if (report.spread) out += spread_section(*report.spread);
  out += fmt::format("<footer class=\"caption\">ampcheck {}, report schema {}</footer>\n",
                     esc(report.run.versions.ampcheck), esc(report.schema_version));
  out += kSortScript;
  out += "</body>\n</html>\n";
  return out;
}

namespace {

std::string kernels_verdict_class(const std::string& verdict) {
  if (verdict == "amp_on" || verdict == "fp32") return "healthy";
  if (verdict == "fallbacks") return "gradient_underflow";  // the amber of a warning
  if (verdict == "amp_off" || verdict == "not_fp32") return "failed";
  return "unknown";
}

std::string rank_section(const ProfileRank& r, std::size_t index, bool several) {
  const std::string id = several ? fmt::format("profile-{}", index + 1) : std::string("profile");
  auto ms = [](std::int64_t ns) { return num(static_cast<double>(ns) * 1e-6); };
  std::string out = section_open(id, several ? (r.rank >= 0 ? fmt::format("Rank {}: {}", r.rank, r.source)
                                                            : fmt::format("Profile {}: {}", index + 1, r.source))
                                             : "Profile");
  out += fmt::format("<div class=\"verdict verdict-{}\">{}</div>\n", kernels_verdict_class(r.verdict),
                     esc(r.verdict_text));
  const std::vector<std::pair<std::string, std::string>> info = {
      {"file", r.source},
      {"format", r.format},
      {"rank", r.rank >= 0 ? integer(r.rank) : "(not recorded)"},
      {"GPU", r.devices.empty() ? "(not recorded)" : r.devices.front()},
      {"expected", r.expect + (r.expect_note.empty() ? "" : " — " + r.expect_note)},
      {"kernels", fmt::format("{} ({} ms)", r.kernels, ms(r.kernel_ns))},
      {"matrix work", fmt::format("{} ms: {}", ms(r.matrix_ns), shares_text(r.shares, r.matrix_ns))}};
  out += "<dl class=\"info\">\n";
  for (const auto& [k, v] : info) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(v));
  out += "</dl>\n";
  for (const std::string& n : r.notes) out += note(n);
  std::string intro;
  if (!r.no_links.empty()) {
    intro = fmt::format("<p>{} kernels: which op launched them cannot be said ({}).</p>\n", r.kernels, esc(r.no_links));
  } else {
    intro = fmt::format("<p>{} kernels ({} ms): {} attributed to the op that launched them ({} ms, {} of the {} ms whose "
                        "launch is in the profile).</p>\n",
                        r.kernels, ms(r.kernel_ns), r.attributed, ms(r.attributed_ns),
                        percent(static_cast<double>(r.attributed_ns), static_cast<double>(r.launched_ns)),
                        ms(r.launched_ns));
  }
  Table unattributable({"not attributable", "#kernels", "#ms", "largest"});
  for (const Unattributable& u : r.unattributable)
    unattributable.row({u.reason, integer(u.kernels), ms(u.ns), join(u.top, "; ")});
  if (!unattributable.empty()) intro += unattributable.render("unattributable-" + id);
  std::vector<InstanceKernel> rows;
  for (const ProfileOp& o : r.instances)
    for (const GpuKernel& g : o.kernels)
      rows.push_back({o.name, o.type + (o.phase == "forward" ? "" : " (" + o.phase + ")"), &g});
  std::string body = kernels_section(r.check, rows, intro, "kernels-" + id, "GPU kernels", "GEMMs, convolutions and attention");
  // The kernels section closes itself; what follows stays in the profile's section.
  out += body;
  Table types({"op type", "#calls", "#ms", "#matrix ms", "precision x tensor cores", "policy", "expected"});
  for (const ProfileOp& o : r.types)
    types.row({o.name, integer(o.calls), ms(o.total_ns), ms(o.matrix_ns), shares_text(o.shares, o.matrix_ns), o.policy,
               o.expected});
  out += "<h3>Op types against the policy</h3>\n" + types.render("profile-types-" + id);
  if (!r.fallbacks.empty()) {
    out += fmt::format("<h3>What the fallbacks cost</h3>\n<p>{}</p>\n", esc(r.cost_text));
    Table costs({"op instance", "#GPU ms", "#GFLOP", "#ms at the tensor-core rate", "rate"});
    for (const FallbackCost& c : r.fallbacks)
      costs.row({c.op, ms(c.gpu_ns), c.flops > 0 ? num(c.flops * 1e-9) : "-", c.at_rate_ns >= 0 ? ms(c.at_rate_ns) : "-",
                 c.rate});
    out += costs.render("fallback-costs-" + id);
  }
  if (!r.counters.empty()) {
    out += fmt::format("<h3>Nsight Compute counters against the kernels' names</h3>\n<p>{} kernels measured; "
                       "<strong>{} disagree</strong> with what their names say.</p>\n",
                       r.counters.size(), r.counter_disagreements);
    Table counters({"kernel", "name: tensor cores", "counters: tensor cores", "name: precision", "counters: precision",
                    "agrees", "metrics"});
    for (const CounterCheck& c : r.counters)
      counters.row({c.kernel, c.name_tensor_cores, c.counters_tensor_cores, c.name_precision, c.counters_precision,
                    c.agrees ? "yes" : "NO", c.metrics});
    out += counters.render("counters-" + id);
  }
  return out + std::string(kSectionClose);
}

}  // namespace

std::string to_html(const KernelsReport& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>ampcheck kernels — {} {}</title>\n", esc(report.profile), esc(report.verdict));
  out += kStyle;
  out += kErrorHook;
  out += "</head>\n<body>\n";
  out += fmt::format("<header>\n<h1>ampcheck kernels — {}</h1>\n", esc(report.profile));
  out += fmt::format("<div class=\"verdict verdict-{}\" id=\"verdict\"><span class=\"verdict-tag\">{}</span> {}</div>\n",
                     kernels_verdict_class(report.verdict), esc(report.verdict), esc(report.verdict_text));
  out += "</header>\n";
  const bool several = report.ranks.size() > 1;
  if (several) {
    out += "<nav>";
    for (std::size_t i = 0; i < report.ranks.size(); ++i)
      out += fmt::format("<a href=\"#profile-{}\">{}</a>", i + 1,
                         report.ranks[i].rank >= 0 ? fmt::format("rank {}", report.ranks[i].rank)
                                                   : fmt::format("profile {}", i + 1));
    if (!report.differences.empty()) out += "<a href=\"#differences\">differences</a>";
    out += "</nav>\n";
  }
  for (std::size_t i = 0; i < report.ranks.size(); ++i) out += rank_section(report.ranks[i], i, several);
  if (!report.differences.empty()) {
    out += section_open("differences", "What differs between the ranks");
    std::vector<std::string> headers = {"what"};
    for (const ProfileRank& r : report.ranks) headers.push_back(r.rank >= 0 ? fmt::format("rank {}", r.rank) : r.source);
    Table t(headers);
    for (const RankDifference& d : report.differences) {
      std::vector<std::string> cells = {d.what};
      cells.insert(cells.end(), d.per_rank.begin(), d.per_rank.end());
      t.row(cells);
    }
    out += t.render("rank-differences") + std::string(kSectionClose);
  }
  out += fmt::format("<footer class=\"caption\">ampcheck {}, kernels report schema {}</footer>\n", esc(report.ampcheck),
                     esc(report.schema_version));
  out += kSortScript;
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace ampcheck::reports
