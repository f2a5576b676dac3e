#include "inspector/shadow.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/amp/policy.h"
#include "engine/dtype/convert.h"  // round_to
#include "kernels/numerics_kernels.h"  // fold_lanes: the statistics' order of sums

namespace ampcheck::inspector {
namespace {

// Set while a recompute runs: should a forward ever call an op through the registry,
// its events must not be measured in turn.
thread_local bool t_recomputing = false;

class RecomputeScope {
 public:
  RecomputeScope() : previous_(t_recomputing) { t_recomputing = true; }
  ~RecomputeScope() { t_recomputing = previous_; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

// ||a - b|| / ||b|| with the 0/0 convention of shadow.h.
double relative(double diff_squares, double ref_squares) {
  if (ref_squares == 0) return diff_squares == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff_squares / ref_squares);
}

}  // namespace

std::string_view range_loss_name(RangeLossKind k) {
  switch (k) {
    case RangeLossKind::underflow: return "underflow";
    case RangeLossKind::overflow: return "overflow";
  }
  return "?";
}

std::optional<RangeLossKind> range_loss_of(double y_low, double y64, DType dtype) {
  if (!std::isfinite(y64) || y64 == 0) return std::nullopt;
  if (y_low == 0) {
    if (round_to(y64, DType::f32) != 0 && round_to(y64, dtype) == 0) return RangeLossKind::underflow;
  } else if (std::isinf(y_low)) {
    if (std::isfinite(round_to(y64, DType::f32)) && std::isinf(round_to(y64, dtype))) return RangeLossKind::overflow;
  }
  return std::nullopt;
}

RangeLoss range_loss(const double* low, const double* exact, std::size_t n, DType dtype) {
  RangeLoss r;
  for (std::size_t i = 0; i < n; ++i) {
    if (low[i] != 0 && std::isfinite(low[i])) continue;  // the common case: nothing lost
    const auto kind = range_loss_of(low[i], exact[i], dtype);
    if (!kind) continue;
    const auto at = static_cast<std::int64_t>(i);
    if (*kind == RangeLossKind::underflow) {
      if (r.underflow++ == 0) r.first_underflow = at, r.underflow_value = exact[i];
    } else if (r.overflow++ == 0) {
      r.first_overflow = at, r.overflow_value = exact[i];
    }
  }
  return r;
}

RangeLoss range_loss(const std::vector<double>& low, const std::vector<double>& exact, DType dtype) {
  return range_loss(low.data(), exact.data(), std::min(low.size(), exact.size()), dtype);
}

Tensor recompute_f64(Op op, const std::vector<Tensor>& inputs, const Params& params) {
  if (op == Op::cast) return inputs.at(0).to(DType::f64);  // a cast's exact result is its input
  std::vector<Tensor> upcast;
  upcast.reserve(inputs.size());
  for (const Tensor& t : inputs)
    upcast.push_back(t.defined() && is_floating(t.dtype()) ? t.to(DType::f64) : t);
  RecomputeScope recomputing;
  NoGradGuard no_grad;
  amp::Autocast no_autocast(nullptr);
  Saved saved;
  return op_info(op).forward(ForwardArgs{upcast, params, saved});
}

ShadowSample measure_shadow(Op op, const std::vector<Tensor>& inputs, const Params& params,
                            const Tensor& output) {
  // Host f64 tensors read in place: the recompute, the output widened, and the recompute
  // rounded to the output's dtype and widened back (each one vectorised conversion).
  const Tensor y64 = recompute_f64(op, inputs, params).to(Device::cpu);
  const Tensor low_t = output.to(Device::cpu).to(DType::f64);
  if (low_t.numel() != y64.numel())
    throw std::logic_error("shadow: " + std::string(op_name(op)) + " recomputed " +
                           std::to_string(y64.numel()) + " elements for an output of " +
                           std::to_string(low_t.numel()));
  const Tensor rounded_t = y64.to(output.dtype()).to(DType::f64);
  const double* low = low_t.data<double>();
  const double* ref = y64.data<double>();
  const double* rounded = rounded_t.data<double>();
  const auto n = static_cast<std::size_t>(y64.numel());

  ShadowSample s;
  s.range = range_loss(low, ref, n, output.dtype());
  constexpr auto kLanes = static_cast<std::size_t>(kernels::kSumLanes);
  double diff[kLanes] = {}, rounding[kLanes] = {}, norm[kLanes] = {};
  bool finite = true;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(low[i]) || !std::isfinite(ref[i])) finite = false;
    const double d = low[i] - ref[i], r = rounded[i] - ref[i];
    diff[i % kLanes] += d * d;
    rounding[i % kLanes] += r * r;
    norm[i % kLanes] += ref[i] * ref[i];
    s.max_abs_error = std::max(s.max_abs_error, std::abs(d));
  }
  if (!finite) return ShadowSample{false, 0, 0, 0, s.range};
  s.relative_error = relative(kernels::fold_lanes(diff), kernels::fold_lanes(norm));
  s.rounding_floor = relative(kernels::fold_lanes(rounding), kernels::fold_lanes(norm));
  return s;
}

double times_floor(double relative_error, double rounding_floor) {
  if (rounding_floor == 0)
    return relative_error == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return relative_error / rounding_floor;
}

std::string ShadowRecord::key() const {
  return (module.empty() ? std::string() : module + ".") + std::string(op_name(op)) + "#" +
         std::to_string(occurrence);
}

ShadowError::ShadowError(ShadowOptions options) : options_(options) {
  if (options_.every_n < 1)
    throw std::invalid_argument("shadow: every_n must be at least 1, got " +
                                std::to_string(options_.every_n));
  sampler_ = Sampler(options_.every_n);
}

void ShadowError::on_step_begin(std::int64_t step) {
  occurrences_.clear();
  step_ = step;
  seen_step_ = true;
}

void ShadowError::on_op_end(const OpEvent& e) {
  if (t_recomputing || e.phase != Phase::forward || e.output == nullptr || e.inputs == nullptr ||
      e.params == nullptr)
    return;
  if (!seen_step_ || e.step != step_) {
    occurrences_.clear();
    step_ = e.step;
    seen_step_ = true;
  }
  if (!sampler_.take(e.step)) return;
  // Every forward call of the pair counts, measured or not, so an occurrence index names
  // the same call on every step whatever dtype it ran in.
  const std::int64_t occurrence = occurrences_[{e.module, e.op}]++;
  const Tensor& out = *e.output;
  if (!out.defined() || !is_low_precision(out.dtype()) || out.numel() == 0) return;
  if (e.op == Op::cast) {
    ++casts_skipped_;
    return;
  }

  ShadowRecord& r = records_[Key{e.module, e.op, occurrence}];
  if (r.count == 0 && r.nonfinite == 0) {
    r.module = e.module;
    r.op = e.op;
    r.occurrence = occurrence;
  }
  r.dtype = out.dtype();
  r.shape = out.shape();
  const ShadowSample s = measure_shadow(e.op, *e.inputs, *e.params, out);
  if (s.range.any()) {
    if (r.underflow + r.overflow == 0) {
      r.first_loss_step = e.step;
      r.first_loss_kind = s.range.underflow > 0 ? RangeLossKind::underflow : RangeLossKind::overflow;
      r.first_loss_value = s.range.underflow > 0 ? s.range.underflow_value : s.range.overflow_value;
    }
    r.underflow += s.range.underflow;
    r.overflow += s.range.overflow;
  }
  if (!s.finite) {
    ++r.nonfinite;
    ++nonfinite_;
    return;
  }
  ++measured_;
  const double n = static_cast<double>(++r.count);
  // Running means: exact enough, and no sums to overflow on long runs.
  r.mean_error += (s.relative_error - r.mean_error) / n;
  r.mean_floor += (s.rounding_floor - r.mean_floor) / n;
  if (r.count == 1 || s.relative_error > r.worst_error) {
    r.worst_error = s.relative_error;
    r.floor_at_worst = s.rounding_floor;
    r.worst_step = e.step;
  }
  r.max_abs_error = std::max(r.max_abs_error, s.max_abs_error);
}

std::vector<ShadowRecord> ShadowError::worst(std::size_t n) const {
  std::vector<ShadowRecord> out;
  for (const auto& [key, r] : records_)
    if (r.count > 0) out.push_back(r);
  // records_ iterates in key order, so a stable sort leaves ties in that order.
  std::stable_sort(out.begin(), out.end(), [](const ShadowRecord& a, const ShadowRecord& b) {
    return a.worst_error > b.worst_error;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

std::vector<ShadowRecord> ShadowError::records() const {
  std::vector<ShadowRecord> out;
  out.reserve(records_.size());
  for (const auto& [key, r] : records_) out.push_back(r);
  return out;
}

void ShadowError::clear() {
  records_.clear();
  occurrences_.clear();
  seen_step_ = false;
  step_ = 0;
  sampler_ = Sampler(options_.every_n);
  measured_ = nonfinite_ = casts_skipped_ = 0;
}

}  // namespace ampcheck::inspector
