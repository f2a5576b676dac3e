// The numerics family on the CPU (kernels/numerics_kernels.h). Statistics and swamping
// cut the tensor into fixed chunks of kGrain elements over the thread pool, whose
// partial results merge in chunk order: the same bits for any thread count. Inside a
// chunk, blocks of kBlock elements are converted to f64 at once (vectorised) on the stack.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>  // the AVX2 tally
#endif

#include "kernels/cpu/convert.h"    // convert: the vectorised exact/rounding conversions
#include "kernels/cpu/parallel.h"   // parallel_for: chunks fixed by n and grain only
#include "kernels/cpu/tensor_io.h"  // load, source
#include "kernels/cpu/gemm.h"       // active_gemm_isa: the AVX-512 path where the CPU has it
#include "kernels/cpu/numerics.h"
#include "kernels/cpu/vectorize.h"  // vectorized: the all-finite scan
#include "kernels/numerics_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// Elements per parallel chunk (one partial summary each, ~2.5 KB) and per block
// converted at once on the stack inside a chunk.
constexpr std::int64_t kGrain = std::int64_t{1} << 14;
constexpr std::int64_t kBlock = 1024;

// The f64 sums in kLanes lanes: element i of a chunk (chunks start at multiples of
// kGrain, blocks at multiples of kBlock, both multiples of kLanes) goes into lane i % 8,
// and the lanes fold pairwise in a fixed order. The scalar loops and the vector paths add
// each lane's elements in the same order, so every path gives the same bits; the vector
// paths hold lanes 0-3 and 4-7 in two registers. A float, a 16-bit float and its square
// are exact in f64, so a multiply-add and a multiply then add give the same lane sums.
constexpr int kLanes = kSumLanes;
static_assert(kLanes == 8, "the AVX2 tally holds the lanes in two registers of four");
static_assert(kGrain % kLanes == 0 && kBlock % kLanes == 0);

struct LaneSums {
  double sum[kLanes] = {}, squares[kLanes] = {};

  void finish(NumericsSummary& s) const {
    s.sum = fold_lanes(sum);
    s.sum_squares = fold_lanes(squares);
  }
};

// Elements [begin, end) of v, in one thread (f64 and integer data): the same lanes and
// totalOrder extremes as the float paths below.
NumericsSummary stats_of_range(const View& v, std::int64_t begin, std::int64_t end) {
  const NarrowBounds f16 = f16_bounds();
  const NarrowBounds bf16 = bf16_bounds();
  const auto* base = static_cast<const unsigned char*>(v.data);
  const std::size_t size = element_size(v.dtype);

  NumericsSummary s;
  s.count = end - begin;
  LaneSums lanes;
  NarrowCounts c16, cbf;
  double values[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const auto m = static_cast<std::size_t>(std::min(kBlock, end - b));
    convert(base + static_cast<std::size_t>(b) * size, v.dtype, values, DType::f64, m);  // exact
    for (std::size_t i = 0; i < m; ++i) {
      const double x = values[i];
      if (((bits_of(x) >> 52) & 0x7ff) == 0x7ff) {  // NaN and Inf count apart from the rest
        if (std::isnan(x))
          ++s.nan;
        else
          ++(x > 0 ? s.pos_inf : s.neg_inf);
        continue;
      }
      lanes.sum[i % kLanes] += x;
      lanes.squares[i % kLanes] += x * x;
      s.min = total_min(s.min, x);
      s.max = total_max(s.max, x);
      const double a = std::fabs(x);
      const bool nonzero = a != 0.0;
      s.absmax = a > s.absmax ? a : s.absmax;
      s.min_nonzero_abs = nonzero && a < s.min_nonzero_abs ? a : s.min_nonzero_abs;
      ++s.bins[exponent_bin(x)];
      count_narrow(a, nonzero, f16, c16);
      count_narrow(a, nonzero, bf16, cbf);
    }
  }
  s.f16 = c16;
  s.bf16 = cbf;
  lanes.finish(s);
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
    into.min = had_finite ? total_min(into.min, more.min) : more.min;
    into.max = had_finite ? total_max(into.max, more.max) : more.max;
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

// What the float paths gather of a chunk. The extremes are
// integer keys of the float bits: a finite float's key (its bits, the magnitude bits
// flipped when negative, as a signed integer) orders as totalOrder does, so min/max are
// integer min/max in any order; |x|'s bits order as |x| does. The histogram is four
// sub-histograms (element i into bins[i % 4], so runs of elements in one bin do not each
// wait for the previous increment) plus a slot kBins the vector path sends NaN and Inf to.
struct FloatTally {
  static constexpr int kSlots = NumericsSummary::kBins + 1;
  LaneSums lanes;
  std::int32_t min_key = std::numeric_limits<std::int32_t>::max();
  std::int32_t max_key = std::numeric_limits<std::int32_t>::min();
  std::int32_t absmax = 0;                                                 // bits of |x|
  std::int32_t min_nonzero = std::numeric_limits<std::int32_t>::max();  // bits of |x|, x != 0
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t bins[4][kSlots] = {};
  std::int64_t narrow[8] = {};  // f16 overflow, rounds to max, underflow, subnormal; then bf16's

  static float of_key(std::int32_t key) {
    const std::uint32_t u = static_cast<std::uint32_t>(key < 0 ? key ^ 0x7fffffff : key);
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  void finish(NumericsSummary& s) const {
    s.nan = nan;
    s.pos_inf = pos_inf;
    s.neg_inf = neg_inf;
    for (int k = 0; k < NumericsSummary::kBins; ++k) s.bins[k] = bins[0][k] + bins[1][k] + bins[2][k] + bins[3][k];
    s.f16 = {narrow[0], narrow[1], narrow[2], narrow[3]};
    s.bf16 = {narrow[4], narrow[5], narrow[6], narrow[7]};
    lanes.finish(s);
    if (max_key != std::numeric_limits<std::int32_t>::min()) {  // a finite element
      s.min = of_key(min_key);
      s.max = of_key(max_key);
      s.absmax = of_key(absmax);
    }
    if (min_nonzero != std::numeric_limits<std::int32_t>::max()) s.min_nonzero_abs = of_key(min_nonzero);
  }
};

// The bin of a finite float's bits, exponent_bin's for its value: a normal float's bin
// is its exponent field + 23 (field 1 is 2^-126, bin -126 - kMinExponent + 1); a
// subnormal m * 2^-149 has floor(log2 m) - 149, bin 32 - clz(m); zero bin 0.
int float_bin(std::uint32_t magnitude) {
  const auto field = static_cast<int>(magnitude >> 23);
  if (field != 0) return field + 23;
  return magnitude == 0 ? NumericsSummary::kZeroBin : 32 - __builtin_clz(magnitude);
}

// Elements [i, m) of a block (x[0] at lane 0) into t, one at a time.
void tally_scalar(const float* x, std::int64_t i, std::int64_t m, const FloatBounds& h, const FloatBounds& b,
                  FloatTally& t) {
  count_narrow_scalar(x + i, m - i, h, b, t.narrow);
  for (; i < m; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {  // NaN and Inf count apart from the rest
      if (a > 0x7f800000u)
        ++t.nan;
      else
        ++(u == a ? t.pos_inf : t.neg_inf);
      continue;
    }
    const double d = x[i];
    t.lanes.sum[i % kLanes] += d;
    t.lanes.squares[i % kLanes] += d * d;
    const auto key = static_cast<std::int32_t>(u == a ? u : u ^ 0x7fffffffu);
    t.min_key = key < t.min_key ? key : t.min_key;
    t.max_key = key > t.max_key ? key : t.max_key;
    const auto mag = static_cast<std::int32_t>(a);
    t.absmax = mag > t.absmax ? mag : t.absmax;
    t.min_nonzero = mag != 0 && mag < t.min_nonzero ? mag : t.min_nonzero;
    ++t.bins[i & 3][float_bin(a)];
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,popcnt"))) inline int count(__m256i mask) {
  return __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(mask))));
}

// tally_scalar eight elements at a time, the same bits: lanes 0-3 and 4-7 of the sums in
// two registers each, the keys and the bins in integer lanes (a subnormal's bin from the
// exponent of its mantissa converted to float, exact below 2^24), the bins then counted
// one by one. Runs on the AVX2 and the AVX-512 machines.
__attribute__((target("avx2,popcnt"))) void tally_avx2(const float* x, std::int64_t m, const FloatBounds& h,
                                                      const FloatBounds& b, FloatTally& t) {
  const __m256 bounds[8] = {_mm256_set1_ps(h.max), _mm256_set1_ps(h.overflow), _mm256_set1_ps(h.underflow),
                            _mm256_set1_ps(h.min_normal_tie), _mm256_set1_ps(b.max), _mm256_set1_ps(b.overflow),
                            _mm256_set1_ps(b.underflow), _mm256_set1_ps(b.min_normal_tie)};
  __m256d s0 = _mm256_loadu_pd(t.lanes.sum), s1 = _mm256_loadu_pd(t.lanes.sum + 4);
  __m256d q0 = _mm256_loadu_pd(t.lanes.squares), q1 = _mm256_loadu_pd(t.lanes.squares + 4);
  const __m256i int_max = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::max());
  const __m256i int_min = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::min());
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i zero = _mm256_setzero_si256();
  __m256i lo = int_max, hi = int_min, absmax = zero, min_nonzero = int_max;
  alignas(32) std::int32_t bin[8];
  std::int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i a = _mm256_and_si256(u, magnitude);
    const __m256i finite = _mm256_cmpgt_epi32(inf, a);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(finite)) != 0xff) {
      const __m256i negative = _mm256_cmpgt_epi32(zero, u);
      const __m256i is_inf = _mm256_cmpeq_epi32(a, inf);
      t.nan += count(_mm256_cmpgt_epi32(a, inf));
      t.pos_inf += count(_mm256_andnot_si256(negative, is_inf));
      t.neg_inf += count(_mm256_and_si256(negative, is_inf));
    }
    const __m256 v = _mm256_castsi256_ps(_mm256_and_si256(u, finite));  // NaN and Inf add +0
    const __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    s0 = _mm256_add_pd(s0, v0);
    s1 = _mm256_add_pd(s1, v1);
    q0 = _mm256_add_pd(q0, _mm256_mul_pd(v0, v0));
    q1 = _mm256_add_pd(q1, _mm256_mul_pd(v1, v1));

    const __m256i key = _mm256_xor_si256(u, _mm256_and_si256(_mm256_srai_epi32(u, 31), magnitude));
    lo = _mm256_min_epi32(lo, _mm256_blendv_epi8(int_max, key, finite));
    hi = _mm256_max_epi32(hi, _mm256_blendv_epi8(int_min, key, finite));
    absmax = _mm256_max_epi32(absmax, _mm256_and_si256(a, finite));
    const __m256i nonzero = _mm256_andnot_si256(_mm256_cmpeq_epi32(a, zero), finite);
    min_nonzero = _mm256_min_epi32(min_nonzero, _mm256_blendv_epi8(int_max, a, nonzero));

    // The narrow counts of |x| (NaN and Inf as 0, which counts nothing), count_narrow_scalar's.
    const __m256 mag = _mm256_castsi256_ps(_mm256_and_si256(a, finite));
    const unsigned nz = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(nonzero)));
    for (int d = 0; d < 2; ++d) {
      const unsigned over = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(mag, bounds[4 * d + 1], _CMP_GE_OQ)));
      const unsigned above_max = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(mag, bounds[4 * d], _CMP_GT_OQ)));
      const unsigned low = nz & static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(mag, bounds[4 * d + 2], _CMP_LE_OQ)));
      const unsigned above_underflow =
          static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(mag, bounds[4 * d + 2], _CMP_GT_OQ)));
      const unsigned below_tie = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(mag, bounds[4 * d + 3], _CMP_LT_OQ)));
      t.narrow[4 * d] += __builtin_popcount(over);
      t.narrow[4 * d + 1] += __builtin_popcount(above_max & ~over);
      t.narrow[4 * d + 2] += __builtin_popcount(low);
      t.narrow[4 * d + 3] += __builtin_popcount(above_underflow & below_tie);
    }

    const __m256i field = _mm256_srli_epi32(a, 23);
    const __m256i normal_bin = _mm256_add_epi32(field, _mm256_set1_epi32(23));
    const __m256i subnormal_bin = _mm256_sub_epi32(
        _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(a)), 23), _mm256_set1_epi32(126));
    __m256i bin_of = _mm256_blendv_epi8(subnormal_bin, normal_bin, _mm256_cmpgt_epi32(field, zero));
    bin_of = _mm256_and_si256(bin_of, _mm256_xor_si256(_mm256_cmpeq_epi32(a, zero), _mm256_set1_epi32(-1)));  // zero: bin 0
    bin_of = _mm256_blendv_epi8(_mm256_set1_epi32(NumericsSummary::kBins), bin_of, finite);
    _mm256_store_si256(reinterpret_cast<__m256i*>(bin), bin_of);
    for (int k = 0; k < 8; ++k) ++t.bins[k & 3][bin[k]];
  }
  _mm256_storeu_pd(t.lanes.sum, s0);
  _mm256_storeu_pd(t.lanes.sum + 4, s1);
  _mm256_storeu_pd(t.lanes.squares, q0);
  _mm256_storeu_pd(t.lanes.squares + 4, q1);
  alignas(32) std::int32_t r[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(r[0]), lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(r[1]), hi);
  _mm256_store_si256(reinterpret_cast<__m256i*>(r[2]), absmax);
  _mm256_store_si256(reinterpret_cast<__m256i*>(r[3]), min_nonzero);
  for (int k = 0; k < 8; ++k) {
    t.min_key = std::min(t.min_key, r[0][k]);
    t.max_key = std::max(t.max_key, r[1][k]);
    t.absmax = std::max(t.absmax, r[2][k]);
    t.min_nonzero = std::min(t.min_nonzero, r[3][k]);
  }
  tally_scalar(x, i, m, h, b, t);
}
#endif

// Elements [begin, end) of f32, f16 or bf16 data on one path (AVX-512 machines take the
// AVX2 one), in one pass over each block: stats_of_range's summary of the same values,
// bit for bit, on every path.
NumericsSummary stats_of_floats(const View& v, std::int64_t begin, std::int64_t end, GemmIsa isa) {
  const FloatBounds f16(f16_bounds()), bf16(bf16_bounds());
  FloatTally t;
  float buf[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const std::int64_t m = std::min(kBlock, end - b);
    const float* x = source(v, b, m, buf);  // f32 in place; f16 and bf16 widened exactly
#if defined(__x86_64__)
    if (isa != GemmIsa::scalar) {
      tally_avx2(x, m, f16, bf16, t);
      continue;
    }
#endif
    tally_scalar(x, 0, m, f16, bf16, t);
  }
  NumericsSummary s;
  s.count = end - begin;
  t.finish(s);
  return s;
}

}  // namespace

NumericsSummary stats(const View& v, GemmIsa isa) {
  const std::int64_t n = v.numel();
  std::vector<NumericsSummary> partials(static_cast<std::size_t>((n + kGrain - 1) / kGrain));
  const bool floats = v.dtype == DType::f32 || v.dtype == DType::f16 || v.dtype == DType::bf16;
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    partials[static_cast<std::size_t>(begin / kGrain)] =
        floats ? stats_of_floats(v, begin, end, isa) : stats_of_range(v, begin, end);
  });
  NumericsSummary s;
  for (const NumericsSummary& p : partials) merge(s, p);  // chunk order: thread-independent
  return s;
}

namespace {

NumericsSummary stats_on_active_path(const View& v) { return stats(v, active_gemm_isa()); }
// The slot is host memory: the summary is there when the call returns.
void stats_into(const View& v, NumericsSummary* slot) { *slot = stats_on_active_path(v); }

// One thread, element order (the first of equal magnitudes is `largest`; min and max in
// totalOrder): f64 and integer data.
ValueScan scan_elements(const View& v) {
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
        r.min = total_min(r.min, x);
        r.max = total_max(r.max, x);
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

// f32, f16 and bf16 data: the counts and extremes are the statistics' (vectorised, over
// the thread pool), then `largest` is the first element whose magnitude is absmax, found
// by a search that stops there. scan_elements' result for the same values.
ValueScan scan(const View& v) {
  if (v.dtype != DType::f32 && v.dtype != DType::f16 && v.dtype != DType::bf16) return scan_elements(v);
  const NumericsSummary s = stats(v, active_gemm_isa());
  ValueScan r;
  r.nan = s.nan;
  r.pos_inf = s.pos_inf;
  r.neg_inf = s.neg_inf;
  r.zero = s.bins[NumericsSummary::kZeroBin];
  r.finite_nonzero = s.nonzero_finite();
  if (s.finite() > 0) {
    r.min = s.min;
    r.max = s.max;
    r.absmax = s.absmax;
  }
  if (r.finite_nonzero == 0) return r;
  const auto target = static_cast<float>(s.absmax);  // a float's magnitude: exact
  float buf[kBlock];
  const std::int64_t n = v.numel();
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    const float* x = source(v, b, m, buf);
    for (std::int64_t i = 0; i < m; ++i)
      if (std::fabs(x[i]) == target) {
        r.largest = x[i];
        return r;
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
      // A local minimum: `lowest` itself is a Bits the loads could alias, which kept the
      // loop scalar (one element per compare-and-move).
      Bits low = mask;
      for (std::int64_t j = i; j < e; ++j) {
        const Bits t = static_cast<Bits>(~p[j] & mask);
        low = t < low ? t : low;
      }
      lowest = low;
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
  static const NumericsKernels k{&cpu::stats_on_active_path, &cpu::stats_into, &cpu::scan,
                                 &cpu::all_finite,           &cpu::any_nonzero, &cpu::swamped};
  return k;
}

}  // namespace ampcheck::kernels
