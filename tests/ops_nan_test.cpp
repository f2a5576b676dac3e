// NaN and Inf through every op, forward and backward, as PyTorch does (issue 15, item 7).
//
// One table, at least one case per op of engine/ops/op_list.h (a test fails when an op
// has none). Each case names what PyTorch does, cited from its kernels (ATen's CPU
// kernels, derivatives.yaml, FunctionsManual.cpp); the expected values are written from
// that rule, never read from ampcheck's output. Every case runs in f64, f32, f16 and bf16.
// The rules that are decisions rather than IEEE arithmetic live in kernels/elementwise.h.
#include <gtest/gtest.h>

#include <memory>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/random.h"
#include "tests/op_check.h"

namespace ampcheck {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
// Expected "a finite value" (the value itself is checked by the gradcheck and precision
// tests of the op's family; here only where NaN and Inf go matters).
constexpr double kFinite = -1.2345e300;

enum class Kind { grad, data, index };  // requires grad / float without grad / i64
struct In {
  std::vector<double> values;
  Shape shape;
  Kind kind = Kind::grad;
};
In grad(std::vector<double> v, Shape s) { return {std::move(v), std::move(s), Kind::grad}; }
In data(std::vector<double> v, Shape s) { return {std::move(v), std::move(s), Kind::data}; }
In index(std::vector<double> v, Shape s) { return {std::move(v), std::move(s), Kind::index}; }

struct NanCase {
  Op op;
  const char* pytorch;  // what PyTorch does: the source of the expected values
  test::OpFn f;
  std::vector<In> in;
  std::vector<double> out;                 // the forward's expected values
  std::vector<double> grad_out;            // d loss / d out (empty: ones)
  std::vector<std::vector<double>> grads;  // expected d input i, for the Kind::grad inputs
};

using V = std::vector<Tensor>;

std::vector<NanCase> dropout_cases();

std::vector<NanCase> table() {
  std::vector<NanCase> t = {
      // ---- GEMM and convolution: IEEE multiply-adds, no zero skipping (BLAS, cuBLAS) ----
      {Op::matmul, "a NaN in A makes its row of A B NaN, even against zeros (NaN * 0 = NaN); dB = A^T G carries it",
       [](const V& x) { return matmul(x[0], x[1]); },
       {grad({kNan, 1, 2, 3}, {2, 2}), grad({1, 0, 0, 1}, {2, 2})},
       {kNan, kNan, 2, 3}, {}, {{1, 1, 1, 1}, {kNan, kNan, 4, 4}}},
      {Op::matmul, "Inf * 0 in a dot product is NaN",
       [](const V& x) { return matmul(x[0], x[1]); },
       {grad({kInf, 1}, {1, 2}), grad({0, 1}, {2, 1})},
       {kNan}, {}, {{0, 1}, {kInf, 1}}},
      {Op::linear, "linear = x W^T + b: a NaN feature makes the row NaN; dW = G^T x carries it, dx = G W does not",
       [](const V& x) { return linear(x[0], x[1], x[2]); },
       {grad({kNan, 1}, {1, 2}), grad({1, 0, 0, 1}, {2, 2}), grad({0, 0}, {2})},
       {kNan, kNan}, {}, {{1, 1}, {kNan, 1, kNan, 1}, {1, 1}}},
      {Op::fp8_linear,
       "TransformerEngine's fp8 Linear: casts that keep NaN (the NaN code), then linear's IEEE sums: as linear (in f64, "
       "linear itself)",
       [](const V& x) { return fp8_linear(x[0], x[1], x[2], std::make_shared<Fp8LinearMeta>()); },
       {grad({kNan, 1}, {1, 2}), grad({1, 0, 0, 1}, {2, 2}), grad({0, 0}, {2})},
       {kNan, kNan}, {}, {{1, 1}, {kNan, 1, kNan, 1}, {1, 1}}},
      {Op::bmm, "as matmul, per batch",
       [](const V& x) { return bmm(x[0], x[1]); },
       {grad({kNan, 1, 2, 3}, {1, 2, 2}), grad({1, 0, 0, 1}, {1, 2, 2})},
       {kNan, kNan, 2, 3}, {}, {{1, 1, 1, 1}, {kNan, kNan, 4, 4}}},
      {Op::scaled_dot_product_attention,
       "the math path (softmax(Q K^T / sqrt(E)) V): a NaN in query row 0 makes its scores, probabilities and output "
       "row NaN, row 1 stays finite; dK = dS^T Q and dV = P^T dO sum over the rows, so row 0's NaN reaches all of them",
       [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
       {grad({kNan, 1, 0.5, 0.5}, {1, 1, 2, 2}), grad({1, 0, 0, 1}, {1, 1, 2, 2}), grad({1, 2, 3, 4}, {1, 1, 2, 2})},
       {kNan, kNan, kFinite, kFinite}, {},
       {{kNan, kNan, kFinite, kFinite}, {kNan, kNan, kNan, kNan}, {kNan, kNan, kNan, kNan}}},
      // ---- recurrent layers: a NaN at step t reaches every later step, never an earlier one;
      //      the backward carries it to every earlier step's gradient through the state ----
      {Op::lstm, "nn.LSTM: x = [1, NaN] over two steps: y0 finite, y1 NaN; sigmoid'/tanh' of NaN reach dx of both",
       [](const V& x) { return lstm(RnnInputs{x[0], x[1], x[2], {}, {}, {}, {}}); },
       {grad({1, kNan}, {2, 1, 1}), data({0.5, 0.5, 0.5, 0.5}, {4, 1}), data({0.5, 0.5, 0.5, 0.5}, {4, 1})},
       {kFinite, kNan}, {}, {{kNan, kNan}}},
      {Op::gru, "nn.GRU: as the LSTM",
       [](const V& x) { return gru(RnnInputs{x[0], x[1], x[2], {}, {}, {}, {}}); },
       {grad({1, kNan}, {2, 1, 1}), data({0.5, 0.5, 0.5}, {3, 1}), data({0.5, 0.5, 0.5}, {3, 1})},
       {kFinite, kNan}, {}, {{kNan, kNan}}},
      {Op::rnn_tanh, "nn.RNN(nonlinearity='tanh'): as the LSTM",
       [](const V& x) { return rnn_tanh(RnnInputs{x[0], x[1], x[2], {}, {}, {}, {}}); },
       {grad({1, kNan}, {2, 1, 1}), data({0.5}, {1, 1}), data({0.5}, {1, 1})},
       {kFinite, kNan}, {}, {{kNan, kNan}}},
      {Op::rnn_relu,
       "nn.RNN(nonlinearity='relu'): relu keeps the NaN (y1 NaN), and its backward is threshold_backward's selection "
       "(result <= 0 ? 0 : g), so the gradient passes finite: dx1 = 0.5, dx0 = (1 + 0.5) * 0.5",
       [](const V& x) { return rnn_relu(RnnInputs{x[0], x[1], x[2], {}, {}, {}, {}}); },
       {grad({1, kNan}, {2, 1, 1}), data({0.5}, {1, 1}), data({0.5}, {1, 1})},
       {0.5, kNan}, {}, {{0.75, 0.5}}},
      {Op::conv2d, "a NaN pixel gives NaN where the kernel covers it; dW = sum x g is NaN, db = sum g is not",
       [](const V& x) { return conv2d(x[0], x[1], x[2]); },
       {grad({kNan, 1, 2, 3}, {1, 1, 2, 2}), grad({2}, {1, 1, 1, 1}), grad({0.5}, {1})},
       {kNan, 2.5, 4.5, 6.5}, {}, {{2, 2, 2, 2}, {kNan}, {4}}},
      // ---- normalisation: the statistics of a channel (row) holding a NaN are NaN ----
      {Op::batch_norm, "a NaN poisons its channel's mean and variance only; d bias = sum g stays finite",
       [](const V& x) { return batch_norm(x[0], x[1], x[2], {}, {}, true, 0.1, 1e-5); },
       {grad({kNan, 1, 1, 2, 1, 6}, {3, 2}), grad({1, 1}, {2}), grad({0, 0}, {2})},
       {kNan, kFinite, kNan, kFinite, kNan, kFinite}, {},
       {{kNan, kFinite, kNan, kFinite, kNan, kFinite}, {kNan, kFinite}, {3, 3}}},
      {Op::layer_norm, "a NaN poisons its row; d weight = sum over rows of g xhat is NaN, d bias is not",
       [](const V& x) { return layer_norm(x[0], 1, x[1], x[2]); },
       {grad({kNan, 1, 2, 1, 2, 6}, {2, 3}), grad({1, 1, 1}, {3}), grad({0, 0, 0}, {3})},
       {kNan, kNan, kNan, kFinite, kFinite, kFinite}, {},
       {{kNan, kNan, kNan, kFinite, kFinite, kFinite}, {kNan, kNan, kNan}, {2, 2, 2}}},
      // ---- activations ----
      {Op::relu,
       "relu = clamp_min(x, 0) = std::max(x, 0): NaN stays NaN; backward threshold_backward(g, result, 0) = "
       "result <= 0 ? 0 : g, a selection: a NaN input passes g, an Inf g where x < 0 gives 0",
       [](const V& x) { return relu(x[0]); },
       {grad({kNan, kInf, -kInf, -2, 3}, {5})},
       {kNan, kInf, 0, 0, 3}, {5, 5, kInf, kInf, 5}, {{5, 5, 0, 0, 5}}},
      {Op::gelu, "x/2 (1 + erf(x/sqrt2)): -Inf gives -Inf * 0 = NaN; backward dy (cdf + x pdf): Inf * 0 at +-Inf",
       [](const V& x) { return gelu(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, kInf, kNan, 0}, {}, {{kNan, kNan, kNan, 0.5}}},
      {Op::gelu, "tanh form x/2 (1 + tanh(u)): the same NaNs at -Inf, and in the backward at +-Inf",
       [](const V& x) { return gelu(x[0], true); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, kInf, kNan, 0}, {}, {{kNan, kNan, kNan, 0.5}}},
      {Op::silu, "x / (1 + exp(-x)): -Inf gives -Inf / Inf = NaN; backward dy s (1 + x (1 - s)): Inf * 0 at +-Inf",
       [](const V& x) { return silu(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, kInf, kNan, 0}, {}, {{kNan, kNan, kNan, 0.5}}},
      {Op::sigmoid, "1 / (1 + exp(-x)); backward dy y (1 - y)",
       [](const V& x) { return sigmoid(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, 1, 0, 0.5}, {}, {{kNan, 0, 0, 0.25}}},
      {Op::tanh, "tanh; backward dy (1 - y^2)",
       [](const V& x) { return tanh(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, 1, -1, 0}, {}, {{kNan, 0, 0, 1}}},
      {Op::hardswish,
       "x * min(max(x + 3, 0), 6) / 6: NaN stays NaN, -Inf gives -Inf * 0 = NaN; backward x < -3 ? 0 : x <= 3 ? "
       "g (x/3 + 1/2) : g, so a NaN x falls through to g and an Inf g below -3 gives 0",
       [](const V& x) { return hardswish(x[0]); },
       {grad({kNan, kInf, -kInf, -4, 4, 0}, {6})},
       {kNan, kInf, kNan, 0, 4, 0}, {5, 5, 5, kInf, 5, 5}, {{5, 5, 0, 0, 5, 2.5}}},
      {Op::hardsigmoid, "min(max(x + 3, 0), 6) / 6; backward -3 < x < 3 ? g/6 : 0 (NaN x and Inf g outside: 0)",
       [](const V& x) { return hardsigmoid(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})},
       {kNan, 1, 0, 0.5}, {5, kInf, kInf, 6}, {{0, 0, 0, 1}}},
      // ---- arithmetic ----
      {Op::add, "IEEE: NaN + 1 = NaN, Inf + -Inf = NaN; the gradients are g",
       [](const V& x) { return add(x[0], x[1]); },
       {grad({kNan, kInf, 1}, {3}), grad({1, -kInf, 2}, {3})},
       {kNan, kNan, 3}, {}, {{1, 1, 1}, {1, 1, 1}}},
      {Op::sub, "Inf - Inf = NaN; the gradients are g and -g",
       [](const V& x) { return sub(x[0], x[1]); },
       {grad({kNan, kInf}, {2}), grad({1, kInf}, {2})},
       {kNan, kNan}, {}, {{1, 1}, {-1, -1}}},
      {Op::mul, "Inf * 0 = NaN; d a = g b, d b = g a",
       [](const V& x) { return mul(x[0], x[1]); },
       {grad({kNan, kInf, 2}, {3}), grad({2, 0, 3}, {3})},
       {kNan, kNan, 6}, {}, {{2, 0, 3}, {kNan, kInf, 2}}},
      {Op::div, "0/0 = NaN, 1/0 = Inf; d a = g / b, d b = -g a / b^2",
       [](const V& x) { return div(x[0], x[1]); },
       {grad({kNan, 0, 1, 1}, {4}), grad({2, 0, 0, kInf}, {4})},
       {kNan, kNan, kInf, 0}, {}, {{0.5, kInf, kInf, 0}, {kNan, kNan, -kInf, 0}}},
      {Op::add_scalar, "x + 1", [](const V& x) { return add(x[0], 1.0); },
       {grad({kNan, kInf}, {2})}, {kNan, kInf}, {}, {{1, 1}}},
      {Op::sub_scalar, "x - 1", [](const V& x) { return sub(x[0], 1.0); },
       {grad({kNan, -kInf}, {2})}, {kNan, -kInf}, {}, {{1, 1}}},
      {Op::mul_scalar, "x * 0: Inf * 0 = NaN; d x = g * 0", [](const V& x) { return mul(x[0], 0.0); },
       {grad({kNan, kInf, 2}, {3})}, {kNan, kNan, 0}, {}, {{0, 0, 0}}},
      {Op::div_scalar, "x / 0: +-Inf, and 0/0 = NaN; d x = g / 0 = Inf", [](const V& x) { return div(x[0], 0.0); },
       {grad({kNan, 1, -1, 0}, {4})}, {kNan, kInf, -kInf, kNan}, {}, {{kInf, kInf, kInf, kInf}}},
      {Op::neg, "-x", [](const V& x) { return neg(x[0]); },
       {grad({kNan, kInf}, {2})}, {kNan, -kInf}, {}, {{-1, -1}}},
      {Op::abs, "|x|; backward g * sgn(x), and PyTorch's sign(NaN) = (0 < x) - (x < 0) = 0",
       [](const V& x) { return abs(x[0]); },
       {grad({kNan, -kInf, -2, 0}, {4})}, {kNan, kInf, 2, 0}, {}, {{0, -1, -1, 0}}},
      {Op::square, "x^2; backward 2 x g", [](const V& x) { return square(x[0]); },
       {grad({kNan, kInf, -kInf}, {3})}, {kNan, kInf, kInf}, {}, {{kNan, kInf, -kInf}}},
      // ---- math ----
      {Op::exp, "exp; backward g y", [](const V& x) { return exp(x[0]); },
       {grad({kNan, kInf, -kInf}, {3})}, {kNan, kInf, 0}, {}, {{kNan, kInf, 0}}},
      {Op::log, "log: NaN below 0, -Inf at 0; backward g / x", [](const V& x) { return log(x[0]); },
       {grad({kNan, -1, 0, kInf}, {4})}, {kNan, kNan, -kInf, kInf}, {}, {{kNan, -1, kInf, 0}}},
      {Op::sqrt, "sqrt: NaN below 0; backward g / (2 y)", [](const V& x) { return sqrt(x[0]); },
       {grad({kNan, -1, 0, kInf}, {4})}, {kNan, kNan, 0, kInf}, {}, {{kNan, kNan, kInf, 0}}},
      {Op::rsqrt, "1/sqrt(x); backward -g y^3 / 2", [](const V& x) { return rsqrt(x[0]); },
       {grad({kNan, -1, 0, kInf}, {4})}, {kNan, kNan, kInf, 0}, {}, {{kNan, kNan, -kInf, 0}}},
      {Op::pow, "pow(x, 2); backward 2 x g", [](const V& x) { return pow(x[0], 2.0); },
       {grad({kNan, kInf, -kInf}, {3})}, {kNan, kInf, kInf}, {}, {{kNan, kInf, -kInf}}},
      {Op::pow, "pow(x, 0) = 1 even for NaN (C's pow); pow_backward returns zeros for exponent 0",
       [](const V& x) { return pow(x[0], 0.0); },
       {grad({kNan, kInf, 0}, {3})}, {1, 1, 1}, {}, {{0, 0, 0}}},
      {Op::reciprocal, "1/x; backward -g y^2", [](const V& x) { return reciprocal(x[0]); },
       {grad({kNan, 0, kInf}, {3})}, {kNan, kInf, 0}, {}, {{kNan, -kInf, 0}}},
      {Op::erf,
       "erf(+-Inf) = +-1, erf(NaN) = NaN (C's erf); backward 2/sqrt(pi) * exp(-x^2) * g (derivatives.yaml): "
       "exp(-Inf) = 0, so 0 at +-Inf for a finite g",
       [](const V& x) { return erf(x[0]); },
       {grad({kNan, kInf, -kInf, 0}, {4})}, {kNan, 1, -1, 0}, {3, 3, 3, 3},
       {{kNan, 0, 0, 3 * 2 / std::sqrt(3.14159265358979323846)}}},
      {Op::erf, "the backward is a product, not a selection: an Inf g where the slope is 0 gives Inf * 0 = NaN",
       [](const V& x) { return erf(x[0]); },
       {grad({kInf, -kInf, 0}, {3})}, {1, -1, 0}, {kInf, -kInf, kInf}, {{kNan, kNan, kInf}}},
      {Op::clamp,
       "min(max(x, lo), hi) keeps NaN; clamp_backward = where(lo <= x <= hi, g, 0): NaN x and Inf g outside give 0",
       [](const V& x) { return clamp(x[0], -1, 1); },
       {grad({kNan, kInf, -kInf, 0.5}, {4})}, {kNan, 1, -1, 0.5}, {5, kInf, kInf, 5}, {{0, 0, 0, 5}}},
      {Op::clamp, "clamp(max=0): where(x <= 0, g, 0)",
       [](const V& x) { return clamp(x[0], -kInf, 0); },
       {grad({kNan, -kInf, 3}, {3})}, {kNan, -kInf, 0}, {5, 5, 5}, {{0, 5, 0}}},
      // ---- reductions ----
      {Op::sum, "NaN + ... = NaN, Inf + -Inf = NaN; d x = g", [](const V& x) { return sum(x[0]); },
       {grad({kNan, 1, 2}, {3})}, {kNan}, {3}, {{3, 3, 3}}},
      {Op::sum, "Inf + -Inf", [](const V& x) { return sum(x[0]); },
       {grad({kInf, -kInf}, {2})}, {kNan}, {}, {{1, 1}}},
      {Op::mean, "NaN; d x = g / n", [](const V& x) { return mean(x[0]); },
       {grad({kNan, 1}, {2})}, {kNan}, {2}, {{1, 1}}},
      {Op::max, "torch.max propagates NaN; the gradient goes to the NaN",
       [](const V& x) { return max(x[0]); },
       {grad({1, kNan, 3}, {3})}, {kNan}, {}, {{0, 1, 0}}},
      {Op::max, "max(dim): NaN wins, the first NaN's index (PyTorch's `!(value >= max)` scan stops at it)",
       [](const V& x) { return max(x[0], {1}); },
       {grad({1, kNan, 3, kNan, 1, kNan, kInf, 1, 2}, {3, 3})}, {kNan, kNan, kInf}, {},
       {{0, 1, 0, 1, 0, 0, 1, 0, 0}}},
      {Op::softmax,
       "a NaN, or an Inf (Inf - Inf = NaN after subtracting the max), makes the whole row NaN; -Inf gives 0",
       [](const V& x) { return softmax(x[0], -1); },
       {grad({kNan, 1, kInf, 1, -kInf, 0}, {3, 2})}, {kNan, kNan, kNan, kNan, 0, 1}, {1, 2, 1, 2, 1, 2},
       {{kNan, kNan, kNan, kNan, 0, 0}}},
      {Op::log_softmax, "a NaN makes its row NaN; -Inf gives -Inf; backward g - exp(y) sum(g)",
       [](const V& x) { return log_softmax(x[0], -1); },
       {grad({kNan, 1, -kInf, 0}, {2, 2})}, {kNan, kNan, -kInf, 0}, {}, {{kNan, kNan, 1, -1}}},
      // ---- losses ----
      {Op::cross_entropy, "a NaN logit makes the mean loss NaN and its row's gradient NaN; other rows keep theirs",
       [](const V& x) { return cross_entropy(x[0], x[1]); },
       {grad({kNan, 1, 1, 2}, {2, 2}), index({0, 1}, {2})}, {kNan}, {},
       // row 1: (softmax([1, 2]) - onehot(1)) / N = ([1, e] / (1 + e) - [0, 1]) / 2
       {{kNan, kNan, 0.5 / (1 + std::exp(1.0)), -0.5 / (1 + std::exp(1.0))}, {}}},
      {Op::cross_entropy, "a -Inf logit of another class has probability 0: loss 0, gradient 0",
       [](const V& x) { return cross_entropy(x[0], x[1]); },
       {grad({-kInf, 0}, {1, 2}), index({1}, {1})}, {0}, {}, {{0, 0}, {}}},
      {Op::mse_loss, "mean((a - b)^2); d a = 2 g (a - b) / n, d b = -d a",
       [](const V& x) { return mse_loss(x[0], x[1]); },
       {grad({kNan, 1, 3}, {3}), grad({0, 1, kInf}, {3})}, {kNan}, {},
       {{kNan, 0, -kInf}, {kNan, 0, kInf}}},
      // ---- layers ----
      {Op::embedding, "rows are copied: a NaN row appears where it is looked up; d weight = scatter-add of g",
       [](const V& x) { return embedding(x[0], x[1]); },
       {index({1, 0, 1}, {3}), grad({1, 2, kNan, 4}, {2, 2})}, {kNan, 4, 1, 2, kNan, 4}, {},
       {{}, {1, 1, 2, 2}}},
      {Op::max_pool2d, "a NaN in the window wins (`(val > maxval) || isnan(val)`) and takes the gradient",
       [](const V& x) { return max_pool2d(x[0], {2, 2}); },
       {grad({1, kNan, 3, 2}, {1, 1, 2, 2})}, {kNan}, {5}, {{0, 5, 0, 0}}},
      {Op::max_pool2d, "two NaNs: the scan keeps the last one",
       [](const V& x) { return max_pool2d(x[0], {2, 2}); },
       {grad({kNan, 1, kNan, 2}, {1, 1, 2, 2})}, {kNan}, {5}, {{0, 0, 5, 0}}},
      {Op::max_pool2d, "Inf is the max; -Inf padding never wins over a -Inf input",
       [](const V& x) { return max_pool2d(x[0], {2, 2}, {1, 1}, {1, 1}); },
       {grad({-kInf, kInf, 1, 2}, {1, 1, 2, 2})},
       {-kInf, kInf, kInf, 1, kInf, kInf, 1, 2, 2}, {},
       {{1, 4, 2, 2}}},
      {Op::avg_pool2d, "the window's sum is NaN; d x = g / k^2", [](const V& x) { return avg_pool2d(x[0], {2, 2}); },
       {grad({1, kNan, 3, 2}, {1, 1, 2, 2})}, {kNan}, {4}, {{1, 1, 1, 1}}},
      {Op::adaptive_avg_pool2d, "only the window holding the NaN is NaN",
       [](const V& x) { return adaptive_avg_pool2d(x[0], {1, 2}); },
       {grad({1, kNan, 3, 2}, {1, 1, 2, 2})}, {2, kNan}, {2, 2}, {{1, 1, 1, 1}}},
      // ---- shape ----
      {Op::reshape, "values move unchanged", [](const V& x) { return reshape(x[0], {4}); },
       {grad({kNan, kInf, 1, 2}, {2, 2})}, {kNan, kInf, 1, 2}, {1, 2, 3, 4}, {{1, 2, 3, 4}}},
      {Op::permute, "values move unchanged", [](const V& x) { return permute(x[0], {1, 0}); },
       {grad({kNan, 1, 2, kInf}, {2, 2})}, {kNan, 2, 1, kInf}, {1, 2, 3, 4}, {{1, 3, 2, 4}}},
      {Op::concat, "values move unchanged", [](const V& x) { return concat({x[0], x[1]}, 0); },
       {grad({kNan}, {1}), grad({kInf}, {1})}, {kNan, kInf}, {2, 3}, {{2}, {3}}},
      {Op::slice, "only the kept elements move", [](const V& x) { return slice(x[0], 0, 1, 4, 2); },
       {grad({kNan, 1, 2, kInf}, {4})}, {1, kInf}, {5, 6}, {{0, 5, 0, 6}}},
      {Op::where,
       "selects: a NaN in the branch not taken does not appear; a NaN condition is true (bool(NaN)); "
       "where_backward = where(c, g, 0) and where(c, 0, g)",
       [](const V& x) { return where(x[0], x[1], x[2]); },
       {data({1, 0, kNan}, {3}), grad({kNan, kNan, 1}, {3}), grad({2, 3, kNan}, {3})},
       {kNan, 3, 1}, {5, 6, kInf}, {{}, {5, 0, kInf}, {0, 6, 0}}},
      {Op::masked_fill, "the filled places take the value whatever x held; d x = g where not filled",
       [](const V& x) { return masked_fill(x[0], x[1], 5); },
       {grad({kNan, kNan, 1}, {3}), data({1, 0, 0}, {3})}, {5, kNan, 1}, {kInf, 1, 1}, {{0, 1, 1}, {}}},
      {Op::masked_fill, "a NaN fill value is written", [](const V& x) { return masked_fill(x[0], x[1], kNan); },
       {grad({1, 2}, {2}), data({1, 0}, {2})}, {kNan, 2}, {}, {{0, 1}, {}}},
      {Op::cast, "conversions keep NaN and +-Inf (IEEE 754, fp_bits.h)",
       [](const V& x) { return cast(x[0], DType::f16); },
       {grad({kNan, kInf, -kInf, 2}, {4})}, {kNan, kInf, -kInf, 2}, {}, {{1, 1, 1, 1}}},
  };
  for (NanCase& c : dropout_cases()) t.push_back(std::move(c));
  return t;
}

// dropout multiplies by its noise (0 or 1/(1-p)) as PyTorch's CPU and CUDA kernels do, so a
// dropped NaN or Inf still gives NaN (NaN * 0, Inf * 0) and a dropped 1 gives 0. The mask is
// the counter rule: element i is dropped iff uniform01(seed, offset + i) < p.
std::vector<NanCase> dropout_cases() {
  constexpr std::uint64_t kSeed = 41;
  constexpr double p = 0.5;
  const std::vector<double> x = {kNan, kInf, -kInf, 1, kNan, kInf, -kInf, 1};
  std::vector<double> out, dx;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool dropped = uniform01(kSeed, i) < p;
    const double noise = dropped ? 0.0 : 1 / (1 - p);
    out.push_back(x[i] * noise);
    dx.push_back(1 * noise);
  }
  return {{Op::dropout, "x * noise: a dropped NaN or Inf gives NaN; d x = g * noise",
           [](const V& v) {
             Generator gen(kSeed);
             return dropout(v[0], p, true, gen);
           },
           {grad(x, {8})}, out, {}, {dx}}};
}

bool matches(double actual, double expected) {
  if (expected == kFinite) return std::isfinite(actual);
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  // Finite values: loose, for f16 and bf16 (their exact values are tested elsewhere).
  return std::fabs(actual - expected) <= 1e-2 * std::max(1.0, std::fabs(expected));
}

std::string show(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i] == kFinite ? "finite" : std::to_string(v[i]));
  return s + "]";
}

void expect_values(const std::vector<double>& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  bool ok = true;
  for (std::size_t i = 0; i < actual.size(); ++i) ok = ok && matches(actual[i], expected[i]);
  EXPECT_TRUE(ok) << what << ": got " << show(actual) << ", expected " << show(expected);
}

std::vector<Tensor> inputs_of(const NanCase& c, DType dtype, bool with_grad) {
  std::vector<Tensor> in;
  for (const In& i : c.in) {
    if (i.kind == Kind::index) {
      std::vector<std::int64_t> idx(i.values.begin(), i.values.end());
      in.push_back(Tensor::from(idx, i.shape));
      continue;
    }
    Tensor t = Tensor::from(i.values, i.shape, dtype);
    if (with_grad && i.kind == Kind::grad) t.set_requires_grad(true);
    in.push_back(t);
  }
  return in;
}

TEST(NanPropagation, EveryOpHasACase) {
  const std::vector<NanCase> t = table();
  for (int k = 0; k < kOpCount; ++k) {
    const Op op = static_cast<Op>(k);
    bool found = false;
    for (const NanCase& c : t) found = found || c.op == op;
    EXPECT_TRUE(found) << op_name(op) << " has no NaN/Inf case: add one to tests/ops_nan_test.cpp";
  }
}

TEST(NanPropagation, TheDropoutCaseDropsSomeAndKeepsSome) {
  const std::vector<double> dx = dropout_cases().at(0).grads.at(0);
  EXPECT_NE(std::count(dx.begin(), dx.end(), 0.0), 0);
  EXPECT_NE(std::count(dx.begin(), dx.end(), 2.0), 0);
}

TEST(NanPropagation, ForwardAndBackwardAsPyTorch) {
  for (const NanCase& c : table()) {
    for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      const std::string what = std::string(op_name(c.op)) + " " + std::string(name(dtype)) + " (" + c.pytorch + ")";
      SCOPED_TRACE(what);
      {
        NoGradGuard no_grad;
        expect_values(c.f(inputs_of(c, dtype, false)).to_f64(), c.out, "forward");
      }
      const std::vector<Tensor> leaves = inputs_of(c, dtype, true);
      const Tensor out = c.f(leaves);
      const std::vector<double> g = c.grad_out.empty() ? std::vector<double>(static_cast<std::size_t>(out.numel()), 1.0)
                                                      : c.grad_out;
      out.backward(Tensor::from(g, out.shape(), out.dtype()));
      for (std::size_t i = 0; i < c.in.size(); ++i) {
        if (c.in[i].kind != Kind::grad) {
          EXPECT_FALSE(leaves[i].grad().defined()) << "input " << i << " requires no gradient";
          continue;
        }
        ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i;
        expect_values(leaves[i].grad().to_f64(), c.grads.at(i), "gradient of input " + std::to_string(i));
      }
    }
  }
}

}  // namespace
}  // namespace ampcheck
