// The fp8 GEMM of an fp8 Linear, as TransformerEngine runs it (cuBLASLt's fp8 matmul):
//
//   C[m,n] = (a_scale_inv * b_scale_inv) * sum_k op(A)[m,k] op(B)[k,n]  (+ C)  (+ bias[n])
//
// A and B hold fp8 codes, each in its own format (HYBRID multiplies an E5M2 gradient by an
// E4M3 operand; E5M2 by E5M2 is refused, as cuBLASLt refuses it), row-major, packed, with
// the transposes of kernels/gemm_kernels.h. The products accumulate in binary32; the
// scale is one binary32 product of the two inverse scales, applied once to each sum; then
// C's old value (accumulate) and the bias are added in binary32, and the result is rounded
// once to C's dtype (f32, f16 or bf16; the bias has C's dtype or f32).
//
// cpu(): the codes widened exactly to binary32 (kernels/cpu/fp8.h), the project's GEMM
// (kernels/cpu/gemm.h): one fma chain over k in ascending order per element. A product of
// two fp8 values is exact in binary32 (at most 4 x 4 significant bits), so the chain's
// only roundings are those of its sums: the bits depend on the inputs alone.
// cuda(): cublasLtMatmul with CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 operands, CUBLAS_COMPUTE_32F,
// the inverse scales as its A/B scale pointers (sm_89 and later). Its accumulation order
// is the library's, and with split_accumulator off (TE's forward GEMM) Hopper's fast
// accumulation keeps fewer bits between promotions: parity with cpu() is to a tolerance,
// the quantization before it is bit-exact on both.
#pragma once

#include <cstdint>

#include "kernels/element.h"  // load_element, store_element
#include "kernels/fp8_format.h"
#include "kernels/fp_bits.h"
#include "kernels/view.h"

namespace ampcheck::kernels {

struct Fp8GemmDesc {
  const char* op = "fp8_gemm";  // named by every error message
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  const std::uint8_t* a = nullptr;  // [m, k] ([k, m] when trans_a), on C's device
  Fp8Format a_format = Fp8Format::e4m3;
  float a_scale_inv = 1.0f;
  const std::uint8_t* b = nullptr;  // [k, n] ([n, k] when trans_b)
  Fp8Format b_format = Fp8Format::e4m3;
  float b_scale_inv = 1.0f;
  View c;      // [m, n]: f32, f16 or bf16
  View bias;   // optional [n] (data == nullptr: none)
  bool accumulate = false;
  // TE's use_split_accumulator (its dgrad and wgrad GEMMs): cuBLASLt's fast accumulation
  // off. The CPU always accumulates every product in binary32.
  bool split_accumulator = true;
  // MXFP8 (block scaling, Fp8Kernels::quantize_mx): one E8M0 scale per kMxBlock values along
  // k, for A [m, k] (not transposed) and B [n, k] (trans_b): the k-contiguous ("TN") layout
  // TE's MXFP8 GEMMs take; scales [m, ceil(k / kMxBlock)] and [n, ceil(k / kMxBlock)], row
  // by row. Both or neither; with them the per-tensor scale_invs are 1. Each code times its
  // block's scale is exact in binary32 (a power of two; but for results below binary32's
  // normals), so a product is too, and the sum is the same chain over k as above. cpu()
  // only: Blackwell's block-scaled GEMMs are not in the CUDA backend, which refuses them.
  const std::uint8_t* a_block_scales = nullptr;
  const std::uint8_t* b_block_scales = nullptr;
};

struct Fp8GemmKernels {
  void (*gemm)(const Fp8GemmDesc& desc);

  static const Fp8GemmKernels& cpu();
  static const Fp8GemmKernels& cuda();
};

// Element i of C (of n columns) from its scaled sum: C's old value (accumulate), then the
// bias, added in binary32, rounded once into C. The CPU and the GPU both finish with it.
AMPCHECK_HD void fp8_gemm_finish(float scaled_sum, bool accumulate, const void* bias, DType bias_dtype, std::int64_t n,
                                 void* c, DType c_dtype, std::int64_t i) {
  float v = scaled_sum;
  if (accumulate) v += load_element<float>(c, c_dtype, i);
  if (bias != nullptr) v += load_element<float>(bias, bias_dtype, i % n);
  store_element(c, c_dtype, i, v);
}

// Throws std::invalid_argument naming desc.op for what no device runs: negative sizes, a
// C or bias of another dtype or shape, E5M2 x E5M2, block scales not as described above.
void check_fp8_gemm(const Fp8GemmDesc& desc);

}  // namespace ampcheck::kernels
