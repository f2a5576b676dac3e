// The numerics statistics the inspector takes of tensors, computed where the tensor
// lives: on CUDA only the summary comes back to the host, never the elements. The
// inspector (inspector/numerics.cpp, inspector/nan_source.cpp) turns the summaries into
// its report types; the definitions of each count are in inspector/numerics.h.
// (engine/dispatch.h explains families.)
//
// The classification of one value is written once below for the host and (under nvcc)
// the device, so both backends count the same elements into the same bins. Counts are
// exact on both; on the CPU the double sums run in eight lanes (element i of a chunk into
// lane i % 8, the lanes folded pairwise) within fixed chunks merged in chunk order, so the
// scalar and vector paths and any thread count give the same bits; on CUDA they are block
// sums in a fixed order (the same bits from run to run on one GPU, not the CPU's). Minima
// and maxima follow totalOrder (-0 below +0), which no order of the elements changes.
#pragma once

#include <algorithm>
#include <cmath>  // llround, which element.h's store_element uses
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/element.h"        // load_element, store_element
#include "kernels/fp_bits.h"        // AMPCHECK_HD, bits_of
#include "kernels/memory_kernels.h"  // SummarySlots' blocks and their copy to the host
#include "kernels/view.h"

namespace ampcheck::kernels {

// Where round-to-nearest-even into a 16-bit dtype changes class, as magnitudes (exact
// doubles). Each boundary is a midpoint between two representable values, and the tie
// goes to the even one: max + ulp/2 -> Inf, min_subnormal/2 -> 0, min_normal - ulp/2 ->
// min_normal. Comparing |x| with them classifies exactly as rounding would, without
// converting every element (tests/ops_training_kernels_test.cpp checks them against the
// engine's dtype limits and its rounding).
struct NarrowBounds {
  double max;             // the largest finite value
  double overflow;        // |x| >= this rounds to Inf
  double underflow;       // 0 < |x| <= this rounds to 0
  double min_normal_tie;  // |x| < this (and above underflow) rounds to a subnormal
};
// f16: max 65504, ulp(max) 32; smallest subnormal 2^-24; smallest normal 2^-14.
AMPCHECK_HD NarrowBounds f16_bounds() { return {0x1.ffcp15, 0x1.ffep15, 0x1p-25, 0x1.ffcp-15}; }
// bf16: max (2 - 2^-7) 2^127, ulp(max) 2^120; smallest subnormal 2^-133; smallest normal 2^-126.
AMPCHECK_HD NarrowBounds bf16_bounds() { return {0x1.fep127, 0x1.ffp127, 0x1p-134, 0x1.fep-127}; }

// What rounding into one 16-bit dtype would do to the values (inspector/numerics.h).
struct NarrowCounts {
  std::int64_t overflow = 0;
  std::int64_t rounds_to_max = 0;
  std::int64_t underflow = 0;
  std::int64_t subnormal = 0;
};

// Counts a finite magnitude into its class (zero is in none), without branches.
AMPCHECK_HD void count_narrow(double a, bool nonzero, const NarrowBounds& n, NarrowCounts& c) {
  c.overflow += a >= n.overflow;
  c.rounds_to_max += (a > n.max) & (a < n.overflow);
  c.underflow += nonzero & (a <= n.underflow);
  c.subnormal += (a > n.underflow) & (a < n.min_normal_tie);
}

// The statistics of one tensor before the inspector derives mean, rms and range.
struct NumericsSummary {
  // Exponent histogram bins: [0] +-0, then one per binary exponent floor(log2|x|) from
  // kMinExponent (the smallest f32 subnormal) to kMaxExponent, then finite values below
  // and above that range (f64 data only).
  static constexpr int kMinExponent = -149;
  static constexpr int kMaxExponent = 127;
  static constexpr int kExponents = kMaxExponent - kMinExponent + 1;
  static constexpr int kZeroBin = 0;
  static constexpr int kBelowBin = kExponents + 1;
  static constexpr int kAboveBin = kExponents + 2;
  static constexpr int kBins = kExponents + 3;

  std::int64_t count = 0;  // elements
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t bins[kBins] = {};
  NarrowCounts f16, bf16;
  // Over the finite elements. While there is none (the counts say so), min, max and
  // min_nonzero_abs hold +Inf, -Inf, +Inf and mean nothing.
  double sum = 0, sum_squares = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double absmax = 0;
  double min_nonzero_abs = std::numeric_limits<double>::infinity();

  std::int64_t finite() const { return count - nan - pos_inf - neg_inf; }
  std::int64_t nonzero_finite() const { return finite() - bins[kZeroBin]; }
};

// The CPU sums' fixed order (above): element i of a chunk into lane i % kSumLanes, the
// lanes folded ((0+1)+(2+3))+((4+5)+(6+7)). The inspector's shadow sums its norms the same way.
inline constexpr int kSumLanes = 8;
AMPCHECK_HD double fold_lanes(const double* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

// The smaller and the larger of two finite values in IEEE 754's totalOrder: -0 is below
// +0, so {+0, -0} has min -0 and max +0 whichever comes first.
AMPCHECK_HD double total_min(double a, double b) { return b < a || (b == a && (bits_of(b) >> 63) != 0) ? b : a; }
AMPCHECK_HD double total_max(double a, double b) { return b > a || (b == a && (bits_of(b) >> 63) == 0) ? b : a; }

// The histogram bin of a finite double (kZeroBin for +-0): its binary exponent, exact
// for subnormals too. Zero is a select, not a branch (ReLU outputs are half zeros: a
// branch on zero would mispredict half the time); only f64 subnormals take a branch.
AMPCHECK_HD int exponent_bin(double x) {
  const std::uint64_t u = bits_of(x);
  const auto field = static_cast<int>((u >> 52) & 0x7ff);
  const bool nonzero = (u << 1) != 0;
  int e = field - 1023;
  if (field == 0 && nonzero) {  // a subnormal: x = mantissa * 2^-1074
    const std::uint64_t mantissa = u & ((std::uint64_t{1} << 52) - 1);
#if defined(__CUDA_ARCH__)
    e = (64 - __clzll(static_cast<long long>(mantissa))) - 1075;
#else
    e = (64 - __builtin_clzll(mantissa)) - 1075;
#endif
  }
  const int bin = e < NumericsSummary::kMinExponent   ? NumericsSummary::kBelowBin
                  : e > NumericsSummary::kMaxExponent ? NumericsSummary::kAboveBin
                                                      : e - NumericsSummary::kMinExponent + 1;
  return nonzero ? bin : NumericsSummary::kZeroBin;
}

// What the NaN/Inf watch reads of a tensor in one pass.
struct ValueScan {
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t zero = 0;            // +-0
  std::int64_t finite_nonzero = 0;
  // Over the finite elements; NaN when there is none.
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  double absmax = std::numeric_limits<double>::quiet_NaN();
  // The finite nonzero value of largest magnitude, the first in element order; 0 when none.
  double largest = 0;
};

// Update swamping (inspector/numerics.h swamped_fraction): of the elements with a
// nonzero update, those whose update is lost to rounding.
struct SwampCounts {
  std::int64_t nonzero = 0;
  std::int64_t swamped = 0;
};

// v rounded once into dtype d, as the exact double of the result.
template <typename T>
AMPCHECK_HD double rounded_to(T v, DType d) {
  std::uint64_t bits = 0;  // 8 bytes hold an element of any dtype
  store_element(&bits, d, 0, v);
  return load_element<double>(&bits, d, 0);
}

// Whether the update dw of a weight w (a value of param_dtype) is lost: w + dw formed as
// the optimizer forms it (f64 for f64 parameters, else f32) and rounded once into
// param_dtype equals w.
AMPCHECK_HD bool swamped_element(double w, double dw, DType param_dtype) {
  if (param_dtype == DType::f64) return w + dw == w;
  return rounded_to(static_cast<float>(w) + static_cast<float>(dw), param_dtype) == w;
}

struct NumericsKernels {
  // Statistics of every element of a float tensor (one pass).
  NumericsSummary (*stats)(const View& v);
  // stats' summary of v, the same bits, written to `slot`: memory of this device
  // (SummarySlots below hands it out). On CUDA the pass is queued on the stream and nothing
  // waits for it; on the CPU it runs now.
  void (*stats_into)(const View& v, NumericsSummary* slot);
  ValueScan (*scan)(const View& v);
  // Whether every element of a float tensor is finite / any is not +-0 (a NaN counts as
  // nonzero), from the bits alone: the checks run on every op's output.
  bool (*all_finite)(const View& v);
  bool (*any_nonzero)(const View& v);
  // w = weight_before rounded to param_dtype; w + dw formed as the optimizer forms it (in
  // f64 for f64 parameters, else in f32) and rounded once into param_dtype; swamped when
  // that equals w. Both Views have the same numel.
  SwampCounts (*swamped)(const View& weight_before, const View& update, DType param_dtype);

  static const NumericsKernels& cpu();
  static const NumericsKernels& cuda();
};

// Summaries written where the tensors live and read back together: the inspector's
// statistics of a step (inspector/numerics.h, PendingStats) take a slot per tensor and read
// them after the step, one copy to the host instead of one wait per tensor. The slots lie
// in blocks from the device's allocator (on CUDA, GPU 0's caching allocator); a step that
// takes more slots than there are adds a block, and the next read() puts every slot into
// one block, so a run whose steps see the same tensors reads one block, in one copy, per
// step. The blocks may be written by queued work until read(), which waits for it.
class SummarySlots {
 public:
  // Slots in the first block, each a NumericsSummary of about 2.4 KB.
  static constexpr std::size_t kFirstBlock = 64;

  SummarySlots(const NumericsKernels& numerics, const MemoryKernels& memory) : numerics_(&numerics), memory_(&memory) {}
  ~SummarySlots() {
    for (const Block& b : blocks_) memory_->free(b.slots);
  }
  SummarySlots(const SummarySlots&) = delete;
  SummarySlots& operator=(const SummarySlots&) = delete;

  // Queues the statistics of v (numerics.stats_into) into the next slot; returns its index
  // in what read() returns.
  std::size_t add(const View& v) {
    if (taken_ == capacity_) grow(capacity_ == 0 ? kFirstBlock : capacity_);
    const Block& last = blocks_.back();  // the blocks before it are full
    numerics_->stats_into(v, last.slots + (taken_ - (capacity_ - last.capacity)));
    return taken_++;
  }
  std::size_t taken() const { return taken_; }

  // The summaries of the slots taken since the last read, in the order they were taken,
  // one copy per block (to_host waits for the work queued before it); the slots are then
  // free again.
  std::vector<NumericsSummary> read() {
    std::vector<NumericsSummary> out(taken_);
    std::size_t at = 0;
    for (const Block& b : blocks_) {
      if (at == taken_) break;
      const std::size_t n = std::min(b.capacity, taken_ - at);
      memory_->to_host(out.data() + at, b.slots, n * sizeof(NumericsSummary));
      at += n;
    }
    taken_ = 0;
    if (blocks_.size() > 1) {  // the next step's slots in one block
      const std::size_t total = capacity_;
      for (const Block& b : blocks_) memory_->free(b.slots);
      blocks_.clear();
      capacity_ = 0;
      grow(total);
    }
    return out;
  }

 private:
  struct Block {
    NumericsSummary* slots;
    std::size_t capacity;
  };
  void grow(std::size_t slots) {
    std::string why_not;
    void* p = memory_->allocate(slots * sizeof(NumericsSummary), why_not);
    if (p == nullptr)
      throw std::runtime_error("numerics statistics: no memory for " + std::to_string(slots) + " summaries: " + why_not);
    blocks_.push_back({static_cast<NumericsSummary*>(p), slots});
    capacity_ += slots;
  }

  const NumericsKernels* numerics_;
  const MemoryKernels* memory_;
  std::vector<Block> blocks_;
  std::size_t capacity_ = 0;  // slots in every block
  std::size_t taken_ = 0;
};

}  // namespace ampcheck::kernels
