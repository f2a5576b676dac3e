// fp8 training: the findings, the headroom of the tensors they name step by step (amax x
// scale / fp8 max: above 1 the largest values saturate; far below, small values flush), and
// one row per scaled tensor.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reports/html_parts.h"

namespace ampcheck::reports::html_impl {
namespace {

// A share of a few values in many: three significant digits (0.0061%), not one decimal.
std::string fp8_share(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return "–";
  return num(100.0 * static_cast<double>(part) / static_cast<double>(whole), 3) + "%";
}

}  // namespace

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

}  // namespace ampcheck::reports::html_impl
