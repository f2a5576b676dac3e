// The numerics family on GPU 0 (kernels/numerics_kernels.h): one pass over the
// elements, and only the summary comes back to the host (stats), or stays in a slot of
// device memory for a later copy of many (stats_into). Integer counts are exact:
// per-thread registers, then shared-memory counters (the exponent histogram's bins take
// a shared atomicAdd per element), then one global atomicAdd per counter and block. The
// double sums and extremes are reduced per block with cub::BlockReduce into a table of
// block results, which a one-block second pass reduces in a fixed order, so the same
// tensor gives the same bits on every run of one GPU.
#include <cub/cub.cuh>        // cub::BlockReduce
#include <math_constants.h>  // CUDART_INF

#include <cstdint>

#include "kernels/cuda/runtime.h"  // check, check_launch, stream, allocator, blocks_for
#include "kernels/element.h"       // load_element
#include "kernels/numerics_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

constexpr unsigned int kThreads = 256;

// Copies `bytes` of device memory to the host and waits for it (and the work before it).
void fetch(void* host, const void* device, std::size_t bytes, const char* op) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync(summary)", op);
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", op);
}

// ---- statistics ------------------------------------------------------------------------

// The integer counters: the histogram's bins, then NaN, +Inf, -Inf, then the f16 and the
// bf16 counts (overflow, rounds_to_max, underflow, subnormal).
constexpr int kNanCounter = NumericsSummary::kBins;
constexpr int kF16Counter = kNanCounter + 3;
constexpr int kBF16Counter = kF16Counter + 4;
constexpr int kCounters = kBF16Counter + 4;

struct Extremes {
  double sum, sum_squares, min, max, absmax, min_nonzero;
};
__device__ Extremes no_extremes() {
  const double inf = CUDART_INF;
  return {0.0, 0.0, inf, -inf, 0.0, inf};
}
struct CombineExtremes {
  __device__ Extremes operator()(const Extremes& a, const Extremes& b) const {
    return {a.sum + b.sum,
            a.sum_squares + b.sum_squares,
            total_min(a.min, b.min),
            total_max(a.max, b.max),
            b.absmax > a.absmax ? b.absmax : a.absmax,
            b.min_nonzero < a.min_nonzero ? b.min_nonzero : a.min_nonzero};
  }
};
using BlockExtremes = cub::BlockReduce<Extremes, kThreads>;

__device__ void add_narrow(unsigned long long* shared, const NarrowCounts& c) {
  const std::int64_t v[4] = {c.overflow, c.rounds_to_max, c.underflow, c.subnormal};
  for (int k = 0; k < 4; ++k)
    if (v[k] != 0) atomicAdd(&shared[k], static_cast<unsigned long long>(v[k]));
}

__global__ void stats_blocks(const void* p, DType d, std::int64_t n, NarrowBounds f16, NarrowBounds bf16,
                             Extremes* partials, unsigned long long* counters) {
  __shared__ unsigned long long shared[kCounters];
  __shared__ typename BlockExtremes::TempStorage temp;
  for (int k = static_cast<int>(threadIdx.x); k < kCounters; k += static_cast<int>(blockDim.x)) shared[k] = 0;
  __syncthreads();

  Extremes e = no_extremes();
  NarrowCounts c16, cbf;
  unsigned long long nan = 0, pos_inf = 0, neg_inf = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const double x = load_element<double>(p, d, i);  // exact for every float dtype
    if (((bits_of(x) >> 52) & 0x7ff) == 0x7ff) {
      if (x != x)
        ++nan;
      else if (x > 0)
        ++pos_inf;
      else
        ++neg_inf;
      continue;
    }
    e.sum += x;
    e.sum_squares += x * x;
    e.min = total_min(e.min, x);
    e.max = total_max(e.max, x);
    const double a = fabs(x);
    e.absmax = a > e.absmax ? a : e.absmax;
    const bool nonzero = a != 0.0;
    e.min_nonzero = nonzero && a < e.min_nonzero ? a : e.min_nonzero;
    atomicAdd(&shared[exponent_bin(x)], 1ull);
    count_narrow(a, nonzero, f16, c16);
    count_narrow(a, nonzero, bf16, cbf);
  }
  if (nan != 0) atomicAdd(&shared[kNanCounter], nan);
  if (pos_inf != 0) atomicAdd(&shared[kNanCounter + 1], pos_inf);
  if (neg_inf != 0) atomicAdd(&shared[kNanCounter + 2], neg_inf);
  add_narrow(shared + kF16Counter, c16);
  add_narrow(shared + kBF16Counter, cbf);

  const Extremes block = BlockExtremes(temp).Reduce(e, CombineExtremes{});
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
  __syncthreads();  // every shared counter is in
  for (int k = static_cast<int>(threadIdx.x); k < kCounters; k += static_cast<int>(blockDim.x))
    if (shared[k] != 0) atomicAdd(&counters[k], shared[k]);
}

// The block results in a fixed order, and with the counters the summary, written to `out`
// (device memory): what stats copies back and stats_into leaves in its slot.
__global__ void stats_finish(const Extremes* partials, unsigned int count, const unsigned long long* counters,
                             std::int64_t n, NumericsSummary* out) {
  __shared__ typename BlockExtremes::TempStorage temp;
  Extremes e = no_extremes();
  for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) e = CombineExtremes{}(e, partials[k]);
  const Extremes total = BlockExtremes(temp).Reduce(e, CombineExtremes{});
  for (int k = static_cast<int>(threadIdx.x); k < NumericsSummary::kBins; k += static_cast<int>(blockDim.x))
    out->bins[k] = static_cast<std::int64_t>(counters[k]);
  if (threadIdx.x != 0) return;
  out->count = n;
  out->nan = static_cast<std::int64_t>(counters[kNanCounter]);
  out->pos_inf = static_cast<std::int64_t>(counters[kNanCounter + 1]);
  out->neg_inf = static_cast<std::int64_t>(counters[kNanCounter + 2]);
  NarrowCounts* narrow[2] = {&out->f16, &out->bf16};
  for (int j = 0; j < 2; ++j) {
    const unsigned long long* c = counters + (j == 0 ? kF16Counter : kBF16Counter);
    narrow[j]->overflow = static_cast<std::int64_t>(c[0]);
    narrow[j]->rounds_to_max = static_cast<std::int64_t>(c[1]);
    narrow[j]->underflow = static_cast<std::int64_t>(c[2]);
    narrow[j]->subnormal = static_cast<std::int64_t>(c[3]);
  }
  out->sum = total.sum;
  out->sum_squares = total.sum_squares;
  out->min = total.min;
  out->max = total.max;
  out->absmax = total.absmax;
  out->min_nonzero_abs = total.min_nonzero;
}

// Queues the pass over v and its summary into `slot` (device memory); nothing waits. The
// scratch goes back to the allocator at once: its reuse is stream-ordered (runtime.h). An
// empty v gets the empty summary (no block results, every counter 0).
void stats_into(const View& v, NumericsSummary* slot) {
  const std::int64_t n = v.numel();
  const unsigned int blocks = n == 0 ? 0 : blocks_for(n, kThreads);
  constexpr std::size_t kCounterBytes = kCounters * sizeof(unsigned long long);
  Scratch scratch(kCounterBytes + blocks * sizeof(Extremes));
  auto* counters = scratch.as<unsigned long long>();
  auto* partials = scratch.as<Extremes>(kCounterBytes);
  check(cudaMemsetAsync(counters, 0, kCounterBytes, stream()), "cudaMemsetAsync", "numerics stats");
  if (blocks > 0) {
    stats_blocks<<<blocks, kThreads, 0, stream()>>>(v.data, v.dtype, n, f16_bounds(), bf16_bounds(), partials,
                                                    counters);
    check_launch("stats_blocks", "numerics stats");
  }
  stats_finish<<<1, kThreads, 0, stream()>>>(partials, blocks, counters, n, slot);
  check_launch("stats_finish", "numerics stats");
}

// stats_into a slot of its own, copied back at once.
NumericsSummary stats(const View& v) {
  NumericsSummary s;
  s.count = v.numel();
  if (s.count == 0) return s;
  Scratch slot(sizeof(NumericsSummary));
  stats_into(v, slot.as<NumericsSummary>());
  fetch(&s, slot.get(), sizeof s, "numerics stats");
  return s;
}

// ---- the NaN/Inf watch's scan ----------------------------------------------------------

struct ScanPart {
  unsigned long long nan, pos_inf, neg_inf, zero, finite_nonzero;
  double min, max, absmax;
  double largest_abs;
  std::int64_t largest_index;  // the first element of that magnitude
  double largest;
};
__device__ ScanPart no_scan() {
  const double inf = CUDART_INF;
  return {0, 0, 0, 0, 0, inf, -inf, 0.0, 0.0, INT64_MAX, 0.0};
}
struct CombineScan {
  __device__ ScanPart operator()(const ScanPart& a, const ScanPart& b) const {
    const bool later = b.largest_abs > a.largest_abs || (b.largest_abs == a.largest_abs && b.largest_index < a.largest_index);
    return {a.nan + b.nan,
            a.pos_inf + b.pos_inf,
            a.neg_inf + b.neg_inf,
            a.zero + b.zero,
            a.finite_nonzero + b.finite_nonzero,
            total_min(a.min, b.min),
            total_max(a.max, b.max),
            b.absmax > a.absmax ? b.absmax : a.absmax,
            later ? b.largest_abs : a.largest_abs,
            later ? b.largest_index : a.largest_index,
            later ? b.largest : a.largest};
  }
};
using BlockScan = cub::BlockReduce<ScanPart, kThreads>;

__global__ void scan_blocks(const void* p, DType d, std::int64_t n, ScanPart* partials) {
  __shared__ typename BlockScan::TempStorage temp;
  ScanPart s = no_scan();
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const double x = load_element<double>(p, d, i);
    if (x != x) {
      ++s.nan;
    } else if (isinf(x)) {
      ++(x > 0 ? s.pos_inf : s.neg_inf);
    } else {
      const double a = fabs(x);
      s.min = total_min(s.min, x);
      s.max = total_max(s.max, x);
      s.absmax = a > s.absmax ? a : s.absmax;
      if (a == 0) {
        ++s.zero;
      } else {
        ++s.finite_nonzero;
        if (a > s.largest_abs) {  // indices rise within a thread: the first of a magnitude stays
          s.largest_abs = a;
          s.largest_index = i;
          s.largest = x;
        }
      }
    }
  }
  const ScanPart block = BlockScan(temp).Reduce(s, CombineScan{});
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

__global__ void scan_finish(const ScanPart* partials, unsigned int count, ScanPart* out) {
  __shared__ typename BlockScan::TempStorage temp;
  ScanPart s = no_scan();
  for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) s = CombineScan{}(s, partials[k]);
  const ScanPart total = BlockScan(temp).Reduce(s, CombineScan{});
  if (threadIdx.x == 0) *out = total;
}

ValueScan scan(const View& v) {
  ValueScan r;
  const std::int64_t n = v.numel();
  if (n == 0) return r;
  const unsigned int blocks = blocks_for(n, kThreads);
  Scratch scratch((blocks + 1) * sizeof(ScanPart));
  auto* partials = scratch.as<ScanPart>();
  scan_blocks<<<blocks, kThreads, 0, stream()>>>(v.data, v.dtype, n, partials);
  check_launch("scan_blocks", "non-finite scan");
  scan_finish<<<1, kThreads, 0, stream()>>>(partials, blocks, partials + blocks);
  check_launch("scan_finish", "non-finite scan");
  ScanPart s;
  fetch(&s, partials + blocks, sizeof s, "non-finite scan");
  r.nan = static_cast<std::int64_t>(s.nan);
  r.pos_inf = static_cast<std::int64_t>(s.pos_inf);
  r.neg_inf = static_cast<std::int64_t>(s.neg_inf);
  r.zero = static_cast<std::int64_t>(s.zero);
  r.finite_nonzero = static_cast<std::int64_t>(s.finite_nonzero);
  if (r.zero + r.finite_nonzero > 0) {
    r.min = s.min;
    r.max = s.max;
    r.absmax = s.absmax;
  }
  r.largest = s.largest;
  return r;
}

// ---- bit checks -------------------------------------------------------------------------

// flag = 1 when an element's masked bits are all ones (kAllOnes) or not all zero.
template <typename Bits, bool kAllOnes>
__global__ void bits_any(const Bits* p, std::int64_t n, Bits mask, unsigned int* flag) {
  bool hit = false;
  for (std::int64_t i = first_index(); i < n && !hit; i += grid_stride()) {
    const Bits b = static_cast<Bits>(p[i] & mask);
    hit = kAllOnes ? b == mask : b != 0;
  }
  if (__syncthreads_or(hit) && threadIdx.x == 0) atomicOr(flag, 1u);
}

template <bool kAllOnes, typename Bits>
bool launch_bits_any(const View& v, Bits mask, const char* op) {
  const std::int64_t n = v.numel();
  if (n == 0) return false;
  Scratch scratch(sizeof(unsigned int));
  auto* flag = scratch.as<unsigned int>();
  check(cudaMemsetAsync(flag, 0, sizeof(unsigned int), stream()), "cudaMemsetAsync", op);
  bits_any<Bits, kAllOnes><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(v.as<const Bits>(), n, mask, flag);
  check_launch("bits_any", op);
  unsigned int hit = 0;
  fetch(&hit, flag, sizeof hit, op);
  return hit != 0;
}

bool all_finite(const View& v) {
  const char* op = "finite check";
  switch (v.dtype) {
    case DType::f64: return !launch_bits_any<true, std::uint64_t>(v, 0x7ff0000000000000ull, op);
    case DType::f32: return !launch_bits_any<true, std::uint32_t>(v, 0x7f800000u, op);
    case DType::f16: return !launch_bits_any<true, std::uint16_t>(v, 0x7c00u, op);
    case DType::bf16: return !launch_bits_any<true, std::uint16_t>(v, 0x7f80u, op);
    case DType::i64: return true;
  }
  return true;
}

bool any_nonzero(const View& v) {
  const char* op = "nonzero check";
  switch (v.dtype) {
    case DType::f64: return launch_bits_any<false, std::uint64_t>(v, 0x7fffffffffffffffull, op);
    case DType::f32: return launch_bits_any<false, std::uint32_t>(v, 0x7fffffffu, op);
    case DType::f16:
    case DType::bf16: return launch_bits_any<false, std::uint16_t>(v, 0x7fffu, op);
    case DType::i64: return false;
  }
  return false;
}

// ---- update swamping --------------------------------------------------------------------

using BlockCount = cub::BlockReduce<unsigned long long, kThreads>;

__global__ void swamped_blocks(const void* w, DType wd, const void* u, DType ud, DType param, std::int64_t n,
                               unsigned long long* counts) {
  __shared__ typename BlockCount::TempStorage temp;
  unsigned long long nonzero = 0, swamped = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const double dw = load_element<double>(u, ud, i);
    if (dw == 0.0) continue;
    ++nonzero;
    swamped += swamped_element(rounded_to(load_element<double>(w, wd, i), param), dw, param) ? 1 : 0;
  }
  const unsigned long long block_nonzero = BlockCount(temp).Sum(nonzero);
  __syncthreads();  // the temporary storage is used again
  const unsigned long long block_swamped = BlockCount(temp).Sum(swamped);
  if (threadIdx.x == 0) {
    if (block_nonzero != 0) atomicAdd(&counts[0], block_nonzero);
    if (block_swamped != 0) atomicAdd(&counts[1], block_swamped);
  }
}

SwampCounts swamped(const View& weight_before, const View& update, DType param_dtype) {
  SwampCounts c;
  const std::int64_t n = weight_before.numel();
  if (n == 0) return c;
  Scratch scratch(2 * sizeof(unsigned long long));
  auto* counts = scratch.as<unsigned long long>();
  check(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), stream()), "cudaMemsetAsync", "swamped_fraction");
  swamped_blocks<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
      weight_before.data, weight_before.dtype, update.data, update.dtype, param_dtype, n, counts);
  check_launch("swamped_blocks", "swamped_fraction");
  unsigned long long host[2] = {0, 0};
  fetch(host, counts, sizeof host, "swamped_fraction");
  c.nonzero = static_cast<std::int64_t>(host[0]);
  c.swamped = static_cast<std::int64_t>(host[1]);
  return c;
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const NumericsKernels& NumericsKernels::cuda() {
  static const NumericsKernels k{&cuda::stats,      &cuda::stats_into,  &cuda::scan,
                                 &cuda::all_finite, &cuda::any_nonzero, &cuda::swamped};
  return k;
}

}  // namespace ampcheck::kernels
