// The convolution and pooling family over NCHW tensors: conv2d (forward, and the three
// gradients: data, filter, bias) with groups, stride, padding and dilation; max_pool2d
// (with the argmax of each window), avg_pool2d and adaptive_avg_pool2d, forward and
// backward. The engine (engine/ops/conv_pool.cpp) checks the shapes and parameters and
// hands the kernels their geometry as plain numbers; every View is contiguous NCHW.
//
// Compute type: that of the output's dtype (kernels/view.h), f16/bf16 in f32 with one
// rounding of each result. cpu() is im2col + the project's GEMM and direct loops
// (kernels/cpu/conv_pool.cpp); cuda() is cuDNN for the convolution and CUDA kernels for
// the bias gradient and the pools (kernels/cuda/conv.cu, pool.cu).
//
// The scalar rules that decide a result (which element of a window is its maximum, where
// an adaptive window starts and ends, which windows hold an input element) are written
// once below for the host and the device, and so is each pool's result at one element as
// the CUDA kernels compute it (one thread per element), so the tests run that arithmetic
// on the host against the CPU kernels.
#pragma once

#include <cmath>  // llround, for kernels/element.h
#include <cstdint>

#include "kernels/element.h"      // load_element
#include "kernels/elementwise.h"  // is_nan
#include "kernels/fp_bits.h"      // AMPCHECK_HD
#include "kernels/view.h"

namespace ampcheck::kernels {

// conv2d: x [n, c_in, h, w], weight [c_out, c_in / groups, kh, kw], y [n, c_out, oh, ow];
// stride (sh, sw), zero padding (ph, pw), dilation (dh, dw). The engine has checked that
// groups divides both channel counts and that oh, ow >= 1.
struct ConvGeometry {
  std::int64_t n = 0, c_in = 0, h = 0, w = 0, c_out = 0, kh = 0, kw = 0, oh = 0, ow = 0, groups = 1;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;

  AMPCHECK_HD std::int64_t hw() const { return h * w; }
  AMPCHECK_HD std::int64_t ohw() const { return oh * ow; }
  AMPCHECK_HD std::int64_t cin_g() const { return c_in / groups; }
  AMPCHECK_HD std::int64_t cout_g() const { return c_out / groups; }
  AMPCHECK_HD std::int64_t k() const { return cin_g() * kh * kw; }  // rows of one group's column matrix
  // A 1x1 kernel with unit stride and no padding reads x itself as the column matrix.
  AMPCHECK_HD bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// The pools: x [n, c, h, w], y [n, c, oh, ow]. max/avg: window (kh, kw), stride (sh, sw),
// padding (ph, pw) at most half the window, so every window holds an input element.
// adaptive_avg_pool2d uses n, c, h, w, oh and ow only.
struct PoolGeometry {
  std::int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;

  AMPCHECK_HD std::int64_t planes() const { return n * c; }
  AMPCHECK_HD std::int64_t hw() const { return h * w; }
  AMPCHECK_HD std::int64_t ohw() const { return oh * ow; }
};

// Whether a window's maximum moves from `best` to `candidate`, met later in row-major
// order: a larger value, or any NaN, so the first maximum wins and the last NaN wins (NaN
// propagates: PyTorch's CPU rule). The first element of a window is taken unconditionally.
template <typename T>
AMPCHECK_HD bool max_pool_takes(T candidate, T best) {
  return candidate > best || is_nan(candidate);
}

// PyTorch's adaptive windows along one dim: output i of `out` covers [start, end) of `in`,
// [floor(i * in / out), ceil((i + 1) * in / out)).
AMPCHECK_HD std::int64_t adaptive_start(std::int64_t i, std::int64_t in, std::int64_t out) { return i * in / out; }
AMPCHECK_HD std::int64_t adaptive_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// The outputs along one dim of a strided window (size k, stride s, padding p, `out`
// outputs) whose unclipped window [o*s - p, o*s - p + k) holds input position i: [lo, hi).
// A backward that gathers (a CUDA thread per input element) visits exactly these.
struct WindowRange {
  std::int64_t lo = 0, hi = 0;
};
AMPCHECK_HD WindowRange windows_holding(std::int64_t i, std::int64_t k, std::int64_t s, std::int64_t p,
                                        std::int64_t out) {
  // o*s <= i + p  and  o*s > i + p - k
  const std::int64_t top = i + p;  // >= 0 for an input position
  std::int64_t lo = top - k < 0 ? 0 : (top - k) / s + 1;
  std::int64_t hi = top / s + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}
// The same for adaptive windows: the outputs o with adaptive_start(o) <= i <
// adaptive_end(o), [floor(i * out / in), ceil((i + 1) * out / in)) clipped to [0, out).
AMPCHECK_HD WindowRange adaptive_windows_holding(std::int64_t i, std::int64_t in, std::int64_t out) {
  std::int64_t lo = i * out / in;
  std::int64_t hi = ((i + 1) * out + in - 1) / in;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
  return {lo, hi};
}

// ---------------------------------------------------------------------------------
// The pools at one element, as the CUDA kernels compute them (kernels/cuda/pool.cu):
// forward, one output o = (plane, oy, ox) from its window in row-major order; backward,
// one input element i = (plane, iy, ix) gathered from the outputs whose windows hold it,
// in ascending output order: the order in which the CPU kernels scatter each output's
// share into the inputs, so the sums are the same operations in the same order, without
// atomics. T is the compute type; a result is rounded once by the caller.

// The maximum of output o's window and its index within the plane (max_pool_takes).
template <typename T>
struct WindowMax {
  std::int64_t index = -1;
  T value = T(0);
};
template <typename T>
AMPCHECK_HD WindowMax<T> max_pool_at(const PoolGeometry& g, const void* x, DType dtype, std::int64_t o) {
  const std::int64_t plane = o / g.ohw(), r = o % g.ohw(), oy = r / g.ow, ox = r % g.ow;
  const std::int64_t top = oy * g.sh - g.ph, left = ox * g.sw - g.pw;
  const std::int64_t y0 = top < 0 ? 0 : top, y1 = top + g.kh < g.h ? top + g.kh : g.h;
  const std::int64_t x0 = left < 0 ? 0 : left, x1 = left + g.kw < g.w ? left + g.kw : g.w;
  WindowMax<T> best;
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) {
      const std::int64_t i = iy * g.w + ix;
      const T v = load_element<T>(x, dtype, plane * g.hw() + i);
      if (best.index < 0 || max_pool_takes(v, best.value)) best = {i, v};
    }
  return best;
}

// grad_x at input i: the sum of grad_y over the outputs whose maximum i is.
template <typename T>
AMPCHECK_HD T max_pool_grad_at(const PoolGeometry& g, const void* gy, DType dtype, const std::int64_t* indices,
                               std::int64_t i) {
  const std::int64_t plane = i / g.hw(), r = i % g.hw(), iy = r / g.w, ix = r % g.w;
  const WindowRange rows = windows_holding(iy, g.kh, g.sh, g.ph, g.oh);
  const WindowRange cols = windows_holding(ix, g.kw, g.sw, g.pw, g.ow);
  T acc = T(0);
  for (std::int64_t oy = rows.lo; oy < rows.hi; ++oy)
    for (std::int64_t ox = cols.lo; ox < cols.hi; ++ox) {
      const std::int64_t o = plane * g.ohw() + oy * g.ow + ox;
      if (indices[o] == r) acc += load_element<T>(gy, dtype, o);
    }
  return acc;
}

// The window's sum (padding counts as zeros) / (kh * kw).
template <typename T>
AMPCHECK_HD T avg_pool_at(const PoolGeometry& g, const void* x, DType dtype, std::int64_t o) {
  const std::int64_t plane = o / g.ohw(), r = o % g.ohw(), oy = r / g.ow, ox = r % g.ow;
  const std::int64_t top = oy * g.sh - g.ph, left = ox * g.sw - g.pw;
  const std::int64_t y0 = top < 0 ? 0 : top, y1 = top + g.kh < g.h ? top + g.kh : g.h;
  const std::int64_t x0 = left < 0 ? 0 : left, x1 = left + g.kw < g.w ? left + g.kw : g.w;
  T acc = T(0);
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) acc += load_element<T>(x, dtype, plane * g.hw() + iy * g.w + ix);
  return acc / static_cast<T>(g.kh * g.kw);
}

// grad_x at input i: the sum over the windows o holding i of grad_y[o] / (kh * kw).
template <typename T>
AMPCHECK_HD T avg_pool_grad_at(const PoolGeometry& g, const void* gy, DType dtype, std::int64_t i) {
  const T divisor = static_cast<T>(g.kh * g.kw);
  const std::int64_t plane = i / g.hw(), r = i % g.hw(), iy = r / g.w, ix = r % g.w;
  const WindowRange rows = windows_holding(iy, g.kh, g.sh, g.ph, g.oh);
  const WindowRange cols = windows_holding(ix, g.kw, g.sw, g.pw, g.ow);
  T acc = T(0);
  for (std::int64_t oy = rows.lo; oy < rows.hi; ++oy)
    for (std::int64_t ox = cols.lo; ox < cols.hi; ++ox)
      acc += load_element<T>(gy, dtype, plane * g.ohw() + oy * g.ow + ox) / divisor;
  return acc;
}

// The mean of output o's adaptive window.
template <typename T>
AMPCHECK_HD T adaptive_avg_at(const PoolGeometry& g, const void* x, DType dtype, std::int64_t o) {
  const std::int64_t plane = o / g.ohw(), r = o % g.ohw(), oy = r / g.ow, ox = r % g.ow;
  const std::int64_t y0 = adaptive_start(oy, g.h, g.oh), y1 = adaptive_end(oy, g.h, g.oh);
  const std::int64_t x0 = adaptive_start(ox, g.w, g.ow), x1 = adaptive_end(ox, g.w, g.ow);
  T acc = T(0);
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) acc += load_element<T>(x, dtype, plane * g.hw() + iy * g.w + ix);
  return acc / static_cast<T>((y1 - y0) * (x1 - x0));
}

// grad_x at input i: the sum over the adaptive windows o holding i of grad_y[o] / |o|.
template <typename T>
AMPCHECK_HD T adaptive_avg_grad_at(const PoolGeometry& g, const void* gy, DType dtype, std::int64_t i) {
  const std::int64_t plane = i / g.hw(), r = i % g.hw(), iy = r / g.w, ix = r % g.w;
  const WindowRange rows = adaptive_windows_holding(iy, g.h, g.oh);
  const WindowRange cols = adaptive_windows_holding(ix, g.w, g.ow);
  T acc = T(0);
  for (std::int64_t oy = rows.lo; oy < rows.hi; ++oy) {
    const std::int64_t window_rows = adaptive_end(oy, g.h, g.oh) - adaptive_start(oy, g.h, g.oh);
    for (std::int64_t ox = cols.lo; ox < cols.hi; ++ox) {
      const std::int64_t window_cols = adaptive_end(ox, g.w, g.ow) - adaptive_start(ox, g.w, g.ow);
      acc += load_element<T>(gy, dtype, plane * g.ohw() + oy * g.ow + ox) / static_cast<T>(window_rows * window_cols);
    }
  }
  return acc;
}

struct ConvPoolKernels {
  // y = conv2d(x, weight) + bias; `bias` is [c_out], or a View with no data for none.
  // x, weight, bias and y share one float dtype.
  void (*conv2d_forward)(const ConvGeometry& g, const View& x, const View& weight, const View& bias,
                         const View& y);
  // grad_x = the adjoint of the convolution in x applied to grad_y (full overwrite).
  void (*conv2d_backward_data)(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x);
  // grad_weight = sum over the batch of grad_y correlated with x (zeros for n = 0).
  void (*conv2d_backward_filter)(const ConvGeometry& g, const View& x, const View& grad_y,
                                 const View& grad_weight);
  // grad_bias[c] = sum of grad_y[:, c, :, :] (zeros for n = 0).
  void (*conv2d_backward_bias)(const ConvGeometry& g, const View& grad_y, const View& grad_bias);

  // y = the maximum of each window and indices (i64, y's shape) = its position within the
  // input's h*w plane (max_pool_takes decides).
  void (*max_pool2d_forward)(const PoolGeometry& g, const View& x, const View& y, const View& indices);
  // The indices alone (a backward whose forward kept none).
  void (*max_pool2d_indices)(const PoolGeometry& g, const View& x, const View& indices);
  // grad_x[plane, indices[o]] += grad_y[o], summed over o in ascending order.
  void (*max_pool2d_backward)(const PoolGeometry& g, const View& grad_y, const View& indices, const View& grad_x);
  // y = the window's sum (padding counts as zeros) / (kh * kw), and its adjoint.
  void (*avg_pool2d_forward)(const PoolGeometry& g, const View& x, const View& y);
  void (*avg_pool2d_backward)(const PoolGeometry& g, const View& grad_y, const View& grad_x);
  // y = the mean of each adaptive window, and its adjoint.
  void (*adaptive_avg_pool2d_forward)(const PoolGeometry& g, const View& x, const View& y);
  void (*adaptive_avg_pool2d_backward)(const PoolGeometry& g, const View& grad_y, const View& grad_x);

  static const ConvPoolKernels& cpu();
  static const ConvPoolKernels& cuda();
};

}  // namespace ampcheck::kernels
