// Where the NaN and Inf came from: the non-finite values section (the producers, the
// propagators, the intended -Inf, gradient underflow, failures) and bisect-nan's search,
// which names its producer the same way.
#include <fmt/format.h>

#include <algorithm>

#include "reports/advice.h"  // lost_text, is_probing_reading, gradient_underflow_text, failure_runs
#include "reports/html_parts.h"

namespace ampcheck::reports::html_impl {
namespace {

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

}  // namespace

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

}  // namespace ampcheck::reports::html_impl
