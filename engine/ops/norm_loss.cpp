// Normalisation (batch_norm, layer_norm), softmax / log_softmax, the losses
// (cross_entropy, mse_loss), embedding and dropout: what each op means (operand checks,
// dtypes, what the backward saves and which gradients it makes). The arithmetic is the
// norm_loss kernel family's (kernels/norm_loss_kernels.h), on the device the operands
// live on.
//
// Dtypes: an op computes in double when an operand is f64 and in float otherwise, and
// rounds each result once to its dtype, so an f16/bf16 result is the f32 result rounded
// once. The statistics a backward needs (mean, invstd, lse) are kept in that compute
// dtype, unrounded.
#include <cmath>    // std::isfinite
#include <cstdint>
#include <initializer_list>
#include <sstream>  // number formatting in error messages
#include <stdexcept>
#include <string>
#include <utility>  // std::pair
#include <variant>
#include <vector>

#include "engine/dispatch.h"      // dispatch, view_of
#include "engine/ops/op_util.h"  // float_dtype, normalize_dim
#include "engine/ops/impl.h"      // the forward/backward declarations
#include "engine/ops/ops.h"       // the public functions defined at the end
#include "engine/random.h"        // Generator (dropout's counters)
#include "kernels/norm_loss_kernels.h"

namespace ampcheck {
namespace {

using kernels::NormLossKernels;

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, std::string(what) + " is an undefined tensor; expected a tensor");
}

const Tensor& input_or_none(const std::vector<Tensor>& in, std::size_t i) {
  static const Tensor none;
  return i < in.size() ? in[i] : none;
}

// f64 when any defined float operand is f64 (f64 computes in double), else f32.
DType compute_dtype(std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t->defined() && t->dtype() == DType::f64) return DType::f64;
  }
  return DType::f32;
}

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// A gradient the backward makes: like `like` (shape, dtype, device) when needed, else
// undefined (its kernel output is then absent and not written).
Tensor grad_like(const Tensor& like, bool needed) {
  return needed ? Tensor::empty(like.shape(), like.dtype(), like.device()) : Tensor{};
}

// ---------------------------------------------------------------- softmax / log_softmax

// The tensor seen as [outer, n, inner] around the reduced dim.
kernels::SoftmaxLines lines_around(const Shape& shape, std::int64_t dim) {
  const auto d = static_cast<std::size_t>(dim);
  return {product(shape, 0, d), shape[d], product(shape, d + 1, shape.size())};
}

Tensor softmax_family_forward(const ForwardArgs& args, bool log, const char* op) {
  const Tensor& x = args.in.at(0);
  require_defined(x, op, "x");
  const DType out_dtype = ops::float_dtype(x, op);
  const std::int64_t dim = ops::normalize_dim(std::get<DimParams>(args.params).dim, x.dim(), op);
  Tensor y = Tensor::empty(x.shape(), out_dtype, x.device());
  dispatch<NormLossKernels>(op, {&x}).softmax(view_of(x), lines_around(x.shape(), dim), log, view_of(y));
  return y;
}

// softmax:     dx_k = y_k (g_k - sum_j g_j y_j)
// log_softmax: dx_k = g_k - exp(y_k) sum_j g_j
std::vector<Tensor> softmax_family_backward(const BackwardArgs& args, bool log, const char* op) {
  const Tensor& x = args.in.at(0);
  const std::int64_t dim = ops::normalize_dim(std::get<DimParams>(args.params).dim, x.dim(), op);
  Tensor dx = grad_like(x, true);
  dispatch<NormLossKernels>(op, {&args.grad, &args.out})
      .softmax_backward(view_of(args.grad), view_of(args.out), lines_around(x.shape(), dim), log, view_of(dx));
  return {dx};
}

// ---------------------------------------------------------------- layer_norm

// Checks the operands; returns the number of elements normalised together.
std::int64_t check_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b,
                              std::int64_t normalized_dims, double eps) {
  const char* op = "layer_norm";
  require_defined(x, op, "x");
  ops::float_dtype(x, op);
  if (normalized_dims < 1 || normalized_dims > x.dim())
    fail(op, "normalized_dims = " + std::to_string(normalized_dims) + " for x of shape " +
                 to_string(x.shape()) + "; expected 1 <= normalized_dims <= " +
                 std::to_string(x.dim()));
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(op, "eps = " + num(eps) + "; expected a finite eps >= 0");
  const Shape norm_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const auto& [t, what] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    if (!t->defined()) continue;
    ops::float_dtype(*t, op);
    if (t->shape() != norm_shape)
      fail(op, std::string(what) + " of shape " + to_string(t->shape()) +
                   "; expected the normalised shape " + to_string(norm_shape) + " of x " +
                   to_string(x.shape()));
  }
  return numel(norm_shape);
}

// ---------------------------------------------------------------- batch_norm

struct BnLayout {
  std::int64_t n = 0, c = 0, s = 0;  // x as [N, C, S]
  std::int64_t count() const { return n * s; }  // values per channel
};

BnLayout check_batch_norm(const std::vector<Tensor>& in, const BatchNormParams& p) {
  const char* op = "batch_norm";
  if (in.size() != 5)
    fail(op, "got " + std::to_string(in.size()) +
                 " inputs; expected 5 (x, weight, bias, running_mean, running_var)");
  const Tensor& x = in[0];
  require_defined(x, op, "x");
  ops::float_dtype(x, op);
  if (x.dim() < 2)
    fail(op, "x of shape " + to_string(x.shape()) + "; expected rank >= 2 [N, C, ...]");
  const BnLayout l{x.shape()[0], x.shape()[1], product(x.shape(), 2, x.shape().size())};
  const char* names[] = {"x", "weight", "bias", "running_mean", "running_var"};
  for (std::size_t i = 1; i < 5; ++i) {
    if (!in[i].defined()) continue;
    ops::float_dtype(in[i], op);
    if (in[i].shape() != Shape{l.c})
      fail(op, std::string(names[i]) + " of shape " + to_string(in[i].shape()) +
                   "; expected [" + std::to_string(l.c) + "] (the channels of x " +
                   to_string(x.shape()) + ")");
  }
  if (in[3].defined() != in[4].defined())
    fail(op, "running_mean is " + std::string(in[3].defined() ? "defined" : "undefined") +
                 " but running_var is " + (in[4].defined() ? "defined" : "undefined") +
                 "; expected both or neither");
  if (!p.training && !in[3].defined())
    fail(op, "evaluation mode (training = false) without running_mean/running_var; expected "
             "running statistics to normalise with");
  if (p.training && l.count() <= 1)
    fail(op, "training with " + std::to_string(l.count()) + " value(s) per channel (x " +
                 to_string(x.shape()) + "); expected more than 1 to estimate a variance");
  if (!(p.eps >= 0) || !std::isfinite(p.eps))
    fail(op, "eps = " + num(p.eps) + "; expected a finite eps >= 0");
  if (!std::isfinite(p.momentum))
    fail(op, "momentum = " + num(p.momentum) + "; expected a finite momentum (0.1 usual)");
  return l;
}

// ---------------------------------------------------------------- cross_entropy

void check_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing) {
  const char* op = "cross_entropy";
  require_defined(logits, op, "logits");
  require_defined(labels, op, "labels");
  ops::float_dtype(logits, op);
  if (logits.dim() != 2)
    fail(op, "logits of shape " + to_string(logits.shape()) + "; expected [N, C]");
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (n == 0 || c == 0)
    fail(op, "logits of shape " + to_string(logits.shape()) +
                 "; expected N >= 1 samples and C >= 1 classes");
  if (labels.dtype() != DType::i64)
    fail(op, "labels of dtype " + std::string(name(labels.dtype())) +
                 "; expected i64 class indices");
  if (labels.shape() != Shape{n})
    fail(op, "labels of shape " + to_string(labels.shape()) + "; expected [" +
                 std::to_string(n) + "] (one per row of logits " + to_string(logits.shape()) +
                 ")");
  if (!(smoothing >= 0 && smoothing <= 1))
    fail(op, "label_smoothing = " + num(smoothing) + "; expected 0 <= label_smoothing <= 1");
  const std::vector<std::int64_t> y = labels.to_i64();
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 0 || y[i] >= c)
      fail(op, "label " + std::to_string(y[i]) + " at position " + std::to_string(i) +
                   " is out of range; expected a class in [0, " + std::to_string(c) + ")");
  }
}

// ---------------------------------------------------------------- mse_loss

void check_mse_loss(const Tensor& input, const Tensor& target) {
  const char* op = "mse_loss";
  require_defined(input, op, "input");
  require_defined(target, op, "target");
  ops::float_dtype(input, op);
  ops::float_dtype(target, op);
  if (input.shape() != target.shape())
    fail(op, "input of shape " + to_string(input.shape()) + " and target of shape " +
                 to_string(target.shape()) + "; expected the same shape");
  if (input.numel() == 0)
    fail(op, "input of shape " + to_string(input.shape()) +
                 " has no elements; expected at least one to average");
}

// ---------------------------------------------------------------- embedding

void check_embedding(const Tensor& indices, const Tensor& weight) {
  const char* op = "embedding";
  require_defined(indices, op, "indices");
  require_defined(weight, op, "weight");
  if (indices.dtype() != DType::i64)
    fail(op, "indices of dtype " + std::string(name(indices.dtype())) +
                 "; expected i64 row indices");
  ops::float_dtype(weight, op);
  if (weight.dim() != 2)
    fail(op, "weight of shape " + to_string(weight.shape()) + "; expected [V, D]");
  const std::int64_t v = weight.shape()[0];
  const std::vector<std::int64_t> idx = indices.to_i64();
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= v)
      fail(op, "index " + std::to_string(idx[i]) + " at position " + std::to_string(i) +
                   " is out of range; expected a row in [0, " + std::to_string(v) +
                   ") of weight " + to_string(weight.shape()));
  }
}

// ---------------------------------------------------------------- dropout

void check_dropout(const Tensor& x, double p) {
  const char* op = "dropout";
  require_defined(x, op, "x");
  ops::float_dtype(x, op);
  if (!(p >= 0 && p < 1))
    fail(op, "p = " + num(p) + "; expected a drop probability in [0, 1)");
}

}  // namespace

// ================================================================ forwards and backwards

namespace impl {

// ---- batch_norm ----

Tensor batch_norm_forward(const ForwardArgs& args) {
  const auto& p = std::get<BatchNormParams>(args.params);
  const BnLayout l = check_batch_norm(args.in, p);
  const Tensor& x = args.in[0];
  const Tensor &w = args.in[1], &b = args.in[2];
  const Tensor &running_mean = args.in[3], &running_var = args.in[4];  // updated in place
  const DType ct = compute_dtype({&x, &w, &b, &running_mean, &running_var});
  const kernels::BatchNormArgs a{l.n, l.c, l.s, p.training, p.momentum, p.eps, ct};
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({l.c}, ct, x.device()), invstd = Tensor::empty({l.c}, ct, x.device());
  dispatch<NormLossKernels>("batch_norm", args.in)
      .batch_norm(view_of(x), view_of(w), view_of(b), view_of(running_mean), view_of(running_var), a, view_of(y),
                  view_of(mean), view_of(invstd));
  args.saved.tensors = {mean, invstd};
  return y;
}

// xhat = (x - mean) invstd, per channel over the N*S values:
//   d bias = sum g,  d weight = sum g xhat,
//   training: dx = weight invstd (g - mean(g) - xhat mean(g xhat))  (batch stats depend on x)
//   eval:     dx = weight invstd g
// Each only for an input that needs it (the channel sums serve dx in training too).
std::vector<Tensor> batch_norm_backward(const BackwardArgs& args) {
  const auto& p = std::get<BatchNormParams>(args.params);
  const Tensor& x = args.in[0];
  const Tensor &w = args.in[1], &b = args.in[2];
  const BnLayout l{x.shape()[0], x.shape()[1], product(x.shape(), 2, x.shape().size())};
  const DType ct = compute_dtype({&x, &w, &b, &args.in[3], &args.in[4]});
  const kernels::BatchNormArgs a{l.n, l.c, l.s, p.training, p.momentum, p.eps, ct};
  const Tensor &mean = args.saved.tensors.at(0), &invstd = args.saved.tensors.at(1);
  Tensor dx = grad_like(x, args.needs(0));
  Tensor dw = grad_like(w, w.defined() && args.needs(1));
  Tensor db = grad_like(b, b.defined() && args.needs(2));
  dispatch<NormLossKernels>("batch_norm", {&args.grad, &x, &w, &mean, &invstd})
      .batch_norm_backward(view_of(args.grad), view_of(x), view_of(w), view_of(mean), view_of(invstd), a,
                           view_of(dx), view_of(dw), view_of(db));
  return {dx, dw, db, Tensor{}, Tensor{}};
}

// ---- layer_norm ----

Tensor layer_norm_forward(const ForwardArgs& args) {
  const auto& p = std::get<LayerNormParams>(args.params);
  if (args.in.empty() || args.in.size() > 3)
    fail("layer_norm", "got " + std::to_string(args.in.size()) +
                           " inputs; expected 1 to 3 (x, weight, bias)");
  const Tensor& x = args.in[0];
  const Tensor &w = input_or_none(args.in, 1), &b = input_or_none(args.in, 2);
  const std::int64_t len = check_layer_norm(x, w, b, p.normalized_dims, p.eps);
  const std::int64_t rows = len == 0 ? 0 : x.numel() / len;
  const DType ct = compute_dtype({&x, &w, &b});
  const kernels::LayerNormArgs a{rows, len, p.eps, ct};
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, ct, x.device()), invstd = Tensor::empty({rows}, ct, x.device());
  dispatch<NormLossKernels>("layer_norm", args.in)
      .layer_norm(view_of(x), view_of(w), view_of(b), a, view_of(y), view_of(mean), view_of(invstd));
  args.saved.tensors = {mean, invstd};
  return y;
}

// Per row, xhat = (x - mean) invstd and h = g weight:
//   dx = invstd (h - mean(h) - xhat mean(h xhat)),
//   d weight = sum over rows of g xhat,  d bias = sum over rows of g;
// each only for an input that needs it.
std::vector<Tensor> layer_norm_backward(const BackwardArgs& args) {
  const auto& p = std::get<LayerNormParams>(args.params);
  const Tensor& x = args.in[0];
  const Tensor &w = input_or_none(args.in, 1), &b = input_or_none(args.in, 2);
  const std::int64_t len = numel(Shape(x.shape().end() - p.normalized_dims, x.shape().end()));
  const std::int64_t rows = len == 0 ? 0 : x.numel() / len;
  const kernels::LayerNormArgs a{rows, len, p.eps, compute_dtype({&x, &w, &b})};
  const Tensor &mean = args.saved.tensors.at(0), &invstd = args.saved.tensors.at(1);
  Tensor dx = grad_like(x, args.needs(0));
  Tensor dw = grad_like(w, w.defined() && args.needs(1));
  Tensor db = grad_like(b, b.defined() && args.needs(2));
  dispatch<NormLossKernels>("layer_norm", {&args.grad, &x, &w, &mean, &invstd})
      .layer_norm_backward(view_of(args.grad), view_of(x), view_of(w), view_of(mean), view_of(invstd), a,
                           view_of(dx), view_of(dw), view_of(db));
  std::vector<Tensor> grads{dx};
  if (args.in.size() > 1) grads.push_back(dw);
  if (args.in.size() > 2) grads.push_back(db);
  return grads;
}

// ---- softmax, log_softmax ----

Tensor softmax_forward(const ForwardArgs& args) {
  return softmax_family_forward(args, false, "softmax");
}
std::vector<Tensor> softmax_backward(const BackwardArgs& args) {
  return softmax_family_backward(args, false, "softmax");
}
Tensor log_softmax_forward(const ForwardArgs& args) {
  return softmax_family_forward(args, true, "log_softmax");
}
std::vector<Tensor> log_softmax_backward(const BackwardArgs& args) {
  return softmax_family_backward(args, true, "log_softmax");
}

// ---- cross_entropy ----

// With lse_n = log sum_c exp(x_nc) and q = (1 - ls) onehot(y) + ls / C:
//   loss = (1/N) sum_n -(sum_c q_c (x_nc - lse_n)).
Tensor cross_entropy_forward(const ForwardArgs& args) {
  const double ls = std::get<CrossEntropyParams>(args.params).label_smoothing;
  const Tensor& logits = args.in.at(0);
  const Tensor& labels = args.in.at(1);
  check_cross_entropy(logits, labels, ls);
  const std::int64_t n = logits.shape()[0];
  Tensor lse = Tensor::empty({n}, compute_dtype({&logits}), logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  dispatch<NormLossKernels>("cross_entropy", {&logits, &labels})
      .cross_entropy(view_of(logits), view_of(labels), ls, view_of(lse), view_of(loss));
  args.saved.tensors = {lse};
  return loss;
}

// d logits_nc = g / N (softmax(x_n)_c - q_c); labels take no gradient.
std::vector<Tensor> cross_entropy_backward(const BackwardArgs& args) {
  const double ls = std::get<CrossEntropyParams>(args.params).label_smoothing;
  const Tensor& logits = args.in[0];
  const Tensor& labels = args.in[1];
  const Tensor& lse = args.saved.tensors.at(0);
  Tensor dx = grad_like(logits, true);
  dispatch<NormLossKernels>("cross_entropy", {&args.grad, &logits, &labels, &lse})
      .cross_entropy_backward(view_of(args.grad), view_of(logits), view_of(labels), view_of(lse), ls, view_of(dx));
  return {dx, Tensor{}};
}

// ---- mse_loss ----

Tensor mse_loss_forward(const ForwardArgs& args) {
  const Tensor& a = args.in.at(0);
  const Tensor& b = args.in.at(1);
  check_mse_loss(a, b);
  Tensor loss = Tensor::empty({}, promote(a.dtype(), b.dtype()), a.device());
  dispatch<NormLossKernels>("mse_loss", {&a, &b}).mse_loss(view_of(a), view_of(b), view_of(loss));
  return loss;
}

// d input = 2 g (input - target) / n,  d target = -d input; the target (usually data)
// gets one only when it requires it.
std::vector<Tensor> mse_loss_backward(const BackwardArgs& args) {
  const Tensor& a = args.in[0];
  const Tensor& b = args.in[1];
  Tensor da = grad_like(a, args.needs(0)), db = grad_like(b, args.needs(1));
  dispatch<NormLossKernels>("mse_loss", {&args.grad, &a, &b})
      .mse_loss_backward(view_of(args.grad), view_of(a), view_of(b), promote(a.dtype(), b.dtype()), view_of(da),
                         view_of(db));
  return {da, db};
}

// ---- embedding ----

// Rows are copied bit for bit: a lookup never rounds.
Tensor embedding_forward(const ForwardArgs& args) {
  const Tensor& indices = args.in.at(0);
  const Tensor& weight = args.in.at(1);
  check_embedding(indices, weight);
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  dispatch<NormLossKernels>("embedding", {&indices, &weight})
      .embedding(view_of(indices), view_of(weight), view_of(out));
  return out;
}

// d weight[v] = sum of the grad rows at the positions whose index is v, added in
// position order; indices take no gradient.
std::vector<Tensor> embedding_backward(const BackwardArgs& args) {
  const Tensor& indices = args.in[0];
  const Tensor& weight = args.in[1];
  Tensor dw = grad_like(weight, true);
  dispatch<NormLossKernels>("embedding", {&indices, &args.grad})
      .embedding_backward(view_of(indices), view_of(args.grad), view_of(dw));
  return {Tensor{}, dw};
}

// ---- dropout ----

// Element i is dropped iff uniform01(seed, offset + i) < p (counter-based: the mask does
// not depend on threads or the device); kept ones are scaled by 1 / (1 - p). The output
// is x * noise with noise in {0, 1/(1-p)}, as PyTorch, so an Inf in x stays visible as a
// NaN.
Tensor dropout_forward(const ForwardArgs& args) {
  const auto& p = std::get<DropoutParams>(args.params);
  const Tensor& x = args.in.at(0);
  check_dropout(x, p.p);
  if (!p.training || p.p == 0) return x.clone();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());  // 0/1: exact in any dtype
  dispatch<NormLossKernels>("dropout", {&x}).dropout(view_of(x), p.p, p.seed, p.offset, view_of(y), view_of(mask));
  args.saved.tensors = {mask};
  return y;
}

// dx = g * mask / (1 - p); the identity when the forward was.
std::vector<Tensor> dropout_backward(const BackwardArgs& args) {
  const auto& p = std::get<DropoutParams>(args.params);
  const Tensor& x = args.in[0];
  if (args.saved.tensors.empty()) return {args.grad.to(x.dtype())};
  const Tensor& mask = args.saved.tensors[0];
  Tensor dx = grad_like(x, true);
  dispatch<NormLossKernels>("dropout", {&args.grad, &mask})
      .dropout_backward(view_of(args.grad), view_of(mask), p.p, view_of(dx));
  return {dx};
}

}  // namespace impl

// ================================================================ public API

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  const BatchNormParams params{training, momentum, eps};
  check_batch_norm({x, weight, bias, running_mean, running_var}, params);
  return call(Op::batch_norm, {x, weight, bias, running_mean, running_var}, params);
}

Tensor layer_norm(const Tensor& x, std::int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_layer_norm(x, weight, bias, normalized_dims, eps);
  std::vector<Tensor> inputs{x, weight, bias};
  // Trailing absent operands are left out (the op is variadic); an absent weight before a
  // present bias stays as an undefined tensor.
  while (!inputs.back().defined()) inputs.pop_back();
  return call(Op::layer_norm, std::move(inputs), LayerNormParams{normalized_dims, eps});
}

Tensor softmax(const Tensor& x, std::int64_t dim) {
  require_defined(x, "softmax", "x");
  ops::float_dtype(x, "softmax");
  ops::normalize_dim(dim, x.dim(), "softmax");
  return call(Op::softmax, {x}, DimParams{dim});
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  require_defined(x, "log_softmax", "x");
  ops::float_dtype(x, "log_softmax");
  ops::normalize_dim(dim, x.dim(), "log_softmax");
  return call(Op::log_softmax, {x}, DimParams{dim});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  check_cross_entropy(logits, labels, label_smoothing);
  return call(Op::cross_entropy, {logits, labels}, CrossEntropyParams{label_smoothing});
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  check_mse_loss(input, target);
  return call(Op::mse_loss, {input, target});
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  check_embedding(indices, weight);
  return call(Op::embedding, {indices, weight});
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_dropout(x, p);  // before the generator moves: a rejected call draws nothing
  const std::uint64_t offset =
      training ? gen.advance(static_cast<std::uint64_t>(x.numel())) : gen.offset();
  return call(Op::dropout, {x}, DropoutParams{p, training, gen.seed(), offset});
}

}  // namespace ampcheck
