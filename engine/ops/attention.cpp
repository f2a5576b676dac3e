// scaled_dot_product_attention: softmax(scale Q K^T + mask) V over the last two dims, as
// PyTorch's F.scaled_dot_product_attention, forward and backward.
//
// What it computes is defined here once, as a composition of the other families' kernels
// on the inputs' device (kernels/attention_kernels.h gives the arithmetic): the scores
// S = Q K^T in the compute type (f32 for f16/bf16/f32, f64 for f64), scaled, the additive
// mask added and the causal positions set to -inf, the softmax in the compute type (a
// query the mask hides every key from gets 0, as PyTorch's _safe_softmax), the
// probabilities rounded to the inputs' dtype and multiplied by V with the GEMM's
// accumulation. The backward recomputes S and P from Q and K (nothing of size
// [T_q, T_k] is kept between the passes), then dV = P^T dO, dP = dO V^T, dS = the softmax
// gradient times the scale (rounded to the dtype, as a fused kernel feeds its GEMMs),
// dQ = dS K, dK = dS^T Q. That is the CPU's path and the reference of the GPU's fused
// one: where the device's AttentionKernels take the call (cuDNN's fused attention on a
// GPU, fp16/bf16), S and P never reach memory and the forward keeps only each row's
// log-sum-exp for the backward.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/ops/impl.h"
#include "engine/ops/op_util.h"
#include "engine/ops/ops.h"
#include "kernels/attention_kernels.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/gemm_kernels.h"
#include "kernels/kernel_note.h"
#include "kernels/memory_kernels.h"
#include "kernels/norm_loss_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::AttentionKernels;
using kernels::GemmDesc;
using kernels::GemmKernels;

constexpr const char* kOp = "scaled_dot_product_attention";

// The call's inputs and sizes: Q [..., T_q, E], K [..., T_k, E], V [..., T_k, E_v] with the
// same leading dims (batch, heads), and the mask, when given, broadcast to [..., T_q, T_k].
struct Attention {
  Tensor q, k, v, mask;
  Shape lead;
  std::int64_t bh = 1, tq = 0, tk = 0, e = 0, ev = 0;
  DType dtype = DType::f32;
  DType acc = DType::f32;  // the compute type's dtype: S and P
  double scale = 1;
  bool causal = false;

  Shape scores_shape() const {
    Shape s = lead;
    s.push_back(tq);
    s.push_back(tk);
    return s;
  }
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(std::string(kOp) + ": " + what); }

Attention read(const std::vector<Tensor>& in, const Params& params) {
  if (in.size() < 3 || in.size() > 4) fail("takes query, key, value and an optional mask, got " + std::to_string(in.size()) + " inputs");
  Attention a;
  a.q = in[0];
  a.k = in[1];
  a.v = in[2];
  if (in.size() == 4) a.mask = in[3];
  const char* names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i) {
    if (!in[static_cast<std::size_t>(i)].defined()) fail(std::string("the ") + names[i] + " is missing");
    if (in[static_cast<std::size_t>(i)].dim() < 2)
      fail(std::string("the ") + names[i] + " needs at least 2 dims [..., L, E], got " +
           to_string(in[static_cast<std::size_t>(i)].shape()));
    ops::float_dtype(in[static_cast<std::size_t>(i)], kOp);
  }
  const Shape& qs = a.q.shape();
  const Shape& ks = a.k.shape();
  const Shape& vs = a.v.shape();
  a.lead.assign(qs.begin(), qs.end() - 2);
  if (Shape(ks.begin(), ks.end() - 2) != a.lead || Shape(vs.begin(), vs.end() - 2) != a.lead)
    fail("query, key and value need the same leading dims (batch, heads), got " + to_string(qs) + ", " +
         to_string(ks) + " and " + to_string(vs) + " (repeat grouped-query attention's key and value heads first)");
  a.tq = qs[qs.size() - 2];
  a.e = qs.back();
  a.tk = ks[ks.size() - 2];
  a.ev = vs.back();
  if (ks.back() != a.e) fail("the query's and the key's last dims differ: " + to_string(qs) + " and " + to_string(ks));
  if (vs[vs.size() - 2] != a.tk)
    fail("the key and the value hold different numbers of positions: " + to_string(ks) + " and " + to_string(vs));
  a.bh = numel(a.lead);
  a.dtype = a.q.dtype();
  if (a.k.dtype() != a.dtype || a.v.dtype() != a.dtype)
    fail("query, key and value must share one dtype, got " + std::string(name(a.q.dtype())) + ", " +
         std::string(name(a.k.dtype())) + " and " + std::string(name(a.v.dtype())));
  a.acc = a.dtype == DType::f64 ? DType::f64 : DType::f32;
  if (a.mask.defined()) {
    ops::float_dtype(a.mask, kOp);
    // Each of the mask's dims is the scores' or 1 (the scores are never widened by it).
    const Shape full = a.scores_shape();
    const Shape& m = a.mask.shape();
    bool fits = m.size() <= full.size();
    for (std::size_t i = 0; fits && i < m.size(); ++i)
      fits = m[m.size() - 1 - i] == 1 || m[m.size() - 1 - i] == full[full.size() - 1 - i];
    if (!fits) fail("the mask " + to_string(m) + " does not broadcast to the scores " + to_string(full));
  }
  const auto& p = std::get<AttentionParams>(params);
  a.scale = p.scale.value_or(1.0 / std::sqrt(static_cast<double>(a.e)));
  a.causal = p.causal;
  return a;
}

// What the fused kernels are told: the leading dims as [batch, heads] (those before the
// heads folded into the batch), and the mask's element strides over [batch, heads, T_q,
// T_k]. `folds` is false for a mask whose batch dims cannot be read as one (it spans
// some of them and broadcasts over others): the composed path takes that call.
kernels::AttentionShape fused_shape(const Attention& a, bool& folds) {
  kernels::AttentionShape s;
  s.q_len = a.tq;
  s.kv_len = a.tk;
  s.head_dim = a.e;
  s.value_dim = a.ev;
  s.scale = a.scale;
  s.causal = a.causal;
  const std::size_t lead = a.lead.size();
  s.heads = lead >= 2 ? a.lead.back() : 1;
  s.batch = lead == 0 ? 1 : a.bh / std::max<std::int64_t>(s.heads, 1);
  folds = true;
  if (!a.mask.defined()) return s;
  // The mask's stride along each dim of the scores (0 where it broadcasts).
  const Shape full = a.scores_shape();
  const Shape& m = a.mask.shape();
  std::vector<std::int64_t> stride(full.size(), 0);
  std::int64_t step = 1;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::size_t md = m.size() - 1 - i, fd = full.size() - 1 - i;
    stride[fd] = m[md] == 1 ? 0 : step;
    step *= m[md];
  }
  s.mask_strides[2] = stride[lead];
  s.mask_strides[3] = stride[lead + 1];
  if (lead == 0) return s;
  if (lead == 1) {
    s.mask_strides[0] = stride[0];
    return s;
  }
  s.mask_strides[1] = stride[lead - 1];
  // The batch dims (all before the heads) read as one: the mask broadcasts over all of
  // them, or spans each of them contiguously (dims of size 1 aside).
  std::int64_t inner = 0;  // the stride of the batch dim after the one looked at
  std::int64_t inner_size = 1;
  bool spans = false, broadcasts = false;
  for (std::size_t d = lead - 1; d-- > 0;) {
    if (full[d] == 1) continue;
    if (stride[d] == 0) {
      broadcasts = true;
      continue;
    }
    if (spans && stride[d] != inner * inner_size) folds = false;
    if (!spans) s.mask_strides[0] = stride[d];
    spans = true;
    inner = stride[d];
    inner_size = full[d];
  }
  if (spans && broadcasts) folds = false;
  return s;
}

// A [rows, T] view of the scores as the softmax kernels read them: one line per query.
kernels::SoftmaxLines lines_of(const Attention& a) { return {a.bh * a.tq, a.tk, 1}; }

// S = Q K^T in the compute type (not rounded to the dtype), then scaled, masked and
// softmaxed: P in the compute type, [..., T_q, T_k]; a fully masked query's row 0.
Tensor probabilities(const Attention& a) {
  const Device dev = a.q.device();
  const Shape shape = a.scores_shape();
  Tensor s = Tensor::empty(shape, a.acc, dev);
  GemmDesc d;
  d.op = kOp;
  d.trans_b = true;
  d.m = a.tq;
  d.n = a.tk;
  d.k = a.e;
  d.batch = a.bh;
  d.a = view_of(a.q);
  d.b = view_of(a.k);
  d.c = view_of(s);
  d.a_batch = d.b_batch = d.c_batch = kernels::strided_batch(a.bh, 1);
  d.compute = a.acc;
  dispatch<GemmKernels>(kOp, {&a.q, &a.k}).gemm(d);

  const auto& ew = dispatch<kernels::ElementwiseKernels>(kOp, {&s});
  Tensor t = Tensor::empty(shape, a.acc, dev);
  kernels::View in[2] = {view_of(s), {}};
  ew.map(kernels::MapFn::mul_scalar, {a.scale, 0}, in, 1, view_of(t));
  std::swap(s, t);
  if (a.mask.defined()) {
    kernels::View both[2] = {view_of(s), view_of(a.mask)};
    ew.map(kernels::MapFn::add, {}, both, 2, view_of(t));
    std::swap(s, t);
  }
  if (a.causal) {
    // The positions above the diagonal (key after query), as a mask PyTorch's is_causal
    // builds: tril(ones(T_q, T_k)).
    std::vector<std::int64_t> above(static_cast<std::size_t>(a.tq * a.tk), 0);
    for (std::int64_t i = 0; i < a.tq; ++i)
      for (std::int64_t j = i + 1; j < a.tk; ++j) above[static_cast<std::size_t>(i * a.tk + j)] = 1;
    const Tensor m = Tensor::from(above, {a.tq, a.tk}).to(dev);
    kernels::View both[2] = {view_of(s), view_of(m)};
    ew.map(kernels::MapFn::masked_fill, {-std::numeric_limits<double>::infinity(), 0}, both, 2, view_of(t));
    std::swap(s, t);
  }
  dispatch<kernels::NormLossKernels>(kOp, {&s}).softmax(view_of(s), lines_of(a), false, view_of(t));
  if (!a.mask.defined()) return t;  // causal alone leaves every query its own key
  // A query whose every score the mask made -Inf attends to nothing: 0, not NaN (PyTorch's
  // _safe_softmax).
  Tensor p = Tensor::empty(shape, a.acc, dev);
  kernels::View both[2] = {view_of(t), view_of(s)};
  ew.map(kernels::MapFn::safe_softmax, {}, both, 2, view_of(p));
  return p;
}

// x in `dtype` (itself when it has it already).
Tensor rounded(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor r = Tensor::empty(x.shape(), dtype, x.device());
  dispatch<kernels::MemoryKernels>(kOp, {&x}).convert(view_of(x), view_of(r));
  return r;
}

// C = op(A) op(B) over the bh batches, accumulated in the compute type, rounded to C's dtype.
void gemm(const Attention& a, const Tensor& x, bool tx, const Tensor& y, bool ty, const Tensor& c, std::int64_t m,
          std::int64_t n, std::int64_t k) {
  GemmDesc d;
  d.op = kOp;
  d.trans_a = tx;
  d.trans_b = ty;
  d.m = m;
  d.n = n;
  d.k = k;
  d.batch = a.bh;
  d.a = view_of(x);
  d.b = view_of(y);
  d.c = view_of(c);
  d.a_batch = d.b_batch = d.c_batch = kernels::strided_batch(a.bh, 1);
  d.compute = a.acc;
  dispatch<GemmKernels>(kOp, {&x, &y}).gemm(d);
}

Shape with_last_two(const Shape& lead, std::int64_t r, std::int64_t c) {
  Shape s = lead;
  s.push_back(r);
  s.push_back(c);
  return s;
}

// Why the device's fused kernels do not take this call ("" when they do).
std::string fused_problem(const Attention& a, const AttentionKernels& fused, kernels::AttentionShape& shape) {
  bool folds = true;
  shape = fused_shape(a, folds);
  if (!folds) return "the mask's leading dims do not fold into [batch, heads]";
  return fused.fused_problem(a.dtype, shape, a.mask.defined(), a.mask.defined() ? a.mask.dtype() : a.dtype);
}

void note_composed(const std::string& why) {
  if (kernels::noting()) kernels::note_kernel("attention composed of GEMMs and a softmax: " + why);
}

kernels::View view_or_none(const Tensor& t) { return t.defined() ? view_of(t) : kernels::View{}; }

}  // namespace

Tensor scaled_dot_product_attention_forward(const ForwardArgs& args) {
  const Attention a = read(args.in, args.params);
  const Device dev = a.q.device();
  Tensor out = Tensor::empty(with_last_two(a.lead, a.tq, a.ev), a.dtype, dev);
  if (a.bh == 0 || a.tq == 0 || a.ev == 0) return out;
  if (a.tk == 0) {
    out.fill(0);  // each output a sum over no keys
    return out;
  }
  const auto& fused = dispatch<AttentionKernels>(kOp, {&a.q, &a.k, &a.v, &a.mask});
  kernels::AttentionShape shape;
  const std::string why = fused_problem(a, fused, shape);
  if (why.empty()) {
    Shape stats_shape = a.lead;
    stats_shape.push_back(a.tq);
    Tensor stats = Tensor::empty(stats_shape, DType::f32, dev);
    fused.forward(view_of(a.q), view_of(a.k), view_of(a.v), view_or_none(a.mask), shape, view_of(out),
                  view_of(stats));
    args.saved.tensors = {stats};
    return out;
  }
  note_composed(why);
  const Tensor p = rounded(probabilities(a), a.dtype);
  gemm(a, p, false, a.v, false, out, a.tq, a.ev, a.tk);
  return out;
}

std::vector<Tensor> scaled_dot_product_attention_backward(const BackwardArgs& args) {
  const Attention a = read(args.in, args.params);
  const Device dev = a.q.device();
  std::vector<Tensor> grads(args.in.size());
  const bool want_q = args.needs(0), want_k = args.needs(1), want_v = args.needs(2);
  if (!want_q && !want_k && !want_v) return grads;
  Tensor dq = Tensor::zeros(a.q.shape(), a.dtype, dev), dk = Tensor::zeros(a.k.shape(), a.dtype, dev),
         dv = Tensor::zeros(a.v.shape(), a.dtype, dev);
  const Tensor g = rounded(args.grad, a.dtype);
  if (a.bh > 0 && a.tq > 0 && a.tk > 0 && !args.saved.tensors.empty()) {
    // The forward ran fused: so does the backward, from its log-sum-exp.
    const auto& fused = dispatch<AttentionKernels>(kOp, {&a.q, &a.k, &a.v, &a.mask});
    bool folds = true;
    const kernels::AttentionShape shape = fused_shape(a, folds);
    fused.backward(view_of(g), view_of(a.q), view_of(a.k), view_of(a.v), view_or_none(a.mask), view_of(args.out),
                   view_of(args.saved.tensors.front()), shape, view_of(dq), view_of(dk), view_of(dv));
  } else if (a.bh > 0 && a.tq > 0 && a.tk > 0 && a.ev > 0) {
    const Tensor p = probabilities(a);
    if (want_v) gemm(a, rounded(p, a.dtype), true, g, false, dv, a.tk, a.ev, a.tq);  // dV = P^T dO
    if (want_q || want_k) {
      const Shape scores = a.scores_shape();
      Tensor dp = Tensor::empty(scores, a.acc, dev);
      gemm(a, g, false, a.v, true, dp, a.tq, a.tk, a.ev);  // dP = dO V^T
      Tensor ds = Tensor::empty(scores, a.acc, dev);
      dispatch<kernels::NormLossKernels>(kOp, {&dp, &p})
          .softmax_backward(view_of(dp), view_of(p), lines_of(a), false, view_of(ds));
      // dS times the scale, rounded once to the dtype the GEMMs below read.
      Tensor dsd = Tensor::empty(scores, a.dtype, dev);
      kernels::View in[2] = {view_of(ds), {}};
      dispatch<kernels::ElementwiseKernels>(kOp, {&ds}).map(kernels::MapFn::mul_scalar, {a.scale, 0}, in, 1,
                                                            view_of(dsd));
      if (want_q) gemm(a, dsd, false, a.k, false, dq, a.tq, a.e, a.tk);  // dQ = dS K
      if (want_k) gemm(a, dsd, true, a.q, false, dk, a.tk, a.e, a.tq);   // dK = dS^T Q
    }
  }
  if (want_q) grads[0] = dq;
  if (want_k) grads[1] = dk;
  if (want_v) grads[2] = dv;
  return grads;
}

}  // namespace impl

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    std::optional<double> scale, bool causal) {
  std::vector<Tensor> inputs{q, k, v};
  if (mask.defined()) inputs.push_back(mask);
  return call(Op::scaled_dot_product_attention, std::move(inputs), AttentionParams{scale, causal});
}

}  // namespace ampcheck
