// matmul, linear, bmm through the project's GEMM (kernels/cpu/gemm.h). f16/bf16 operands
// are widened to f32 exactly, multiplied with f32 accumulation, and the result rounded
// once to the output dtype: what tensor-core GEMMs with fp32 accumulation compute, up to
// summation order (here fixed: one fma chain per element in ascending k).
#include <stdexcept>
#include <string>

#include "engine/ops/cpu_util.h"
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"

namespace ampcheck {
namespace impl {
namespace {

// A matmul seen as a batch of [M,K] x [K,N] products. Operands are read as [Ba,M,K] and
// [Bb,K,N]; a_batch[i] / b_batch[i] name the operand matrix of output batch i.
struct MatmulPlan {
  std::int64_t m = 1, k = 1, n = 1, batch = 1;
  std::vector<std::int64_t> a_batch, b_batch;
  Shape out_shape;
  Shape batch_shape;  // the broadcast batch dims of the output
  bool a_vector = false, b_vector = false;
};

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
  p.batch_shape = cpu::broadcast_shapes(ab, bb, op);
  p.batch = numel(p.batch_shape);
  p.a_batch.resize(static_cast<std::size_t>(p.batch));
  p.b_batch.resize(static_cast<std::size_t>(p.batch));
  cpu::broadcast_offsets(ab, p.batch_shape, 0, p.batch, p.a_batch.data());
  cpu::broadcast_offsets(bb, p.batch_shape, 0, p.batch, p.b_batch.data());
  p.out_shape = p.batch_shape;
  if (!p.a_vector) p.out_shape.push_back(p.m);
  if (!p.b_vector) p.out_shape.push_back(p.n);
  return p;
}

// C_i = op(A_i) op(B_i) for every output batch i, in the compute type T.
template <typename T>
void batched_gemm(const MatmulPlan& p, const T* a, const T* b, T* c) {
  parallel_for(p.batch, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i)
      cpu::gemm(false, false, p.m, p.n, p.k, a + p.a_batch[static_cast<std::size_t>(i)] * p.m * p.k, p.k,
                b + p.b_batch[static_cast<std::size_t>(i)] * p.k * p.n, p.n, c + i * p.m * p.n, p.n);
  });
}

Tensor matmul_impl(const Tensor& x, const Tensor& y, const char* op) {
  const DType dtype = promote(cpu::float_dtype(x, op), cpu::float_dtype(y, op));
  const MatmulPlan p = plan_matmul(x.shape(), y.shape(), op);
  return cpu::with_compute_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> a = cpu::values<T>(x), b = cpu::values<T>(y);
    std::vector<T> c(static_cast<std::size_t>(p.batch * p.m * p.n));
    batched_gemm(p, a.data(), b.data(), c.data());
    return cpu::from_values(c, p.out_shape, dtype);
  });
}

// d A_i = G_i B_i^T, d B_i = A_i^T G_i, summed over batches that shared an operand; each
// only for an operand that needs it (its GEMM, and the other operand's load, are skipped).
std::vector<Tensor> matmul_grads(const BackwardArgs& args, const char* op) {
  const Tensor& x = args.in[0];
  const Tensor& y = args.in[1];
  const bool need_a = args.needs(0), need_b = args.needs(1);
  const MatmulPlan p = plan_matmul(x.shape(), y.shape(), op);
  return cpu::with_compute_type(args.grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = cpu::values<T>(args.grad);
    const std::vector<T> a = need_b ? cpu::values<T>(x) : std::vector<T>{};
    const std::vector<T> b = need_a ? cpu::values<T>(y) : std::vector<T>{};
    std::vector<T> ga(need_a ? static_cast<std::size_t>(x.numel()) : 0, T(0));
    std::vector<T> gb(need_b ? static_cast<std::size_t>(y.numel()) : 0, T(0));
    // Sequential over batches: operands shared by several batches accumulate in order.
    for (std::int64_t i = 0; i < p.batch; ++i) {
      const auto ai = p.a_batch[static_cast<std::size_t>(i)], bi = p.b_batch[static_cast<std::size_t>(i)];
      const T* gi = g.data() + i * p.m * p.n;
      if (need_a)
        cpu::gemm(false, true, p.m, p.k, p.n, gi, p.n, b.data() + bi * p.k * p.n, p.n, ga.data() + ai * p.m * p.k,
                  p.k, /*accumulate=*/true);
      if (need_b)
        cpu::gemm(true, false, p.k, p.n, p.m, a.data() + ai * p.m * p.k, p.k, gi, p.n, gb.data() + bi * p.k * p.n,
                  p.n, /*accumulate=*/true);
    }
    return std::vector<Tensor>{need_a ? cpu::from_values(ga, x.shape(), x.dtype()) : Tensor(),
                               need_b ? cpu::from_values(gb, y.shape(), y.dtype()) : Tensor()};
  });
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
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const bool has_bias = a.in.size() == 3 && a.in[2].defined();
  DType dtype = promote(cpu::float_dtype(x, "linear"), cpu::float_dtype(w, "linear"));
  if (has_bias) dtype = promote(dtype, cpu::float_dtype(a.in[2], "linear"));
  const std::int64_t rows = x.numel() / x.size(-1), in = w.size(1), out = w.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  return cpu::with_compute_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = cpu::values<T>(x), wv = cpu::values<T>(w);
    std::vector<T> y(static_cast<std::size_t>(rows * out));
    cpu::gemm(false, true, rows, out, in, xv.data(), in, wv.data(), in, y.data(), out);
    if (has_bias) {
      const std::vector<T> bv = cpu::values<T>(a.in[2]);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < out; ++j) y[static_cast<std::size_t>(r * out + j)] += bv[static_cast<std::size_t>(j)];
    }
    return cpu::from_values(y, out_shape, dtype);
  });
}
// d x = G W, d W = G^T X, d b = sum of G's rows; each only when its input needs it (the
// first layer's d x, the gradient of the data, is never computed).
std::vector<Tensor> linear_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const std::int64_t rows = x.numel() / x.size(-1), in = w.size(1), out = w.size(0);
  return cpu::with_compute_type(a.grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = cpu::values<T>(a.grad);
    std::vector<Tensor> grads(2);
    if (a.needs(0)) {
      const std::vector<T> wv = cpu::values<T>(w);
      std::vector<T> gx(static_cast<std::size_t>(x.numel()));
      cpu::gemm(false, false, rows, in, out, g.data(), out, wv.data(), in, gx.data(), in);
      grads[0] = cpu::from_values(gx, x.shape(), x.dtype());
    }
    if (a.needs(1)) {
      const std::vector<T> xv = cpu::values<T>(x);
      std::vector<T> gw(static_cast<std::size_t>(w.numel()));
      cpu::gemm(true, false, out, in, rows, g.data(), out, xv.data(), in, gw.data(), in);
      grads[1] = cpu::from_values(gw, w.shape(), w.dtype());
    }
    if (a.in.size() == 3) {
      if (!a.in[2].defined() || !a.needs(2)) {
        grads.emplace_back();
      } else {
        std::vector<T> gb(static_cast<std::size_t>(out), T(0));
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < out; ++j) gb[static_cast<std::size_t>(j)] += g[static_cast<std::size_t>(r * out + j)];
        grads.push_back(cpu::from_values(gb, a.in[2].shape(), a.in[2].dtype()));
      }
    }
    return grads;
  });
}

}  // namespace impl

Tensor matmul(const Tensor& a, const Tensor& b) { return call(Op::matmul, {a, b}); }
Tensor bmm(const Tensor& a, const Tensor& b) { return call(Op::bmm, {a, b}); }
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (bias.defined()) return call(Op::linear, {x, weight, bias});
  return call(Op::linear, {x, weight});
}

}  // namespace ampcheck
