// Reads top to bottom: the micro-kernel written once over a vector type, its scalar,
// AVX2 and AVX-512 instances (each compiled for its target with a pragma region, so the
// rest of the library stays portable), packing, the tile driver, the plan.
//
// Why every path gives the same bits (gemm.h): a micro-kernel keeps an MR x NR block of
// C in registers, one element per lane, and for p = 0, 1, ..., kc-1 does
// acc[r][j] = fma(a[r, p], b[p, j], acc[r][j]). Lane j of a vector is the same chain a
// scalar loop would run; vector width, MR and NR only decide how many chains run side
// by side. Between k blocks the chains rest in C (f32 for f32, f64 for f64), exactly the
// value the register held.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>      // std::fma: the scalar path's one rounding
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"  // cpu_features: which paths this CPU runs

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2/FMA and AVX-512F intrinsics
#endif

namespace ampcheck::kernels::cpu {
namespace {

using i64 = std::int64_t;

// k steps per block: an A micro-panel (MR x kKc) stays in L1 while the B block
// (kKc x tile_n) streams from L2.
constexpr i64 kKc = 256;

// ---- the micro-kernel: kernels/cpu/gemm_micro_kernel.inc, instanced per target ----
template <typename T>
using MicroKernel = void (*)(i64 kc, const T* a, const T* b, T* c, i64 ldc, bool load_c);

template <typename T>
struct Kernel {
  int mr = 1, nr = 1;
  MicroKernel<T> run = nullptr;
};

// ---- scalar: std::fma, one rounding per step, as the vector FMAs ------------------
template <typename Elem>
struct ScalarOps {
  using T = Elem;
  using V = Elem;
  static constexpr int W = 1;
  static V zero() { return T(0); }
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V broadcast(const T* p) { return *p; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
};

namespace scalar_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* helpers as "maybe uninitialized" once they
// are inlined (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---- AVX2 + FMA: 8 f32 / 4 f64 lanes, 16 registers: 6 rows x 2 vectors --------------
#pragma GCC push_options
#pragma GCC target("avx2,fma")
struct Avx2F32 {
  using T = float;
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const T* p) { return _mm256_loadu_ps(p); }
  static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
  static V broadcast(const T* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
struct Avx2F64 {
  using T = double;
  using V = __m256d;
  static constexpr int W = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
  static V broadcast(const T* p) { return _mm256_broadcast_sd(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
};
namespace avx2_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}
#pragma GCC pop_options

// ---- AVX-512F: 16 f32 / 8 f64 lanes, 32 registers: 12 rows x 2 vectors --------------
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
struct Avx512F32 {
  using T = float;
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const T* p) { return _mm512_loadu_ps(p); }
  static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
  static V broadcast(const T* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
struct Avx512F64 {
  using T = double;
  using V = __m512d;
  static constexpr int W = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const T* p) { return _mm512_loadu_pd(p); }
  static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
  static V broadcast(const T* p) { return _mm512_set1_pd(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
};
namespace avx512_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}
#pragma GCC pop_options
#pragma GCC diagnostic pop
#endif  // __x86_64__

Kernel<float> kernel_for(GemmIsa isa, float) {
#if defined(__x86_64__)
  if (isa == GemmIsa::avx512) return {12, 32, avx512_path::micro_kernel<Avx512F32, 12, 2>};
  if (isa == GemmIsa::avx2) return {6, 16, avx2_path::micro_kernel<Avx2F32, 6, 2>};
#endif
  (void)isa;
  return {4, 4, scalar_path::micro_kernel<ScalarOps<float>, 4, 4>};
}
Kernel<double> kernel_for(GemmIsa isa, double) {
#if defined(__x86_64__)
  if (isa == GemmIsa::avx512) return {12, 16, avx512_path::micro_kernel<Avx512F64, 12, 2>};
  if (isa == GemmIsa::avx2) return {6, 8, avx2_path::micro_kernel<Avx2F64, 6, 2>};
#endif
  (void)isa;
  return {4, 4, scalar_path::micro_kernel<ScalarOps<double>, 4, 4>};
}

// ---- packing ----------------------------------------------------------------------
// op(A) rows [i0, i0+rows) x k steps [p0, p0+kc) as MR-row panels, k-major within a
// panel; rows past the end are zero (their results are never stored).
template <typename T>
void pack_a(const GemmArgs<T>& g, i64 i0, i64 rows, i64 p0, i64 kc, int mr, T* out) {
  for (i64 ip = 0; ip < rows; ip += mr) {
    const i64 valid = std::min<i64>(mr, rows - ip);
    T* panel = out + ip * kc;
    if (g.trans_a) {  // A stored [k, m]: a panel's MR values per k step are contiguous
      for (i64 p = 0; p < kc; ++p) {
        const T* src = g.a + (p0 + p) * g.lda + i0 + ip;
        for (i64 r = 0; r < valid; ++r) panel[p * mr + r] = src[r];
        for (i64 r = valid; r < mr; ++r) panel[p * mr + r] = T(0);
      }
    } else {  // A stored [m, k]: each row contiguous
      for (i64 r = 0; r < valid; ++r) {
        const T* src = g.a + (i0 + ip + r) * g.lda + p0;
        for (i64 p = 0; p < kc; ++p) panel[p * mr + r] = src[p];
      }
      for (i64 r = valid; r < mr; ++r)
        for (i64 p = 0; p < kc; ++p) panel[p * mr + r] = T(0);
    }
  }
}

// op(B) k steps [p0, p0+kc) x columns [j0, j0+cols) as NR-column panels.
template <typename T>
void pack_b(const GemmArgs<T>& g, i64 j0, i64 cols, i64 p0, i64 kc, int nr, T* out) {
  for (i64 jp = 0; jp < cols; jp += nr) {
    const i64 valid = std::min<i64>(nr, cols - jp);
    T* panel = out + jp * kc;
    if (g.trans_b) {  // B stored [n, k]: each column of op(B) contiguous
      for (i64 j = 0; j < valid; ++j) {
        const T* src = g.b + (j0 + jp + j) * g.ldb + p0;
        for (i64 p = 0; p < kc; ++p) panel[p * nr + j] = src[p];
      }
      for (i64 j = valid; j < nr; ++j)
        for (i64 p = 0; p < kc; ++p) panel[p * nr + j] = T(0);
    } else {  // B stored [k, n]: NR contiguous values per k step
      for (i64 p = 0; p < kc; ++p) {
        std::memcpy(panel + p * nr, g.b + (p0 + p) * g.ldb + j0 + jp, static_cast<std::size_t>(valid) * sizeof(T));
        for (i64 j = valid; j < nr; ++j) panel[p * nr + j] = T(0);
      }
    }
  }
}

// ---- one tile ------------------------------------------------------------------------
template <typename T>
void run_tile(const GemmPlan& plan, const GemmArgs<T>& g, i64 tile) {
  const Kernel<T> kern = kernel_for(plan.isa, T{});
  const i64 i0 = (tile / plan.tiles_n) * plan.tile_m, j0 = (tile % plan.tiles_n) * plan.tile_n;
  const i64 rows = std::min(plan.tile_m, g.m - i0), cols = std::min(plan.tile_n, g.n - j0);
  if (g.k == 0) {  // empty chains: C keeps its value, or is 0
    if (!g.accumulate)
      for (i64 i = 0; i < rows; ++i) std::fill_n(g.c + (i0 + i) * g.ldc + j0, cols, T(0));
    return;
  }
  const i64 rows_padded = (rows + kern.mr - 1) / kern.mr * kern.mr;
  const i64 cols_padded = (cols + kern.nr - 1) / kern.nr * kern.nr;
  thread_local std::vector<T> a_pack, b_pack;
  a_pack.resize(static_cast<std::size_t>(rows_padded * std::min(kKc, g.k)));
  b_pack.resize(static_cast<std::size_t>(cols_padded * std::min(kKc, g.k)));
  T edge[16 * 32];  // one MR x NR block where the tile's edge cuts it (largest: 12 x 32)

  for (i64 p0 = 0; p0 < g.k; p0 += kKc) {
    const i64 kc = std::min(kKc, g.k - p0);
    const bool load_c = g.accumulate || p0 > 0;  // later blocks continue the chains in C
    pack_a(g, i0, rows, p0, kc, kern.mr, a_pack.data());
    pack_b(g, j0, cols, p0, kc, kern.nr, b_pack.data());
    for (i64 ip = 0; ip < rows; ip += kern.mr) {
      const T* a_panel = a_pack.data() + ip * kc;
      const i64 mr = std::min<i64>(kern.mr, rows - ip);
      for (i64 jp = 0; jp < cols; jp += kern.nr) {
        const T* b_panel = b_pack.data() + jp * kc;
        const i64 nr = std::min<i64>(kern.nr, cols - jp);
        T* c = g.c + (i0 + ip) * g.ldc + j0 + jp;
        if (mr == kern.mr && nr == kern.nr) {
          kern.run(kc, a_panel, b_panel, c, g.ldc, load_c);
          continue;
        }
        // The edge block runs the same kernel on a copy: the same chains, fewer stored.
        if (load_c)
          for (i64 r = 0; r < mr; ++r) std::copy_n(c + r * g.ldc, nr, edge + r * kern.nr);
        kern.run(kc, a_panel, b_panel, edge, kern.nr, load_c);
        for (i64 r = 0; r < mr; ++r) std::copy_n(edge + r * kern.nr, nr, c + r * g.ldc);
      }
    }
  }
}

template <typename T>
void tiles_with(const GemmPlan& plan, const GemmArgs<T>& g, i64 first, i64 last) {
  if (first < 0 || last > plan.tiles() || first > last)
    throw std::invalid_argument("gemm: tiles [" + std::to_string(first) + ", " + std::to_string(last) +
                                ") outside the plan's " + std::to_string(plan.tiles()));
  for (i64 t = first; t < last; ++t) run_tile(plan, g, t);
}

}  // namespace

std::string_view gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::avx512: return "avx512";
    case GemmIsa::avx2: return "avx2";
    case GemmIsa::scalar: break;
  }
  return "scalar";
}

bool gemm_isa_supported(GemmIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case GemmIsa::avx512: return f.avx512f && f.avx2 && f.fma;
    case GemmIsa::avx2: return f.avx2 && f.fma;
    case GemmIsa::scalar: break;
  }
  return true;
}

template <typename T>
GemmPlan gemm_plan(const GemmArgs<T>& g, GemmIsa isa) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("gemm: " + what); };
  if (g.m < 0 || g.n < 0 || g.k < 0)
    bad("negative size m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k));
  const i64 a_row = g.trans_a ? g.m : g.k, b_row = g.trans_b ? g.k : g.n;
  if (g.lda < std::max<i64>(1, a_row)) bad("lda " + std::to_string(g.lda) + " < " + std::to_string(a_row));
  if (g.ldb < std::max<i64>(1, b_row)) bad("ldb " + std::to_string(g.ldb) + " < " + std::to_string(b_row));
  if (g.ldc < std::max<i64>(1, g.n)) bad("ldc " + std::to_string(g.ldc) + " < " + std::to_string(g.n));
  if (!gemm_isa_supported(isa))
    bad("the " + std::string(gemm_isa_name(isa)) + " path is not supported by this CPU");

  GemmPlan plan;
  plan.isa = isa;
  if (g.m == 0 || g.n == 0) return plan;  // no tiles
  const Kernel<T> kern = kernel_for(isa, T{});
  // Tiles of up to 8 x 8 micro-blocks; the shape decides, never the thread count. A tile
  // is cut smaller in m while the GEMM has fewer than 8 tiles of real work, so that a
  // medium GEMM still spreads over the cores. (The plan changes speed, never bits.)
  auto round_up = [](i64 v, i64 to) { return (v + to - 1) / to * to; };
  plan.tile_n = std::min(round_up(g.n, kern.nr), i64{8} * kern.nr);
  plan.tile_m = std::min(round_up(g.m, kern.mr), i64{8} * kern.mr);
  auto count = [&] { return ((g.m + plan.tile_m - 1) / plan.tile_m) * ((g.n + plan.tile_n - 1) / plan.tile_n); };
  constexpr i64 kMinTileWork = i64{1} << 17;  // multiply-adds: below this a tile is not worth a thread
  while (count() < 8 && plan.tile_m > kern.mr && (plan.tile_m / 2) * plan.tile_n * std::max<i64>(g.k, 1) >= kMinTileWork)
    plan.tile_m = round_up(plan.tile_m / 2, kern.mr);
  plan.tiles_m = (g.m + plan.tile_m - 1) / plan.tile_m;
  plan.tiles_n = (g.n + plan.tile_n - 1) / plan.tile_n;
  return plan;
}

template GemmPlan gemm_plan(const GemmArgs<float>&, GemmIsa);
template GemmPlan gemm_plan(const GemmArgs<double>&, GemmIsa);

void gemm_tiles(const GemmPlan& plan, const GemmArgs<float>& args, i64 first, i64 last) {
  tiles_with(plan, args, first, last);
}
void gemm_tiles(const GemmPlan& plan, const GemmArgs<double>& args, i64 first, i64 last) {
  tiles_with(plan, args, first, last);
}

}  // namespace ampcheck::kernels::cpu
