// What the numbers looked like: the exponent heatmap of every recorded tensor against the
// fp16 and bf16 ranges, the dtypes each op ran in (and the casts the AMP policy inserted),
// and the worst tensors, local errors, values lost to the range and swamped updates.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reports/html_parts.h"

namespace ampcheck::reports::html_impl {
namespace {

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

}  // namespace

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

namespace {

std::string casts_text(const std::vector<CastCount>& casts) {
  std::vector<std::string> parts;
  for (const CastCount& c : casts)
    parts.push_back(fmt::format("{} {}→{} ×{}", c.slot.empty() ? fmt::format("input {}", c.input) : c.slot, c.from,
                                c.to, c.calls));
  return join(parts, "; ");
}

}  // namespace

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

}  // namespace ampcheck::reports::html_impl
