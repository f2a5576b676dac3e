#include "inspector/numerics.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>  // exchange

#include "engine/dispatch.h"           // dispatch, kernels_on, view_of
#include "kernels/memory_kernels.h"    // the slots' memory (kernels::SummarySlots)
#include "kernels/numerics_kernels.h"  // the pass over the elements, on the tensor's device

namespace ampcheck::inspector {
namespace {

using kernels::NumericsKernels;
using kernels::NumericsSummary;
static_assert(ExponentHistogram::kMinExponent == NumericsSummary::kMinExponent &&
                  ExponentHistogram::kMaxExponent == NumericsSummary::kMaxExponent,
              "the histogram's bins are the kernels' bins");

LowPrecisionCounts counts_of(const kernels::NarrowCounts& c) {
  return {c.overflow, c.rounds_to_max, c.underflow, c.subnormal};
}

// The derived statistics, from the sums and extremes.
void finish(TensorStats& s) {
  const std::int64_t finite = s.finite();
  s.mean = finite > 0 ? s.sum / static_cast<double>(finite) : TensorStats::kUndefined;
  s.rms = finite > 0 ? std::sqrt(s.sum_squares / static_cast<double>(finite))
                     : TensorStats::kUndefined;
  if (s.nonzero_finite() > 0) {
    const double ratio = s.absmax / s.min_nonzero_abs;
    // f64 data can span more than the double range (1e308 / 5e-324).
    s.dynamic_range_log2 = std::isfinite(ratio) ? std::log2(ratio)
                                                : std::log2(s.absmax) - std::log2(s.min_nonzero_abs);
  } else {
    s.dynamic_range_log2 = TensorStats::kUndefined;
  }
}

void add_counts(LowPrecisionCounts& into, const LowPrecisionCounts& more) {
  into.overflow += more.overflow;
  into.rounds_to_max += more.rounds_to_max;
  into.underflow += more.underflow;
  into.subnormal += more.subnormal;
}

void require_float(const Tensor& t, const char* what, const char* where) {
  if (!t.defined())
    throw std::invalid_argument(std::string(where) + ": " + what + " is an undefined tensor");
  if (!is_floating(t.dtype()))
    throw std::invalid_argument(std::string(where) + ": " + what + " is an " +
                                std::string(name(t.dtype())) +
                                " tensor; numerics statistics are for float tensors");
}

double fraction(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// A tensor's statistics from its summary.
TensorStats stats_of(const NumericsSummary& k) {
  TensorStats s;
  s.count = k.count;
  s.tensors = 1;
  ExponentHistogram& h = s.histogram;
  h.zero = k.bins[NumericsSummary::kZeroBin];
  h.nan = k.nan;
  h.pos_inf = k.pos_inf;
  h.neg_inf = k.neg_inf;
  h.below = k.bins[NumericsSummary::kBelowBin];
  h.above = k.bins[NumericsSummary::kAboveBin];
  for (std::size_t e = 0; e < h.by_exponent.size(); ++e) h.by_exponent[e] = k.bins[e + 1];
  s.f16 = counts_of(k.f16);
  s.bf16 = counts_of(k.bf16);
  s.sum = k.sum;
  s.sum_squares = k.sum_squares;
  if (s.finite() > 0) {
    s.min = k.min;
    s.max = k.max;
    s.absmax = k.absmax;
  }
  if (s.nonzero_finite() > 0) s.min_nonzero_abs = k.min_nonzero_abs;
  finish(s);
  return s;
}

}  // namespace

std::int64_t ExponentHistogram::total() const {
  std::int64_t n = zero + nan + pos_inf + neg_inf + below + above;
  for (const std::int64_t c : by_exponent) n += c;
  return n;
}

TensorStats compute_stats(const Tensor& t) {
  require_float(t, "the tensor", "compute_stats");
  return stats_of(kernels_on<NumericsKernels>(t.device()).stats(view_of(t)));
}

PendingStats::PendingStats() = default;
PendingStats::~PendingStats() = default;
PendingStats::PendingStats(PendingStats&&) noexcept = default;
PendingStats& PendingStats::operator=(PendingStats&&) noexcept = default;

void PendingStats::queue(const std::string& key, const Tensor& t) {
  require_float(t, "the tensor", "PendingStats::queue");
  const bool cuda = t.device() == Device::cuda;
  std::unique_ptr<kernels::SummarySlots>& slots = cuda ? cuda_ : cpu_;
  if (!slots)
    slots = std::make_unique<kernels::SummarySlots>(kernels_on<NumericsKernels>(t.device()),
                                                    kernels_on<kernels::MemoryKernels>(t.device()));
  queued_.push_back({key, cuda, slots->add(view_of(t))});
}

void PendingStats::merge_into(std::map<std::string, TensorStats>& stats) {
  if (queued_.empty()) return;
  // Taken out first: should a read throw, no later call indexes slots already read.
  const std::vector<Queued> queued = std::exchange(queued_, {});
  const std::vector<NumericsSummary> cpu = cpu_ ? cpu_->read() : std::vector<NumericsSummary>();
  const std::vector<NumericsSummary> cuda = cuda_ ? cuda_->read() : std::vector<NumericsSummary>();
  for (const Queued& q : queued) merge(stats[q.key], stats_of((q.cuda ? cuda : cpu)[q.index]));
}

void merge(TensorStats& into, const TensorStats& more) {
  const bool had_finite = into.finite() > 0;
  const bool had_nonzero = into.nonzero_finite() > 0;
  into.count += more.count;
  into.tensors += more.tensors;
  ExponentHistogram& h = into.histogram;
  const ExponentHistogram& g = more.histogram;
  h.zero += g.zero;
  h.nan += g.nan;
  h.pos_inf += g.pos_inf;
  h.neg_inf += g.neg_inf;
  h.below += g.below;
  h.above += g.above;
  for (std::size_t i = 0; i < h.by_exponent.size(); ++i) h.by_exponent[i] += g.by_exponent[i];
  add_counts(into.f16, more.f16);
  add_counts(into.bf16, more.bf16);
  into.sum += more.sum;
  into.sum_squares += more.sum_squares;
  // Undefined (NaN) extremes mean "no element yet": decided by the counts, not by NaN.
  if (more.finite() > 0) {
    into.min = had_finite ? kernels::total_min(into.min, more.min) : more.min;
    into.max = had_finite ? kernels::total_max(into.max, more.max) : more.max;
    into.absmax = had_finite ? std::max(into.absmax, more.absmax) : more.absmax;
  }
  if (more.nonzero_finite() > 0)
    into.min_nonzero_abs =
        had_nonzero ? std::min(into.min_nonzero_abs, more.min_nonzero_abs) : more.min_nonzero_abs;
  finish(into);
}

Readiness readiness(const TensorStats& s) {
  Readiness r;
  r.overflow_fraction_f16 = fraction(s.f16.overflow, s.count);
  r.underflow_fraction_f16 = fraction(s.f16.underflow, s.count);
  r.subnormal_fraction_f16 = fraction(s.f16.subnormal, s.count);
  r.overflow_fraction_bf16 = fraction(s.bf16.overflow, s.count);
  r.underflow_fraction_bf16 = fraction(s.bf16.underflow, s.count);
  r.subnormal_fraction_bf16 = fraction(s.bf16.subnormal, s.count);
  return r;
}

double swamped_fraction(const Tensor& weight_before, const Tensor& update, DType param_dtype) {
  require_float(weight_before, "weight_before", "swamped_fraction");
  require_float(update, "update", "swamped_fraction");
  if (!is_floating(param_dtype))
    throw std::invalid_argument("swamped_fraction: param_dtype " + std::string(name(param_dtype)) +
                                " is not a float dtype");
  const std::int64_t n = weight_before.numel();
  if (update.numel() != n)
    throw std::invalid_argument("swamped_fraction: weight " + to_string(weight_before.shape()) +
                                " and update " + to_string(update.shape()) +
                                " differ in element count");
  const kernels::SwampCounts c = dispatch<NumericsKernels>("swamped_fraction", {&weight_before, &update})
                                     .swamped(view_of(weight_before), view_of(update), param_dtype);
  return fraction(c.swamped, c.nonzero);
}

Sampler::Sampler(std::int64_t every_n, std::int64_t first_k) : every_n_(every_n), first_k_(first_k) {
  if (every_n < 1)
    throw std::invalid_argument("numerics sampler: every_n = " + std::to_string(every_n) +
                                " must be at least 1 (1 observes every step)");
}

bool Sampler::take(std::int64_t step) const {
  if (step < 0) return false;
  if (window_ && step >= window_->first && step <= window_->second) return true;
  if (first_k_ >= 0 && step >= first_k_) return false;
  return step % every_n_ == 0;
}

bool NumericsTable::add(const std::string& key, const Tensor& t, std::int64_t step) {
  if (!sampler.take(step)) return false;
  flush();
  merge(stats[key], compute_stats(t));
  return true;
}

bool NumericsTable::queue(const std::string& key, const Tensor& t, std::int64_t step) {
  if (!sampler.take(step)) return false;
  pending.queue(key, t);
  return true;
}

}  // namespace ampcheck::inspector
