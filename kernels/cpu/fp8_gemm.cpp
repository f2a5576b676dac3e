// The fp8 GEMM on the CPU (kernels/fp8_gemm_kernels.h): widen (times each block's scale
// under MXFP8), multiply in binary32 with the project's GEMM, scale once, round once.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"  // active_isa
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/tensor_io.h"  // gemm
#include "kernels/fp8_gemm_kernels.h"

namespace ampcheck::kernels {

void check_fp8_gemm(const Fp8GemmDesc& d) {
  const std::string op = d.op;
  if (d.m < 0 || d.n < 0 || d.k < 0)
    throw std::invalid_argument(op + ": negative size (m " + std::to_string(d.m) + ", n " + std::to_string(d.n) +
                                ", k " + std::to_string(d.k) + ")");
  if (d.a_format == Fp8Format::e5m2 && d.b_format == Fp8Format::e5m2)
    throw std::invalid_argument(op + ": E5M2 x E5M2 has no fp8 GEMM (cuBLASLt takes E4M3 x E4M3, E4M3 x E5M2 and "
                                     "E5M2 x E4M3): keep one operand in E4M3 (HYBRID: E5M2 for gradients only)");
  const auto float_out = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
  if (!float_out(d.c.dtype) || d.c.numel() != d.m * d.n)
    throw std::invalid_argument(op + ": C must be f32, f16 or bf16 of m x n = " + std::to_string(d.m * d.n) +
                                " elements");
  if (d.bias.data != nullptr && (d.bias.numel() != d.n || !(d.bias.dtype == d.c.dtype || d.bias.dtype == DType::f32)))
    throw std::invalid_argument(op + ": the bias must hold n = " + std::to_string(d.n) +
                                " elements of C's dtype or f32");
  if ((d.a_block_scales == nullptr) != (d.b_block_scales == nullptr))
    throw std::invalid_argument(op + ": block scales for one operand only: MXFP8 scales both A and B by blocks");
  if (d.a_block_scales != nullptr && (d.trans_a || !d.trans_b))
    throw std::invalid_argument(op + ": block-scaled operands run as A [m, k] and B [n, k] (trans_b), their blocks "
                                     "along k, as TE's MXFP8 GEMMs take them");
  if (d.a_block_scales != nullptr && (d.a_scale_inv != 1.0f || d.b_scale_inv != 1.0f))
    throw std::invalid_argument(op + ": block-scaled operands take no per-tensor scale");
}

namespace cpu {
namespace {

void fp8_gemm(const Fp8GemmDesc& d) {
  check_fp8_gemm(d);
  const std::int64_t count = d.m * d.n;
  if (count == 0) return;
  const Isa isa = active_isa();
  std::vector<float> a(static_cast<std::size_t>(d.m * d.k)), b(static_cast<std::size_t>(d.k * d.n));
  if (d.a_block_scales != nullptr) {  // A [m, k] and B [n, k], blocks along k
    dequantize_mxfp8(d.a, d.a_block_scales, a.data(), d.m, d.k, d.a_format, isa);
    dequantize_mxfp8(d.b, d.b_block_scales, b.data(), d.n, d.k, d.b_format, isa);
  } else {
    fp8_to_f32(d.a, a.data(), a.size(), d.a_format, isa);
    fp8_to_f32(d.b, b.data(), b.size(), d.b_format, isa);
  }
  std::vector<float> acc(static_cast<std::size_t>(count), 0.0f);
  if (d.k > 0) {
    const std::int64_t lda = std::max<std::int64_t>(1, d.trans_a ? d.m : d.k);
    const std::int64_t ldb = std::max<std::int64_t>(1, d.trans_b ? d.k : d.n);
    gemm(d.trans_a, d.trans_b, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, acc.data(), std::max<std::int64_t>(1, d.n));
  }
  const float scale = d.a_scale_inv * d.b_scale_inv;
  for (std::int64_t i = 0; i < count; ++i)
    fp8_gemm_finish(scale * acc[static_cast<std::size_t>(i)], d.accumulate, d.bias.data, d.bias.dtype, d.n, d.c.data,
                    d.c.dtype, i);
}

}  // namespace
}  // namespace cpu

const Fp8GemmKernels& Fp8GemmKernels::cpu() {
  static const Fp8GemmKernels k{&cpu::fp8_gemm};
  return k;
}

}  // namespace ampcheck::kernels
