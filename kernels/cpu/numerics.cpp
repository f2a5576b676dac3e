// The numerics family on the CPU (kernels/numerics_kernels.h). Statistics and swamping
// cut the tensor into fixed chunks of kGrain elements over the thread pool, whose
// partial results merge in chunk order: the same bits for any thread count. Inside a
// chunk, blocks of kBlock elements are converted to f64 at once (vectorised) on the stack.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>  // AVX-512F compares into masks
#endif

#include "kernels/cpu/convert.h"    // convert: the vectorised exact/rounding conversions
#include "kernels/cpu/parallel.h"   // parallel_for: chunks fixed by n and grain only
#include "kernels/cpu/tensor_io.h"  // load, source
#include "kernels/cpu/gemm.h"       // active_gemm_isa: the AVX-512 path where the CPU has it
#include "kernels/cpu/vectorize.h"  // vectorized: the all-finite scan
#include "kernels/numerics_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// Elements per parallel chunk (one partial summary each, ~2.5 KB) and per block
// converted at once on the stack inside a chunk.
constexpr std::int64_t kGrain = std::int64_t{1} << 14;
constexpr std::int64_t kBlock = 1024;

// What depends on the order of the elements: the f64 sums, the extremes (the first of +0
// and -0 is kept), and the NaN/Inf counts, which skip an element for the rest. Both
// statistics passes feed every element through add() in element order.
struct OrderedTally {
  double lo = INFINITY, hi = -INFINITY, absmax = 0.0, min_nonzero = INFINITY;
  double sum = 0.0, sum_squares = 0.0;

  // False (after counting it in s) for NaN and Inf, which nothing else counts.
  bool add(double x, NumericsSummary& s) {
    if (((bits_of(x) >> 52) & 0x7ff) == 0x7ff) {  // NaN and Inf take the rare path
      if (std::isnan(x))
        ++s.nan;
      else
        ++(x > 0 ? s.pos_inf : s.neg_inf);
      return false;
    }
    sum += x;
    sum_squares += x * x;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    const double a = std::fabs(x);
    absmax = a > absmax ? a : absmax;
    min_nonzero = a != 0.0 && a < min_nonzero ? a : min_nonzero;
    return true;
  }
  void finish(NumericsSummary& s) const {
    s.sum = sum;
    s.sum_squares = sum_squares;
    s.min = lo;
    s.max = hi;
    s.absmax = absmax;
    s.min_nonzero_abs = min_nonzero;
  }
};

// Elements [begin, end) of v, in one thread, in element order.
NumericsSummary stats_of_range(const View& v, std::int64_t begin, std::int64_t end) {
  const NarrowBounds f16 = f16_bounds();
  const NarrowBounds bf16 = bf16_bounds();
  const auto* base = static_cast<const unsigned char*>(v.data);
  const std::size_t size = element_size(v.dtype);

  NumericsSummary s;
  s.count = end - begin;
  OrderedTally t;
  NarrowCounts c16, cbf;
  double values[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const auto m = static_cast<std::size_t>(std::min(kBlock, end - b));
    convert(base + static_cast<std::size_t>(b) * size, v.dtype, values, DType::f64, m);  // exact
    for (std::size_t i = 0; i < m; ++i) {
      const double x = values[i];
      if (!t.add(x, s)) continue;
      const double a = std::fabs(x);
      const bool nonzero = a != 0.0;
      ++s.bins[exponent_bin(x)];
      count_narrow(a, nonzero, f16, c16);
      count_narrow(a, nonzero, bf16, cbf);
    }
  }
  s.f16 = c16;
  s.bf16 = cbf;
  t.finish(s);
  return s;
}

void add_counts(NarrowCounts& into, const NarrowCounts& more) {
  into.overflow += more.overflow;
  into.rounds_to_max += more.rounds_to_max;
  into.underflow += more.underflow;
  into.subnormal += more.subnormal;
}

// Counts add, sums add (into's first), extremes combine where `more` has any.
void merge(NumericsSummary& into, const NumericsSummary& more) {
  const bool had_finite = into.finite() > 0;
  const bool had_nonzero = into.nonzero_finite() > 0;
  into.count += more.count;
  into.nan += more.nan;
  into.pos_inf += more.pos_inf;
  into.neg_inf += more.neg_inf;
  for (int k = 0; k < NumericsSummary::kBins; ++k) into.bins[k] += more.bins[k];
  add_counts(into.f16, more.f16);
  add_counts(into.bf16, more.bf16);
  into.sum += more.sum;
  into.sum_squares += more.sum_squares;
  if (more.finite() > 0) {
    into.min = had_finite ? std::min(into.min, more.min) : more.min;
    into.max = had_finite ? std::max(into.max, more.max) : more.max;
    into.absmax = had_finite ? std::max(into.absmax, more.absmax) : more.absmax;
  }
  if (more.nonzero_finite() > 0)
    into.min_nonzero_abs = had_nonzero ? std::min(into.min_nonzero_abs, more.min_nonzero_abs) : more.min_nonzero_abs;
}

// The counts of what rounding one finite-or-zeroed |x| into a 16-bit dtype would do,
// as count_narrow, in float: every bound is a float (f16: 65504, 65520, 2^-25,
// (1 - 2^-11) 2^-14; bf16: its max, (2 - 2^-8) 2^127, 2^-134, (1 - 2^-8) 2^-126), so
// each comparison is the f64 one.
struct FloatBounds {
  float max, overflow, underflow, min_normal_tie;
  explicit FloatBounds(const NarrowBounds& b)
      : max(static_cast<float>(b.max)), overflow(static_cast<float>(b.overflow)),
        underflow(static_cast<float>(b.underflow)), min_normal_tie(static_cast<float>(b.min_normal_tie)) {}
};

// count[0..3] += f16's overflow, rounds-to-max, underflow and subnormal counts of x[0..m),
// count[4..7] += bf16's; NaN and Inf count nothing. The same integers on every path.
void count_narrow_scalar(const float* x, std::int64_t m, const FloatBounds& h, const FloatBounds& b,
                         std::int64_t* count) {
  for (std::int64_t i = 0; i < m; ++i) {
    const float raw = std::fabs(x[i]);
    const float a = raw <= std::numeric_limits<float>::max() ? raw : 0.0f;  // NaN and Inf: 0
    const bool nonzero = a != 0.0f;
    count[0] += a >= h.overflow;
    count[1] += (a > h.max) & (a < h.overflow);
    count[2] += nonzero & (a <= h.underflow);
    count[3] += (a > h.underflow) & (a < h.min_normal_tie);
    count[4] += a >= b.overflow;
    count[5] += (a > b.max) & (a < b.overflow);
    count[6] += nonzero & (a <= b.underflow);
    count[7] += (a > b.underflow) & (a < b.min_normal_tie);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void count_narrow_avx512(const float* x, std::int64_t m, const FloatBounds& h,
                                                           const FloatBounds& b, std::int64_t* count) {
  const __m512 bounds[8] = {_mm512_set1_ps(h.max), _mm512_set1_ps(h.overflow), _mm512_set1_ps(h.underflow),
                            _mm512_set1_ps(h.min_normal_tie), _mm512_set1_ps(b.max), _mm512_set1_ps(b.overflow),
                            _mm512_set1_ps(b.underflow), _mm512_set1_ps(b.min_normal_tie)};
  const __m512 largest = _mm512_set1_ps(std::numeric_limits<float>::max()), zero = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= m; i += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + i));
    const __mmask16 finite = _mm512_cmp_ps_mask(a, largest, _CMP_LE_OQ);
    const __mmask16 nonzero = _mm512_mask_cmp_ps_mask(finite, a, zero, _CMP_NEQ_OQ);
    for (int d = 0; d < 2; ++d) {
      const __m512 max = bounds[4 * d], overflow = bounds[4 * d + 1], underflow = bounds[4 * d + 2],
                   tie = bounds[4 * d + 3];
      const __mmask16 above_max = _mm512_mask_cmp_ps_mask(finite, a, max, _CMP_GT_OQ);
      const __mmask16 over = _mm512_mask_cmp_ps_mask(finite, a, overflow, _CMP_GE_OQ);
      const __mmask16 low = _mm512_mask_cmp_ps_mask(nonzero, a, underflow, _CMP_LE_OQ);
      const __mmask16 below_tie = _mm512_mask_cmp_ps_mask(finite, a, tie, _CMP_LT_OQ);
      count[4 * d] += __builtin_popcount(over);
      count[4 * d + 1] += __builtin_popcount(above_max & static_cast<__mmask16>(~over));
      count[4 * d + 2] += __builtin_popcount(low);
      count[4 * d + 3] += __builtin_popcount(below_tie & nonzero & static_cast<__mmask16>(~low));
    }
  }
  count_narrow_scalar(x + i, m - i, h, b, count);
}

// The same counts eight floats at a time (the Zen 3 and Haswell machines' path).
__attribute__((target("avx2,popcnt"))) void count_narrow_avx2(const float* x, std::int64_t m, const FloatBounds& h,
                                                             const FloatBounds& b, std::int64_t* count) {
  const __m256 bounds[8] = {_mm256_set1_ps(h.max), _mm256_set1_ps(h.overflow), _mm256_set1_ps(h.underflow),
                            _mm256_set1_ps(h.min_normal_tie), _mm256_set1_ps(b.max), _mm256_set1_ps(b.overflow),
                            _mm256_set1_ps(b.underflow), _mm256_set1_ps(b.min_normal_tie)};
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max()), zero = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude);
    a = _mm256_and_ps(a, _mm256_cmp_ps(a, largest, _CMP_LE_OQ));  // NaN and Inf: 0, as the scalar loop
    const unsigned nonzero = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, zero, _CMP_NEQ_OQ)));
    for (int d = 0; d < 2; ++d) {
      const unsigned over = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, bounds[4 * d + 1], _CMP_GE_OQ)));
      const unsigned above_max = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, bounds[4 * d], _CMP_GT_OQ)));
      const unsigned low = nonzero & static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, bounds[4 * d + 2], _CMP_LE_OQ)));
      const unsigned above_underflow = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, bounds[4 * d + 2], _CMP_GT_OQ)));
      const unsigned below_tie = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, bounds[4 * d + 3], _CMP_LT_OQ)));
      count[4 * d] += __builtin_popcount(over);
      count[4 * d + 1] += __builtin_popcount(above_max & ~over);
      count[4 * d + 2] += __builtin_popcount(low);
      count[4 * d + 3] += __builtin_popcount(above_underflow & below_tie);
    }
  }
  count_narrow_scalar(x + i, m - i, h, b, count);
}
#endif

void count_narrow_block(const float* x, std::int64_t m, const FloatBounds& h, const FloatBounds& b,
                        std::int64_t* count) {
#if defined(__x86_64__)
  if (active_gemm_isa() == GemmIsa::avx512) return count_narrow_avx512(x, m, h, b, count);
  if (active_gemm_isa() == GemmIsa::avx2) return count_narrow_avx2(x, m, h, b, count);
#endif
  count_narrow_scalar(x, m, h, b, count);
}

// Elements [begin, end) of f32, f16 or bf16 data: stats_of_range's summary bit for bit,
// in two passes over each block. The first, vectorized, counts what rounding into f16
// and bf16 would do (integer counts, so their order is free); non-finite values count
// there as zeros, which count nothing. The second, scalar, keeps in element order what
// depends on it: the f64 sums (each float is exact in f64, and so is its square), the
// extremes (the first of +0 and -0 is kept) and the NaN/Inf counts; and the exponent
// histogram, in four sub-histograms so that runs of elements in one bin do not each wait
// for the previous increment.
NumericsSummary stats_of_floats(const View& v, std::int64_t begin, std::int64_t end) {
  const FloatBounds f16(f16_bounds()), bf16(bf16_bounds());
  NumericsSummary s;
  s.count = end - begin;
  OrderedTally t;
  std::int64_t narrow[8] = {};  // f16 overflow, rounds to max, underflow, subnormal; then bf16's
  std::int64_t bins[4][NumericsSummary::kBins] = {};
  float buf[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const std::int64_t m = std::min(kBlock, end - b);
    const float* x = source(v, b, m, buf);  // f32 in place; f16 and bf16 widened exactly
    count_narrow_block(x, m, f16, bf16, narrow);
    for (std::int64_t i = 0; i < m; ++i) {
      const double d = x[i];
      if (t.add(d, s)) ++bins[i & 3][exponent_bin(d)];
    }
  }
  for (int k = 0; k < NumericsSummary::kBins; ++k) s.bins[k] = bins[0][k] + bins[1][k] + bins[2][k] + bins[3][k];
  s.f16 = {narrow[0], narrow[1], narrow[2], narrow[3]};
  s.bf16 = {narrow[4], narrow[5], narrow[6], narrow[7]};
  t.finish(s);
  return s;
}

NumericsSummary stats(const View& v) {
  const std::int64_t n = v.numel();
  std::vector<NumericsSummary> partials(static_cast<std::size_t>((n + kGrain - 1) / kGrain));
  const bool floats = v.dtype == DType::f32 || v.dtype == DType::f16 || v.dtype == DType::bf16;
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    partials[static_cast<std::size_t>(begin / kGrain)] =
        floats ? stats_of_floats(v, begin, end) : stats_of_range(v, begin, end);
  });
  NumericsSummary s;
  for (const NumericsSummary& p : partials) merge(s, p);  // chunk order: thread-independent
  return s;
}

// One thread, element order (the first of equal extremes is kept, as a single loop keeps it).
ValueScan scan(const View& v) {
  ValueScan r;
  bool any_finite = false;
  double largest_abs = 0;
  double buf[kChunk];
  const std::int64_t n = v.numel();
  for (std::int64_t lo = 0; lo < n; lo += kChunk) {
    const std::int64_t m = std::min(kChunk, n - lo);
    load(v, lo, m, buf);
    for (std::int64_t i = 0; i < m; ++i) {
      const double x = buf[i];
      if (std::isnan(x)) {
        ++r.nan;
        continue;
      }
      if (std::isinf(x)) {
        ++(x > 0 ? r.pos_inf : r.neg_inf);
        continue;
      }
      const double a = std::fabs(x);
      if (!any_finite) {
        any_finite = true;
        r.min = r.max = x;
        r.absmax = a;
      } else {
        r.min = std::min(r.min, x);
        r.max = std::max(r.max, x);
        r.absmax = std::max(r.absmax, a);
      }
      if (x == 0) {
        ++r.zero;
        continue;
      }
      ++r.finite_nonzero;
      if (a > largest_abs) {
        largest_abs = a;
        r.largest = x;
      }
    }
  }
  return r;
}

// Any element whose exponent bits are all ones (Inf or NaN): one pass without
// conversion, stopping at the first chunk that has one.
template <typename Bits>
bool exponents_finite(const View& v, Bits mask) {
  // A value is finite unless its exponent bits are all ones: unless ~bits & mask is 0.
  // The smallest of those over a block is an integer min reduction, which vectorizes.
  const auto* p = v.as<const Bits>();
  const std::int64_t n = v.numel();
  for (std::int64_t i = 0; i < n; i += 4096) {
    const std::int64_t e = std::min<std::int64_t>(n, i + 4096);
    Bits lowest = mask;
    vectorized([&] {
      for (std::int64_t j = i; j < e; ++j) {
        const Bits t = static_cast<Bits>(~p[j] & mask);
        lowest = t < lowest ? t : lowest;
      }
    });
    if (lowest == 0) return false;
  }
  return true;
}

bool all_finite(const View& v) {
  switch (v.dtype) {
    case DType::f64: return exponents_finite<std::uint64_t>(v, 0x7ff0000000000000ull);
    case DType::f32: return exponents_finite<std::uint32_t>(v, 0x7f800000u);
    case DType::f16: return exponents_finite<std::uint16_t>(v, 0x7c00u);
    case DType::bf16: return exponents_finite<std::uint16_t>(v, 0x7f80u);
    case DType::i64: return true;
  }
  return true;
}

// A gradient that is not all zero usually answers at its first element.
template <typename Bits>
bool bits_nonzero(const View& v, Bits magnitude) {
  const auto* p = v.as<const Bits>();
  const std::int64_t n = v.numel();
  for (std::int64_t i = 0; i < n; ++i)
    if ((p[i] & magnitude) != 0) return true;
  return false;
}

bool any_nonzero(const View& v) {
  switch (v.dtype) {
    case DType::f64: return bits_nonzero<std::uint64_t>(v, 0x7fffffffffffffffull);
    case DType::f32: return bits_nonzero<std::uint32_t>(v, 0x7fffffffu);
    case DType::f16:
    case DType::bf16: return bits_nonzero<std::uint16_t>(v, 0x7fffu);
    case DType::i64: return false;
  }
  return false;
}

SwampCounts swamped(const View& weight_before, const View& update, DType param_dtype) {
  const std::int64_t n = weight_before.numel();
  const auto* wbase = static_cast<const unsigned char*>(weight_before.data);
  const auto* ubase = static_cast<const unsigned char*>(update.data);
  const std::size_t wsize = element_size(weight_before.dtype);
  const std::size_t usize = element_size(update.dtype);
  std::vector<SwampCounts> partials(static_cast<std::size_t>((n + kGrain - 1) / kGrain));
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    SwampCounts c;
    double w[kBlock], dw[kBlock], after[kBlock];
    float sum32[kBlock];
    std::uint64_t stored[kBlock];  // param_dtype bits; 8 bytes hold any dtype
    for (std::int64_t b = begin; b < end; b += kBlock) {
      const auto m = static_cast<std::size_t>(std::min(kBlock, end - b));
      convert(wbase + static_cast<std::size_t>(b) * wsize, weight_before.dtype, stored, param_dtype, m);
      convert(stored, param_dtype, w, DType::f64, m);
      convert(ubase + static_cast<std::size_t>(b) * usize, update.dtype, dw, DType::f64, m);
      // As the optimizer does: the sum in opmath (f64 for f64 parameters, else f32),
      // then one rounding into the parameter's dtype.
      if (param_dtype == DType::f64) {
        for (std::size_t i = 0; i < m; ++i) after[i] = w[i] + dw[i];
      } else {
        for (std::size_t i = 0; i < m; ++i) sum32[i] = static_cast<float>(w[i]) + static_cast<float>(dw[i]);
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
  SwampCounts total;
  for (const SwampCounts& c : partials) {
    total.nonzero += c.nonzero;
    total.swamped += c.swamped;
  }
  return total;
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const NumericsKernels& NumericsKernels::cpu() {
  static const NumericsKernels k{&cpu::stats, &cpu::scan, &cpu::all_finite, &cpu::any_nonzero, &cpu::swamped};
  return k;
}

}  // namespace ampcheck::kernels
