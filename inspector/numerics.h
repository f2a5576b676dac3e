// Numerics statistics of tensors: what the values look like and what they would become
// in fp16 and bf16. One pass over a tensor of any float dtype gives an exponent
// histogram, the low-precision overflow / underflow / subnormal counts, and min, max,
// absmax, mean, rms and dynamic range; statistics of one key (an op's output, a
// gradient, a parameter) merge over steps, sampled to bound the cost.
//
// Definitions (the rounding is the engine's own conversion, so these match what the
// engine would store, bit for bit):
//   overflow       finite x that rounds to +-Inf in the dtype: |x| >= max + ulp(max)/2
//                  (f16: 65520; bf16: 2^128 - 2^119). The half-way value is a tie that
//                  goes to even, which is Inf because max has an odd mantissa.
//   rounds_to_max  finite x with |x| > max that rounds to +-max instead (f16: 65504 <
//                  |x| < 65520): lossy, but not Inf, so not counted as overflow.
//   underflow      nonzero finite x that rounds to 0: 0 < |x| <= min_subnormal / 2
//                  (f16: 2^-25; bf16: 2^-134; the tie goes to even 0).
//   subnormal      nonzero finite x whose rounded value is a nonzero subnormal.
// Statistics over values (min, max, absmax, mean, rms, min_nonzero_abs, dynamic range)
// are over the finite elements only: NaN and +-Inf are counted, not averaged. A
// statistic of an empty set (no finite element, no nonzero finite element) is NaN.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace ampcheck::kernels {
class SummarySlots;  // kernels/numerics_kernels.h
}  // namespace ampcheck::kernels

namespace ampcheck::inspector {

// One bin per binary exponent e = floor(log2|x|) over the f32 range (-149 for the
// smallest subnormal to 127), plus zero, NaN, +Inf and -Inf. Finite f64 data outside
// the f32 exponent range lands in `below` / `above`, so the bins always sum to numel.
struct ExponentHistogram {
  static constexpr int kMinExponent = -149;
  static constexpr int kMaxExponent = 127;
  static constexpr int kExponents = kMaxExponent - kMinExponent + 1;

  std::int64_t zero = 0;  // +0 and -0
  std::int64_t nan = 0;
  std::int64_t pos_inf = 0;
  std::int64_t neg_inf = 0;
  std::int64_t below = 0;  // finite nonzero, e < kMinExponent (f64 data only)
  std::int64_t above = 0;  // finite, e > kMaxExponent (f64 data only)
  std::array<std::int64_t, kExponents> by_exponent{};

  // The bin of exponent e, kMinExponent <= e <= kMaxExponent.
  std::int64_t& at(int e) { return by_exponent[static_cast<std::size_t>(e - kMinExponent)]; }
  std::int64_t at(int e) const { return by_exponent[static_cast<std::size_t>(e - kMinExponent)]; }
  std::int64_t total() const;  // every bin: equals the elements counted
  bool operator==(const ExponentHistogram&) const = default;
};

// What the values would become in one low-precision dtype (definitions above).
struct LowPrecisionCounts {
  std::int64_t overflow = 0;
  std::int64_t rounds_to_max = 0;
  std::int64_t underflow = 0;
  std::int64_t subnormal = 0;
  bool operator==(const LowPrecisionCounts&) const = default;
};

struct TensorStats {
  static constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();

  std::int64_t count = 0;    // elements seen
  std::int64_t tensors = 0;  // tensors merged into these statistics
  ExponentHistogram histogram;
  LowPrecisionCounts f16, bf16;

  // Over the finite elements; the sums are kept so merging re-weights exactly.
  double sum = 0.0;
  double sum_squares = 0.0;
  double min = kUndefined;
  double max = kUndefined;
  double absmax = kUndefined;
  double min_nonzero_abs = kUndefined;
  double mean = kUndefined;                // sum / finite()
  double rms = kUndefined;                 // sqrt(sum_squares / finite())
  double dynamic_range_log2 = kUndefined;  // log2(absmax / min_nonzero_abs)

  std::int64_t zeros() const { return histogram.zero; }
  std::int64_t nans() const { return histogram.nan; }
  std::int64_t pos_inf() const { return histogram.pos_inf; }
  std::int64_t neg_inf() const { return histogram.neg_inf; }
  std::int64_t finite() const { return count - nans() - pos_inf() - neg_inf(); }
  std::int64_t nonzero_finite() const { return finite() - zeros(); }
};

// Statistics of every element of a float tensor (throws std::invalid_argument for an
// undefined or i64 tensor), computed on the tensor's device (kernels/numerics_kernels.h:
// on CUDA only the summary is copied back). Bit-identical for any thread count: the
// tensor is cut into fixed chunks whose partial results merge in chunk order (on CUDA,
// block results reduced in a fixed order: the same bits on every run of one GPU).
TensorStats compute_stats(const Tensor& t);

// Aggregation over steps: counts add, min/max combine, mean and rms re-weighted from the
// double sums. Merging stats of a then b equals the stats of a and b concatenated
// (up to the order in which the double sums were added).
void merge(TensorStats& into, const TensorStats& more);

// From an fp32 run: the fraction of all elements that would overflow, underflow to zero
// or become subnormal if the tensor were stored in fp16 or bf16 (0 for an empty tensor).
struct Readiness {
  double overflow_fraction_f16 = 0.0;
  double underflow_fraction_f16 = 0.0;
  double subnormal_fraction_f16 = 0.0;
  double overflow_fraction_bf16 = 0.0;
  double underflow_fraction_bf16 = 0.0;
  double subnormal_fraction_bf16 = 0.0;
};
Readiness readiness(const TensorStats& stats);

// Update swamping: of the elements whose update is nonzero, the fraction whose update is
// lost to rounding, w + dw == w with w = weight_before rounded to param_dtype. The sum
// is formed as the engine's optimizer forms it (in f32, or f64 for f64 parameters) and
// rounded once into param_dtype. 0 when no update is nonzero. Throws
// std::invalid_argument when the element counts differ or a dtype is not float.
double swamped_fraction(const Tensor& weight_before, const Tensor& update, DType param_dtype);

// Which steps are observed: every `every_n`-th step (0, N, 2N, ...) among the first
// `first_k` steps (all steps when first_k < 0), and every step of the last window given
// to also_take (the inspector gives the N steps after a step whose gradients held
// Inf/NaN: around a failure each step is worth its cost). Steps count from 0.
class Sampler {
 public:
  Sampler(std::int64_t every_n = 1, std::int64_t first_k = -1);  // throws for every_n < 1
  bool take(std::int64_t step) const;
  std::int64_t every_n() const { return every_n_; }
  std::int64_t first_k() const { return first_k_; }
  void also_take(std::int64_t first, std::int64_t last) { window_ = {first, last}; }

 private:
  std::int64_t every_n_;
  std::int64_t first_k_;
  std::optional<std::pair<std::int64_t, std::int64_t>> window_;  // [first, last]
};

// Statistics taken now and merged later, so that a GPU is waited for once per step, not
// once per tensor: queue() starts the pass over a tensor on its device into a slot
// (kernels::SummarySlots; on CUDA nothing waits, and the tensor may be freed or written
// afterwards, the pass being ahead of that on the one stream) and remembers its key;
// merge_into() reads every slot back, one copy per device, and merges them in the order
// they were queued. The summaries are compute_stats' bits and the merges come in the same
// order as merging each at once, so the statistics are the same bits.
class PendingStats {
 public:
  PendingStats();
  ~PendingStats();
  PendingStats(PendingStats&&) noexcept;
  PendingStats& operator=(PendingStats&&) noexcept;

  // Throws std::invalid_argument for an undefined or i64 tensor, as compute_stats.
  void queue(const std::string& key, const Tensor& t);
  std::size_t size() const { return queued_.size(); }
  void merge_into(std::map<std::string, TensorStats>& stats);

 private:
  struct Queued {
    std::string key;
    bool cuda;          // whose slots
    std::size_t index;  // in what they read back
  };
  std::vector<Queued> queued_;
  // Made at the first tensor of each device.
  std::unique_ptr<kernels::SummarySlots> cpu_, cuda_;
};

// Statistics aggregated by a caller-chosen key such as "fc1.linear#3/output".
struct NumericsTable {
  Sampler sampler;
  std::map<std::string, TensorStats> stats;
  PendingStats pending;  // queued, not yet in stats

  // Merges the statistics of t into stats[key] when the sampler takes `step`; returns
  // whether it did (a skipped step costs no pass over the tensor). What is queued is
  // merged first, so the merges keep the order of the calls.
  bool add(const std::string& key, const Tensor& t, std::int64_t step);
  // add() deferred: queues t's statistics for stats[key] when the sampler takes `step`,
  // merged at the next flush() or add(); returns whether it did.
  bool queue(const std::string& key, const Tensor& t, std::int64_t step);
  // Merges what is queued into stats, in the order queued (waits for the device).
  void flush() { pending.merge_into(stats); }
};

}  // namespace ampcheck::inspector
