// Reads top to bottom: the kernel table, the scalar, AVX2 and AVX-512 vector types and
// their instances of the micro-kernel (kernels/cpu/gemm_micro_kernel.inc, written once,
// compiled per target in a pragma region so the rest of the library stays portable), the
// tile driver, the plan.
//
// Why every path gives the same bits (gemm.h): a micro-kernel keeps a block of up to
// MR x NR elements of C in registers, one element per lane, and for p = 0, 1, ..., kc-1
// does acc[r][j] = fma(a[r, p], b[p, j], acc[r][j]). Lane j of a vector is the same chain
// a scalar loop would run; vector width, MR and NR only decide how many chains run side
// by side. Between k blocks the chains rest in C (f32 for f32, f64 for f64), exactly the
// value the register held.
//
// Data movement (what makes it fast, never what it computes): A is read in place (a
// broadcast reads one element, wherever it is); so is B stored [k, n] (NR contiguous
// values per k step, masked at the edge); B stored [n, k] is packed once per k block of
// a tile into NR-wide panels, through 8 x 8 (f64: 4 x 4) register transposes.
#include "kernels/cpu/gemm.h"

#include "kernels/cpu/convert.h"  // active_isa: AMPCHECK_CPU_ISA caps the GEMM path too

#include <algorithm>
#include <array>
#include <cmath>      // std::fma: the scalar path's one rounding
#include <stdexcept>  // std::invalid_argument
#include <string>
#include <type_traits>  // std::conditional_t: the f32 or f64 instance of a path
#include <utility>    // std::index_sequence: the instances by row count
#include <vector>

#include "kernels/cpu/cpu_features.h"  // cpu_features: which paths this CPU runs

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2/FMA and AVX-512F intrinsics

// A region of functions (the path's structs and its micro-kernels) compiled for `isa`:
// GCC's push_options / target, clang's attribute push (clang has no target pragma).
#if defined(__clang__)
#define AMPCHECK_PRAGMA(x) _Pragma(#x)
#define AMPCHECK_TARGET_BEGIN(isa) AMPCHECK_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define AMPCHECK_TARGET_END _Pragma("clang attribute pop")
#else
#define AMPCHECK_PRAGMA(x) _Pragma(#x)
#define AMPCHECK_TARGET_BEGIN(isa) _Pragma("GCC push_options") AMPCHECK_PRAGMA(GCC target(isa))
#define AMPCHECK_TARGET_END _Pragma("GCC pop_options")
#endif
#endif

namespace ampcheck::kernels::cpu {
namespace {

using i64 = std::int64_t;

// k steps per block: the A rows of a micro-kernel (MR x kKc) stay in L1 while the packed
// B block (kKc x tile_n) streams from L2.
constexpr i64 kKc = 256;
constexpr int kMaxMr = 12;

template <typename T>
using MicroKernel = void (*)(i64 kc, const T* a, i64 rs_a, i64 cs_a, const T* b, i64 rs_b, T* c, i64 ldc,
                             int cols, bool load_c);
template <typename T>
using PackB = void (*)(const GemmArgs<T>& g, i64 j0, i64 cols, i64 p0, i64 kc, T* out);

// One path's instances: whole[r-1] computes r rows of NR columns, edge[r-1] r rows of
// fewer columns (masked loads of B and C, masked stores of C), narrow[r-1] the same with
// one vector for an edge of at most one vector's width; pack_b packs B's panels.
template <typename T>
struct Kernels {
  int mr = 1, nr = 1, lanes = 1;
  std::array<MicroKernel<T>, kMaxMr> whole{}, edge{}, narrow{};
  PackB<T> pack_b = nullptr;
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
  static V load_first(const T* p, int n) { return n > 0 ? *p : T(0); }
  static void store_first(T* p, V v, int n) {
    if (n > 0) *p = v;
  }
  static V broadcast(const T* p) { return *p; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static constexpr int kTranspose = 1;
  static void transpose(const T* s, i64, T* d, i64) { *d = *s; }
};

namespace scalar_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* helpers as "maybe uninitialized" once they
// are inlined (GCC bug 105593); the warning says nothing about this code.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// ---- AVX2 + FMA: 8 f32 / 4 f64 lanes, 16 registers: 6 rows x 2 vectors --------------
AMPCHECK_TARGET_BEGIN("avx2,fma")
// d[p * ld + j] = s[j * ls + p] for an 8 x 8 block of f32 (the classic unpack /
// shuffle / permute2f128 transpose).
[[gnu::always_inline]] inline void transpose_8x8(const float* s, i64 ls, float* d, i64 ld) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ls);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}
// The same for a 4 x 4 block of f64.
[[gnu::always_inline]] inline void transpose_4x4(const double* s, i64 ls, double* d, i64 ld) {
  const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ls), r2 = _mm256_loadu_pd(s + 2 * ls),
                r3 = _mm256_loadu_pd(s + 3 * ls);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(d + ld, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(d + 2 * ld, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(d + 3 * ld, _mm256_permute2f128_pd(t1, t3, 0x31));
}

struct Avx2F32 {
  using T = float;
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const T* p) { return _mm256_loadu_ps(p); }
  static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
  static __m256i first(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
  static V load_first(const T* p, int n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_first(T* p, V v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  static V broadcast(const T* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static constexpr int kTranspose = 8;
  static void transpose(const T* s, i64 ls, T* d, i64 ld) { transpose_8x8(s, ls, d, ld); }
};
struct Avx2F64 {
  using T = double;
  using V = __m256d;
  static constexpr int W = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
  static __m256i first(int n) { return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)); }
  static V load_first(const T* p, int n) { return _mm256_maskload_pd(p, first(n)); }
  static void store_first(T* p, V v, int n) { _mm256_maskstore_pd(p, first(n), v); }
  static V broadcast(const T* p) { return _mm256_broadcast_sd(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static constexpr int kTranspose = 4;
  static void transpose(const T* s, i64 ls, T* d, i64 ld) { transpose_4x4(s, ls, d, ld); }
};
namespace avx2_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}
AMPCHECK_TARGET_END

// ---- AVX-512F: 16 f32 / 8 f64 lanes, 32 registers: 12 rows x 2 vectors --------------
AMPCHECK_TARGET_BEGIN("avx512f,avx2,fma")
struct Avx512F32 {
  using T = float;
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const T* p) { return _mm512_loadu_ps(p); }
  static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V load_first(const T* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_first(T* p, V v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static V broadcast(const T* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static constexpr int kTranspose = 8;
  static void transpose(const T* s, i64 ls, T* d, i64 ld) { transpose_8x8(s, ls, d, ld); }
};
struct Avx512F64 {
  using T = double;
  using V = __m512d;
  static constexpr int W = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const T* p) { return _mm512_loadu_pd(p); }
  static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
  static __mmask8 first(int n) { return static_cast<__mmask8>((1u << n) - 1u); }
  static V load_first(const T* p, int n) { return _mm512_maskz_loadu_pd(first(n), p); }
  static void store_first(T* p, V v, int n) { _mm512_mask_storeu_pd(p, first(n), v); }
  static V broadcast(const T* p) { return _mm512_set1_pd(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static constexpr int kTranspose = 4;
  static void transpose(const T* s, i64 ls, T* d, i64 ld) { transpose_4x4(s, ls, d, ld); }
};
namespace avx512_path {
#include "kernels/cpu/gemm_micro_kernel.inc"
}
AMPCHECK_TARGET_END
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // __x86_64__

// The instances are built once per path and element type, each only when its path is
// asked for: a path's builder is compiled for its ISA (it may copy the table with AVX-512
// stores), so building it on a CPU without that ISA is an illegal instruction.
template <typename T>
const Kernels<T>& kernels_for(GemmIsa isa) {
  constexpr bool f32 = std::is_same_v<T, float>;
#if defined(__x86_64__)
  using Avx512 = std::conditional_t<f32, Avx512F32, Avx512F64>;
  using Avx2 = std::conditional_t<f32, Avx2F32, Avx2F64>;
  // Each built on its path's first use only: building one runs that path's instructions
  // (GCC copies the table with AVX-512 moves), which a CPU without them cannot execute.
  if (isa == GemmIsa::avx512) {
    static const Kernels<T> avx512 = avx512_path::kernels<Avx512, 12, 2>();
    return avx512;
  }
  if (isa == GemmIsa::avx2) {
    static const Kernels<T> avx2 = avx2_path::kernels<Avx2, 6, 2>();
    return avx2;
  }
#endif
  static const Kernels<T> scalar = scalar_path::kernels<ScalarOps<T>, 4, 4>();
  (void)isa;
  return scalar;
}

// ---- one tile ------------------------------------------------------------------------
// Rows [i0, i0+rows) x columns [j0, j0+cols) of C. Per k block: every MR-row strip of
// the tile runs the micro-kernels along B's NR-column panels.
template <typename T>
void run_tile(const GemmPlan& plan, const GemmArgs<T>& g, i64 tile) {
  const Kernels<T>& kern = kernels_for<T>(plan.isa);
  const i64 i0 = (tile / plan.tiles_n) * plan.tile_m, j0 = (tile % plan.tiles_n) * plan.tile_n;
  const i64 rows = std::min(plan.tile_m, g.m - i0), cols = std::min(plan.tile_n, g.n - j0);
  if (g.k == 0) {  // empty chains: C keeps its value, or is 0
    if (!g.accumulate)
      for (i64 i = 0; i < rows; ++i) std::fill_n(g.c + (i0 + i) * g.ldc + j0, cols, T(0));
    return;
  }
  // op(B) panels: B stored [n, k] is packed, per k block, into NR-wide panels; so is a B
  // [k, n] whose panels serve more than 4 strips of rows (contiguous panels beat rows
  // that far apart); otherwise B [k, n] is read in place, row p of a panel at stride ldb.
  const bool pack = g.trans_b || rows > 4 * kern.mr;
  thread_local std::vector<T> b_pack;
  if (pack) b_pack.resize(static_cast<std::size_t>((cols + kern.nr - 1) / kern.nr * kern.nr * std::min(kKc, g.k)));
  // op(A)(i, p) in place: A [m, k] row-major, or A^T of a [k, m] one.
  const i64 rs_a = g.trans_a ? 1 : g.lda, cs_a = g.trans_a ? g.lda : 1;

  for (i64 p0 = 0; p0 < g.k; p0 += kKc) {
    const i64 kc = std::min(kKc, g.k - p0);
    const bool load_c = g.accumulate || p0 > 0;  // later blocks continue the chains in C
    if (pack) kern.pack_b(g, j0, cols, p0, kc, b_pack.data());
    const i64 rs_b = pack ? kern.nr : g.ldb;
    for (i64 ip = 0; ip < rows; ip += kern.mr) {
      const i64 mr = std::min<i64>(kern.mr, rows - ip);
      const T* a = g.a + (i0 + ip) * rs_a + p0 * cs_a;
      const MicroKernel<T> whole = kern.whole[static_cast<std::size_t>(mr - 1)];
      for (i64 jp = 0; jp < cols; jp += kern.nr) {
        const i64 nr = std::min<i64>(kern.nr, cols - jp);
        const T* b = pack ? b_pack.data() + jp * kc : g.b + p0 * g.ldb + j0 + jp;
        T* c = g.c + (i0 + ip) * g.ldc + j0 + jp;
        const MicroKernel<T> run = nr == kern.nr      ? whole
                                   : nr <= kern.lanes ? kern.narrow[static_cast<std::size_t>(mr - 1)]
                                                      : kern.edge[static_cast<std::size_t>(mr - 1)];
        run(kc, a, rs_a, cs_a, b, rs_b, c, g.ldc, static_cast<int>(nr), load_c);
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
  const Kernels<T>& kern = kernels_for<T>(isa);
  // Tiles of up to 32 x 8 micro-blocks (B is packed once per tile and k block, so tall
  // tiles pack it rarely); the shape decides, never the thread count. A tile is cut
  // smaller in m while the GEMM has fewer than 8 tiles of real work, so that a medium
  // GEMM still spreads over the cores. (The plan changes speed, never bits.)
  auto round_up = [](i64 v, i64 to) { return (v + to - 1) / to * to; };
  plan.tile_n = std::min(round_up(g.n, kern.nr), i64{8} * kern.nr);
  plan.tile_m = std::min(round_up(g.m, kern.mr), i64{32} * kern.mr);
  auto count = [&] { return ((g.m + plan.tile_m - 1) / plan.tile_m) * ((g.n + plan.tile_n - 1) / plan.tile_n); };
  constexpr i64 kMinTileWork = i64{1} << 20;  // multiply-adds: below this a tile is not worth a thread
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

GemmIsa active_gemm_isa() {
  static const GemmIsa isa = [] {
    const Isa limit = active_isa();
    GemmIsa best = GemmIsa::scalar;
    if (limit >= Isa::f16c && gemm_isa_supported(GemmIsa::avx2)) best = GemmIsa::avx2;
    if (limit >= Isa::avx512 && gemm_isa_supported(GemmIsa::avx512)) best = GemmIsa::avx512;
    return best;
  }();
  return isa;
}

}  // namespace ampcheck::kernels::cpu
