// The CPU GEMM: C[m,n] = op(A)[m,k] . op(B)[k,n], row-major, in f32 or f64.
//
// Its one promise is the summation order. Every element of C is ONE chain of fused
// multiply-adds over k in ascending order,
//     c = fma(a[i,0], b[0,j], c0);  c = fma(a[i,1], b[1,j], c);  ...  c = fma(a[i,k-1], b[k-1,j], c)
// with c0 = 0, or C's own value when accumulating. No partial sums, no reassociation:
// the scalar path, the AVX2 path (8 lanes) and the AVX-512 path (16 lanes) hold one
// element per lane and step k the same way, blocking over k stores the chain's partial
// value in C's own precision between blocks (where the chain would hold it anyway), and
// the work is cut into output tiles, each computed whole by one thread. So the bits of
// C depend on the inputs only: not on the ISA, the cache blocking, the thread count or
// the machine. (A BLAS promises none of that: see tests/gemm_test.cpp and
// bench/blas_order_probe.cpp for what OpenBLAS's kernels do.)
//
// Threading is the caller's: gemm_tiles() runs tiles [first, last) of a plan whose tile
// count depends on the shape only, so any partition of the tiles over threads gives the
// same result.
#pragma once

#include <cstdint>
#include <string_view>

namespace ampcheck::kernels::cpu {

// The instruction sets the GEMM has a micro-kernel for.
enum class GemmIsa : int { scalar, avx2, avx512 };
std::string_view gemm_isa_name(GemmIsa isa);
bool gemm_isa_supported(GemmIsa isa);  // AVX2 also needs FMA; AVX-512 needs AVX-512F
// The path the CPU GEMM takes: AVX-512 where the CPU has it, else AVX2+FMA, else scalar,
// capped by AMPCHECK_CPU_ISA as the conversions are (scalar -> scalar, f16c -> avx2,
// avx512 and avx512_bf16 -> avx512; see active_isa()). Every path gives the same bits.
GemmIsa active_gemm_isa();

template <typename T>
struct GemmArgs {
  bool trans_a = false, trans_b = false;  // op(A) = A^T: A is stored [k, m]; likewise B [n, k]
  std::int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;
  std::int64_t lda = 0;  // row stride of A as stored
  const T* b = nullptr;
  std::int64_t ldb = 0;
  T* c = nullptr;
  std::int64_t ldc = 0;
  bool accumulate = false;  // chains start from C's value instead of 0 (C is read)
};

// The output tiles of a GEMM: a function of (m, n, k, isa) only.
struct GemmPlan {
  GemmIsa isa = GemmIsa::scalar;
  std::int64_t tile_m = 1, tile_n = 1;  // rows and columns of C per tile
  std::int64_t tiles_m = 0, tiles_n = 0;
  std::int64_t tiles() const { return tiles_m * tiles_n; }
};

// Throws std::invalid_argument for negative sizes, strides smaller than a row, or an
// ISA this CPU does not run.
template <typename T>
GemmPlan gemm_plan(const GemmArgs<T>& args, GemmIsa isa);

// Computes tiles [first, last) of the plan; tiles never overlap.
void gemm_tiles(const GemmPlan& plan, const GemmArgs<float>& args, std::int64_t first, std::int64_t last);
void gemm_tiles(const GemmPlan& plan, const GemmArgs<double>& args, std::int64_t first, std::int64_t last);

// All tiles on the calling thread.
template <typename T>
void gemm(const GemmArgs<T>& args, GemmIsa isa) {
  const GemmPlan plan = gemm_plan(args, isa);
  gemm_tiles(plan, args, 0, plan.tiles());
}

}  // namespace ampcheck::kernels::cpu
