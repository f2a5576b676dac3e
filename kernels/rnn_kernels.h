// The recurrent family: PyTorch's nn.LSTM, nn.GRU and nn.RNN layers (one layer, one
// direction) over a whole sequence, as the ops lstm, gru, rnn_tanh and rnn_relu
// (engine/ops/rnn.cpp).
//
// What they compute is defined once, by the ops' composed path in engine/ops/rnn.cpp: per
// step t, gi = x_t W_ih^T + b_ih and gh = h W_hh^T + b_hh (GEMMs of the GEMM family,
// accumulated in the compute type and not rounded), then the cell below in the compute
// type, its new h (and c) rounded once to the dtype, which the next step reads; the
// backward through time from the activations the forward kept. PyTorch's gate order and
// equations:
//   lstm      i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (gi + gh), in that order
//             c' = f c + i g;  h' = o tanh(c')
//   gru       r = sigmoid(gi_r + gh_r); z = sigmoid(gi_z + gh_z)
//             n = tanh(gi_n + r gh_n);  h' = (1 - z) n + z h
//   rnn_tanh  h' = tanh(gi + gh);  rnn_relu  h' = relu(gi + gh)
// The cells are written once below for the host and the device. That path is the CPU's,
// the reference of `ampcheck selftest --device cuda`, and the GPU's wherever
// fused_problem() names a reason; cuda() runs the whole sequence in one cuDNN call per
// pass (cudnnRNNForward, cudnnRNNBackwardData_v8 / _BackwardWeights_v8;
// kernels/cuda/rnn.cu), held to the composed path within the dtype's tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/fp_bits.h"  // AMPCHECK_HD
#include "kernels/view.h"

namespace ampcheck::kernels {

enum class RnnMode : std::uint8_t { lstm, gru, rnn_tanh, rnn_relu };

// The op of each mode: "lstm", "gru", "rnn_tanh", "rnn_relu" (engine/ops/op_list.h).
inline const char* rnn_op_name(RnnMode m) {
  switch (m) {
    case RnnMode::lstm: return "lstm";
    case RnnMode::gru: return "gru";
    case RnnMode::rnn_tanh: return "rnn_tanh";
    case RnnMode::rnn_relu: return "rnn_relu";
  }
  return "rnn";
}

// Gates per step: 4 (LSTM), 3 (GRU), 1.
AMPCHECK_HD int rnn_gates(RnnMode m) { return m == RnnMode::lstm ? 4 : m == RnnMode::gru ? 3 : 1; }

// x [steps, batch, input] (time-major), W_ih [G*hidden, input], W_hh [G*hidden, hidden],
// b_ih and b_hh [G*hidden] (both or neither), h0 and (LSTM) c0 [batch, hidden] (each may be
// absent: zeros), y [steps, batch, hidden] (every step's h). Packed row-major.
struct RnnShape {
  RnnMode mode = RnnMode::lstm;
  std::int64_t steps = 0, batch = 0, input = 0, hidden = 0;
  bool bias = true;
};

// ---- the cells, one element (b, j) of the batch's [batch, hidden] at a time ----
// g(k) reads gate k's pre-activation sum gi + gh of this element (GRU: see below); a(k)
// is gate k's activation, kept for the backward.

AMPCHECK_HD float rnn_sigmoid(float x) { return 1.0f / (1.0f + ::expf(-x)); }
AMPCHECK_HD double rnn_sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }
AMPCHECK_HD float rnn_tanh(float x) { return ::tanhf(x); }
AMPCHECK_HD double rnn_tanh(double x) { return ::tanh(x); }

// LSTM: pre[k] = gi_k + gh_k for k = i, f, g, o. Writes the activations and returns c', h'.
template <typename T>
AMPCHECK_HD void lstm_cell(const T pre[4], T c, T act[4], T& c_new, T& h_new) {
  act[0] = rnn_sigmoid(pre[0]);
  act[1] = rnn_sigmoid(pre[1]);
  act[2] = rnn_tanh(pre[2]);
  act[3] = rnn_sigmoid(pre[3]);
  c_new = act[1] * c + act[0] * act[2];
  h_new = act[3] * rnn_tanh(c_new);
}

// LSTM backward: dh, dc the gradients of h' and c' (dc from the next step), c the previous
// cell, c_new this step's (as stored). Gives d pre[k] (the gradient of gi_k and of gh_k
// alike) and the previous cell's gradient.
template <typename T>
AMPCHECK_HD void lstm_cell_backward(const T act[4], T c, T c_new, T dh, T dc, T dpre[4], T& dc_prev) {
  const T tc = rnn_tanh(c_new);
  const T dct = dc + dh * act[3] * (T(1) - tc * tc);
  dpre[0] = dct * act[2] * act[0] * (T(1) - act[0]);
  dpre[1] = dct * c * act[1] * (T(1) - act[1]);
  dpre[2] = dct * act[0] * (T(1) - act[2] * act[2]);
  dpre[3] = dh * tc * act[3] * (T(1) - act[3]);
  dc_prev = dct * act[1];
}

// GRU: gi[k], gh[k] for k = r, z, n kept apart (r multiplies gh_n); h the previous state.
template <typename T>
AMPCHECK_HD void gru_cell(const T gi[3], const T gh[3], T h, T act[3], T& h_new) {
  act[0] = rnn_sigmoid(gi[0] + gh[0]);
  act[1] = rnn_sigmoid(gi[1] + gh[1]);
  act[2] = rnn_tanh(gi[2] + act[0] * gh[2]);
  h_new = (T(1) - act[1]) * act[2] + act[1] * h;
}

// GRU backward: d gi[k], d gh[k], and the part of the previous state's gradient that does
// not pass through W_hh (z dh).
template <typename T>
AMPCHECK_HD void gru_cell_backward(const T act[3], T gh_n, T h, T dh, T dgi[3], T dgh[3], T& dh_direct) {
  const T dn = dh * (T(1) - act[1]);
  const T dz = dh * (h - act[2]);
  const T da = dn * (T(1) - act[2] * act[2]);
  const T dr = da * gh_n;
  dgi[0] = dgh[0] = dr * act[0] * (T(1) - act[0]);
  dgi[1] = dgh[1] = dz * act[1] * (T(1) - act[1]);
  dgi[2] = da;
  dgh[2] = da * act[0];
  dh_direct = dh * act[1];
}

// Elman: h' = tanh or relu of pre; its backward from h' alone. relu as PyTorch's
// (clamp_min, and threshold_backward's selection): a NaN passes through both ways.
template <typename T>
AMPCHECK_HD T rnn_cell(RnnMode m, T pre) {
  return m == RnnMode::rnn_tanh ? rnn_tanh(pre) : (pre < T(0) ? T(0) : pre);
}
template <typename T>
AMPCHECK_HD T rnn_cell_backward(RnnMode m, T h_new, T dh) {
  return m == RnnMode::rnn_tanh ? dh * (T(1) - h_new * h_new) : (h_new <= T(0) ? T(0) : dh);
}

// One step of the composed path for the whole batch. Layouts, all [batch, G*hidden] or
// [batch, hidden], packed: gi, gh (compute type), h and c the previous states, act
// (compute type, kept), h_new and c_new (the states' dtype). c, c_new: LSTM only.
struct RnnStep {
  RnnMode mode = RnnMode::lstm;
  std::int64_t batch = 0, hidden = 0;
};

struct RnnKernels {
  // The cells of one step: act, h_new (and c_new) from gi, gh, h (and c).
  void (*cell)(const RnnStep& s, const View& gi, const View& gh, const View& h, const View& c, const View& act,
               const View& h_new, const View& c_new);
  // Its backward: from dh (the gradient of h_new, summed over the output and the next
  // step) and dc (LSTM: of c_new), the saved act, h, c, c_new and gh: dgi and dgh (compute
  // type), dh_direct (GRU: z dh, the gradient of h that skips W_hh; else no data) and
  // dc_prev (LSTM).
  void (*cell_backward)(const RnnStep& s, const View& act, const View& gh, const View& h, const View& c,
                        const View& c_new, const View& dh, const View& dc, const View& dgi, const View& dgh,
                        const View& dh_direct, const View& dc_prev);

  // Empty where forward/backward below take the call (x's dtype and the shape); else why
  // not, in a user's words, and the op runs its composed path. Never throws.
  std::string (*fused_problem)(DType dtype, const RnnShape& shape);
  // The whole sequence at once: y, and `reserve` (f32 elements, as many as
  // reserve_elements() says) that the backward reads. Absent biases, h0, c0: no data.
  std::int64_t (*reserve_elements)(DType dtype, const RnnShape& shape);
  void (*forward)(const View& x, const View& w_ih, const View& w_hh, const View& b_ih, const View& b_hh,
                  const View& h0, const View& c0, const RnnShape& shape, const View& y, const View& reserve);
  // Gradients of x, the weights, the biases and the initial states from dy, with the
  // forward's inputs, output and reserve. A gradient View without data is not wanted.
  void (*backward)(const View& dy, const View& x, const View& w_ih, const View& w_hh, const View& b_ih,
                   const View& b_hh, const View& h0, const View& c0, const View& y, const View& reserve,
                   const RnnShape& shape, const View& dx, const View& dw_ih, const View& dw_hh, const View& db_ih,
                   const View& db_hh, const View& dh0, const View& dc0);

  static const RnnKernels& cpu();
  static const RnnKernels& cuda();
};

}  // namespace ampcheck::kernels
