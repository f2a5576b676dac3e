// lstm, gru, rnn_tanh, rnn_relu: one layer of PyTorch's nn.LSTM / nn.GRU / nn.RNN, one
// direction, over a whole time-major sequence, forward and backward through time
// (kernels/rnn_kernels.h gives the equations and the gate order).
//
// Inputs: x [T, B, I], W_ih [G*H, I], W_hh [G*H, H], then optional b_ih, b_hh [G*H] (both
// or neither), h0 and (LSTM) c0 [B, H] (zeros when absent). Output: y [T, B, H], every
// step's h. All of one dtype.
//
// The composed path defines the ops: the input projection of every step at once
// (GI = X W_ih^T + b_ih, one GEMM), then per step GH = h W_hh^T + b_hh (one GEMM) and the
// cells, in the compute type; each step's h (and c) rounded once to the dtype, which the
// next step reads. The backward walks the steps in reverse through the cells' backward
// and one GEMM per step for the state's gradient (dh W_hh), then the weights' and the
// input's gradients over every step at once. Where the device's RnnKernels take the call
// (cuDNN on a GPU), the whole sequence is one call per pass and the forward keeps cuDNN's
// reserve space instead of the activations.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/dispatch.h"
#include "engine/ops/impl.h"
#include "engine/ops/op_util.h"
#include "engine/ops/ops.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/gemm_kernels.h"
#include "kernels/kernel_note.h"
#include "kernels/memory_kernels.h"
#include "kernels/rnn_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::GemmDesc;
using kernels::GemmKernels;
using kernels::RnnKernels;
using kernels::RnnMode;
using kernels::View;

struct Layer {
  RnnMode mode = RnnMode::lstm;
  const char* op = "lstm";
  Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0;
  std::int64_t T = 0, B = 0, I = 0, H = 0, G = 1;
  DType dtype = DType::f32, acc = DType::f32;

  kernels::RnnShape shape() const { return {mode, T, B, I, H, b_ih.defined()}; }
};

Tensor input(const std::vector<Tensor>& in, std::size_t k) { return k < in.size() ? in[k] : Tensor(); }

Layer read(RnnMode mode, const std::vector<Tensor>& in) {
  Layer l;
  l.mode = mode;
  l.op = rnn_op_name(mode);
  const std::string op = l.op;
  auto fail = [&](const std::string& what) { throw std::invalid_argument(op + ": " + what); };
  if (mode != RnnMode::lstm && in.size() == 7 && in[6].defined()) fail("only an LSTM takes c0");
  const std::size_t most = mode == RnnMode::lstm ? 7 : 6;
  if (in.size() < 3 || in.size() > most)
    fail("takes x, W_ih, W_hh, then b_ih, b_hh, h0" + std::string(mode == RnnMode::lstm ? ", c0" : "") + " (optional), got " +
         std::to_string(in.size()) + " inputs");
  l.x = in[0];
  l.w_ih = in[1];
  l.w_hh = in[2];
  l.b_ih = input(in, 3);
  l.b_hh = input(in, 4);
  l.h0 = input(in, 5);
  l.c0 = input(in, 6);
  if (!l.x.defined() || !l.w_ih.defined() || !l.w_hh.defined()) fail("x, W_ih and W_hh are required");
  if (l.x.dim() != 3) fail("x must be [time, batch, features], got " + to_string(l.x.shape()));
  l.G = kernels::rnn_gates(mode);
  l.T = l.x.size(0);
  l.B = l.x.size(1);
  l.I = l.x.size(2);
  if (l.w_hh.dim() != 2 || l.w_hh.size(0) % l.G != 0)
    fail("W_hh must be [" + std::to_string(l.G) + " * hidden, hidden], got " + to_string(l.w_hh.shape()));
  l.H = l.w_hh.size(0) / l.G;
  if (l.w_hh.shape() != Shape{l.G * l.H, l.H}) fail("W_hh must be [" + std::to_string(l.G) + " * hidden, hidden], got " + to_string(l.w_hh.shape()));
  if (l.w_ih.shape() != Shape{l.G * l.H, l.I})
    fail("W_ih " + to_string(l.w_ih.shape()) + " does not match x " + to_string(l.x.shape()) + " and W_hh " +
         to_string(l.w_hh.shape()));
  if (l.b_ih.defined() != l.b_hh.defined()) fail("give both biases (b_ih and b_hh) or neither");
  for (const Tensor* b : {&l.b_ih, &l.b_hh})
    if (b->defined() && b->shape() != Shape{l.G * l.H}) fail("a bias must be [" + std::to_string(l.G * l.H) + "], got " + to_string(b->shape()));
  for (const Tensor* s : {&l.h0, &l.c0})
    if (s->defined() && s->shape() != Shape{l.B, l.H}) fail("an initial state must be [batch, hidden] = [" + std::to_string(l.B) + ", " + std::to_string(l.H) + "], got " + to_string(s->shape()));
  l.dtype = ops::float_dtype(l.x, l.op);
  for (const Tensor* t : {&l.w_ih, &l.w_hh, &l.b_ih, &l.b_hh, &l.h0, &l.c0})
    if (t->defined() && t->dtype() != l.dtype)
      fail("every input must have x's dtype " + std::string(name(l.dtype)) + ", one is " + std::string(name(t->dtype())));
  l.acc = l.dtype == DType::f64 ? DType::f64 : DType::f32;
  return l;
}

// Rows [first, first + count) of t's first dim, as a View of `shape` (no copy).
View rows(const Tensor& t, std::int64_t first, std::int64_t per_row, kernels::Dims shape) {
  View v = view_of(t);
  v.data = static_cast<unsigned char*>(v.data) + static_cast<std::size_t>(first * per_row) * element_size(t.dtype());
  v.shape = std::move(shape);
  return v;
}

// C [m, n] = A [m, k] B^T (B [n, k]) (+ bias) or, with trans flags, the other products;
// accumulated in the layer's compute type, rounded once to C's dtype.
void gemm(const Layer& l, View a, bool ta, View b, bool tb, View c, std::int64_t m, std::int64_t n, std::int64_t k,
          View bias = {}, bool accumulate = false) {
  GemmDesc d;
  d.op = l.op;
  d.trans_a = ta;
  d.trans_b = tb;
  d.m = m;
  d.n = n;
  d.k = k;
  d.a = std::move(a);
  d.b = std::move(b);
  d.c = std::move(c);
  d.bias = std::move(bias);
  d.accumulate = accumulate;
  d.compute = l.acc;
  dispatch<GemmKernels>(l.op, {&l.x}).gemm(d);
}

Tensor state_or_zeros(const Tensor& s, const Layer& l) {
  return s.defined() ? s : Tensor::zeros({l.B, l.H}, l.dtype, l.x.device());
}

View view_or_none(const Tensor& t) { return t.defined() ? view_of(t) : View{}; }

// The composed forward: y, and what the backward keeps (the gates' activations; the GRU's
// hidden-side sums; the LSTM's cells).
Tensor composed_forward(const Layer& l, Saved& saved) {
  const Device dev = l.x.device();
  const std::int64_t T = l.T, B = l.B, H = l.H, GH = l.G * l.H;
  Tensor y = Tensor::empty({T, B, H}, l.dtype, dev);
  Tensor gi = Tensor::empty({T, B, GH}, l.acc, dev);
  gemm(l, view_of(l.x), false, view_of(l.w_ih), true, view_of(gi), T * B, GH, l.I, view_or_none(l.b_ih));
  Tensor act = Tensor::empty({T, B, GH}, l.acc, dev);
  // GRU: every step's hidden-side sums are kept (r multiplies gh_n); else one buffer.
  Tensor gh = Tensor::empty({l.mode == RnnMode::gru ? T : 1, B, GH}, l.acc, dev);
  Tensor cells = l.mode == RnnMode::lstm ? Tensor::empty({T + 1, B, H}, l.dtype, dev) : Tensor();
  const Tensor h0 = state_or_zeros(l.h0, l);
  if (cells.defined()) cells.rows(0, 1).copy_from(state_or_zeros(l.c0, l).view({1, B, H}));
  const auto& k = dispatch<RnnKernels>(l.op, {&l.x});
  const kernels::RnnStep step{l.mode, B, H};
  for (std::int64_t t = 0; t < T; ++t) {
    const View h = t == 0 ? view_of(h0) : rows(y, t - 1, B * H, {B, H});
    const View ght = rows(gh, l.mode == RnnMode::gru ? t : 0, B * GH, {B, GH});
    gemm(l, h, false, view_of(l.w_hh), true, ght, B, GH, H, view_or_none(l.b_hh));
    k.cell(step, rows(gi, t, B * GH, {B, GH}), ght, h, cells.defined() ? rows(cells, t, B * H, {B, H}) : View{},
           rows(act, t, B * GH, {B, GH}), rows(y, t, B * H, {B, H}),
           cells.defined() ? rows(cells, t + 1, B * H, {B, H}) : View{});
  }
  saved.tensors = {act, l.mode == RnnMode::gru ? gh : Tensor(), cells};
  return y;
}

std::vector<Tensor> composed_backward(const Layer& l, const Tensor& dy_in, const Tensor& y, const Saved& saved,
                                      const BackwardArgs& args) {
  const Device dev = l.x.device();
  const std::int64_t T = l.T, B = l.B, H = l.H, GH = l.G * l.H;
  const Tensor& act = saved.tensors.at(0);
  const Tensor& gh = saved.tensors.at(1);
  const Tensor& cells = saved.tensors.at(2);
  const Tensor h0 = state_or_zeros(l.h0, l);
  Tensor dgi = Tensor::empty({T, B, GH}, l.acc, dev), dgh = Tensor::empty({T, B, GH}, l.acc, dev);
  // The state's gradient from the later steps, and the cell's (LSTM).
  Tensor dh_next = Tensor::zeros({B, H}, l.acc, dev), dh = Tensor::empty({B, H}, l.acc, dev);
  Tensor dc = Tensor::zeros({B, H}, l.acc, dev), dc_prev = Tensor::empty({B, H}, l.acc, dev);
  Tensor direct = l.mode == RnnMode::gru ? Tensor::empty({B, H}, l.acc, dev) : Tensor();
  const auto& k = dispatch<RnnKernels>(l.op, {&l.x});
  const auto& ew = dispatch<kernels::ElementwiseKernels>(l.op, {&l.x});
  const kernels::RnnStep step{l.mode, B, H};
  for (std::int64_t t = T - 1; t >= 0; --t) {
    const View both[2] = {rows(dy_in, t, B * H, {B, H}), view_of(dh_next)};
    ew.map(kernels::MapFn::add, {}, both, 2, view_of(dh));
    const View h = t == 0 ? view_of(h0) : rows(y, t - 1, B * H, {B, H});
    k.cell_backward(step, rows(act, t, B * GH, {B, GH}), gh.defined() ? rows(gh, t, B * GH, {B, GH}) : View{}, h,
                    cells.defined() ? rows(cells, t, B * H, {B, H}) : View{},
                    cells.defined() ? rows(cells, t + 1, B * H, {B, H}) : View{}, view_of(dh),
                    cells.defined() ? view_of(dc) : View{}, rows(dgi, t, B * GH, {B, GH}),
                    rows(dgh, t, B * GH, {B, GH}), view_or_none(direct), cells.defined() ? view_of(dc_prev) : View{});
    // dh_next = dGH_t W_hh (+ the GRU's z dh, which skips W_hh).
    if (direct.defined()) dh_next.copy_from(direct);
    gemm(l, rows(dgh, t, B * GH, {B, GH}), false, view_of(l.w_hh), false, view_of(dh_next), B, H, GH, {},
         direct.defined());
    if (cells.defined()) std::swap(dc, dc_prev);
  }
  std::vector<Tensor> grads(args.in.size());
  auto want = [&](std::size_t i) { return i < args.in.size() && args.in[i].defined() && args.needs(i); };
  if (want(0)) {
    grads[0] = Tensor::empty(l.x.shape(), l.dtype, dev);
    gemm(l, view_of(dgi), false, view_of(l.w_ih), false, view_of(grads[0]), T * B, l.I, GH);
  }
  if (want(1)) {
    grads[1] = Tensor::empty(l.w_ih.shape(), l.dtype, dev);
    gemm(l, view_of(dgi), true, view_of(l.x), false, view_of(grads[1]), GH, l.I, T * B);
  }
  if (want(2)) {
    // dW_hh = sum_t dGH_t^T h_{t-1}: steps 1.. against y's rows 0.., then step 0 against h0.
    grads[2] = Tensor::zeros(l.w_hh.shape(), l.acc, dev);
    if (T > 1)
      gemm(l, rows(dgh, 1, B * GH, {(T - 1) * B, GH}), true, rows(y, 0, B * H, {(T - 1) * B, H}), false,
           view_of(grads[2]), GH, H, (T - 1) * B);
    if (l.h0.defined())
      gemm(l, rows(dgh, 0, B * GH, {B, GH}), true, view_of(l.h0), false, view_of(grads[2]), GH, H, B, {}, true);
    if (l.dtype != l.acc) grads[2] = grads[2].to(l.dtype);
  }
  const auto& g = dispatch<GemmKernels>(l.op, {&l.x});
  if (want(3)) {
    grads[3] = Tensor::empty(l.b_ih.shape(), l.dtype, dev);
    g.column_sum(view_of(dgi), view_of(grads[3]), l.acc, l.op);
  }
  if (want(4)) {
    grads[4] = Tensor::empty(l.b_hh.shape(), l.dtype, dev);
    g.column_sum(view_of(dgh), view_of(grads[4]), l.acc, l.op);
  }
  if (want(5)) grads[5] = dh_next.to(l.dtype);
  if (want(6)) grads[6] = dc.to(l.dtype);
  return grads;
}

Tensor forward(RnnMode mode, const ForwardArgs& args) {
  const Layer l = read(mode, args.in);
  if (l.T == 0 || l.B == 0 || l.H == 0) {
    args.saved.tensors.clear();
    return Tensor::zeros({l.T, l.B, l.H}, l.dtype, l.x.device());
  }
  const auto& k = dispatch<RnnKernels>(l.op, {&l.x, &l.w_ih, &l.w_hh, &l.b_ih, &l.b_hh, &l.h0, &l.c0});
  const kernels::RnnShape shape = l.shape();
  const std::string why = k.fused_problem(l.dtype, shape);
  if (why.empty()) {
    Tensor y = Tensor::empty({l.T, l.B, l.H}, l.dtype, l.x.device());
    Tensor reserve = Tensor::empty({std::max<std::int64_t>(1, k.reserve_elements(l.dtype, shape))}, DType::f32,
                                   l.x.device());
    k.forward(view_of(l.x), view_of(l.w_ih), view_of(l.w_hh), view_or_none(l.b_ih), view_or_none(l.b_hh),
              view_or_none(l.h0), view_or_none(l.c0), shape, view_of(y), view_of(reserve));
    args.saved.tensors = {reserve};
    return y;
  }
  if (kernels::noting()) kernels::note_kernel(std::string(l.op) + " step by step: " + why);
  return composed_forward(l, args.saved);
}

std::vector<Tensor> backward(RnnMode mode, const BackwardArgs& args) {
  const Layer l = read(mode, args.in);
  std::vector<Tensor> grads(args.in.size());
  if (l.T == 0 || l.B == 0 || l.H == 0) {
    for (std::size_t i = 0; i < args.in.size(); ++i)
      if (args.in[i].defined() && args.needs(i)) grads[i] = Tensor::zeros(args.in[i].shape(), l.dtype, l.x.device());
    return grads;
  }
  const Tensor dy = args.grad.dtype() == l.dtype ? args.grad : args.grad.to(l.dtype);
  if (args.saved.tensors.size() != 1) return composed_backward(l, dy, args.out, args.saved, args);
  // The forward ran as one call: so does the backward, from its reserve space.
  auto grad_for = [&](std::size_t i) {
    if (i >= args.in.size() || !args.in[i].defined() || !args.needs(i)) return View{};
    grads[i] = Tensor::empty(args.in[i].shape(), l.dtype, l.x.device());
    return view_of(grads[i]);
  };
  const View dx = grad_for(0), dw_ih = grad_for(1), dw_hh = grad_for(2), db_ih = grad_for(3), db_hh = grad_for(4),
             dh0 = grad_for(5), dc0 = grad_for(6);
  dispatch<RnnKernels>(l.op, {&l.x}).backward(
      view_of(dy), view_of(l.x), view_of(l.w_ih), view_of(l.w_hh), view_or_none(l.b_ih), view_or_none(l.b_hh),
      view_or_none(l.h0), view_or_none(l.c0), view_of(args.out), view_of(args.saved.tensors.front()), l.shape(), dx,
      dw_ih, dw_hh, db_ih, db_hh, dh0, dc0);
  return grads;
}

}  // namespace

Tensor lstm_forward(const ForwardArgs& a) { return forward(RnnMode::lstm, a); }
std::vector<Tensor> lstm_backward(const BackwardArgs& a) { return backward(RnnMode::lstm, a); }
Tensor gru_forward(const ForwardArgs& a) { return forward(RnnMode::gru, a); }
std::vector<Tensor> gru_backward(const BackwardArgs& a) { return backward(RnnMode::gru, a); }
Tensor rnn_tanh_forward(const ForwardArgs& a) { return forward(RnnMode::rnn_tanh, a); }
std::vector<Tensor> rnn_tanh_backward(const BackwardArgs& a) { return backward(RnnMode::rnn_tanh, a); }
Tensor rnn_relu_forward(const ForwardArgs& a) { return forward(RnnMode::rnn_relu, a); }
std::vector<Tensor> rnn_relu_backward(const BackwardArgs& a) { return backward(RnnMode::rnn_relu, a); }

}  // namespace impl

namespace {
Tensor layer(Op op, const RnnInputs& in) {
  std::vector<Tensor> inputs{in.x, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.h0, in.c0};
  while (inputs.size() > 3 && !inputs.back().defined()) inputs.pop_back();
  return call(op, std::move(inputs));
}
}  // namespace

Tensor lstm(const RnnInputs& in) { return layer(Op::lstm, in); }
Tensor gru(const RnnInputs& in) { return layer(Op::gru, in); }
Tensor rnn_tanh(const RnnInputs& in) { return layer(Op::rnn_tanh, in); }
Tensor rnn_relu(const RnnInputs& in) { return layer(Op::rnn_relu, in); }

}  // namespace ampcheck
