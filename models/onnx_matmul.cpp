// MatMul and Gemm, the matrix products. Gemm's x W^T + b is one `linear`, the op the
// framework's Linear layer runs, so the op trace reads as the framework's does.
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {

void op_matmul(Exec& e) {
  const Tensor a = e.tensor(0), b = e.tensor(1);
  e.set(0, matmul(a, b));
}

void op_gemm(Exec& e) {
  Tensor a = e.tensor(0);
  const Tensor b = e.tensor(1);
  const double alpha = e.attr_f("alpha", 1), beta = e.attr_f("beta", 1);
  const bool ta = e.attr_i("transA", 0) != 0, tb = e.attr_i("transB", 0) != 0;
  if (a.dim() != 2 || b.dim() != 2) e.fail("Gemm takes 2-D A and B, got " + to_string(a.shape()) + " and " + to_string(b.shape()));
  if (ta) a = transpose(a, 0, 1);
  Tensor c;
  if (e.has(2)) c = e.tensor(2);
  // x W^T + b is a Linear layer: one linear op, as the framework ran it.
  const bool bias_fits = !c.defined() || (beta == 1 && c.dim() == 1 && tb && c.size(0) == b.size(0));
  Tensor y = tb ? linear(a, b, bias_fits ? c : Tensor{}) : matmul(a, b);
  if (alpha != 1) y = mul(y, alpha);
  if (c.defined() && !(tb && bias_fits)) y = add(y, beta == 1 ? c : mul(c, beta));
  e.set(0, y);
}

}  // namespace ampcheck::models::onnx_impl
