#include "inspector/numerics.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/dtype/convert.h"  // convert: the engine's own rounding, vectorised
#include "engine/parallel.h"       // parallel_for: chunks fixed by n and grain only

namespace ampcheck::inspector {
namespace {

// Elements per parallel chunk (one partial TensorStats each, ~2.5 KB) and per block
// converted at once on the stack inside a chunk.
constexpr std::int64_t kGrain = std::int64_t{1} << 14;
constexpr std::int64_t kBlock = 1024;

// Where round-to-nearest-even into a 16-bit dtype changes class, as magnitudes (exact
// doubles). Each boundary is a midpoint between two representable values, and the tie
// goes to the even one: max + ulp/2 -> Inf, min_subnormal/2 -> 0, min_normal - ulp/2 ->
// min_normal. Comparing |x| with them classifies exactly as rounding would, without
// converting every element (the tests check the boundaries against the engine's own
// rounding).
struct Narrow {
  double max;            // the largest finite value
  double overflow;       // |x| >= this rounds to Inf
  double underflow;      // 0 < |x| <= this rounds to 0
  double min_normal_tie; // |x| < this (and above underflow) rounds to a subnormal
};

Narrow narrow(DType d) {
  const DTypeInfo& i = info(d);
  const double half_ulp_max = std::ldexp(1.0, i.max_exponent() - i.mantissa_bits - 1);
  return {i.max(), i.max() + half_ulp_max, i.min_subnormal() / 2, i.min_normal() - i.min_subnormal() / 2};
}

// Counts a finite magnitude into its class (zero is in none), without branches.
inline void count_class(double a, bool nonzero, const Narrow& n, LowPrecisionCounts& c) {
  c.overflow += a >= n.overflow;
  c.rounds_to_max += (a > n.max) & (a < n.overflow);
  c.underflow += nonzero & (a <= n.underflow);
  c.subnormal += (a > n.underflow) & (a < n.min_normal_tie);
}

// floor(log2|x|) of a finite nonzero double, exact for subnormals too.
int binary_exponent(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const auto field = static_cast<int>((bits >> 52) & 0x7ff);
  const std::uint64_t mantissa = bits & ((std::uint64_t{1} << 52) - 1);
  if (field != 0) return field - 1023;
  return static_cast<int>(std::bit_width(mantissa)) - 1075;  // x = mantissa * 2^-1074
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

// Elements [begin, end) of t, in one thread, in element order.
TensorStats stats_of_range(const Tensor& t, std::int64_t begin, std::int64_t end) {
  static const Narrow f16 = narrow(DType::f16);
  static const Narrow bf16 = narrow(DType::bf16);
  const DType dtype = t.dtype();
  const auto* base = static_cast<const unsigned char*>(t.raw());
  const std::size_t size = element_size(dtype);

  TensorStats s;
  s.count = end - begin;
  double lo = INFINITY, hi = -INFINITY, absmax = 0.0, min_nonzero = INFINITY;
  double sum = 0.0, sum_squares = 0.0;
  // Bins: [0] zero, [1..kExponents] exponents kMinExponent.., then below, above. The
  // common path is branch-free (ReLU outputs are half zeros: a branch on zero would
  // mispredict half the time); NaN/Inf and f64 subnormals take the rare path.
  constexpr int kZeroBin = 0, kBelowBin = ExponentHistogram::kExponents + 1, kAboveBin = kBelowBin + 1;
  std::array<std::int64_t, ExponentHistogram::kExponents + 3> bins{};
  LowPrecisionCounts c16, cbf;
  double values[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const auto m = static_cast<std::size_t>(std::min(kBlock, end - b));
    const unsigned char* src = base + static_cast<std::size_t>(b) * size;
    convert(src, dtype, values, DType::f64, m);  // exact for every float dtype
    for (std::size_t i = 0; i < m; ++i) {
      const double x = values[i];
      const auto u = std::bit_cast<std::uint64_t>(x);
      const int field = static_cast<int>((u >> 52) & 0x7ff);
      if (field == 0x7ff) {
        if (std::isnan(x))
          ++s.histogram.nan;
        else
          ++(x > 0 ? s.histogram.pos_inf : s.histogram.neg_inf);
        continue;
      }
      sum += x;
      sum_squares += x * x;
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
      const double a = std::fabs(x);
      absmax = a > absmax ? a : absmax;
      const bool nonzero = a != 0.0;
      min_nonzero = nonzero && a < min_nonzero ? a : min_nonzero;
      int e = field - 1023;
      if (field == 0 && nonzero) e = binary_exponent(x);  // an f64 subnormal
      const int bin = e < ExponentHistogram::kMinExponent   ? kBelowBin
                      : e > ExponentHistogram::kMaxExponent ? kAboveBin
                                                            : e - ExponentHistogram::kMinExponent + 1;
      ++bins[static_cast<std::size_t>(nonzero ? bin : kZeroBin)];
      count_class(a, nonzero, f16, c16);
      count_class(a, nonzero, bf16, cbf);
    }
  }
  s.histogram.zero += bins[kZeroBin];
  s.histogram.below += bins[kBelowBin];
  s.histogram.above += bins[kAboveBin];
  for (std::size_t k = 0; k < s.histogram.by_exponent.size(); ++k) s.histogram.by_exponent[k] += bins[k + 1];
  s.f16 = c16;
  s.bf16 = cbf;
  s.sum = sum;
  s.sum_squares = sum_squares;
  if (s.finite() > 0) {
    s.min = lo;
    s.max = hi;
    s.absmax = absmax;
  }
  if (s.nonzero_finite() > 0) s.min_nonzero_abs = min_nonzero;
  finish(s);
  return s;
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

}  // namespace

std::int64_t ExponentHistogram::total() const {
  std::int64_t n = zero + nan + pos_inf + neg_inf + below + above;
  for (const std::int64_t c : by_exponent) n += c;
  return n;
}

TensorStats compute_stats(const Tensor& t) {
  require_float(t, "the tensor", "compute_stats");
  const std::int64_t n = t.numel();
  std::vector<TensorStats> partials(static_cast<std::size_t>((n + kGrain - 1) / kGrain));
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    partials[static_cast<std::size_t>(begin / kGrain)] = stats_of_range(t, begin, end);
  });
  TensorStats s;
  for (const TensorStats& p : partials) merge(s, p);  // chunk order: thread-independent
  s.tensors = 1;
  finish(s);
  return s;
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
    into.min = had_finite ? std::min(into.min, more.min) : more.min;
    into.max = had_finite ? std::max(into.max, more.max) : more.max;
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
  const auto* wbase = static_cast<const unsigned char*>(weight_before.raw());
  const auto* ubase = static_cast<const unsigned char*>(update.raw());
  const std::size_t wsize = element_size(weight_before.dtype());
  const std::size_t usize = element_size(update.dtype());

  struct Counts {
    std::int64_t nonzero = 0, swamped = 0;
  };
  std::vector<Counts> partials(static_cast<std::size_t>((n + kGrain - 1) / kGrain));
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    Counts c;
    double w[kBlock], dw[kBlock], after[kBlock];
    float sum32[kBlock];
    std::uint64_t stored[kBlock];  // param_dtype bits; 8 bytes hold any dtype
    for (std::int64_t b = begin; b < end; b += kBlock) {
      const auto m = static_cast<std::size_t>(std::min(kBlock, end - b));
      convert(wbase + static_cast<std::size_t>(b) * wsize, weight_before.dtype(), stored,
              param_dtype, m);
      convert(stored, param_dtype, w, DType::f64, m);
      convert(ubase + static_cast<std::size_t>(b) * usize, update.dtype(), dw, DType::f64, m);
      // As the optimizer does: the sum in opmath (f64 for f64 parameters, else f32),
      // then one rounding into the parameter's dtype.
      if (param_dtype == DType::f64) {
        for (std::size_t i = 0; i < m; ++i) after[i] = w[i] + dw[i];
      } else {
        for (std::size_t i = 0; i < m; ++i)
          sum32[i] = static_cast<float>(w[i]) + static_cast<float>(dw[i]);
        convert(sum32, DType::f32, stored, param_dtype, m);
        convert(stored, param_dtype, after, DType::f64, m);
      }
      for (std::size_t i = 0; i < m; ++i) {
        if (dw[i] == 0.0) continue;
        ++c.nonzero;
        if (after[i] == w[i]) ++c.swamped;
      }
    }
    partials[static_cast<std::size_t>(begin / kGrain)] = c;
  });
  Counts total;
  for (const Counts& c : partials) {
    total.nonzero += c.nonzero;
    total.swamped += c.swamped;
  }
  return fraction(total.swamped, total.nonzero);
}

Sampler::Sampler(std::int64_t every_n, std::int64_t first_k) : every_n_(every_n), first_k_(first_k) {
  if (every_n < 1)
    throw std::invalid_argument("numerics sampler: every_n = " + std::to_string(every_n) +
                                " must be at least 1 (1 observes every step)");
}

bool Sampler::take(std::int64_t step) const {
  if (step < 0) return false;
  if (first_k_ >= 0 && step >= first_k_) return false;
  return step % every_n_ == 0;
}

bool NumericsTable::add(const std::string& key, const Tensor& t, std::int64_t step) {
  if (!sampler.take(step)) return false;
  merge(stats[key], compute_stats(t));
  return true;
}

}  // namespace ampcheck::inspector
