// The HTML page's drawing kit, one for every section: the text and numbers as the page
// writes them (escaped, at a fixed precision, so equal reports give the same bytes),
// sortable tables, and one plot helper that draws every SVG plot. Internal to reports/
// (html_parts.h), not part of its API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ampcheck::reports::html_impl {

// ---- text: every string from the report goes through esc(); numbers through fmt ----

std::string esc(std::string_view s);
// Significant digits, "nan" / "inf" / "-inf" for the non-finite values the model allows.
std::string num(double v, int significant = 4);
std::string integer(std::int64_t v);
std::string percent(double part, double whole);
// SVG coordinates: one decimal is finer than a pixel.
std::string px(double v);
std::string join(const std::vector<std::string>& items, std::string_view sep);
std::string list_or_none(const std::vector<std::string>& items);

// ---- tables: cells are text (escaped here); numeric columns are right-aligned and sort
// as numbers ----

class Table {
 public:
  // A header starting with '#' marks a numeric column (the '#' is not shown).
  explicit Table(std::vector<std::string> headers);
  Table& row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  std::string render(std::string_view id = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

// ---- plots: elements are added in data coordinates; the axes map them to pixels (linear,
// log10 or log2). Each element kind has its own layer so that the drawing order does not
// depend on the order of the calls ----

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

class Plot {
 public:
  Plot(std::string id, std::string title, Axis x, Axis y, Frame frame = {})
      : id_(std::move(id)), title_(std::move(title)), x_(std::move(x)), y_(std::move(y)), f_(frame) {}

  double plot_width() const { return f_.width - f_.left - f_.right; }

  // A line through the points in order; `step`: hold each value until the next x.
  void series(std::string_view name, std::string_view color, const std::vector<std::pair<double, double>>& points,
              bool step = false);
  void marker(double x, double y, std::string_view cls, std::string_view color, std::string_view tooltip);
  // A short tick hanging from the top edge: a value that cannot be placed on the y axis.
  void top_tick(double x, std::string_view cls, std::string_view color, std::string_view tooltip);
  void cell(double x0, double x1, double y0, double y1, std::string_view fill, std::string_view tooltip);
  // A shaded vertical band over the whole height (clipped to the plot).
  void band(double x0, double x1, std::string_view cls, std::string_view fill, std::string_view tooltip);
  // A labelled vertical reference line; its label sits in the top margin, in `row` 0 or 1
  // (so that close lines do not overlap). A line outside the x range is pointed at from
  // the nearer edge instead of being drawn, its label two rows higher (the top margin
  // needs four label rows when that can happen).
  void vline(double x, std::string_view cls, std::string_view color, std::string_view label, int row);
  // A labelled horizontal reference line across the plot (a value on the y axis).
  void hline(double y, std::string_view cls, std::string_view color, std::string_view label);
  void legend(LegendEntry e) { legend_.push_back(std::move(e)); }

  std::string render() const;

 private:
  double sx(double x) const;
  double sy(double y) const;
  std::string axis_ticks(bool is_x) const;
  // One row above the plot, entries side by side.
  std::string render_legend() const;

  std::string id_, title_;
  Axis x_, y_;
  Frame f_;
  std::string bands_, cells_, lines_, series_, markers_;
  std::vector<LegendEntry> legend_;
};

inline constexpr std::string_view kRed = "#d62728";
inline constexpr std::string_view kOrange = "#ff7f0e";
inline constexpr std::string_view kSeriesColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#8c564b",
                                                     "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

// Integer steps on x: [first, last], widened when there is a single step.
Axis step_axis(double first, double last);

}  // namespace ampcheck::reports::html_impl
