#include "reports/advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

namespace ampcheck::reports {
namespace {

std::string who(const LostValue& l) {
  const std::string op = l.inserted_cast ? std::string("an inserted cast") : l.op;
  return l.module.empty() ? op : fmt::format("{} in '{}'", op, l.module);
}

// "-Inf", "NaN and +Inf": what the producer's output held.
std::string made(const NanEvent& p) {
  std::vector<std::string> kinds;
  if (p.out_nan) kinds.emplace_back("NaN");
  if (p.out_pos_inf) kinds.emplace_back("+Inf");
  if (p.out_neg_inf) kinds.emplace_back("-Inf");
  if (kinds.empty()) return "a non-finite value";
  std::string s;
  for (std::size_t i = 0; i < kinds.size(); ++i) s += (i == 0 ? "" : i + 1 == kinds.size() ? " and " : ", ") + kinds[i];
  return s;
}

std::string values(std::int64_t n) { return fmt::format("{} value{}", n, n == 1 ? "" : "s"); }

// An integral scale as an integer, for a framework's key.
std::string scale_value(double scale) {
  return std::floor(scale) == scale && std::fabs(scale) < 1e15 ? fmt::format("{:.0f}", scale) : fmt::format("{:g}", scale);
}

// DeepSpeed takes a power of two: the largest at or below the scale.
int scale_power(double scale) { return static_cast<int>(std::floor(std::log2(scale))); }

enum class Framework { pytorch, paddle, deepspeed, apex, ampcheck };

// A configuration in ampcheck's own form: ampcheck's keys (and the frameworks'). Else the
// scaler's framework when it has one, else the configuration's.
Framework framework_of(const AmpSettings& amp) {
  if (amp.semantics == "ampcheck" || amp.semantics.empty()) return Framework::ampcheck;
  for (const std::string_view s : {std::string_view(amp.loss_scaling), std::string_view(amp.semantics)}) {
    if (s == "pytorch") return Framework::pytorch;
    if (s == "paddle") return Framework::paddle;
    if (s == "deepspeed") return Framework::deepspeed;
    if (s == "apex") return Framework::apex;
  }
  return Framework::ampcheck;
}

// The key of the scaler's initial scale in ampcheck's own form ("loss_scaling" block).
std::string ampcheck_start_key(const AmpSettings& amp, double scale) {
  const std::string& b = amp.loss_scaling;
  if (b == "paddle") return fmt::format("\"behaviour\": \"paddle\", \"init_loss_scaling\": {}", scale_value(scale));
  if (b == "deepspeed") return fmt::format("\"behaviour\": \"deepspeed\", \"initial_scale_power\": {}", scale_power(scale));
  if (b == "apex") return fmt::format("\"behaviour\": \"apex\", \"loss_scale\": {}", scale_value(scale));
  return fmt::format("\"behaviour\": \"pytorch\", \"init_scale\": {}", scale_value(scale));
}

}  // namespace

std::string value_text(double v) {
  const double a = std::fabs(v);
  return a >= 1e-3 && a < 1e6 ? fmt::format("{:.6g}", v) : fmt::format("{:.3g}", v);
}

std::string lost_text(const NanEvent& p, const LostValue& l) {
  const std::string producer =
      p.module.empty() ? fmt::format("{} produced {}", p.op, made(p)) : fmt::format("{} in '{}' produced {}", p.op, p.module, made(p));
  if (l.input.empty())
    return fmt::format("{}: its result {} {} {} (largest finite {}), which fp32 holds ({}, step {})", producer,
                       value_text(l.value), l.kind == "overflow" ? "overflowed" : "underflowed", l.dtype, value_text(l.limit),
                       values(l.count), l.step);
  if (l.kind == "overflow")
    return fmt::format("{} <- its {} came from {}, whose result {} overflowed {} (largest finite {}; {}, step {})",
                       producer, l.input, who(l), value_text(l.value), l.dtype, value_text(l.limit), values(l.count), l.step);
  return fmt::format("{} <- its {} came from {}, which flushed {} to 0 in {} (smallest subnormal {}; {}, step {})",
                     producer, l.input, who(l), value_text(l.value), l.dtype, value_text(l.limit), values(l.count), l.step);
}

std::string flushed_gradient_text(const LostValue& l) {
  return fmt::format("{} ({}, step {}) flushed every gradient it passed back to 0 in {}: {}, the largest in magnitude {} "
                     "(smallest subnormal {})",
                     who(l), l.phase, l.step, l.dtype, values(l.count), value_text(l.value), value_text(l.limit));
}

std::string scale_text(double scale) {
  if (scale > 0 && std::isfinite(scale)) {
    const double p = std::log2(scale);
    if (p == std::floor(p)) return fmt::format("2^{:.0f}", p);
  }
  return fmt::format("{:g}", scale);
}

std::string start_scale_advice(const AmpSettings& amp, double scale) {
  const std::string s = scale_value(scale);
  switch (framework_of(amp)) {
    case Framework::pytorch: return fmt::format("PyTorch GradScaler(init_scale={})", s);
    case Framework::paddle: return fmt::format("Paddle GradScaler(init_loss_scaling={}), or init_loss_scaling: {} in amp_configs", s, s);
    case Framework::deepspeed: return fmt::format("DeepSpeed \"fp16\": {{\"initial_scale_power\": {}}}", scale_power(scale));
    case Framework::apex:
      return fmt::format("Apex amp.initialize(..., max_loss_scale={}): its dynamic scaler starts at min(2^16, max_loss_scale)", s);
    case Framework::ampcheck: break;
  }
  return fmt::format("ampcheck config \"loss_scaling\": {{{}}}; PyTorch GradScaler(init_scale={}), Paddle "
                     "init_loss_scaling={}, DeepSpeed initial_scale_power={}",
                     ampcheck_start_key(amp, scale), s, s, scale_power(scale));
}

std::string dynamic_scaling_advice(const AmpSettings& amp, double scale) {
  const bool given = scale > 0;
  switch (framework_of(amp)) {
    case Framework::pytorch:
      return given ? fmt::format("PyTorch GradScaler(init_scale={}), enabled (it is dynamic)", scale_value(scale))
                   : std::string("PyTorch GradScaler(), enabled (dynamic, from 65536)");
    case Framework::paddle:
      return fmt::format("Paddle GradScaler(init_loss_scaling={}, use_dynamic_loss_scaling=True)",
                         given ? scale_value(scale) : std::string("32768"));
    case Framework::deepspeed:
      return fmt::format("DeepSpeed \"fp16\": {{\"loss_scale\": 0, \"initial_scale_power\": {}}} (loss_scale 0 is dynamic)",
                         given ? scale_power(scale) : 16);
    case Framework::apex: return "Apex amp.initialize(..., loss_scale=\"dynamic\")";
    case Framework::ampcheck: break;
  }
  const std::string s = given ? scale_value(scale) : std::string("65536");
  return fmt::format("ampcheck config \"loss_scaling\": {{\"behaviour\": \"pytorch\", \"init_scale\": {}}}; PyTorch "
                     "GradScaler(init_scale={}), Paddle GradScaler(init_loss_scaling={}, use_dynamic_loss_scaling=True)",
                     s, s, s);
}

std::string probing_note(const Report& r) {
  if (!r.nonfinite.probing) return {};
  const ScalerProbing& p = *r.nonfinite.probing;
  const double start = p.suggested_scale > 0 ? p.suggested_scale : p.scale_to;
  // Every skip that was the scale coming down (a 1.6 report lists them; an older one has
  // the leading run only).
  std::int64_t skipped = 0;
  for (const SkippedUpdate& u : r.nonfinite.skips) skipped += u.reading == "initial" || u.reading == "lower";
  if (r.nonfinite.skips.empty()) skipped = p.skipped;
  return fmt::format("{} of {} steps were skipped while the loss scaler came down from {} to {}{}: start it lower ({})",
                     skipped, r.nonfinite.updates, scale_text(p.scale_from), scale_text(p.scale_to),
                     start < p.scale_to ? " (later " + scale_text(start) + ")" : std::string(),
                     start_scale_advice(r.run.amp, start));
}

std::string skip_reading_text(const std::string& reading) {
  if (reading == "initial") return "probing from the initial scale";
  if (reading == "lower") return "probing: the scale to a new low";
  if (reading == "after_growth") return "probing after the scale grew";
  if (reading == "counted") return "counted: at a scale that had trained, to no new low";
  if (reading == "persistent") return "persistent: the same op overflows at every scale";
  if (reading == "forward") return "after a non-finite forward value";
  if (reading == "not_absorbed") return "not absorbed: the scaler did not react";
  return reading;
}

bool is_probing_reading(const std::string& reading) {
  return reading == "initial" || reading == "lower" || reading == "after_growth";
}

std::string gradient_underflow_text(const Report& r) {
  if (!r.nonfinite.zero_gradients) return {};
  const ZeroGradients& z = *r.nonfinite.zero_gradients;
  return fmt::format("gradients underflow: every parameter gradient was 0 in {} from step {} ({} of {} steps); enable "
                     "dynamic loss scaling or raise the scale{} ({})",
                     z.dtype, z.first_step, z.steps, z.stepped,
                     z.scale_needed > 0 ? " to at least " + scale_text(z.scale_needed) : std::string(),
                     dynamic_scaling_advice(r.run.amp, z.scale_needed));
}

std::string static_scale_overflow_text(const Report& r) {
  const NonFinite& nf = r.nonfinite;
  if (r.run.amp.loss_scaling != "static" || nf.failures.empty() ||
      (nf.producer.has_value() && nf.producer->phase == "forward"))
    return {};
  const bool gradients_only = std::all_of(nf.failures.begin(), nf.failures.end(), [](const Failure& f) {
    return f.kind == "gradient_not_absorbed" || f.kind == "skipped_fraction";
  });
  if (!gradients_only) return {};
  return fmt::format("the loss scale is static ({:g}): gradients that overflow {} at it are skipped forever; a dynamic "
                     "scaler backs off until they fit ({})",
                     r.run.amp.init_loss_scaling, r.run.dtype, dynamic_scaling_advice(r.run.amp, 0));
}

std::vector<FailureRun> failure_runs(const std::vector<Failure>& failures) {
  std::vector<FailureRun> runs;
  for (const Failure& f : failures) {
    const auto it = std::find_if(runs.begin(), runs.end(), [&](const FailureRun& g) { return g.first.kind == f.kind; });
    if (it == runs.end()) {
      runs.push_back({f, 0, f.step});
    } else {
      ++it->more;
      it->last_step = f.step;
    }
  }
  return runs;
}

std::string more_text(const FailureRun& run) {
  if (run.more == 0) return {};
  return run.more == 1 ? fmt::format("; and 1 more at step {}", run.last_step)
                       : fmt::format("; and {} more, the last at step {}", run.more, run.last_step);
}

bool loss_scale_is_the_cure(const Report& r) {
  const std::vector<Failure>& f = r.nonfinite.failures;
  return r.nonfinite.zero_gradients && !f.empty() && std::all_of(f.begin(), f.end(), [](const Failure& x) {
           return x.kind == "gradient_underflow" || x.kind == "scale_below_floor";
         });
}

}  // namespace ampcheck::reports
