// The scalar definitions of the elementwise ops whose result is a comparison or a
// selection, and of their derivatives: there, what a NaN (or an Inf in the gradient)
// becomes is a decision, not a consequence of IEEE arithmetic. Each follows PyTorch's
// CPU and CUDA kernels, so a NaN produced upstream reaches the loss as it does there.
// Written once for the host and (under nvcc) the device, like fp_bits.h; T is the compute
// type (float or double).
//
// What PyTorch does, and so these:
//   - max_nan(a, b): NaN when either is NaN (torch.maximum, the max reductions, the
//     row max of softmax); std::max(a, NaN) would return a.
//   - relu(x) = clamp_min(x, 0) = std::max(x, 0): NaN stays NaN, -0 stays -0.
//   - relu_backward(g, y) = threshold_backward(g, y = relu(x), 0) = y <= 0 ? 0 : g: a
//     selection on the output, so a NaN input passes g through, and an Inf or NaN g
//     where x < 0 gives 0, not Inf * 0 = NaN.
//   - hardswish(x) = x * min(max(x + 3, 0), 6) / 6: NaN stays NaN, and -Inf gives
//     -Inf * 0 = NaN (PyTorch's and PaddlePaddle's formula; the piecewise form of the
//     docs would say 0); x <= -3 gives x * 0, -0 for finite x.
//   - hardswish_backward(g, x) = x < -3 ? 0 : x <= 3 ? g (2x + 3) / 6 : g: NaN x falls
//     through to g.
//   - hardsigmoid_backward(g, x) = -3 < x < 3 ? g / 6 : 0: NaN x gives 0.
//   - clamp(x, lo, hi) = min(max(x, lo), hi) with NaN kept; clamp_backward(g, x, lo, hi)
//     = lo <= x <= hi ? g : 0 (where(), so NaN x and Inf g outside give 0).
//   - sign(x) = (0 < x) - (x < 0): 0 for NaN (PyTorch's CPU sign kernel), so abs'
//     backward g * sign(x) is g * 0 at a NaN x.
#pragma once

#include "kernels/fp_bits.h"  // AMPCHECK_HD

namespace ampcheck::kernels {

template <typename T>
AMPCHECK_HD bool is_nan(T v) {
  return v != v;  // the one value unequal to itself (no fast-math in this project)
}

// The larger of a and b, NaN when either is NaN.
template <typename T>
AMPCHECK_HD T max_nan(T a, T b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a < b ? b : a;
}

template <typename T>
AMPCHECK_HD T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <typename T>
AMPCHECK_HD T relu_backward(T g, T y) {
  return y <= T(0) ? T(0) : g;
}

template <typename T>
AMPCHECK_HD T hardswish(T x) {
  if (x <= T(-3)) return x * T(0);
  if (x >= T(3)) return x;
  return x * (x + T(3)) / T(6);
}
template <typename T>
AMPCHECK_HD T hardswish_backward(T g, T x) {
  if (x < T(-3)) return T(0);
  if (x <= T(3)) return g * ((T(2) * x + T(3)) / T(6));
  return g;
}

template <typename T>
AMPCHECK_HD T hardsigmoid(T x) {
  if (x <= T(-3)) return T(0);
  if (x >= T(3)) return T(1);
  return x / T(6) + T(0.5);
}
template <typename T>
AMPCHECK_HD T hardsigmoid_backward(T g, T x) {
  return x > T(-3) && x < T(3) ? g * (T(1) / T(6)) : T(0);
}

template <typename T>
AMPCHECK_HD T clamp(T x, T lo, T hi) {
  if (is_nan(x)) return x;
  const T low = x < lo ? lo : x;
  return hi < low ? hi : low;
}
template <typename T>
AMPCHECK_HD T clamp_backward(T g, T x, T lo, T hi) {
  return x >= lo && x <= hi ? g : T(0);
}

template <typename T>
AMPCHECK_HD T sign(T x) {
  return T((T(0) < x) - (x < T(0)));
}

}  // namespace ampcheck::kernels
