// The GPU kernels: one section for `run`'s CUPTI records and for each profile `ampcheck
// kernels` reads (one code path), and a profile's own section around it.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "reports/html_parts.h"
#include "reports/text.h"  // shares_text

namespace ampcheck::reports::html_impl {
namespace {

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

}  // namespace

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

}  // namespace ampcheck::reports::html_impl
