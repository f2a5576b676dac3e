#include "inspector/inspector.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "reports/text_table.h"

namespace ampcheck::inspector {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::off: return "off";
    case Mode::trace: return "trace";
    case Mode::stats: return "stats";
    case Mode::full: return "full";
  }
  return "?";
}

std::optional<Mode> parse_mode(std::string_view text) {
  for (Mode m : {Mode::off, Mode::trace, Mode::stats, Mode::full})
    if (mode_name(m) == text) return m;
  return std::nullopt;
}

// ---- Occurrences ----
std::int64_t Occurrences::of(const OpEvent& e) {
  if (e.step != step_) {
    reset();
    step_ = e.step;
  }
  const Key key(e.module, e.op);
  if (e.phase != Phase::backward) return forward_[key]++;
  const std::int64_t forwards = forward_[key];
  return std::max<std::int64_t>(0, forwards - 1 - backward_[key]++);
}

// ---- Escalation ----
void Inspector::Escalation::on_step_begin(std::int64_t step) {
  if (!pending_) return;
  pending_ = false;
  numerics_.also_take(step, step + every_ - 1);
  shadow_.also_measure(step, step + every_ - 1);
}

// ---- NumericsRecorder ----
NumericsRecorder::NumericsRecorder(Sampler sampler) { table_.sampler = sampler; }

// A step without an end (a loop that never calls end_step) leaves its statistics for the
// next: they are merged before the new step's, so the slots do not pile up.
void NumericsRecorder::on_step_begin(std::int64_t) {
  flush();
  occurrences_.reset();
}

void NumericsRecorder::on_step_end(std::int64_t) { flush(); }

void NumericsRecorder::on_op_end(const OpEvent& e) {
  if (e.inserted_cast) return;  // the cast's output is the next op's input, seen there
  const std::int64_t k = occurrences_.of(e);  // counted on every step, sampled or not
  if (!table_.sampler.take(e.step)) return;
  const std::string key = fmt::format("{}/{}#{}", e.module, op_name(e.op), k);
  if (e.phase == Phase::forward && e.output && e.output->defined() && is_floating(e.output->dtype())) {
    table_.queue(key + ":out", *e.output, e.step);
  } else if (e.phase == Phase::backward && e.grad_inputs) {
    for (std::size_t i = 0; i < e.grad_inputs->size(); ++i) {
      const Tensor& g = (*e.grad_inputs)[i];
      if (g.defined() && is_floating(g.dtype())) table_.queue(fmt::format("{}:grad{}", key, i), g, e.step);
    }
  }
}

void NumericsRecorder::on_param_update(const ParamUpdate& u) {
  const std::string name(u.name);
  if (table_.sampler.take(u.step)) {
    if (u.after) table_.queue("param:" + name, *u.after, u.step);
    if (u.grad) table_.queue("grad:" + name, *u.grad, u.step);
    if (u.state)
      for (const auto& [buf, t] : *u.state) table_.queue("state:" + name + "." + buf, t, u.step);
  }
  // Swamping matters where the low-precision value is what the optimizer updates (no
  // master): an element with a nonzero gradient whose stored value did not move lost
  // its update to rounding.
  if (u.master || !u.before || !u.after || !u.grad || !is_low_precision(u.after->dtype())) return;
  const std::vector<double> before = u.before->to_f64(), after = u.after->to_f64(), grad = u.grad->to_f64();
  std::int64_t moving = 0, lost = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    if (grad[i] == 0) continue;
    ++moving;
    lost += after[i] == before[i];
  }
  if (moving == 0) return;
  Swamping& s = swamping_[name];
  ++s.updates;
  s.fraction_sum += static_cast<double>(lost) / static_cast<double>(moving);
}

// ---- Inspector ----
Inspector::Inspector(InspectorOptions options) : options_(std::move(options)) {
  const Mode m = options_.mode;
  if (m >= Mode::trace) {
    OpTraceOptions to = options_.trace;
    to.gpu_kernels = to.gpu_kernels || options_.cupti;
    trace_ = std::make_unique<OpTrace>(to);
    if (options_.glog_level >= 5)
      glog_ = std::make_unique<GlogWriter>(options_.glog ? *options_.glog : std::cerr,
                                           GlogOptions{options_.glog_level, options_.glog_timestamps});
    if (options_.cupti) {
      KernelWatchOptions ko;
      ko.per_op = glog_ != nullptr;  // the log's line after each op names the kernels it ran
      ko.observers_launch = m >= Mode::stats;  // the NaN watch and the numerics copy statistics back
      kernels_ = std::make_unique<KernelWatch>(trace_.get(), ko);
      if (glog_) glog_->set_kernels(kernels_.get());
    }
  }
  if (m >= Mode::stats) nan_ = std::make_unique<NanWatch>(options_.nan);
  if (m >= Mode::full) {
    numerics_ = std::make_unique<NumericsRecorder>(options_.sampler);
    shadow_ = std::make_unique<ShadowError>(ShadowOptions{options_.shadow_every});
    escalation_ = std::make_unique<Escalation>(*numerics_, *shadow_, options_.sampler.every_n());
  }
}

Inspector::~Inspector() { detach(); }

void Inspector::attach() {
  if (attached_) return;
  // CUPTI first and last around the others: the kernels the others launch (statistics,
  // copies to the host) are theirs, not the op's (inspector/kernel_watch.h).
  if (kernels_ && !kernels_started_) {
    kernels_started_ = kernels_->start();
    if (!kernels_started_) kernels_not_traced_ = kernels_->why_not();
  }
  const bool cupti = kernels_ && kernels_->running();
  if (cupti) add_observer(&kernels_->enter());
  for (Observer* o : std::initializer_list<Observer*>{trace_.get(), glog_.get(), nan_.get(), escalation_.get(),
                                                      numerics_.get(), shadow_.get()})
    if (o) add_observer(o);
  if (cupti) add_observer(&kernels_->leave());
  attached_ = true;
}

void Inspector::detach() {
  if (!attached_) return;
  if (kernels_) {
    remove_observer(&kernels_->enter());
    remove_observer(&kernels_->leave());
    kernels_->stop();  // the last records: everything the trace will get
  }
  for (Observer* o : std::initializer_list<Observer*>{trace_.get(), glog_.get(), nan_.get(), escalation_.get(),
                                                      numerics_.get(), shadow_.get()})
    if (o) remove_observer(o);
  attached_ = false;
}

std::vector<ReadinessRow> readiness_report(const NumericsTable& table, std::size_t top) {
  std::vector<ReadinessRow> rows;
  for (const auto& [key, stats] : table.stats) {
    const Readiness r = readiness(stats);
    if (r.overflow_fraction_f16 + r.underflow_fraction_f16 + r.overflow_fraction_bf16 + r.underflow_fraction_bf16 > 0)
      rows.push_back({key, r});
  }
  auto badness = [](const Readiness& r) { return r.overflow_fraction_f16 + r.underflow_fraction_f16; };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const ReadinessRow& a, const ReadinessRow& b) { return badness(a.readiness) > badness(b.readiness); });
  if (rows.size() > top) rows.resize(top);
  return rows;
}

std::string Inspector::summary(std::size_t top) const {
  std::string out;
  if (trace_) out += operator_stats_table(*trace_) + "\n";
  if (nan_) out += describe(nan_->report()) + "\n";
  if (numerics_) {
    const auto rows = readiness_report(numerics_->table(), top);
    if (!rows.empty()) {
      reports::TextTable t({"tensor", "f16 overflow", "f16 underflow", "bf16 overflow", "bf16 underflow"});
      t.align(0, reports::TextTable::Align::left);
      for (const ReadinessRow& r : rows)
        t.add_row({r.key, fmt::format("{:.3g}", r.readiness.overflow_fraction_f16),
                   fmt::format("{:.3g}", r.readiness.underflow_fraction_f16),
                   fmt::format("{:.3g}", r.readiness.overflow_fraction_bf16),
                   fmt::format("{:.3g}", r.readiness.underflow_fraction_bf16)});
      out += "Tensors with values outside the low-precision range (fraction of elements):\n" + t.render() + "\n";
    }
    if (!numerics_->swamping().empty()) {
      reports::TextTable t({"parameter", "updates", "swamped (mean fraction)"});
      t.align(0, reports::TextTable::Align::left);
      for (const auto& [name, s] : numerics_->swamping())
        t.add_row({name, std::to_string(s.updates), fmt::format("{:.3g}", s.mean())});
      out += "Updates lost to rounding (w + dw == w):\n" + t.render() + "\n";
    }
  }
  if (shadow_) {
    const auto worst = shadow_->worst(top);
    if (!worst.empty()) {
      reports::TextTable t({"op instance", "dtype", "worst rel error", "x rounding floor", "step"});
      t.align(0, reports::TextTable::Align::left);
      for (const ShadowRecord& r : worst)
        t.add_row({r.key(), std::string(name(r.dtype)), fmt::format("{:.3g}", r.worst_error),
                   fmt::format("{:.3g}", r.worst_times_floor()), std::to_string(r.worst_step)});
      out += "Worst local (shadow) errors of low-precision ops:\n" + t.render();
    }
  }
  return out;
}

}  // namespace ampcheck::inspector
