// matmul, linear, bmm: shapes, dtypes and gradients here; the products themselves are
// the GEMM family's (kernels/gemm_kernels.h). f16/bf16 operands are read exactly,
// multiplied with f32 accumulation, and the result rounded once to the output dtype:
// what tensor-core GEMMs with fp32 accumulation compute, up to summation order (on the
// CPU fixed: one fma chain per element in ascending k).
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/ops/op_util.h"  // broadcast_shapes, float_dtype
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/gemm_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::Broadcast;
using kernels::GemmDesc;
using kernels::GemmKernels;

// A matmul seen as a batch of [M,K] x [K,N] products: the operands are read as [Ba,M,K]
// and [Bb,K,N], and a_batch / b_batch say which of their matrices output batch i uses.
struct MatmulPlan {
  std::int64_t m = 1, k = 1, n = 1, batch = 1;
  Broadcast a_batch, b_batch;
  Shape out_shape;
  bool a_vector = false, b_vector = false;
};

// The maps of both operands' batch dims `ab`, `bb` into the broadcast batch `out`, with
// runs of dims that both operands either span or broadcast over merged into one (the
// numbering of the batches is the same), so that any number of batch dims fits a kernel
// argument and a plain stride is found as one.
void batch_maps(const Shape& ab, const Shape& bb, const Shape& out, MatmulPlan& p) {
  Shape a, b, o;  // merged sizes
  const std::size_t rank = out.size();
  for (std::size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;  // no batch steps along it
    const std::int64_t ad = d + ab.size() < rank ? 1 : ab[d + ab.size() - rank];
    const std::int64_t bd = d + bb.size() < rank ? 1 : bb[d + bb.size() - rank];
    if (!o.empty() && (a.back() == 1) == (ad == 1) && (b.back() == 1) == (bd == 1)) {
      o.back() *= out[d];
      a.back() *= ad;
      b.back() *= bd;
    } else {
      o.push_back(out[d]);
      a.push_back(ad);
      b.push_back(bd);
    }
  }
  p.a_batch = kernels::broadcast_of(a, o);
  p.b_batch = kernels::broadcast_of(b, o);
}

MatmulPlan plan_matmul(const Shape& a, const Shape& b, const char* op) {
  if (a.empty() || b.empty())
    throw std::invalid_argument(std::string(op) + ": both operands need at least 1 dim, got " +
                                to_string(a) + " and " + to_string(b));
  MatmulPlan p;
  p.a_vector = a.size() == 1;
  p.b_vector = b.size() == 1;
  Shape a2 = p.a_vector ? Shape{1, a[0]} : a;  // a vector is a row on the left...
  Shape b2 = p.b_vector ? Shape{b[0], 1} : b;  // ...and a column on the right
  p.m = a2[a2.size() - 2];
  p.k = a2.back();
  p.n = b2.back();
  if (b2[b2.size() - 2] != p.k)
    throw std::invalid_argument(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) +
                                " cannot be multiplied (inner dims " + std::to_string(p.k) + " and " +
                                std::to_string(b2[b2.size() - 2]) + " differ)");
  const Shape ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  const Shape batch_shape = ops::broadcast_shapes(ab, bb, op);
  p.batch = numel(batch_shape);
  batch_maps(ab, bb, batch_shape, p);
  p.out_shape = batch_shape;
  if (!p.a_vector) p.out_shape.push_back(p.m);
  if (!p.b_vector) p.out_shape.push_back(p.n);
  return p;
}

Tensor matmul_impl(const Tensor& x, const Tensor& y, const char* op) {
  const GemmKernels& kernels = dispatch<GemmKernels>(op, {&x, &y});
  const DType dtype = promote(ops::float_dtype(x, op), ops::float_dtype(y, op));
  const MatmulPlan p = plan_matmul(x.shape(), y.shape(), op);
  Tensor out = Tensor::empty(p.out_shape, dtype, x.device());
  GemmDesc d;
  d.op = op;
  d.m = p.m;
  d.n = p.n;
  d.k = p.k;
  d.batch = p.batch;
  d.a = view_of(x);
  d.b = view_of(y);
  d.c = view_of(out);
  d.a_batch = p.a_batch;
  d.b_batch = p.b_batch;
  d.c_batch = kernels::strided_batch(p.batch, 1);
  d.compute = dtype;
  kernels.gemm(d);
  return out;
}

// d A_i = G_i B_i^T, d B_i = A_i^T G_i, summed over the batches that shared an operand;
// each only for an operand that needs it.
std::vector<Tensor> matmul_grads(const BackwardArgs& args, const char* op) {
  const Tensor& x = args.in[0];
  const Tensor& y = args.in[1];
  const Tensor& g = args.grad;
  const GemmKernels& kernels = dispatch<GemmKernels>(op, {&x, &y, &g});
  const MatmulPlan p = plan_matmul(x.shape(), y.shape(), op);
  GemmDesc d;
  d.op = op;
  d.batch = p.batch;
  d.compute = g.dtype();
  std::vector<Tensor> grads(2);
  if (args.needs(0)) {
    grads[0] = Tensor::empty(x.shape(), x.dtype(), x.device());
    d.trans_a = false;
    d.trans_b = true;
    d.m = p.m;
    d.n = p.k;
    d.k = p.n;
    d.a = view_of(g);
    d.b = view_of(y);
    d.c = view_of(grads[0]);
    d.a_batch = kernels::strided_batch(p.batch, 1);
    d.b_batch = p.b_batch;
    d.c_batch = p.a_batch;
    kernels.gemm(d);
  }
  if (args.needs(1)) {
    grads[1] = Tensor::empty(y.shape(), y.dtype(), y.device());
    d.trans_a = true;
    d.trans_b = false;
    d.m = p.k;
    d.n = p.n;
    d.k = p.m;
    d.a = view_of(x);
    d.b = view_of(g);
    d.c = view_of(grads[1]);
    d.a_batch = p.a_batch;
    d.b_batch = kernels::strided_batch(p.batch, 1);
    d.c_batch = p.b_batch;
    kernels.gemm(d);
  }
  return grads;
}

void check_linear(const std::vector<Tensor>& in) {
  if (in.size() != 2 && in.size() != 3)
    throw std::invalid_argument("linear takes (x, weight) or (x, weight, bias)");
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != w.size(1))
    throw std::invalid_argument("linear: x " + to_string(x.shape()) + " and weight " +
                                to_string(w.shape()) + " need x[..., in] and weight [out, in]");
  if (in.size() == 3 && in[2].defined() && (in[2].dim() != 1 || in[2].size(0) != w.size(0)))
    throw std::invalid_argument("linear: bias " + to_string(in[2].shape()) + " must be [" +
                                std::to_string(w.size(0)) + "]");
}

using ops::rows_of;

}  // namespace

Tensor matmul_forward(const ForwardArgs& a) { return matmul_impl(a.in[0], a.in[1], "matmul"); }
std::vector<Tensor> matmul_backward(const BackwardArgs& a) { return matmul_grads(a, "matmul"); }

Tensor bmm_forward(const ForwardArgs& a) {
  if (a.in[0].dim() != 3 || a.in[1].dim() != 3 || a.in[0].size(0) != a.in[1].size(0))
    throw std::invalid_argument("bmm: expects [B, M, K] and [B, K, N], got " + to_string(a.in[0].shape()) +
                                " and " + to_string(a.in[1].shape()));
  return matmul_impl(a.in[0], a.in[1], "bmm");
}
std::vector<Tensor> bmm_backward(const BackwardArgs& a) { return matmul_grads(a, "bmm"); }

// linear(x, W, b) = x W^T + b, the bias added in the compute type before the one rounding.
Tensor linear_forward(const ForwardArgs& a) {
  check_linear(a.in);
  const GemmKernels& kernels = dispatch<GemmKernels>("linear", a.in);
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const bool has_bias = a.in.size() == 3 && a.in[2].defined();
  DType dtype = promote(ops::float_dtype(x, "linear"), ops::float_dtype(w, "linear"));
  if (has_bias) dtype = promote(dtype, ops::float_dtype(a.in[2], "linear"));
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  Tensor out = Tensor::empty(out_shape, dtype, x.device());
  GemmDesc d;
  d.op = "linear";
  d.trans_b = true;
  d.m = rows_of(x);
  d.n = w.size(0);
  d.k = w.size(1);
  d.a = view_of(x);
  d.b = view_of(w);
  d.c = view_of(out);
  if (has_bias) d.bias = view_of(a.in[2]);
  d.compute = dtype;
  kernels.gemm(d);
  return out;
}
// d x = G W, d W = G^T X, d b = sum of G's rows; each only when its input needs it (the
// first layer's d x, the gradient of the data, is never computed).
std::vector<Tensor> linear_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const Tensor& g = a.grad;
  const GemmKernels& kernels = dispatch<GemmKernels>("linear", {&x, &w, &g});
  const std::int64_t rows = rows_of(x), in = w.size(1), out = w.size(0);
  GemmDesc d;
  d.op = "linear";
  d.compute = g.dtype();
  std::vector<Tensor> grads(2);
  if (a.needs(0)) {
    grads[0] = Tensor::empty(x.shape(), x.dtype(), x.device());
    d.m = rows;
    d.n = in;
    d.k = out;
    d.a = view_of(g);
    d.b = view_of(w);
    d.c = view_of(grads[0]);
    kernels.gemm(d);
  }
  if (a.needs(1)) {
    grads[1] = Tensor::empty(w.shape(), w.dtype(), w.device());
    d.trans_a = true;
    d.m = out;
    d.n = in;
    d.k = rows;
    d.a = view_of(g);
    d.b = view_of(x);
    d.c = view_of(grads[1]);
    kernels.gemm(d);
  }
  if (a.in.size() == 3) {
    if (!a.in[2].defined() || !a.needs(2)) {
      grads.emplace_back();
    } else {
      Tensor gb = Tensor::empty(a.in[2].shape(), a.in[2].dtype(), g.device());
      kernels.column_sum(view_of(g), view_of(gb), g.dtype(), "linear");
      grads.push_back(gb);
    }
  }
  return grads;
}

}  // namespace impl

Tensor matmul(const Tensor& a, const Tensor& b) { return call(Op::matmul, {a, b}); }
Tensor bmm(const Tensor& a, const Tensor& b) { return call(Op::bmm, {a, b}); }
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (bias.defined()) return call(Op::linear, {x, weight, bias});
  return call(Op::linear, {x, weight});
}

}  // namespace ampcheck
