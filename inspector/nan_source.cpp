#include "inspector/nan_source.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

namespace ampcheck::inspector {
namespace {

// Recent allowed values kept for carrier matching: bounded so a long run holds no more
// storage alive than a few steps' masks.
constexpr std::size_t kAllowedValuesKept = 256;

TensorRange range_of(const Tensor& t, std::string role) {
  TensorRange r;
  r.role = std::move(role);
  r.dtype = t.dtype();
  r.shape = t.shape();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.min = r.max = r.absmax = nan;
  bool any_finite = false;
  for (const double v : t.to_f64()) {
    if (std::isnan(v)) {
      ++r.non_finite.nan;
    } else if (std::isinf(v)) {
      ++(v > 0 ? r.non_finite.pos_inf : r.non_finite.neg_inf);
    } else if (!any_finite) {
      any_finite = true;
      r.min = r.max = v;
      r.absmax = std::fabs(v);
    } else {
      r.min = std::min(r.min, v);
      r.max = std::max(r.max, v);
      r.absmax = std::max(r.absmax, std::fabs(v));
    }
  }
  return r;
}

// Whether every element is finite, from the exponent bits alone: the common case costs
// one pass without conversion or allocation (stats mode checks every op's output).
template <typename Bits>
bool exponents_finite(const Tensor& t, Bits mask) {
  const auto* p = t.data<Bits>();
  Bits all = 0;
  const std::int64_t n = t.numel();
  bool finite = true;
  for (std::int64_t i = 0; i < n && finite; i += 4096) {
    const std::int64_t e = std::min<std::int64_t>(n, i + 4096);
    for (std::int64_t j = i; j < e; ++j) all |= static_cast<Bits>((p[j] & mask) == mask);
    finite = all == 0;
  }
  return finite;
}

bool all_finite(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f64: return exponents_finite<std::uint64_t>(t, 0x7ff0000000000000ull);
    case DType::f32: return exponents_finite<std::uint32_t>(t, 0x7f800000u);
    case DType::f16: return exponents_finite<std::uint16_t>(t, 0x7c00u);
    case DType::bf16: return exponents_finite<std::uint16_t>(t, 0x7f80u);
    case DType::i64: return true;
  }
  return true;
}

NonFiniteCounts counts_of(const Tensor& t) {
  NonFiniteCounts c;
  if (!t.defined() || !is_floating(t.dtype()) || all_finite(t)) return c;
  for (const double v : t.to_f64()) {
    if (std::isnan(v)) ++c.nan;
    else if (std::isinf(v)) ++(v > 0 ? c.pos_inf : c.neg_inf);
  }
  return c;
}

bool floating(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

// "attn" covers "attn" and "attn.q", not "attention".
bool under(const std::string& module, const std::string& prefix) {
  if (prefix.empty()) return true;
  if (module.size() < prefix.size() || module.compare(0, prefix.size(), prefix) != 0) return false;
  return module.size() == prefix.size() || module[prefix.size()] == '.';
}

// The scaler reacted to the overflow: the scale dropped, or a backoff is on its way
// (Paddle counts bad steps before decr_every_n_nan_or_inf; DeepSpeed spends hysteresis
// first). A static scaler, or one with dynamic scaling off, does neither.
bool reacted(const amp::ScalerEvent& e) {
  if (e.scale_after < e.scale_before) return true;
  const auto decr = e.counters.find("decr_count");
  if (decr != e.counters.end() && decr->second > 0) return true;
  return e.counters.count("cur_hysteresis") != 0;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string counts_text(const NonFiniteCounts& c) {
  std::string s;
  auto add = [&](std::int64_t n, const char* what) {
    if (n == 0) return;
    if (!s.empty()) s += ", ";
    s += std::to_string(n) + " " + what;
  };
  add(c.nan, "NaN");
  add(c.pos_inf, "+Inf");
  add(c.neg_inf, "-Inf");
  return s.empty() ? "none" : s;
}

std::string event_text(const NanEvent& e) {
  std::string s = std::string(op_name(e.op)) +
                  " in module '" + e.module + "', " + std::string(phase_name(e.phase)) + ", step " +
                  std::to_string(e.step) + ": output " +
                  counts_text(e.output);
  return s;
}

}  // namespace

NonFiniteCounts& NonFiniteCounts::operator+=(const NonFiniteCounts& o) {
  nan += o.nan;
  pos_inf += o.pos_inf;
  neg_inf += o.neg_inf;
  return *this;
}

std::string_view failure_kind_name(FailureKind k) {
  switch (k) {
    case FailureKind::forward_non_finite: return "forward_non_finite";
    case FailureKind::gradient_not_absorbed: return "gradient_not_absorbed";
    case FailureKind::scale_below_floor: return "scale_below_floor";
    case FailureKind::skipped_fraction: return "skipped_fraction";
  }
  return "?";
}

std::int64_t NanReport::skipped() const {
  return std::count_if(scale_history.begin(), scale_history.end(),
                       [](const ScaleRecord& r) { return r.event.skipped; });
}
std::int64_t NanReport::absorbed() const {
  return std::count_if(scale_history.begin(), scale_history.end(),
                       [](const ScaleRecord& r) { return r.absorbed; });
}

NanWatch::NanWatch(NanWatchOptions options) : options_(std::move(options)) {}

bool NanWatch::allowed(const OpEvent& e) const {
  const std::string_view name = op_name(e.op);
  for (const std::string& op : options_.allowed_ops)
    if (op == name) return true;
  for (const std::string& prefix : options_.allowed_modules)
    if (under(e.module, prefix)) return true;
  return false;
}

bool NanWatch::carries_allowed(const Tensor& t) const {
  return std::any_of(allowed_values_.begin(), allowed_values_.end(),
                     [&](const Tensor& a) { return a.same(t); });
}

void NanWatch::remember_allowed(const Tensor& t) {
  if (allowed_values_.size() == kAllowedValuesKept) allowed_values_.erase(allowed_values_.begin());
  allowed_values_.push_back(t);
}

void NanWatch::add_propagator(Propagation& p, const NanEvent& e) const {
  ++p.events;
  const std::string name(op_name(e.op));
  auto it = std::find_if(p.by_op.begin(), p.by_op.end(), [&](const auto& kv) { return kv.first == name; });
  if (it == p.by_op.end()) p.by_op.emplace_back(name, 1);
  else ++it->second;
  if (p.first.size() < options_.max_listed) p.first.push_back(e);
}

void NanWatch::on_op_end(const OpEvent& e) {
  ++report_.events_checked;
  const bool backward = e.phase == Phase::backward;

  // What the event produced: the output, or each gradient it passed back.
  NonFiniteCounts produced;
  std::vector<std::size_t> bad_grads;
  if (backward) {
    if (e.grad_inputs != nullptr)
      for (std::size_t i = 0; i < e.grad_inputs->size(); ++i) {
        const NonFiniteCounts c = counts_of((*e.grad_inputs)[i]);
        if (c.any()) bad_grads.push_back(i);
        produced += c;
      }
  } else if (e.output != nullptr) {
    produced = counts_of(*e.output);
  }
  if (!produced.any()) return;  // the common case costs one scan per tensor

  NanEvent ev;
  ev.sequence = e.sequence;
  ev.step = e.step;
  ev.phase = e.phase;
  ev.op = e.op;
  ev.module = e.module;
  ev.output = produced;
  ev.bad_grads = std::move(bad_grads);
  bool inputs_finite = true, only_allowed_bad = true;
  auto read = [&](const Tensor& t, std::string role) {
    if (!floating(t)) return;
    ev.inputs.push_back(range_of(t, std::move(role)));
    if (ev.inputs.back().non_finite.any()) {
      inputs_finite = false;
      only_allowed_bad = only_allowed_bad && carries_allowed(t);
    }
  };
  if (e.inputs != nullptr)
    for (std::size_t i = 0; i < e.inputs->size(); ++i) read((*e.inputs)[i], "input " + std::to_string(i));
  if (backward && e.grad_output != nullptr) read(*e.grad_output, "grad_output");

  // Allowed: produced by an allowed op or module, or merely carried on from one.
  if (allowed(e) || (!inputs_finite && only_allowed_bad)) {
    ++report_.allowed_events;
    if (!backward && e.output != nullptr) remember_allowed(*e.output);
    if (backward && e.grad_inputs != nullptr)
      for (const std::size_t i : ev.bad_grads) remember_allowed((*e.grad_inputs)[i]);
    return;
  }

  if (e.phase != Phase::forward) {
    // Judged by the next scaler update: absorbed probing, or a real failure. The
    // optimizer phase holds the scaler's own multiply, whose overflow is the probing.
    if (pending_.attribution.size() < options_.max_listed) pending_.attribution.push_back(ev);
    if (inputs_finite && !pending_.producer) pending_.producer = ev;
    else if (!inputs_finite) add_propagator(pending_.propagators, ev);
    return;
  }
  const bool first_failure = std::none_of(report_.failures.begin(), report_.failures.end(), [](const Failure& f) {
    return f.kind == FailureKind::forward_non_finite;
  });
  if (first_failure)
    report_.failures.push_back({FailureKind::forward_non_finite, ev.step,
                                "first non-finite forward value: " + event_text(ev)});
  if (inputs_finite && !report_.producer) report_.producer = ev;
  else if (!inputs_finite) add_propagator(report_.propagators, ev);
}

void NanWatch::merge_real(NanReport& r, const Pending& p) const {
  if (p.producer && !r.producer) r.producer = p.producer;
  for (const auto& [op, n] : p.propagators.by_op) {
    auto it = std::find_if(r.propagators.by_op.begin(), r.propagators.by_op.end(),
                           [&](const auto& kv) { return kv.first == op; });
    if (it == r.propagators.by_op.end()) r.propagators.by_op.emplace_back(op, n);
    else it->second += n;
  }
  r.propagators.events += p.propagators.events;
  for (const NanEvent& ev : p.propagators.first)
    if (r.propagators.first.size() < options_.max_listed) r.propagators.first.push_back(ev);
}

void NanWatch::on_scaler_update(const amp::ScalerEvent& e) {
  ScaleRecord record;
  record.event = e;
  record.absorbed = e.found_inf && e.skipped && reacted(e);
  const bool had_bad_grads = !pending_.attribution.empty();
  if (e.found_inf || had_bad_grads) {
    record.backward_producer = pending_.producer;
    record.attribution = pending_.attribution;
    record.propagators = pending_.propagators.events;
  }
  if (!record.absorbed && (e.found_inf || had_bad_grads)) {
    merge_real(report_, pending_);
    std::string where = pending_.attribution.empty() ? std::string("no backward op event held them")
                                                     : "first in " + event_text(pending_.attribution.front());
    report_.failures.push_back(
        {FailureKind::gradient_not_absorbed, e.step,
         std::string(e.skipped ? "step skipped but the scale did not react"
                               : (e.found_inf ? "step not skipped" : "no Inf/NaN found by the scaler")) +
             " (scale " + number(e.scale_before) + " -> " + number(e.scale_after) + "); " + where});
  }
  // Once per collapse: the updates that stay below the floor add nothing new.
  const bool below = e.scale_after < options_.scale_floor;
  if (below && !below_floor_)
    report_.failures.push_back({FailureKind::scale_below_floor, e.step,
                                "scale " + number(e.scale_after) + " below the floor " +
                                    number(options_.scale_floor)});
  below_floor_ = below;
  report_.scale_history.push_back(std::move(record));
  pending_ = Pending{};
}

NanReport NanWatch::report() const {
  NanReport r = report_;
  if (!pending_.attribution.empty()) {
    merge_real(r, pending_);
    r.failures.push_back({FailureKind::gradient_not_absorbed, pending_.attribution.front().step,
                          "non-finite gradients no scaler update has judged; first in " +
                              event_text(pending_.attribution.front())});
  }
  if (r.updates() > 0) {
    const double fraction = static_cast<double>(r.skipped()) / static_cast<double>(r.updates());
    if (fraction > options_.max_skipped_fraction)
      r.failures.push_back({FailureKind::skipped_fraction, r.updates(),
                            std::to_string(r.skipped()) + " of " + std::to_string(r.updates()) +
                                " updates skipped (" + number(fraction) + " > " +
                                number(options_.max_skipped_fraction) + ")"});
  }
  return r;
}

std::string describe(const NanReport& r) {
  std::ostringstream s;
  if (r.producer) {
    const NanEvent& p = *r.producer;
    s << "producer: " << event_text(p) << "\n";
    for (const TensorRange& in : p.inputs)
      s << "  " << in.role << " " << name(in.dtype) << " " << to_string(in.shape) << ": min "
        << in.min << ", max " << in.max << ", absmax " << in.absmax << "\n";
  } else {
    s << "producer: none" << (r.propagators.events > 0 ? " (non-finite values entered from outside the ops)" : "")
      << "\n";
  }
  s << "propagators: " << r.propagators.events << " events";
  for (std::size_t i = 0; i < r.propagators.by_op.size(); ++i)
    s << (i == 0 ? " (" : ", ") << r.propagators.by_op[i].first << " x" << r.propagators.by_op[i].second;
  s << (r.propagators.by_op.empty() ? "" : ")") << "\n";
  s << "failures: " << r.failures.size() << "\n";
  for (const Failure& f : r.failures) s << "  " << failure_kind_name(f.kind) << " at step " << f.step << ": " << f.detail << "\n";
  s << "loss scale: " << r.updates() << " updates, " << r.skipped() << " skipped, " << r.absorbed()
    << " absorbed as probing";
  if (!r.scale_history.empty())
    s << "; scale " << r.scale_history.front().event.scale_before << " -> " << r.scale_history.back().event.scale_after;
  s << "\n";
  // The updates that did something (a change of scale, an Inf/NaN, a skip); the quiet
  // ones only move counters. At most 20 lines, the rest counted.
  constexpr std::size_t kMaxLines = 20;
  std::size_t shown = 0, eventful = 0;
  for (const ScaleRecord& rec : r.scale_history) {
    const amp::ScalerEvent& e = rec.event;
    if (e.scale_before == e.scale_after && !e.found_inf && !e.skipped) continue;
    if (++eventful > kMaxLines) continue;
    ++shown;
    s << "  update " << e.step << ": scale " << e.scale_before << " -> " << e.scale_after
      << (e.found_inf ? ", found_inf" : "") << (e.skipped ? ", skipped" : "") << (rec.absorbed ? ", absorbed" : "");
    for (const auto& [name, v] : e.counters) s << ", " << name << "=" << v;
    s << "\n";
    for (const NanEvent& a : rec.attribution) s << "    " << event_text(a) << "\n";
  }
  if (eventful > shown) s << "  ... " << eventful - shown << " more updates that changed the scale or skipped\n";
  if (r.allowed_events > 0) s << "allowed (not reported): " << r.allowed_events << " events\n";
  return s.str();
}

}  // namespace ampcheck::inspector
