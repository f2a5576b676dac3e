// The GEMM family: a batch of matrix products C_i = op(A_i) op(B_i), which matmul, bmm,
// linear and all of their gradients map onto (engine/ops/gemm.cpp), and the column sum
// that is linear's bias gradient.
//
// Numerics (ARCHITECTURE.md): operands of any float dtype are read exactly into the
// compute type (double for f64, float otherwise), products accumulate in it, and each
// element of C is rounded once to C's dtype, which may differ from the operands'.
// cpu() converts the operands and runs the project's GEMM (kernels/cpu/gemm.h): every
// element one fma chain over k in ascending order, so its bits depend on the inputs only.
// cuda() is cuBLASLt with CUBLAS_COMPUTE_32F (f32 stays f32: no TF32; f16/bf16 on tensor
// cores) or CUBLAS_COMPUTE_64F: the same arithmetic in another summation order.
#pragma once

#include <algorithm>
#include <cmath>  // llround, for kernels/element.h
#include <cstdint>

#include "kernels/element.h"  // Broadcast
#include "kernels/view.h"

namespace ampcheck::kernels {

// C_i = op(A_i) op(B_i) for batches i = 0 .. batch-1; C_i is [m, n], op(A_i) [m, k],
// op(B_i) [k, n]. Every operand is a run of packed row-major matrices: A's are [m, k]
// ([k, m] when trans_a: op(A) = A^T), B's [k, n] ([n, k] when trans_b), C's [m, n]; a
// View's shape only tells how many elements it holds. C shares no memory with A, B or
// the bias.
//
// Which matrix of an operand batch i uses is its map's offset(i), counted in matrices
// (numpy broadcasting of the batch dims: kernels/element.h). The default map (rank 0)
// names matrix 0 for every batch, a shared operand; strided_batch() is the plain one.
// Several batches that name the same C matrix (the gradient of a shared operand) SUM into
// it, in batch order on the CPU: one fma chain over all of their k.
struct GemmDesc {
  const char* op = "gemm";  // named by every error message (a CUDA library call's too)
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  View a, b, c;
  Broadcast a_batch, b_batch, c_batch;
  // The sums start from C's values (else from 0, and C is only written).
  bool accumulate = false;
  // Optional [n] (data == nullptr: none): added to every row of C in the compute type,
  // before the one rounding.
  View bias;
  // Products and sums run in the compute type of this dtype (with_compute_type).
  DType compute = DType::f32;
};

// The map of an operand whose batch i is matrix i * stride (0: one matrix for all).
inline Broadcast strided_batch(std::int64_t batch, std::int64_t stride) {
  Broadcast b;
  b.rank = 1;
  b.dims[0] = std::max<std::int64_t>(batch, 1);
  b.strides[0] = stride;
  return b;
}

// Whether a map names a different matrix for every batch (so its products need no sum):
// no dim of more than one batch reads one matrix twice.
inline bool distinct_batches(const Broadcast& map) {
  for (int d = 0; d < map.rank; ++d)
    if (map.dims[d] > 1 && map.strides[d] == 0) return false;
  return true;
}

struct GemmKernels {
  void (*gemm)(const GemmDesc& desc);
  // out[j] = the sum over rows r of g[r, j], where out holds the cols = out.numel() and g
  // is read as [g.numel() / cols, cols]: in the compute type of `compute`, rows in
  // ascending order on the CPU, rounded once to out's dtype. `op` names the op in errors.
  void (*column_sum)(const View& g, const View& out, DType compute, const char* op);

  static const GemmKernels& cpu();
  static const GemmKernels& cuda();
};

}  // namespace ampcheck::kernels
