#include "inspector/to_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace ampcheck::inspector {

reports::DtypeCounts dtype_counts(const DtypeCalls& c) {
  return {static_cast<std::int64_t>(c.fp16), static_cast<std::int64_t>(c.bf16), static_cast<std::int64_t>(c.fp32),
          static_cast<std::int64_t>(c.other),
          c.fp8 != 0 ? std::optional<std::int64_t>(static_cast<std::int64_t>(c.fp8)) : std::nullopt};
}

namespace {

reports::LowPrecisionCounts counts(const LowPrecisionCounts& c) {
  return {c.overflow, c.rounds_to_max, c.underflow, c.subnormal};
}

std::vector<std::int64_t> dims(const Dim3& d) { return {d.x, d.y, d.z}; }

std::int64_t ns(std::uint64_t v) { return static_cast<std::int64_t>(v); }

reports::GpuKernel gpu_kernel(const GpuKernelStats& g) {
  return reports::GpuKernel{g.name,
                            dims(g.grid),
                            dims(g.block),
                            g.launches,
                            ns(g.total_ns),
                            ns(g.min_ns),
                            ns(g.max_ns),
                            precision_name(g.cls.input),
                            precision_name(g.cls.accumulate),
                            tensor_cores_name(g.cls.tensor_cores),
                            kind_name(g.cls.kind)};
}

reports::KernelFinding finding(const KernelFinding& f) {
  return reports::KernelFinding{severity_name(f.severity),
                                kernel_problem_name(f.problem),
                                f.instance,
                                f.type,
                                f.module,
                                std::string(phase_name(f.phase)),
                                dtype_text(f.expected),
                                f.kernel,
                                precision_name(f.cls.input),
                                precision_name(f.cls.accumulate),
                                tensor_cores_name(f.cls.tensor_cores),
                                f.launches,
                                f.reason,
                                f.text()};
}

// What CUPTI saw, in the report: the counts, GPU time per op type, the findings of the
// kernel check and the work no op launched.
reports::Kernels kernels_report(const Inspector& insp, const OpTrace& trace) {
  reports::Kernels k;
  const KernelWatch* w = insp.kernels();
  k.traced = w != nullptr;
  k.not_traced = insp.kernels_not_traced();
  if (!w) return k;
  const KernelTraceStats& st = w->stats();
  k.kernels = static_cast<std::int64_t>(st.kernels);
  k.memcpys = static_cast<std::int64_t>(st.memcpys);
  k.memsets = static_cast<std::int64_t>(st.memsets);
  k.attributed = static_cast<std::int64_t>(st.attributed);
  k.inspector = static_cast<std::int64_t>(st.observers);
  k.unattributed = static_cast<std::int64_t>(st.unattributed() + trace.kernels_lost());
  k.dropped = static_cast<std::int64_t>(st.dropped);
  k.invalid = static_cast<std::int64_t>(st.invalid);
  for (const auto& [type, t] : trace.gpu_by_type())
    k.by_type.push_back({type, t.launches, ns(t.total_ns), ns(t.matrix_ns), ns(t.tensor_core_ns), ns(t.cuda_core_ns)});
  const KernelCheck check = check_kernels(trace);
  k.instances_checked = check.instances_checked;
  k.kernels_unread = check.kernels_unread;
  for (const KernelFinding& f : check.findings) k.findings.push_back(finding(f));
  for (const auto& [owner, table] : {std::pair{"step", &w->outside_ops()}, std::pair{"inspector", &w->observers_own()}})
    for (const auto& [name, o] : *table)
      k.outside.push_back({name, owner, o.launches, ns(o.total_ns), kind_name(o.cls.kind)});
  std::stable_sort(k.outside.begin(), k.outside.end(), [](const reports::OutsideKernel& a, const reports::OutsideKernel& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  constexpr std::size_t kOutsideKept = 20;
  if (k.outside.size() > kOutsideKept) k.outside.resize(kOutsideKept);
  k.errors = w->errors();
  return k;
}

reports::OpInstance instance(const InstanceStats& s) {
  reports::OpInstance o;
  o.name = s.name();
  o.type = std::string(op_name(s.op));
  o.module = s.module;
  o.phase = std::string(phase_name(s.phase));
  o.occurrence = s.occurrence;
  o.calls = s.calls;
  o.reason = std::string(amp::reason_name(s.reason));
  for (DType d : s.dtypes_in) o.dtypes_in.push_back(dtype_text(d));
  o.compute = dtype_text(s.compute_dtype);
  o.out = dtype_text(s.out_dtype);
  o.kernel_dtypes = dtype_counts(s.kernel_dtypes);
  for (const auto& [key, calls] : s.casts) {
    const auto& [input, from, to] = key;
    o.casts.push_back({static_cast<std::int64_t>(input), slot_name(s.op, input), dtype_text(from), dtype_text(to), calls});
  }
  for (const auto& [kernel, calls] : s.kernels) o.kernels.push_back({kernel, calls});
  return o;
}

void add_gpu_kernels(const InstanceStats& s, reports::OpInstance& o) {
  std::vector<reports::GpuKernel>& out = o.gpu_kernels.emplace();
  for (const GpuKernelStats& g : s.gpu_kernels) out.push_back(gpu_kernel(g));
  // By name, then launch shape: the same kernels give the same list whatever order
  // their records came in.
  std::sort(out.begin(), out.end(), [](const reports::GpuKernel& a, const reports::GpuKernel& b) {
    return std::tie(a.name, a.grid, a.block) < std::tie(b.name, b.grid, b.block);
  });
}

}  // namespace

std::string dtype_text(DType d) { return is_floating(d) ? std::string(info(d).long_name) : "int64"; }

reports::Numerics to_report(const TensorStats& s) {
  reports::Numerics n;
  n.count = s.count;
  n.tensors = s.tensors;
  n.zeros = s.zeros();
  n.nan = s.nans();
  n.pos_inf = s.pos_inf();
  n.neg_inf = s.neg_inf();
  n.f16 = counts(s.f16);
  n.bf16 = counts(s.bf16);
  n.min = s.min;
  n.max = s.max;
  n.absmax = s.absmax;
  n.min_nonzero_abs = s.min_nonzero_abs;
  n.mean = s.mean;
  n.rms = s.rms;
  n.dynamic_range_log2 = s.dynamic_range_log2;
  const ExponentHistogram& h = s.histogram;
  n.histogram.zero = h.zero;
  n.histogram.nan = h.nan;
  n.histogram.pos_inf = h.pos_inf;
  n.histogram.neg_inf = h.neg_inf;
  n.histogram.below = h.below;
  n.histogram.above = h.above;
  // Dense between the first and last nonempty exponent bins.
  const auto first = std::find_if(h.by_exponent.begin(), h.by_exponent.end(), [](std::int64_t c) { return c != 0; });
  if (first != h.by_exponent.end()) {
    const auto last = std::find_if(h.by_exponent.rbegin(), h.by_exponent.rend(), [](std::int64_t c) { return c != 0; });
    n.histogram.min_exponent = ExponentHistogram::kMinExponent + static_cast<int>(first - h.by_exponent.begin());
    n.histogram.counts.assign(first, last.base());
  }
  return n;
}

reports::LostValue to_report(const LostValue& l) {
  return {l.input,  std::string(op_name(l.op)), l.module, std::string(phase_name(l.phase)), l.step, l.inserted_cast,
          std::string(range_loss_name(l.kind)), dtype_text(l.dtype), l.value, l.count, l.limit};
}

reports::NanEvent to_report(const NanEvent& e) {
  reports::NanEvent r;
  r.step = e.step;
  r.phase = std::string(phase_name(e.phase));
  r.op = std::string(op_name(e.op));
  r.module = e.module;
  for (const TensorRange& t : e.inputs)
    r.inputs.push_back({t.role, dtype_text(t.dtype), t.shape, t.non_finite.nan, t.non_finite.pos_inf,
                        t.non_finite.neg_inf, t.min, t.max, t.absmax});
  r.out_nan = e.output.nan;
  r.out_pos_inf = e.output.pos_inf;
  r.out_neg_inf = e.output.neg_inf;
  for (const LostValue& l : e.lost) r.lost.push_back(to_report(l));
  return r;
}

std::vector<reports::TraceSpan> trace_spans(const OpTrace& trace) {
  std::vector<reports::TraceSpan> spans;
  const std::vector<OpRecord>& records = trace.records();
  if (records.empty()) return spans;
  double t0 = records.front().start;
  for (const OpRecord& r : records) t0 = std::min(t0, r.start);
  // Steps: from the first op's start to the last op's end.
  std::map<std::int64_t, std::pair<double, double>> steps;
  for (const OpRecord& r : records) {
    const double begin = (r.start - t0) * 1e6, end = begin + r.seconds * 1e6;
    reports::TraceSpan s;
    s.name = std::string(op_name(r.op)) + (r.phase == Phase::backward ? "_grad" : "");
    s.category = r.inserted_cast ? "cast" : std::string(phase_name(r.phase));
    s.start_us = begin;
    s.duration_us = r.seconds * 1e6;
    s.args = {{"module", r.module}, {"dtype", dtype_text(r.kernel_dtype)}, {"out", dtype_text(r.out_dtype)},
              {"compute", dtype_text(r.compute_dtype)}, {"reason", std::string(amp::reason_name(r.reason))},
              {"kernel", r.kernel}, {"step", std::to_string(r.step)}};
    for (const TraceCast& c : r.casts)
      s.args.emplace_back("cast " + c.slot, dtype_text(c.from) + " -> " + dtype_text(c.to));
    spans.push_back(std::move(s));
    auto [it, added] = steps.try_emplace(r.step, begin, end);
    if (!added) it->second = {std::min(it->second.first, begin), std::max(it->second.second, end)};
  }
  for (const auto& [step, range] : steps)
    spans.push_back({"step " + std::to_string(step), "step", range.first, range.second - range.first, 0, {}});
  // The GPU track: each kernel where CUPTI timed it, under the op span that launched it.
  for (const OpRecord& r : records) {
    for (const GpuLaunch& g : r.gpu) {
      reports::TraceSpan s;
      s.name = g.name;
      s.category = "kernel";
      s.start_us = (g.start - t0) * 1e6;
      s.duration_us = g.seconds * 1e6;
      s.track = 1;
      const std::string op = std::string(op_name(r.op)) + (r.phase == Phase::backward ? "_grad" : "");
      s.args = {{"op", r.inserted_cast ? "cast (inserted by AMP)" : op},
                {"module", r.module},
                {"step", std::to_string(r.step)},
                {"grid", fmt::format("{}x{}x{}", g.grid.x, g.grid.y, g.grid.z)},
                {"block", fmt::format("{}x{}x{}", g.block.x, g.block.y, g.block.z)},
                {"stream", std::to_string(g.stream)}};
      if (g.cls != nullptr) {
        s.args.emplace_back("input", precision_name(g.cls->input));
        s.args.emplace_back("accumulate", precision_name(g.cls->accumulate));
        s.args.emplace_back("tensor cores", tensor_cores_name(g.cls->tensor_cores));
        s.args.emplace_back("kind", kind_name(g.cls->kind));
      }
      spans.push_back(std::move(s));
    }
  }
  return spans;
}

void fill_report(const Inspector& insp, reports::Report& report) {
  if (const OpTrace* t = insp.trace()) {
    report.op_types.clear();
    for (const auto& [type, calls] : t->op_stats()) report.op_types.push_back({type, dtype_counts(calls)});
    report.inserted_casts.clear();
    for (const auto& [key, calls] : t->inserted_casts())
      report.inserted_casts.push_back({dtype_text(key.first), dtype_text(key.second), static_cast<std::int64_t>(calls)});
    report.ops.clear();
    const bool gpu = insp.kernels() != nullptr;
    for (const InstanceStats& s : t->instances()) {
      report.ops.push_back(instance(s));
      if (gpu) add_gpu_kernels(s, report.ops.back());
    }
    report.kernels.reset();
    if (insp.options().cupti) report.kernels = kernels_report(insp, *t);
    report.summary.low_precision_calls = 0;
    report.summary.total_calls = 0;
    for (const auto& [type, calls] : t->op_stats()) {
      report.summary.low_precision_calls += static_cast<std::int64_t>(calls.fp16 + calls.bf16 + calls.fp8);
      report.summary.total_calls += static_cast<std::int64_t>(calls.total());
    }
  }

  if (const NumericsRecorder* n = insp.numerics()) {
    // "<instance>:out" / "<instance>:grad<i>" belong to op instances; the rest are tensors.
    std::map<std::string, reports::OpInstance*> by_name;
    for (reports::OpInstance& o : report.ops) by_name[o.name] = &o;
    report.tensors.clear();
    for (const auto& [key, stats] : n->table().stats) {
      const auto colon = key.rfind(':');
      const std::string role = colon == std::string::npos ? "" : key.substr(colon + 1);
      if (colon != std::string::npos && (role == "out" || role.rfind("grad", 0) == 0) && key.find('/') != std::string::npos) {
        std::string name = key.substr(0, colon);
        if (role != "out") {  // a gradient: the backward instance of the same call
          const auto hash = name.rfind('#');
          name = name.substr(0, hash) + "_grad" + name.substr(hash);
        }
        if (auto it = by_name.find(name); it != by_name.end()) {
          it->second->numerics.push_back({role, to_report(stats)});
          continue;
        }
      }
      report.tensors.push_back({key, to_report(stats)});
    }
    report.swamping.clear();
    for (const auto& [name, s] : n->swamping()) report.swamping.push_back({name, s.updates, s.mean()});
  }

  if (const ShadowError* sh = insp.shadow()) {
    std::map<std::string, reports::OpInstance*> by_name;
    for (reports::OpInstance& o : report.ops)
      if (o.phase == "forward") by_name[o.name] = &o;
    for (const ShadowRecord& r : sh->records()) {
      const std::string name = r.module + "/" + std::string(op_name(r.op)) + "#" + std::to_string(r.occurrence);
      const auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      if (r.count > 0 || r.nonfinite > 0)
        it->second->local_error = reports::LocalError{r.count,       r.nonfinite,      r.mean_error, r.mean_floor,
                                                      r.worst_error, r.floor_at_worst, r.worst_step, r.max_abs_error};
      if (r.underflow + r.overflow > 0)
        it->second->range_loss = reports::RangeLoss{r.underflow, r.overflow, r.first_loss_step,
                                                    std::string(range_loss_name(r.first_loss_kind)), r.first_loss_value};
    }
  }

  if (const NanWatch* w = insp.nan()) {
    const NanReport nr = w->report();
    reports::NonFinite& nf = report.nonfinite;
    nf = {};
    if (nr.producer) nf.producer = to_report(*nr.producer);
    for (const NanEvent& p : nr.producers) nf.producers.push_back(to_report(p));
    nf.propagator_events = nr.propagators.events;
    nf.propagators = nr.propagators.by_op;
    for (const Failure& f : nr.failures) nf.failures.push_back({std::string(failure_kind_name(f.kind)), f.step, f.detail});
    nf.updates = nr.updates();
    nf.skipped = nr.skipped();
    nf.absorbed = nr.absorbed();
    nf.events_checked = nr.events_checked;
    for (const IntendedInf& i : nr.intended) {
      reports::IntendedInf x{std::string(op_name(i.op)), i.module, i.events, i.values, {}, i.reason()};
      for (const Op op : i.readers) x.readers.emplace_back(op_name(op));
      nf.intended.push_back(std::move(x));
    }
    for (const MaskFailure& m : nr.mask_failures)
      nf.mask_failures.push_back({std::string(op_name(m.writer.op)), m.writer.module, m.writer.step,
                                  std::string(op_name(m.reader)), m.reader_module, m.made_non_finite});
    for (const ScaleRecord& rec : nr.scale_history) {
      if (!rec.event.skipped) continue;
      reports::SkippedUpdate u;
      u.update = rec.event.step;
      u.scale_before = rec.event.scale_before;
      u.scale_after = rec.event.scale_after;
      u.reading = std::string(skip_reading_name(rec.reading));
      u.cause = std::string(skip_cause_name(rec.cause.kind));
      if (rec.cause.event) u.event = to_report(*rec.cause.event);
      u.params = rec.cause.params;
      u.param_names = rec.cause.names;
      u.text = cause_text(rec.cause);
      nf.skips.push_back(std::move(u));
    }
    if (const auto& p = nr.probing)
      nf.probing = reports::ScalerProbing{p->first_update, p->last_update, p->skipped,        p->scale_from,
                                          p->scale_to,     p->suggested_scale, p->excused};
    if (const auto& z = nr.zero_gradients) {
      reports::ZeroGradients& x = nf.zero_gradients.emplace();
      x.first_step = z->first_step;
      x.steps = z->steps;
      x.stepped = z->stepped;
      x.dtype = dtype_text(z->dtype);
      x.scale_needed = z->scale_needed;
      if (z->evidence) x.evidence = to_report(*z->evidence);
      x.loss = z->loss;
      x.initial_loss = z->initial_loss;
    }
  }
}

}  // namespace ampcheck::inspector
