// The HTML page's drawing kit (html_plot.h): text, tables and the one plot helper.
#include "reports/html_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ampcheck::reports::html_impl {

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

std::string num(double v, int significant) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.{}g}", v, significant);
}

std::string integer(std::int64_t v) { return fmt::format("{}", v); }

std::string percent(double part, double whole) {
  if (whole <= 0) return "–";
  return fmt::format("{:.1f}%", 100.0 * part / whole);
}

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

// ---- tables ----

Table::Table(std::vector<std::string> headers) {
  for (auto& h : headers) {
    const bool numeric = !h.empty() && h[0] == '#';
    numeric_.push_back(numeric);
    headers_.push_back(numeric ? h.substr(1) : h);
  }
}

Table& Table::row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
  return *this;
}

std::string Table::render(std::string_view id) const {
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

// ---- plots ----

namespace {

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

double to_pixels(const Axis& a, double v, double p0, double p1) {
  const double t0 = transform(a.scale, a.lo), t1 = transform(a.scale, a.hi);
  const double t = (transform(a.scale, v) - t0) / (t1 - t0);
  return p0 + std::clamp(t, 0.0, 1.0) * (p1 - p0);
}

std::string tick_text(const Axis& a, const std::string& label) {
  if (a.max_label_chars == 0 || label.size() <= a.max_label_chars) return esc(label);
  std::size_t cut = a.max_label_chars - 1;
  while (cut > 0 && (static_cast<unsigned char>(label[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return fmt::format("<title>{}</title>{}…", esc(label), esc(label.substr(0, cut)));
}

}  // namespace

double Plot::sx(double x) const { return to_pixels(x_, x, f_.left, f_.width - f_.right); }
double Plot::sy(double y) const { return to_pixels(y_, y, f_.height - f_.bottom, f_.top); }

void Plot::series(std::string_view name, std::string_view color, const std::vector<std::pair<double, double>>& points,
                  bool step) {
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

void Plot::marker(double x, double y, std::string_view cls, std::string_view color, std::string_view tooltip) {
  markers_ += fmt::format(
      "<circle class=\"{}\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\" stroke=\"white\" stroke-width=\"1\">"
      "<title>{}</title></circle>\n",
      cls, px(sx(x)), px(sy(y)), color, esc(tooltip));
}

void Plot::top_tick(double x, std::string_view cls, std::string_view color, std::string_view tooltip) {
  const double X = sx(x);
  markers_ += fmt::format(
      "<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\">"
      "<title>{}</title></line>\n",
      cls, px(X), px(f_.top), px(X), px(f_.top + 10), color, esc(tooltip));
}

void Plot::cell(double x0, double x1, double y0, double y1, std::string_view fill, std::string_view tooltip) {
  const double X0 = sx(x0), X1 = sx(x1), Y0 = sy(y1), Y1 = sy(y0);
  cells_ += fmt::format(
      "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
      px(X0), px(Y0), px(X1 - X0), px(Y1 - Y0), fill, esc(tooltip));
}

void Plot::band(double x0, double x1, std::string_view cls, std::string_view fill, std::string_view tooltip) {
  const double X0 = std::clamp(sx(x0), f_.left, f_.width - f_.right);
  const double X1 = std::clamp(sx(x1), f_.left, f_.width - f_.right);
  if (X1 <= X0) return;
  bands_ += fmt::format(
      "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n", cls,
      px(X0), px(f_.top), px(X1 - X0), px(f_.height - f_.top - f_.bottom), fill, esc(tooltip));
}

void Plot::vline(double x, std::string_view cls, std::string_view color, std::string_view label, int row) {
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

void Plot::hline(double y, std::string_view cls, std::string_view color, std::string_view label) {
  const double Y = sy(y);
  lines_ += fmt::format(
      "<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" "
      "stroke-dasharray=\"5 3\"><title>{}</title></line>\n"
      "<text class=\"{} label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"{}\">{}</text>\n",
      cls, px(f_.left), px(Y), px(f_.width - f_.right), px(Y), color, esc(label), cls, px(f_.width - f_.right - 4),
      px(Y - 4), color, esc(label));
}

std::string Plot::render() const {
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

std::string Plot::axis_ticks(bool is_x) const {
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

std::string Plot::render_legend() const {
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

Axis step_axis(double first, double last) {
  Axis a;
  a.label = "step";
  a.integer = true;
  a.lo = first;
  a.hi = last > first ? last : first + 1;
  return a;
}

}  // namespace ampcheck::reports::html_impl
