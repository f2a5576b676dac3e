#include "inspector/nan_source.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "engine/dispatch.h"           // kernels_on, view_of
#include "inspector/to_report.h"
#include "kernels/numerics_kernels.h"  // the scans over the elements, on the tensor's device
#include "reports/advice.h"            // lost_text, flushed_gradient_text, scale_text

namespace ampcheck::inspector {
namespace {

// Recent allowed values kept for carrier matching: bounded so a long run holds no more
// storage alive than a few steps' masks.
constexpr std::size_t kAllowedValuesKept = 256;
// Forward outputs remembered within a step (for the walk back from a producer's input);
// a step with more starts over. Their tensors stay alive until the step ends.
constexpr std::size_t kMadeKept = 8192;
// -Inf masks and the tensors carrying them, per step (a loop without step marks folds
// the oldest masks into the report and forgets the oldest carriers).
constexpr std::size_t kMaskRootsKept = 1024;
constexpr std::size_t kMaskValuesKept = 256;
// How far back through casts and reshapes a producer's input is followed.
constexpr int kMaxWalk = 16;

using kernels::NumericsKernels;

const NumericsKernels& numerics_on(const Tensor& t) { return kernels_on<NumericsKernels>(t.device()); }

TensorRange range_of(const Tensor& t, std::string role) {
  const kernels::ValueScan v = numerics_on(t).scan(view_of(t));
  TensorRange r;
  r.role = std::move(role);
  r.dtype = t.dtype();
  r.shape = t.shape();
  r.non_finite = {v.nan, v.pos_inf, v.neg_inf};
  r.min = v.min;
  r.max = v.max;
  r.absmax = v.absmax;
  return r;
}

// Whether every element is finite, from the exponent bits alone: the common case costs
// one pass without conversion or allocation (stats mode checks every op's output).
bool all_finite(const Tensor& t) { return numerics_on(t).all_finite(view_of(t)); }

// Whether any element is not +-0, from the bits (a NaN counts as nonzero): a gradient
// that is not all zero usually answers at its first element.
bool any_nonzero(const Tensor& t) { return numerics_on(t).any_nonzero(view_of(t)); }

NonFiniteCounts counts_of(const Tensor& t) {
  NonFiniteCounts c;
  if (!t.defined() || !is_floating(t.dtype()) || all_finite(t)) return c;
  const kernels::ValueScan v = numerics_on(t).scan(view_of(t));
  c.nan = v.nan;
  c.pos_inf = v.pos_inf;
  c.neg_inf = v.neg_inf;
  return c;
}

bool floating(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

// The same values: the registry gives autograd a fresh handle of an op's output, so two
// handles of one output differ as handles and agree here.
bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.raw() == b.raw() && a.dtype() == b.dtype() && a.shape() == b.shape();
}
bool only_neg_inf(const NonFiniteCounts& c) { return c.neg_inf > 0 && c.nan == 0 && c.pos_inf == 0; }

// "attn" covers "attn" and "attn.q", not "attention".
bool under(const std::string& module, const std::string& prefix) {
  if (prefix.empty()) return true;
  if (module.size() < prefix.size() || module.compare(0, prefix.size(), prefix) != 0) return false;
  return module.size() == prefix.size() || module[prefix.size()] == '.';
}

// Ops a producer's input 0 is followed back through: they move values without changing them.
bool walkable(Op op) { return op == Op::cast || op == Op::reshape || op == Op::permute || op == Op::slice; }
// The walk keeps element i at index i: a producer's element can be matched to the lost one.
bool keeps_order(Op op) { return op == Op::cast || op == Op::reshape; }
// Ops that write a -Inf mask: masked_fill from its fill value; add, where and cast from a
// constant (a cast: the AMP policy's of an exported mask the model holds).
bool mask_writer(Op op) { return op == Op::masked_fill || op == Op::add || op == Op::where || op == Op::cast; }
// Ops that pass a mask's -Inf on as -Inf (moved, shifted, scaled, or log-probabilities).
bool mask_carrier(Op op) {
  switch (op) {
    case Op::cast: case Op::reshape: case Op::permute: case Op::slice: case Op::concat: case Op::where:
    case Op::masked_fill: case Op::add: case Op::sub: case Op::add_scalar: case Op::sub_scalar:
    case Op::mul_scalar: case Op::div_scalar: case Op::dropout: case Op::log_softmax:
      return true;
    default:
      return false;
  }
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

// The op stored fp16/bf16 and read a value at or beyond that dtype's lowest finite value
// (an input's, or its scalar or fill value): the -Inf it made is that value rounded, as
// -3.4e38 (torch.finfo(float32).min) is -Inf in fp16 and bf16; not an exact -Inf as
// log(0) makes.
bool at_dtype_extreme(const OpEvent& e, const NanEvent& ev) {
  if (e.output == nullptr || !is_low_precision(e.output->dtype())) return false;
  const double lowest = -info(e.output->dtype()).max();
  for (const TensorRange& in : ev.inputs)
    if (in.min <= lowest) return true;
  if (e.params != nullptr) {
    if (const auto* p = std::get_if<ScalarParams>(e.params)) return p->value <= lowest;
    if (const auto* p = std::get_if<FillParams>(e.params)) return p->value <= lowest;
  }
  return false;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Skips in a row with one cause that show the overflow does not follow the loss scale
// before they read persistent (the recorder's judge.py has the same rule).
constexpr std::size_t kPersistentSkips = 3;

// What a run of persistent skips shows, from scale_history[first] on.
std::string persistent_text(const std::vector<ScaleRecord>& h, std::size_t first) {
  std::size_t last = first;
  while (last + 1 < h.size() && h[last + 1].reading == SkipReading::persistent) ++last;
  return "the same op made it at every loss scale from " + reports::scale_text(h[first].event.scale_before) +
         " down to " +
         reports::scale_text(h[last].event.scale_before) + " (" + std::to_string(last - first + 1) +
         " updates in a row) while its inputs did not shrink with the scale: no loss scale absorbs this overflow; "
         "compute that op in fp32";
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
  return std::string(op_name(e.op)) + " in module '" + e.module + "', " + std::string(phase_name(e.phase)) +
         ", step " + std::to_string(e.step) + ": output " + counts_text(e.output);
}

bool same_key(const NanEvent& a, const NanEvent& b) {
  return a.op == b.op && a.phase == b.phase && a.module == b.module;
}

// Adds `ev` as the first occurrence of its (op, module, phase), in sequence order: an
// earlier occurrence found late (a mask that spread) replaces a later one.
void add_producer(std::vector<NanEvent>& list, const NanEvent& ev) {
  const auto same = std::find_if(list.begin(), list.end(), [&](const NanEvent& p) { return same_key(p, ev); });
  if (same != list.end()) {
    if (same->sequence <= ev.sequence) return;
    list.erase(same);
  }
  const auto at = std::upper_bound(list.begin(), list.end(), ev.sequence,
                                   [](std::uint64_t s, const NanEvent& p) { return s < p.sequence; });
  list.insert(at, ev);
}

bool has_key(const std::vector<NanEvent>& list, const NanEvent& ev) {
  return std::any_of(list.begin(), list.end(), [&](const NanEvent& p) { return same_key(p, ev); });
}

void add_reader(std::vector<Op>& readers, Op op) {
  if (std::find(readers.begin(), readers.end(), op) == readers.end()) readers.push_back(op);
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
    case FailureKind::gradient_underflow: return "gradient_underflow";
  }
  return "?";
}

std::string IntendedInf::reason() const {
  if (readers.empty()) return "-inf mask: no op read it";
  if (std::all_of(readers.begin(), readers.end(), [](Op o) { return o == Op::softmax; }))
    return "-inf mask: softmax maps it to 0";
  if (std::all_of(readers.begin(), readers.end(),
                  [](Op o) { return o == Op::softmax || o == Op::scaled_dot_product_attention; }))
    return "-inf mask: the attention's softmax maps it to 0";
  std::string names;
  for (std::size_t i = 0; i < readers.size(); ++i) names += (i ? ", " : "") + std::string(op_name(readers[i]));
  return "-inf mask: " + names + (readers.size() == 1 ? " maps" : " map") + " it to finite values";
}

std::int64_t NanReport::skipped() const {
  return std::count_if(scale_history.begin(), scale_history.end(),
                       [](const ScaleRecord& r) { return r.event.skipped; });
}
std::int64_t NanReport::absorbed() const {
  return std::count_if(scale_history.begin(), scale_history.end(),
                       [](const ScaleRecord& r) { return r.absorbed; });
}
std::int64_t NanReport::probing_skips() const {
  return std::count_if(scale_history.begin(), scale_history.end(),
                       [](const ScaleRecord& r) { return r.event.skipped && is_probing(r.reading); });
}

std::string_view skip_reading_name(SkipReading r) {
  switch (r) {
    case SkipReading::initial: return "initial";
    case SkipReading::lower: return "lower";
    case SkipReading::after_growth: return "after_growth";
    case SkipReading::counted: return "counted";
    case SkipReading::persistent: return "persistent";
    case SkipReading::forward: return "forward";
    case SkipReading::not_absorbed: return "not_absorbed";
  }
  return "counted";
}

bool is_probing(SkipReading r) {
  return r == SkipReading::initial || r == SkipReading::lower || r == SkipReading::after_growth;
}

std::string_view skip_cause_name(SkipCause::Kind k) {
  switch (k) {
    case SkipCause::Kind::op: return "op";
    case SkipCause::Kind::accumulation: return "accumulation";
    case SkipCause::Kind::parameter: return "parameter";
    case SkipCause::Kind::forward: return "forward";
    case SkipCause::Kind::unknown: return "unknown";
  }
  return "unknown";
}

std::string cause_text(const SkipCause& c) {
  const auto where = [](const std::string& module) {
    return module.empty() ? std::string("outside any module") : "in '" + module + "'";
  };
  // The dtype of the tensor of `role` the event read ("input 1", "grad_output").
  const auto dtype_of = [&](const std::string& role) -> std::string {
    if (!c.event) return {};
    for (const TensorRange& in : c.event->inputs)
      if (in.role == role) return std::string(info(in.dtype).long_name);
    return {};
  };
  std::string s;
  switch (c.kind) {
    case SkipCause::Kind::op: {
      const NanEvent& e = *c.event;
      s = std::string(op_name(e.op)) + (e.phase == Phase::backward ? "_grad " : " ") + where(e.module) + " (" +
          std::string(phase_name(e.phase)) + ") made " + counts_text(e.output) + " from finite values";
      // A gradient has its input's dtype; a forward or optimizer-phase output, its op's.
      std::string dtype;
      if (e.phase == Phase::backward && !e.bad_grads.empty()) {
        s += " in its gradient for input " + std::to_string(e.bad_grads.front());
        dtype = dtype_of("input " + std::to_string(e.bad_grads.front()));
      }
      if (!dtype.empty()) s += " (" + dtype + ")";
      break;
    }
    case SkipCause::Kind::accumulation: {
      const NanEvent& e = *c.event;
      const std::string dtype = dtype_of("grad_output");
      s = "the gradient reaching " + std::string(op_name(e.op)) + "_grad " + where(e.module) +
          " was already non-finite: autograd's sum of the gradients of a value read in several places (a "
          "residual, a reused activation) overflowed" + (dtype.empty() ? "" : " " + dtype);
      break;
    }
    case SkipCause::Kind::parameter:
      s = "no backward op held it: a parameter's gradient summed over its uses (a shared or tied weight) overflowed";
      break;
    case SkipCause::Kind::forward:
      s = "a forward value was non-finite already (the run's forward failure)";
      if (c.event)
        s += "; " + std::string(op_name(c.event->op)) + "_grad " + where(c.event->module) +
             " read it and passed the gradients on non-finite";
      break;
    case SkipCause::Kind::unknown:
      s = "no backward op held it";
      break;
  }
  if (c.params > 0) {
    s += "; " + std::to_string(c.params) + " parameter gradient" + (c.params == 1 ? "" : "s") + " held Inf/NaN";
    for (std::size_t i = 0; i < c.names.size(); ++i) s += (i == 0 ? ": " : ", ") + c.names[i];
    if (c.params > static_cast<std::int64_t>(c.names.size())) s += ", ...";
  }
  return s;
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
                     [&](const Tensor& a) { return same_view(a, t); });
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

NanWatch::ViewKey NanWatch::view_key(const Tensor& t) { return {t.raw(), t.dtype(), t.shape()}; }

void NanWatch::remember_made(const OpEvent& e) {
  if (e.output == nullptr || !e.output->defined()) return;
  if (made_.size() >= kMadeKept) made_.clear();
  // A view of values already made (a reshape to the same shape) did not make them.
  const ViewKey key = view_key(*e.output);
  if (made_.count(key) != 0) return;
  Made m;
  m.sequence = e.sequence;
  m.step = e.step;
  m.op = e.op;
  m.module = e.module;
  m.inserted_cast = e.inserted_cast;
  m.output = *e.output;
  // What a recompute needs (low-precision outputs) or a walk goes through; the rest is
  // only told apart from a constant.
  if (e.inputs != nullptr && e.params != nullptr && (is_low_precision(e.output->dtype()) || walkable(e.op))) {
    m.inputs = *e.inputs;
    m.params = *e.params;
  }
  made_.emplace(key, std::move(m));
}

std::vector<LostValue> NanWatch::lost_values(const OpEvent& e) const {
  std::vector<LostValue> lost;
  if (e.output == nullptr || e.inputs == nullptr || e.params == nullptr) return lost;
  const Tensor& out = *e.output;
  const std::vector<double> produced = out.to_f64();
  // Its own result: an overflow of its low-precision output that fp32 would have held.
  std::int64_t explained = 0;  // non-finite outputs its own overflow accounts for
  if (is_low_precision(out.dtype())) {
    const std::vector<double> exact = recompute_f64(e.op, *e.inputs, *e.params).to_f64();
    const RangeLoss own = range_loss(produced, exact, out.dtype());
    explained = own.overflow;
    if (own.overflow > 0)
      lost.push_back({"", e.op, e.module, Phase::forward, e.step, e.inserted_cast, RangeLossKind::overflow,
                      out.dtype(), own.overflow_value, own.overflow, info(out.dtype()).max()});
  }
  // Each input holding 0, followed back to the low-precision op that flushed it; not
  // asked when the op's own overflow made every non-finite value.
  const std::int64_t nonfinite = counts_of(out).total();
  for (std::size_t i = 0; i < e.inputs->size() && explained < nonfinite; ++i) {
    const Tensor& input = (*e.inputs)[i];
    if (!floating(input)) continue;
    if (numerics_on(input).scan(view_of(input)).zero == 0) continue;
    bool aligned = static_cast<std::size_t>(input.numel()) == produced.size();  // element j of the input made element j
    Tensor t = input;
    for (int depth = 0; depth < kMaxWalk; ++depth) {
      const auto it = made_.find(view_key(t));
      if (it == made_.end() || it->second.inputs.empty()) break;
      const Made& m = it->second;
      if (is_low_precision(m.output.dtype())) {
        const std::vector<double> low = m.output.to_f64();
        const std::vector<double> exact = recompute_f64(m.op, m.inputs, m.params).to_f64();
        const RangeLoss r = range_loss(low, exact, m.output.dtype());
        if (r.underflow > 0) {
          double value = r.underflow_value;
          if (aligned && low.size() == produced.size())
            for (std::size_t j = 0; j < low.size(); ++j)
              if (!std::isfinite(produced[j]) &&
                  range_loss_of(low[j], exact[j], m.output.dtype()) == RangeLossKind::underflow) {
                value = exact[j];
                break;
              }
          lost.push_back({"input " + std::to_string(i), m.op, m.module, Phase::forward, m.step, m.inserted_cast,
                          RangeLossKind::underflow, m.output.dtype(), value, r.underflow,
                          info(m.output.dtype()).min_subnormal()});
          break;
        }
      }
      if (!walkable(m.op)) break;
      aligned = aligned && keeps_order(m.op);
      t = m.inputs.front();
    }
  }
  return lost;
}

std::vector<std::size_t> NanWatch::mask_roots_of(const Tensor& t) const {
  for (const auto& [value, roots] : mask_values_)
    if (same_view(value, t)) return roots;
  return {};
}

void NanWatch::add_mask_value(const Tensor& t, std::vector<std::size_t> roots) {
  if (mask_values_.size() == kMaskValuesKept) mask_values_.erase(mask_values_.begin());
  mask_values_.emplace_back(t, std::move(roots));
}

void NanWatch::spread_masks(const std::vector<std::size_t>& roots, const OpEvent& reader, bool made_non_finite,
                            const std::string& how) {
  for (const std::size_t i : roots) {
    MaskRoot& root = roots_[i];
    if (root.spread) continue;
    root.spread = true;
    if (std::none_of(report_.mask_failures.begin(), report_.mask_failures.end(), [&](const MaskFailure& f) {
          return f.writer.op == root.event.op && f.writer.module == root.event.module;
        }))
      report_.mask_failures.push_back({root.event, reader.op, reader.module, made_non_finite});
    add_producer(report_.producers, root.event);
    forward_bad_since_update_ = true;
    if (!first_forward_bad_ || root.event.sequence < first_forward_bad_->sequence) {
      first_forward_bad_ = root.event;
      first_forward_note_ = how;
    }
  }
}

void NanWatch::fold_masks(std::vector<IntendedInf>& into, const std::vector<MaskRoot>& roots) const {
  for (const MaskRoot& root : roots) {
    if (root.spread) continue;
    auto it = std::find_if(into.begin(), into.end(), [&](const IntendedInf& x) {
      return x.op == root.event.op && x.module == root.event.module;
    });
    if (it == into.end()) {
      into.push_back({root.event.op, root.event.module, 0, 0, {}});
      it = into.end() - 1;
    }
    ++it->events;
    it->values += root.values;
    for (const Op op : root.readers) add_reader(it->readers, op);
  }
}

void NanWatch::note_backward_cast(const OpEvent& e) {
  if (step_grads_.flushed || e.grad_inputs == nullptr || e.grad_inputs->empty() || e.grad_output == nullptr) return;
  const Tensor& g = e.grad_inputs->front();
  if (!floating(g) || !is_low_precision(g.dtype()) || any_nonzero(g) || !floating(*e.grad_output)) return;
  // The cast is exact but for its rounding: every finite nonzero gradient it received
  // became 0 in g, so was flushed.
  // How many, and the one of largest magnitude (the first in element order on a tie).
  const kernels::ValueScan scan = numerics_on(*e.grad_output).scan(view_of(*e.grad_output));
  const double largest = scan.largest;
  const std::int64_t count = scan.finite_nonzero;
  if (count == 0) return;
  // Backward events do not say whether the policy inserted the cast; its forward does.
  bool inserted = e.inserted_cast;
  if (e.inputs != nullptr && !e.inputs->empty())
    for (const auto& [id, m] : made_)
      if (m.op == Op::cast && m.inserted_cast && !m.inputs.empty() && same_view(m.inputs.front(), e.inputs->front()))
        inserted = true;
  step_grads_.flushed = LostValue{"grad_output", Op::cast, e.module, Phase::backward, e.step, inserted,
                                  RangeLossKind::underflow, g.dtype(), largest, count,
                                  info(g.dtype()).min_subnormal()};
}

void NanWatch::on_op_end(const OpEvent& e) {
  ++report_.events_checked;
  const bool backward = e.phase == Phase::backward;
  const bool forward = e.phase == Phase::forward;
  if (forward && e.output != nullptr && floating(*e.output) && is_low_precision(e.output->dtype()) && !low_precision_) {
    low_precision_ = true;
    low_dtype_ = e.output->dtype();
  }
  if (backward && e.op == Op::cast) note_backward_cast(e);
  // The loss scaler's multiply (GradScaler::scale, in the optimizer phase) shows the loss.
  if (e.phase == Phase::optimizer && e.op == Op::mul_scalar && e.inputs != nullptr && !e.inputs->empty() &&
      floating(e.inputs->front()) && e.inputs->front().numel() == 1) {
    step_grads_.loss = e.inputs->front().item();
    if (std::isnan(initial_loss_)) initial_loss_ = step_grads_.loss;
  }
  if (forward) remember_made(e);

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
  if (!produced.any()) {
    // A finite result of a -Inf mask: softmax is the reader a mask is meant for; another
    // op that reads it (exp, max) may be right or not, which only the user can say.
    // scaled_dot_product_attention's mask (input 3) is read by its softmax.
    if (forward && !mask_values_.empty() && e.inputs != nullptr)
      for (std::size_t k = 0; k < e.inputs->size(); ++k) {
        const std::vector<std::size_t> roots = mask_roots_of((*e.inputs)[k]);
        if (roots.empty()) continue;
        if (e.op == Op::softmax || (e.op == Op::scaled_dot_product_attention && k == 3)) {
          for (const std::size_t root : roots) add_reader(roots_[root].readers, e.op);
        } else {
          spread_masks(roots, e, false, "; its -Inf reached " + std::string(op_name(e.op)) + " in module '" + e.module +
                                  "', which is not a softmax (name the mask with --allow-inf if that is intended)");
        }
      }
    return;  // the common case costs one scan per tensor
  }

  NanEvent ev;
  ev.sequence = e.sequence;
  ev.step = e.step;
  ev.phase = e.phase;
  ev.op = e.op;
  ev.module = e.module;
  ev.output = produced;
  ev.bad_grads = std::move(bad_grads);
  bool inputs_finite = true, only_allowed_bad = true, only_mask_bad = true, only_constant_masks = true;
  std::vector<std::size_t> roots_read;
  auto read = [&](const Tensor& t, std::string role) {
    if (!floating(t)) return;
    ev.inputs.push_back(range_of(t, std::move(role)));
    const NonFiniteCounts& bad = ev.inputs.back().non_finite;
    if (!bad.any()) return;
    inputs_finite = false;
    only_allowed_bad = only_allowed_bad && carries_allowed(t);
    if (!forward) return;
    const std::vector<std::size_t> roots = mask_roots_of(t);
    for (const std::size_t r : roots)
      if (std::find(roots_read.begin(), roots_read.end(), r) == roots_read.end()) roots_read.push_back(r);
    only_mask_bad = only_mask_bad && !roots.empty();
    // A constant: no op of this step made it (a mask tensor the model holds).
    only_constant_masks = only_constant_masks && roots.empty() && only_neg_inf(bad) && made_.count(view_key(t)) == 0;
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

  if (forward && options_.intended_masks && e.output != nullptr) {
    // A mask built outside autograd: finite data and constants (no input carries a
    // gradient) made -Inf, as an exported Hugging Face mask does when fp16/bf16 rounds its
    // torch.finfo(float32).min (a Mul, a Cast, a Where of constants). Whatever made it,
    // its readers decide below, as for masked_fill's.
    bool outside_autograd = inputs_finite && e.inputs != nullptr && at_dtype_extreme(e, ev);
    if (outside_autograd)
      for (const Tensor& in : *e.inputs) outside_autograd = outside_autograd && !in.requires_grad();
    const bool writes_mask =
        only_neg_inf(produced) &&
        ((mask_writer(e.op) && (e.op == Op::masked_fill ? inputs_finite : !inputs_finite && only_constant_masks)) ||
         outside_autograd);
    if (writes_mask) {
      if (roots_.size() == kMaskRootsKept) {
        fold_masks(report_.intended, {roots_.front()});
        roots_.erase(roots_.begin());
        for (auto& [value, roots] : mask_values_) {
          std::erase(roots, std::size_t{0});
          for (std::size_t& r : roots) --r;
        }
      }
      roots_.push_back({ev, produced.neg_inf, {}, false});
      add_mask_value(*e.output, {roots_.size() - 1});
      return;
    }
    if (!inputs_finite && only_mask_bad && only_neg_inf(produced) && mask_carrier(e.op)) {
      add_mask_value(*e.output, roots_read);
      return;
    }
    if (!roots_read.empty())
      spread_masks(roots_read, e, true, "; its -Inf reached " + std::string(op_name(e.op)) + " in module '" + e.module +
                                   "', which made " + counts_text(produced) + " of it");
  }

  if (!forward) {
    // Judged by the next scaler update: absorbed probing, or a real failure. The
    // optimizer phase holds the scaler's own multiply, whose overflow is the probing.
    if (pending_.attribution.size() < options_.max_listed) pending_.attribution.push_back(ev);
    if (inputs_finite) add_producer(pending_.producers, ev);
    else add_propagator(pending_.propagators, ev);
    return;
  }
  forward_bad_since_update_ = true;
  if (!first_forward_bad_ || ev.sequence < first_forward_bad_->sequence) {
    first_forward_bad_ = ev;
    first_forward_note_.clear();
  }
  if (!inputs_finite) {
    add_propagator(report_.propagators, ev);
    return;
  }
  if (has_key(report_.producers, ev)) return;
  ev.lost = lost_values(e);  // a recompute or two, once per new producer
  if (first_forward_bad_->sequence == ev.sequence) first_forward_bad_ = ev;
  add_producer(report_.producers, ev);
}

void NanWatch::on_param_update(const ParamUpdate& u) {
  if (u.grad == nullptr || !floating(*u.grad)) return;
  ++step_grads_.updates;
  if (!step_grads_.nonzero && any_nonzero(*u.grad)) step_grads_.nonzero = true;
}

void NanWatch::end_gradient_step() {
  const StepGradients s = std::exchange(step_grads_, StepGradients{});
  if (s.updates == 0) return;  // skipped, or no optimizer: neither breaks a run nor adds to it
  ++stepped_;
  if (s.nonzero) {
    zero_run_ = ZeroGradients{};
    return;
  }
  if (zero_run_.steps++ == 0) {
    zero_run_.first_step = step_;
    zero_run_.evidence = s.flushed;
    zero_run_.loss = s.loss;
  }
  if (zero_run_.steps > zero_longest_.steps) zero_longest_ = zero_run_;
}

void NanWatch::on_step_begin(std::int64_t step) {
  fold_masks(report_.intended, roots_);
  roots_.clear();
  mask_values_.clear();
  made_.clear();
  step_grads_ = StepGradients{};
  step_open_ = true;
  step_ = step;
}

void NanWatch::on_step_end(std::int64_t) {
  end_gradient_step();
  step_open_ = false;
  // The step's forward values are not read again: let their storage go.
  fold_masks(report_.intended, roots_);
  roots_.clear();
  mask_values_.clear();
  made_.clear();
}

void NanWatch::merge_real(NanReport& r, const Pending& p) const {
  for (const NanEvent& ev : p.producers) add_producer(r.producers, ev);
  for (const auto& entry : p.propagators.by_op) {
    const auto& [op, n] = entry;
    auto it = std::find_if(r.propagators.by_op.begin(), r.propagators.by_op.end(),
                           [&](const auto& kv) { return kv.first == entry.first; });
    if (it == r.propagators.by_op.end()) r.propagators.by_op.emplace_back(op, n);
    else it->second += n;
  }
  r.propagators.events += p.propagators.events;
  for (const NanEvent& ev : p.propagators.first)
    if (r.propagators.first.size() < options_.max_listed) r.propagators.first.push_back(ev);
}

void NanWatch::on_scaler_update(const amp::ScalerEvent& e) {
  if (!step_open_) {  // a loop without step marks: the update ends the step
    step_ = e.step;
    end_gradient_step();
  }
  ScaleRecord record;
  record.event = e;
  record.absorbed = e.found_inf && e.skipped && reacted(e);
  record.forward_non_finite = std::exchange(forward_bad_since_update_, false);
  const bool had_bad_grads = !pending_.attribution.empty();
  if (e.found_inf || had_bad_grads) {
    if (!pending_.producers.empty()) record.backward_producer = pending_.producers.front();
    record.attribution = pending_.attribution;
    record.propagators = pending_.propagators.events;
    SkipCause& c = record.cause;
    c.params = e.nonfinite_params;
    c.names = e.nonfinite_names;
    // The first backward event that held non-finite gradients received them in its
    // grad_output (autograd summed them outside any op), or read a non-finite value of
    // its forward (the loss, an activation).
    const auto grad_output_bad = [](const NanEvent& ev) {
      return std::any_of(ev.inputs.begin(), ev.inputs.end(),
                         [](const TensorRange& t) { return t.role == "grad_output" && t.non_finite.any(); });
    };
    if (record.backward_producer) {
      c.kind = SkipCause::Kind::op;
      c.event = record.backward_producer;
    } else if (record.forward_non_finite ||
               (!record.attribution.empty() && !grad_output_bad(record.attribution.front()))) {
      c.kind = SkipCause::Kind::forward;
      if (!record.attribution.empty()) c.event = record.attribution.front();
    } else if (!record.attribution.empty()) {
      c.kind = SkipCause::Kind::accumulation;
      c.event = record.attribution.front();
    } else {
      c.kind = e.nonfinite_params > 0 ? SkipCause::Kind::parameter : SkipCause::Kind::unknown;
    }
  }
  // The reading of a skip (nan_source.h, SkipReading), from the scales before it.
  if (e.skipped) {
    if (!record.absorbed) record.reading = SkipReading::not_absorbed;
    else if (record.forward_non_finite) record.reading = SkipReading::forward;
    else if (!stepped_any_) record.reading = SkipReading::initial;
    else if (e.scale_after < lowest_scale_) record.reading = SkipReading::lower;
    else if (e.scale_before > last_stepped_scale_) record.reading = SkipReading::after_growth;
    else record.reading = SkipReading::counted;
  } else {
    stepped_any_ = true;
    last_stepped_scale_ = e.scale_before;
  }
  lowest_scale_ = std::min({lowest_scale_, e.scale_before, e.scale_after});
  if (!record.absorbed && (e.found_inf || had_bad_grads)) {
    merge_real(report_, pending_);
    const std::string where = cause_text(record.cause);
    report_.failures.push_back(
        {FailureKind::gradient_not_absorbed, e.step,
         std::string(e.skipped ? "step skipped but the scale did not react"
                               : (e.found_inf ? "step not skipped" : "no Inf/NaN found by the scaler")) +
             " (scale " + number(e.scale_before) + " -> " + number(e.scale_after) + "); " + where});
  }
  // Once per collapse: the updates that stay below the floor add nothing new.
  const bool below = e.scale_after < options_.scale_floor;
  if (below && !below_floor_)
    report_.failures.push_back(
        {FailureKind::scale_below_floor, e.step,
         "scale " + number(e.scale_after) + " below the floor " + number(options_.scale_floor) +
             // The update that took it there says what kept overflowing.
             (e.found_inf ? "; the update skipped for: " + cause_text(record.cause) : std::string())});
  below_floor_ = below;
  report_.scale_history.push_back(std::move(record));
  note_streak();
  pending_ = Pending{};
}

namespace {

// Whether an input of the same op's event moved with the loss scale between two skips:
// its largest magnitude changed by a ratio nearer the scales' ratio than to 1. A pair
// that cannot show it (the scale did not drop, no comparable input) counts as following.
bool follows_scale(const ScaleRecord& prev, const ScaleRecord& cur) {
  const double q = prev.event.scale_before > 0 ? cur.event.scale_before / prev.event.scale_before : 1.0;
  if (!(q > 0 && q < 1)) return true;
  bool compared = false;
  for (const TensorRange& in : cur.cause.event->inputs)
    for (const TensorRange& before : prev.cause.event->inputs) {
      if (before.role != in.role) continue;
      const double a = in.absmax, b = before.absmax;
      if (!(a > 0 && b > 0 && std::isfinite(a) && std::isfinite(b))) continue;
      compared = true;
      const double r = std::log2(a / b);
      if (std::abs(r - std::log2(q)) < std::abs(r)) return true;
    }
  return !compared;
}

bool same_cause(const NanEvent& a, const NanEvent& b) {
  return a.op == b.op && a.phase == b.phase && a.module == b.module;
}

}  // namespace

// The persistent reading (nan_source.h, SkipReading): an op that makes Inf/NaN from finite
// values whatever the loss scale has the scaler back off forever, each skip looking like
// probing (the scale at a new low) while the run never trains.
void NanWatch::note_streak() {
  ScaleRecord& rec = report_.scale_history.back();
  const bool probing_skip = rec.event.skipped && rec.absorbed && is_probing(rec.reading);
  if (!probing_skip || rec.cause.kind != SkipCause::Kind::op || !rec.cause.event) {
    streak_.clear();
    streak_independent_ = true;
    return;
  }
  if (!streak_.empty() && same_cause(*report_.scale_history[streak_.front()].cause.event, *rec.cause.event)) {
    streak_independent_ = streak_independent_ && !follows_scale(report_.scale_history[streak_.back()], rec);
  } else {
    streak_.clear();
    streak_independent_ = true;
  }
  streak_.push_back(report_.scale_history.size() - 1);
  if (streak_.size() >= kPersistentSkips && streak_independent_)
    for (std::size_t i : streak_) report_.scale_history[i].reading = SkipReading::persistent;
}

NanReport NanWatch::report() const {
  NanReport r = report_;
  fold_masks(r.intended, roots_);
  if (!pending_.attribution.empty()) {
    merge_real(r, pending_);
    r.failures.push_back({FailureKind::gradient_not_absorbed, pending_.attribution.front().step,
                          "non-finite gradients no scaler update has judged; first in " +
                              event_text(pending_.attribution.front())});
  }
  if (first_forward_bad_) {
    const NanEvent& f = *first_forward_bad_;
    r.failures.push_back({FailureKind::forward_non_finite, f.step,
                          "first non-finite forward value: " + event_text(f) + first_forward_note_});
  }

  // Probing from too high an initial scale: the leading run of absorbed skips, then a step.
  const std::vector<ScaleRecord>& h = r.scale_history;
  std::size_t lead = 0;
  // Skips after a non-finite forward value are that value's doing, not the scale's.
  while (lead < h.size() && h[lead].event.skipped && h[lead].absorbed && !h[lead].forward_non_finite) ++lead;
  if (lead > 0 && lead < h.size() && !h[lead].event.skipped && h[lead - 1].event.scale_after < h[0].event.scale_before) {
    double lowest = h[lead - 1].event.scale_after;
    for (std::size_t i = lead; i < h.size(); ++i) lowest = std::min(lowest, h[i].event.scale_after);
    r.probing = ScalerProbing{h[0].event.step,         h[lead - 1].event.step,    static_cast<std::int64_t>(lead),
                              h[0].event.scale_before, h[lead - 1].event.scale_after, lowest, false};
    // Gradients so large that only a scale below the floor holds them, found by probing
    // and trained with after: the scale that works, not a collapse.
    const std::int64_t last = r.probing->last_update;
    std::erase_if(r.failures, [&](const Failure& f) { return f.kind == FailureKind::scale_below_floor && f.step <= last; });
  }
  // The skipped fraction counts the skips that are not probing (SkipReading): a scale still
  // looking for its level is the scaler at work, however many steps it took.
  if (r.updates() > 0) {
    const std::int64_t counted = r.skipped() - r.probing_skips();
    const double fraction = static_cast<double>(counted) / static_cast<double>(r.updates());
    if (fraction > options_.max_skipped_fraction) {
      std::string detail = std::to_string(counted) + " of " + std::to_string(r.updates()) +
                           " updates skipped outside the scaler's probing (" + number(fraction) + " > " +
                           number(options_.max_skipped_fraction) + ")";
      for (std::size_t i = 0; i < h.size(); ++i)
        if (h[i].event.skipped && !is_probing(h[i].reading)) {
          detail += "; the first at update " + std::to_string(h[i].event.step) + ": " + cause_text(h[i].cause);
          if (h[i].reading == SkipReading::persistent) detail += "; " + persistent_text(h, i);
          break;
        }
      r.failures.push_back({FailureKind::skipped_fraction, r.updates(), detail});
    } else if (r.probing &&
               static_cast<double>(r.skipped()) / static_cast<double>(r.updates()) > options_.max_skipped_fraction) {
      r.probing->excused = true;  // counting every skip would have failed the run: name the cure
    }
  }

  // Gradient underflow: every parameter gradient exactly 0, step after step, while ops
  // computed in low precision.
  // A loss that came down to a tenth of where it started has converged: its gradients
  // are small in fp32 too, and there is nothing left to learn.
  const bool converged = zero_longest_.loss < 0.1 * initial_loss_;  // false when either is NaN
  if (options_.zero_gradient_steps > 0 && low_precision_ && zero_longest_.steps > 0 && !converged &&
      zero_longest_.steps >= std::min(options_.zero_gradient_steps, stepped_)) {
    ZeroGradients z = zero_longest_;
    z.stepped = stepped_;
    z.dtype = low_dtype_;
    z.initial_loss = initial_loss_;
    if (z.evidence && z.evidence->value != 0) {
      // The evidence is a gradient of the scaled loss: what would have lifted it is the
      // scale in effect at its step (1 without a scaler) times the factor it lacked.
      double scale = 1;
      for (const ScaleRecord& rec : h)
        if (rec.event.step >= z.evidence->step) {
          scale = rec.event.scale_before;
          break;
        }
      z.scale_needed = std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(
                                           scale * info(z.evidence->dtype).min_normal() / std::fabs(z.evidence->value)))));
    }
    std::string detail = "every parameter gradient was 0 in " + std::string(info(z.dtype).long_name) + " for " +
                         std::to_string(z.steps) + " optimizer step(s) in a row from step " +
                         std::to_string(z.first_step);
    if (z.evidence) detail += "; " + reports::flushed_gradient_text(to_report(*z.evidence));
    r.failures.push_back({FailureKind::gradient_underflow, z.first_step, detail});
    r.zero_gradients = std::move(z);
  }

  std::stable_sort(r.failures.begin(), r.failures.end(), [](const Failure& a, const Failure& b) { return a.step < b.step; });
  if (!r.producers.empty()) r.producer = r.producers.front();
  return r;
}

std::string lost_text(const NanEvent& producer, const LostValue& lost) {
  return reports::lost_text(to_report(producer), to_report(lost));
}

std::string describe(const NanReport& r) {
  std::ostringstream s;
  if (r.producer) {
    for (std::size_t k = 0; k < r.producers.size(); ++k) {
      const NanEvent& p = r.producers[k];
      s << (k == 0 ? "producer: " : "also produced by: ") << event_text(p) << "\n";
      for (const TensorRange& in : p.inputs)
        s << "  " << in.role << " " << name(in.dtype) << " " << to_string(in.shape) << ": min " << in.min
          << ", max " << in.max << ", absmax " << in.absmax << "\n";
      for (const LostValue& l : p.lost) s << "  " << lost_text(p, l) << "\n";
    }
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
  for (const IntendedInf& i : r.intended)
    s << "intended: " << op_name(i.op) << " in module '" << i.module << "': " << i.values << " -Inf in " << i.events
      << " calls; " << i.reason() << "\n";
  s << "loss scale: " << r.updates() << " updates, " << r.skipped() << " skipped, " << r.absorbed()
    << " absorbed as probing";
  if (!r.scale_history.empty())
    s << "; scale " << r.scale_history.front().event.scale_before << " -> " << r.scale_history.back().event.scale_after;
  s << "\n";
  if (r.probing)
    s << "probing: updates " << r.probing->first_update << "-" << r.probing->last_update << " skipped while the scale came down from "
      << r.probing->scale_from << " to " << r.probing->scale_to << (r.probing->excused ? " (left out of the skipped fraction)" : "")
      << "\n";
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
