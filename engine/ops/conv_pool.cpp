// Convolution and pooling over NCHW tensors on the CPU.
//   conv2d: im2col + GEMM per sample and group (float GEMM for f32/f16/bf16, double for
//           f64), parallel over the batch;
//   max_pool2d, avg_pool2d, adaptive_avg_pool2d: direct loops, parallel over planes.
// Every kernel loads its inputs into the compute type, works there, and stores each
// result once, so f16/bf16 results are the f32 results rounded once. No reduction is
// split across threads in a thread-count-dependent way: results are bit-identical for
// every thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/ops/cpu_util.h"
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"

namespace ampcheck {
namespace {

using i64 = std::int64_t;

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

std::string pair_str(const std::array<i64, 2>& a) {
  return "{" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + "}";
}

std::string describe(const Tensor& t) {
  return std::string(name(t.dtype())) + " " + to_string(t.shape());
}

std::size_t usize(i64 n) { return static_cast<std::size_t>(n); }

// x must be a defined 4-D NCHW tensor with non-empty planes.
void check_nchw(const Tensor& x, const char* op) {
  if (!x.defined()) fail(op, "the input x is undefined; expected a tensor [N, C, H, W]");
  if (x.dim() != 4)
    fail(op, "input x has shape " + to_string(x.shape()) + " (" + std::to_string(x.dim()) +
                 " dims); expected 4 dims [N, C, H, W] (NCHW): add a batch dim of 1 with "
                 "reshape for a single image");
  if (x.size(1) < 1 || x.size(2) < 1 || x.size(3) < 1)
    fail(op, "input x has shape " + to_string(x.shape()) +
                 "; expected C, H and W of at least 1");
}

void check_pair(const char* op, const char* what, const std::array<i64, 2>& v, i64 min,
                const char* hint) {
  if (v[0] < min || v[1] < min)
    fail(op, std::string(what) + " " + pair_str(v) + " is invalid; expected each >= " +
                 std::to_string(min) + hint);
}

// ---------------------------------------------------------------------------------
// conv2d

struct ConvGeom {
  i64 n = 0, c_in = 0, h = 0, w = 0, c_out = 0, kh = 0, kw = 0, oh = 0, ow = 0, groups = 1;
  i64 sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  i64 hw() const { return h * w; }
  i64 ohw() const { return oh * ow; }
  i64 cin_g() const { return c_in / groups; }
  i64 cout_g() const { return c_out / groups; }
  i64 k() const { return cin_g() * kh * kw; }  // rows of one group's column matrix
  // A 1x1 kernel with unit stride and no padding reads x itself as the column matrix.
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

// Validates shapes and parameters (dtypes are checked by the forward, after any AMP cast).
ConvGeom conv_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const ConvParams& p) {
  const char* op = "conv2d";
  check_nchw(x, op);
  if (!weight.defined()) fail(op, "the weight is undefined; expected [C_out, C_in/groups, kH, kW]");
  if (weight.dim() != 4)
    fail(op, "weight has shape " + to_string(weight.shape()) +
                 "; expected 4 dims [C_out, C_in/groups, kH, kW]");
  check_pair(op, "stride", p.stride, 1, "");
  check_pair(op, "padding", p.padding, 0, "");
  check_pair(op, "dilation", p.dilation, 1, "");
  ConvGeom g;
  g.n = x.size(0), g.c_in = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.c_out = weight.size(0), g.kh = weight.size(2), g.kw = weight.size(3);
  g.groups = p.groups;
  g.sh = p.stride[0], g.sw = p.stride[1], g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  if (g.groups < 1)
    fail(op, "groups = " + std::to_string(g.groups) + " is invalid; expected >= 1");
  if (g.c_out < 1 || weight.size(1) < 1 || g.kh < 1 || g.kw < 1)
    fail(op, "weight has shape " + to_string(weight.shape()) + "; expected every dim >= 1");
  if (g.c_in % g.groups != 0)
    fail(op, "x " + to_string(x.shape()) + " has C_in = " + std::to_string(g.c_in) +
                 ", not divisible by groups = " + std::to_string(g.groups) +
                 "; expected groups to divide the input channels");
  if (g.c_out % g.groups != 0)
    fail(op, "weight " + to_string(weight.shape()) + " has C_out = " +
                 std::to_string(g.c_out) + ", not divisible by groups = " +
                 std::to_string(g.groups) + "; expected groups to divide the output channels");
  if (weight.size(1) != g.cin_g())
    fail(op, "weight " + to_string(weight.shape()) + " takes " +
                 std::to_string(weight.size(1)) + " input channels per group, but x " +
                 to_string(x.shape()) + " with groups = " + std::to_string(g.groups) +
                 " has C_in/groups = " + std::to_string(g.cin_g()) +
                 "; expected weight.size(1) == C_in/groups");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != g.c_out))
    fail(op, "bias has shape " + to_string(bias.shape()) + "; expected [" +
                 std::to_string(g.c_out) + "] (C_out of weight " + to_string(weight.shape()) +
                 ") or an undefined tensor for no bias");
  const i64 eff_h = g.dh * (g.kh - 1) + 1, eff_w = g.dw * (g.kw - 1) + 1;
  if (g.h + 2 * g.ph < eff_h || g.w + 2 * g.pw < eff_w)
    fail(op, "the dilated kernel " + std::to_string(eff_h) + "x" + std::to_string(eff_w) +
                 " (weight " + to_string(weight.shape()) + ", dilation " +
                 pair_str(p.dilation) + ") is larger than the padded input " +
                 std::to_string(g.h + 2 * g.ph) + "x" + std::to_string(g.w + 2 * g.pw) +
                 " (x " + to_string(x.shape()) + ", padding " + pair_str(p.padding) +
                 "); expected a smaller kernel or more padding");
  g.oh = (g.h + 2 * g.ph - eff_h) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - eff_w) / g.sw + 1;
  return g;
}

// The forward's full check: shapes, then one float dtype shared by every input.
ConvGeom conv_check(const std::vector<Tensor>& in, const ConvParams& p) {
  if (in.size() != 2 && in.size() != 3)
    fail("conv2d", "takes (x, weight) or (x, weight, bias), got " + std::to_string(in.size()) +
                       " tensor inputs");
  const Tensor none;
  const Tensor& bias = in.size() == 3 ? in[2] : none;
  const ConvGeom g = conv_geometry(in[0], in[1], bias, p);
  const DType dtype = cpu::float_dtype(in[0], "conv2d");
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != dtype)
      fail("conv2d", std::string("dtypes differ: x is ") + describe(in[0]) + ", " +
                         (i == 1 ? "weight" : "bias") + " is " + describe(in[i]) +
                         "; every input must share one float dtype: cast them to one "
                         "(cast(t, DType::" + std::string(name(dtype)) +
                         ")) or run under the AMP policy, which casts for you");
  return g;
}

// The output columns ox whose input column ox*sw - pw + j*dw lies inside [0, w): one
// range per kernel column j, so the copy loops below carry no per-element bounds test.
struct ColumnRange {
  i64 lo = 0, hi = 0;  // ox in [lo, hi)
};
ColumnRange valid_columns(const ConvGeom& g, i64 j) {
  const i64 shift = j * g.dw - g.pw;  // ix = ox*sw + shift
  auto ceil_div = [](i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const i64 lo = std::clamp<i64>(ceil_div(-shift, g.sw), 0, g.ow);
  const i64 hi = std::clamp<i64>(ceil_div(g.w - shift, g.sw), lo, g.ow);
  return {lo, hi};
}

// col[(c, i, j), (oy, ox)] = x[c, oy*sh - ph + i*dh, ox*sw - pw + j*dw], 0 in the padding;
// rows are channel-major, so group g's rows are the contiguous block [g*k, (g+1)*k).
template <typename T>
void im2col(const ConvGeom& g, const T* x, T* col) {
  for (i64 c = 0; c < g.c_in; ++c) {
    const T* plane = x + c * g.hw();
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * g.ohw();
        const ColumnRange r = valid_columns(g, j);
        const i64 shift = j * g.dw - g.pw;
        for (i64 oy = 0; oy < g.oh; ++oy) {
          T* dst = row + oy * g.ow;
          const i64 iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.ow, T{0});
            continue;
          }
          const T* src = plane + iy * g.w + shift;
          std::fill(dst, dst + r.lo, T{0});
          if (g.sw == 1)
            std::copy(src + r.lo, src + r.hi, dst + r.lo);
          else
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = src[ox * g.sw];
          std::fill(dst + r.hi, dst + g.ow, T{0});
        }
      }
    }
  }
}

// Sample s of x loaded into `x`, and the GEMM operand it gives: its im2col columns, or x
// itself for a pointwise (1x1, stride 1, no padding) convolution.
template <typename T>
const T* sample_columns(const ConvGeom& g, const Tensor& input, i64 s, std::vector<T>& x, std::vector<T>& col) {
  const i64 x_size = g.c_in * g.hw();
  cpu::load(input, s * x_size, x_size, x.data());
  if (g.pointwise()) return x.data();
  im2col(g, x.data(), col.data());
  return col.data();
}

// The adjoint of im2col: x[c, iy, ix] += col[(c, i, j), (oy, ox)] (x zeroed first).
template <typename T>
void col2im(const ConvGeom& g, const T* col, T* x) {
  std::fill(x, x + g.c_in * g.hw(), T{0});
  for (i64 c = 0; c < g.c_in; ++c) {
    T* plane = x + c * g.hw();
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * g.ohw();
        const ColumnRange r = valid_columns(g, j);
        const i64 shift = j * g.dw - g.pw;
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const i64 iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const T* src = row + oy * g.ow;
          T* dst = plane + iy * g.w + shift;
          for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox * g.sw] += src[ox];
        }
      }
    }
  }
}

template <typename T>
Tensor conv_forward(const std::vector<Tensor>& in, const ConvGeom& g) {
  const DType dtype = in[0].dtype();
  const std::vector<T> weight = cpu::values<T>(in[1]);
  const bool has_bias = in.size() == 3 && in[2].defined();
  const std::vector<T> bias = has_bias ? cpu::values<T>(in[2]) : std::vector<T>{};
  Tensor out = Tensor::empty({g.n, g.c_out, g.oh, g.ow}, dtype);
  const i64 x_size = g.c_in * g.hw(), y_size = g.c_out * g.ohw();
  parallel_for(g.n, 1, [&](i64 begin, i64 end) {
    std::vector<T> x(usize(x_size)), y(usize(y_size));
    std::vector<T> col(g.pointwise() ? 0 : usize(g.c_in * g.kh * g.kw * g.ohw()));
    for (i64 s = begin; s < end; ++s) {
      const T* cols = sample_columns(g, in[0], s, x, col);
      // y_g [C_out/g, OH*OW] = W_g [C_out/g, k] . col_g [k, OH*OW]
      for (i64 grp = 0; grp < g.groups; ++grp)
        cpu::gemm(false, false, g.cout_g(), g.ohw(), g.k(), weight.data() + grp * g.cout_g() * g.k(), g.k(),
                  cols + grp * g.k() * g.ohw(), g.ohw(), y.data() + grp * g.cout_g() * g.ohw(), g.ohw());
      if (has_bias)
        for (i64 c = 0; c < g.c_out; ++c) {
          T* row = y.data() + c * g.ohw();
          for (i64 i = 0; i < g.ohw(); ++i) row[i] += bias[usize(c)];
        }
      cpu::store(out, s * y_size, y_size, y.data());
    }
  });
  return out;
}

// Cap on the per-slot partial weight gradients (elements over all slots).
constexpr i64 kWeightSlotBudget = i64{1} << 22;
constexpr i64 kMaxWeightSlots = 16;

// grad_x_n = col2im(W^T . gy_n), per group: gcol_g [k, OH*OW] = W_g^T . gy_g
template <typename T>
Tensor conv_grad_x(const BackwardArgs& args, const ConvGeom& g) {
  const std::vector<Tensor>& in = args.in;
  const std::vector<T> weight = cpu::values<T>(in[1]);
  const i64 x_size = g.c_in * g.hw(), y_size = g.c_out * g.ohw();
  Tensor gx = Tensor::empty(in[0].shape(), in[0].dtype());
  parallel_for(g.n, 1, [&](i64 begin, i64 end) {
    std::vector<T> gy(usize(y_size)), gcol(usize(g.c_in * g.kh * g.kw * g.ohw()));
    std::vector<T> gx_buf(g.pointwise() ? 0 : usize(x_size));
    for (i64 s = begin; s < end; ++s) {
      cpu::load(args.grad, s * y_size, y_size, gy.data());
      for (i64 grp = 0; grp < g.groups; ++grp)
        cpu::gemm(true, false, g.k(), g.ohw(), g.cout_g(), weight.data() + grp * g.cout_g() * g.k(), g.k(),
                  gy.data() + grp * g.cout_g() * g.ohw(), g.ohw(), gcol.data() + grp * g.k() * g.ohw(), g.ohw());
      if (g.pointwise()) {
        cpu::store(gx, s * x_size, x_size, gcol.data());
      } else {
        col2im(g, gcol.data(), gx_buf.data());
        cpu::store(gx, s * x_size, x_size, gx_buf.data());
      }
    }
  });
  return gx;
}

// grad_W_g = sum_n gy_n,g [C_out/g, OH*OW] . col_n,g^T. The batch is cut into a number
// of slots that depends on the shapes only; each slot sums its samples in order and
// the slots are added in order, so the result does not depend on the thread count.
template <typename T>
Tensor conv_grad_w(const BackwardArgs& args, const ConvGeom& g) {
  const std::vector<Tensor>& in = args.in;
  const i64 x_size = g.c_in * g.hw(), y_size = g.c_out * g.ohw();
  const i64 col_size = g.pointwise() ? 0 : g.c_in * g.kh * g.kw * g.ohw();
  const i64 w_size = g.c_out * g.k();
  std::vector<T> gw(usize(w_size), T{0});
  if (g.n > 0) {
    const i64 slots =
        std::max<i64>(1, std::min({g.n, kMaxWeightSlots, kWeightSlotBudget / w_size}));
    std::vector<std::vector<T>> partial(usize(slots));
    parallel_for(slots, 1, [&](i64 begin, i64 end) {
      std::vector<T> x(usize(x_size)), gy(usize(y_size)), col(usize(col_size));
      for (i64 slot = begin; slot < end; ++slot) {
        std::vector<T>& acc = partial[usize(slot)];
        acc.assign(usize(w_size), T{0});
        for (i64 s = slot * g.n / slots; s < (slot + 1) * g.n / slots; ++s) {
          const T* cols = sample_columns(g, in[0], s, x, col);
          cpu::load(args.grad, s * y_size, y_size, gy.data());
          for (i64 grp = 0; grp < g.groups; ++grp)
            cpu::gemm(false, true, g.cout_g(), g.k(), g.ohw(), gy.data() + grp * g.cout_g() * g.ohw(), g.ohw(),
                      cols + grp * g.k() * g.ohw(), g.ohw(), acc.data() + grp * g.cout_g() * g.k(), g.k(),
                      /*accumulate=*/true);
        }
      }
    });
    for (const std::vector<T>& acc : partial)
      for (std::size_t i = 0; i < gw.size(); ++i) gw[i] += acc[i];
  }
  return cpu::from_values(gw, in[1].shape(), in[1].dtype());
}

// grad_b[c] = sum over n, oy, ox of gy[n, c, oy, ox]; one channel per work item.
template <typename T>
Tensor conv_grad_b(const BackwardArgs& args, const ConvGeom& g) {
  std::vector<T> gb(usize(g.c_out), T{0});
  parallel_for(g.c_out, 1, [&](i64 begin, i64 end) {
    std::vector<T> row(usize(g.ohw()));
    for (i64 c = begin; c < end; ++c) {
      T acc{0};
      for (i64 s = 0; s < g.n; ++s) {
        cpu::load(args.grad, (s * g.c_out + c) * g.ohw(), g.ohw(), row.data());
        for (const T v : row) acc += v;
      }
      gb[usize(c)] = acc;
    }
  });
  return cpu::from_values(gb, args.in[2].shape(), args.in[2].dtype());
}

// Each gradient only for an input that needs it: a first layer's grad_x (the gradient of
// the data batch) is never computed.
template <typename T>
std::vector<Tensor> conv_backward(const BackwardArgs& args, const ConvGeom& g) {
  const std::vector<Tensor>& in = args.in;
  std::vector<Tensor> grads(in.size());
  if (args.needs(0)) grads[0] = conv_grad_x<T>(args, g);
  if (args.needs(1)) grads[1] = conv_grad_w<T>(args, g);
  if (in.size() == 3 && in[2].defined() && args.needs(2)) grads[2] = conv_grad_b<T>(args, g);
  return grads;
}

// ---------------------------------------------------------------------------------
// pooling

struct PoolGeom {
  i64 n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  i64 kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  i64 planes() const { return n * c; }
  i64 hw() const { return h * w; }
  i64 ohw() const { return oh * ow; }
};

// max_pool2d and avg_pool2d: output (H + 2p - k) / s + 1 (floor), padding at most half the
// kernel (as PyTorch), so every window holds at least one input element.
PoolGeom pool_geometry(const Tensor& x, const PoolParams& p, const char* op) {
  check_nchw(x, op);
  check_pair(op, "kernel", p.kernel, 1, "");
  check_pair(op, "stride", p.stride, 1, " ({0, 0} in the public API means stride = kernel)");
  check_pair(op, "padding", p.padding, 0, "");
  if (2 * p.padding[0] > p.kernel[0] || 2 * p.padding[1] > p.kernel[1])
    fail(op, "padding " + pair_str(p.padding) + " is more than half the kernel " +
                 pair_str(p.kernel) + "; expected padding <= kernel / 2");
  PoolGeom g;
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.kh = p.kernel[0], g.kw = p.kernel[1], g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1];
  if (g.h + 2 * g.ph < g.kh || g.w + 2 * g.pw < g.kw)
    fail(op, "kernel " + pair_str(p.kernel) + " is larger than the padded input " +
                 std::to_string(g.h + 2 * g.ph) + "x" + std::to_string(g.w + 2 * g.pw) +
                 " (x " + to_string(x.shape()) + ", padding " + pair_str(p.padding) +
                 "); expected a smaller kernel or more padding");
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

PoolGeom adaptive_geometry(const Tensor& x, const PoolParams& p) {
  const char* op = "adaptive_avg_pool2d";
  check_nchw(x, op);
  check_pair(op, "output_size", p.kernel, 1, "");
  PoolGeom g;
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.oh = p.kernel[0], g.ow = p.kernel[1];
  return g;
}

// PyTorch's adaptive windows: [floor(i*in/out), ceil((i+1)*in/out)).
i64 adaptive_start(i64 i, i64 in, i64 out) { return i * in / out; }
i64 adaptive_end(i64 i, i64 in, i64 out) { return ((i + 1) * in + out - 1) / out; }

// Runs f(plane, src_plane, dst_plane) for each of the N*C planes: src planes of src_size
// elements loaded from `src` in the compute type, dst planes of dst_size stored once into
// a new tensor of `shape` and `dtype`. Each plane is one work item.
template <typename T, typename F>
Tensor per_plane(const Tensor& src, i64 planes, i64 src_size, i64 dst_size, const Shape& shape,
                 DType dtype, F f) {
  Tensor out = Tensor::empty(shape, dtype);
  const i64 grain = std::max<i64>(1, cpu::kChunk / std::max<i64>(1, src_size + dst_size));
  parallel_for(planes, grain, [&](i64 begin, i64 end) {
    std::vector<T> a(usize(src_size)), b(usize(dst_size));
    for (i64 p = begin; p < end; ++p) {
      cpu::load(src, p * src_size, src_size, a.data());
      f(p, a.data(), b.data());
      cpu::store(out, p * dst_size, dst_size, b.data());
    }
  });
  return out;
}

// Index (within its H*W plane) of each window's maximum: the first one, or the last NaN
// (NaN propagates; PyTorch's CPU rule). Padding never wins (it is -inf).
template <typename T>
void argmax_plane(const PoolGeom& g, const T* x, std::int64_t* idx) {
  for (i64 oy = 0; oy < g.oh; ++oy) {
    const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
    const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
    for (i64 ox = 0; ox < g.ow; ++ox) {
      const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
      const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
      i64 best = -1;
      for (i64 iy = y0; iy < y1; ++iy)
        for (i64 ix = x0; ix < x1; ++ix) {
          const i64 i = iy * g.w + ix;
          if (best < 0 || x[i] > x[best] || std::isnan(x[i])) best = i;
        }
      idx[oy * g.ow + ox] = best;
    }
  }
}

template <typename T>
Tensor max_pool_forward(const Tensor& x, const PoolGeom& g, Saved& saved) {
  Tensor indices = Tensor::empty({g.n, g.c, g.oh, g.ow}, DType::i64);
  std::int64_t* idx = indices.data<std::int64_t>();
  Tensor out = per_plane<T>(x, g.planes(), g.hw(), g.ohw(), indices.shape(), x.dtype(),
                            [&](i64 p, const T* src, T* dst) {
                              std::int64_t* ip = idx + p * g.ohw();
                              argmax_plane(g, src, ip);
                              for (i64 o = 0; o < g.ohw(); ++o) dst[o] = src[ip[o]];
                            });
  saved.tensors.push_back(indices);
  return out;
}

// grad_x[argmax(o)] += gy[o]
template <typename T>
Tensor max_pool_backward(const BackwardArgs& args, const PoolGeom& g) {
  const Tensor& x = args.in[0];
  Tensor indices;
  if (!args.saved.tensors.empty()) {
    indices = args.saved.tensors[0];
  } else {  // a forward that kept nothing: find the maxima again
    indices = Tensor::empty({g.n, g.c, g.oh, g.ow}, DType::i64);
    std::int64_t* out_idx = indices.data<std::int64_t>();
    parallel_for(g.planes(), 1, [&](i64 begin, i64 end) {
      std::vector<T> plane(usize(g.hw()));
      for (i64 p = begin; p < end; ++p) {
        cpu::load(x, p * g.hw(), g.hw(), plane.data());
        argmax_plane(g, plane.data(), out_idx + p * g.ohw());
      }
    });
  }
  const std::int64_t* idx = indices.data<std::int64_t>();
  return per_plane<T>(args.grad, g.planes(), g.ohw(), g.hw(), x.shape(), x.dtype(),
                      [&](i64 p, const T* gy, T* gx) {
                        std::fill(gx, gx + g.hw(), T{0});
                        const std::int64_t* ip = idx + p * g.ohw();
                        for (i64 o = 0; o < g.ohw(); ++o) gx[ip[o]] += gy[o];
                      });
}

// y[o] = sum of the window (padding counts as zeros) / (kH*kW)
template <typename T>
Tensor avg_pool_forward(const Tensor& x, const PoolGeom& g) {
  const T divisor = static_cast<T>(g.kh * g.kw);
  return per_plane<T>(x, g.planes(), g.hw(), g.ohw(), {g.n, g.c, g.oh, g.ow}, x.dtype(),
                      [&](i64, const T* src, T* dst) {
                        for (i64 oy = 0; oy < g.oh; ++oy) {
                          const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
                          const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
                          for (i64 ox = 0; ox < g.ow; ++ox) {
                            const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
                            const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
                            T acc{0};
                            for (i64 iy = y0; iy < y1; ++iy)
                              for (i64 ix = x0; ix < x1; ++ix) acc += src[iy * g.w + ix];
                            dst[oy * g.ow + ox] = acc / divisor;
                          }
                        }
                      });
}

// grad_x[i] = sum over the windows o holding i of gy[o] / (kH*kW)
template <typename T>
Tensor avg_pool_backward(const BackwardArgs& args, const PoolGeom& g) {
  const T divisor = static_cast<T>(g.kh * g.kw);
  const Tensor& x = args.in[0];
  return per_plane<T>(args.grad, g.planes(), g.ohw(), g.hw(), x.shape(), x.dtype(),
                      [&](i64, const T* gy, T* gx) {
                        std::fill(gx, gx + g.hw(), T{0});
                        for (i64 oy = 0; oy < g.oh; ++oy) {
                          const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
                          const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
                          for (i64 ox = 0; ox < g.ow; ++ox) {
                            const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
                            const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
                            const T v = gy[oy * g.ow + ox] / divisor;
                            for (i64 iy = y0; iy < y1; ++iy)
                              for (i64 ix = x0; ix < x1; ++ix) gx[iy * g.w + ix] += v;
                          }
                        }
                      });
}

// y[oy, ox] = mean of x over rows [hs, he) and columns [ws, we) (adaptive windows)
template <typename T>
Tensor adaptive_forward(const Tensor& x, const PoolGeom& g) {
  return per_plane<T>(x, g.planes(), g.hw(), g.ohw(), {g.n, g.c, g.oh, g.ow}, x.dtype(),
                      [&](i64, const T* src, T* dst) {
                        for (i64 oy = 0; oy < g.oh; ++oy) {
                          const i64 y0 = adaptive_start(oy, g.h, g.oh);
                          const i64 y1 = adaptive_end(oy, g.h, g.oh);
                          for (i64 ox = 0; ox < g.ow; ++ox) {
                            const i64 x0 = adaptive_start(ox, g.w, g.ow);
                            const i64 x1 = adaptive_end(ox, g.w, g.ow);
                            T acc{0};
                            for (i64 iy = y0; iy < y1; ++iy)
                              for (i64 ix = x0; ix < x1; ++ix) acc += src[iy * g.w + ix];
                            dst[oy * g.ow + ox] = acc / static_cast<T>((y1 - y0) * (x1 - x0));
                          }
                        }
                      });
}

// grad_x[i] = sum over the windows o holding i of gy[o] / |window o|
template <typename T>
Tensor adaptive_backward(const BackwardArgs& args, const PoolGeom& g) {
  const Tensor& x = args.in[0];
  return per_plane<T>(args.grad, g.planes(), g.ohw(), g.hw(), x.shape(), x.dtype(),
                      [&](i64, const T* gy, T* gx) {
                        std::fill(gx, gx + g.hw(), T{0});
                        for (i64 oy = 0; oy < g.oh; ++oy) {
                          const i64 y0 = adaptive_start(oy, g.h, g.oh);
                          const i64 y1 = adaptive_end(oy, g.h, g.oh);
                          for (i64 ox = 0; ox < g.ow; ++ox) {
                            const i64 x0 = adaptive_start(ox, g.w, g.ow);
                            const i64 x1 = adaptive_end(ox, g.w, g.ow);
                            const T v = gy[oy * g.ow + ox] /
                                        static_cast<T>((y1 - y0) * (x1 - x0));
                            for (i64 iy = y0; iy < y1; ++iy)
                              for (i64 ix = x0; ix < x1; ++ix) gx[iy * g.w + ix] += v;
                          }
                        }
                      });
}

// The pools take one float input; the forward checks it (the wrapper checks shapes only).
DType pool_dtype(const std::vector<Tensor>& in, const char* op) {
  if (in.size() != 1) fail(op, "takes one tensor input, got " + std::to_string(in.size()));
  return cpu::float_dtype(in[0], op);
}

// Public stride {0, 0}: stride = kernel.
std::array<i64, 2> default_stride(const std::array<i64, 2>& stride,
                                  const std::array<i64, 2>& kernel) {
  return stride[0] == 0 && stride[1] == 0 ? kernel : stride;
}

}  // namespace

namespace impl {

Tensor conv2d_forward(const ForwardArgs& args) {
  const ConvGeom g = conv_check(args.in, std::get<ConvParams>(args.params));
  return cpu::with_compute_type(args.in[0].dtype(), [&](auto zero) {
    return conv_forward<decltype(zero)>(args.in, g);
  });
}

std::vector<Tensor> conv2d_backward(const BackwardArgs& args) {
  const ConvGeom g = conv_check(args.in, std::get<ConvParams>(args.params));
  return cpu::with_compute_type(args.in[0].dtype(), [&](auto zero) {
    return conv_backward<decltype(zero)>(args, g);
  });
}

Tensor max_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "max_pool2d");
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "max_pool2d");
  return cpu::with_compute_type(dtype, [&](auto zero) {
    return max_pool_forward<decltype(zero)>(args.in[0], g, args.saved);
  });
}

std::vector<Tensor> max_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "max_pool2d");
  return {cpu::with_compute_type(args.in[0].dtype(), [&](auto zero) {
    return max_pool_backward<decltype(zero)>(args, g);
  })};
}

Tensor avg_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "avg_pool2d");
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "avg_pool2d");
  return cpu::with_compute_type(dtype, [&](auto zero) {
    return avg_pool_forward<decltype(zero)>(args.in[0], g);
  });
}

std::vector<Tensor> avg_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "avg_pool2d");
  return {cpu::with_compute_type(args.in[0].dtype(), [&](auto zero) {
    return avg_pool_backward<decltype(zero)>(args, g);
  })};
}

Tensor adaptive_avg_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "adaptive_avg_pool2d");
  const PoolGeom g = adaptive_geometry(args.in[0], std::get<PoolParams>(args.params));
  return cpu::with_compute_type(dtype, [&](auto zero) {
    return adaptive_forward<decltype(zero)>(args.in[0], g);
  });
}

std::vector<Tensor> adaptive_avg_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = adaptive_geometry(args.in[0], std::get<PoolParams>(args.params));
  return {cpu::with_compute_type(args.in[0].dtype(), [&](auto zero) {
    return adaptive_backward<decltype(zero)>(args, g);
  })};
}

}  // namespace impl

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  ConvParams p;
  p.stride = options.stride;
  p.padding = options.padding;
  p.dilation = options.dilation;
  p.groups = options.groups;
  conv_geometry(x, weight, bias, p);  // dtypes: checked by the forward, after any AMP cast
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return call(Op::conv2d, std::move(inputs), p);
}

Tensor max_pool2d(const Tensor& x, std::array<std::int64_t, 2> kernel,
                  std::array<std::int64_t, 2> stride, std::array<std::int64_t, 2> padding) {
  PoolParams p;
  p.kernel = kernel;
  p.stride = default_stride(stride, kernel);
  p.padding = padding;
  pool_geometry(x, p, "max_pool2d");
  return call(Op::max_pool2d, {x}, p);
}

Tensor avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> kernel,
                  std::array<std::int64_t, 2> stride, std::array<std::int64_t, 2> padding) {
  PoolParams p;
  p.kernel = kernel;
  p.stride = default_stride(stride, kernel);
  p.padding = padding;
  pool_geometry(x, p, "avg_pool2d");
  return call(Op::avg_pool2d, {x}, p);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size) {
  PoolParams p;
  p.kernel = output_size;
  adaptive_geometry(x, p);
  return call(Op::adaptive_avg_pool2d, {x}, p);
}

}  // namespace ampcheck
