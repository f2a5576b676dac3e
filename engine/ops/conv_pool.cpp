// Convolution and pooling over NCHW tensors: what each op means (shapes, parameters,
// dtypes, what the backward saves and which gradients it computes). The arithmetic is the
// conv/pool kernel family's (kernels/conv_pool_kernels.h), on the device of the inputs:
// im2col + GEMM and direct loops on the CPU, cuDNN and CUDA kernels on the GPU.
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/ops/op_util.h"  // float_dtype
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/conv_pool_kernels.h"

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

// The geometry the kernels take: sizes, stride, padding, dilation and groups.
using ConvGeom = kernels::ConvGeometry;

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
  const DType dtype = ops::float_dtype(in[0], "conv2d");
  for (std::size_t i = 1; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != dtype)
      fail("conv2d", std::string("dtypes differ: x is ") + describe(in[0]) + ", " +
                         (i == 1 ? "weight" : "bias") + " is " + describe(in[i]) +
                         "; every input must share one float dtype: cast them to one "
                         "(cast(t, DType::" + std::string(name(dtype)) +
                         ")) or run under the AMP policy, which casts for you");
  return g;
}

// ---------------------------------------------------------------------------------
// pooling

using PoolGeom = kernels::PoolGeometry;

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

// The pools take one float input; the forward checks it (the wrapper checks shapes only).
DType pool_dtype(const std::vector<Tensor>& in, const char* op) {
  if (in.size() != 1) fail(op, "takes one tensor input, got " + std::to_string(in.size()));
  return ops::float_dtype(in[0], op);
}

// Public stride {0, 0}: stride = kernel.
std::array<i64, 2> default_stride(const std::array<i64, 2>& stride,
                                  const std::array<i64, 2>& kernel) {
  return stride[0] == 0 && stride[1] == 0 ? kernel : stride;
}

}  // namespace

namespace impl {

using kernels::ConvPoolKernels;

Tensor conv2d_forward(const ForwardArgs& args) {
  const ConvGeom g = conv_check(args.in, std::get<ConvParams>(args.params));
  const Tensor& x = args.in[0];
  const Tensor none;
  const Tensor& bias = args.in.size() == 3 ? args.in[2] : none;
  Tensor y = Tensor::empty({g.n, g.c_out, g.oh, g.ow}, x.dtype(), x.device());
  dispatch<ConvPoolKernels>("conv2d", args.in)
      .conv2d_forward(g, view_of(x), view_of(args.in[1]), view_of(bias), view_of(y));
  return y;
}

// Each gradient only for an input that needs it: a first layer's grad_x (the gradient of
// the data batch) is never computed.
std::vector<Tensor> conv2d_backward(const BackwardArgs& args) {
  const ConvGeom g = conv_check(args.in, std::get<ConvParams>(args.params));
  const std::vector<Tensor>& in = args.in;
  const Tensor none;
  const Tensor& bias = in.size() == 3 ? in[2] : none;
  const ConvPoolKernels& k = dispatch<ConvPoolKernels>("conv2d", {&args.grad, &in[0], &in[1], &bias});
  std::vector<Tensor> grads(in.size());
  if (args.needs(0)) {
    grads[0] = Tensor::empty(in[0].shape(), in[0].dtype(), in[0].device());
    k.conv2d_backward_data(g, view_of(args.grad), view_of(in[1]), view_of(grads[0]));
  }
  if (args.needs(1)) {
    grads[1] = Tensor::empty(in[1].shape(), in[1].dtype(), in[1].device());
    k.conv2d_backward_filter(g, view_of(in[0]), view_of(args.grad), view_of(grads[1]));
  }
  if (bias.defined() && args.needs(2)) {
    grads[2] = Tensor::empty(bias.shape(), bias.dtype(), bias.device());
    k.conv2d_backward_bias(g, view_of(args.grad), view_of(grads[2]));
  }
  return grads;
}

Tensor max_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "max_pool2d");
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "max_pool2d");
  const Tensor& x = args.in[0];
  Tensor indices = Tensor::empty({g.n, g.c, g.oh, g.ow}, DType::i64, x.device());
  Tensor y = Tensor::empty(indices.shape(), dtype, x.device());
  dispatch<ConvPoolKernels>("max_pool2d", {&x}).max_pool2d_forward(g, view_of(x), view_of(y), view_of(indices));
  args.saved.tensors.push_back(indices);
  return y;
}

// grad_x[argmax(o)] += gy[o], with the forward's argmax, or the maxima found again when the
// forward kept nothing.
std::vector<Tensor> max_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "max_pool2d");
  const Tensor& x = args.in[0];
  const ConvPoolKernels& k = dispatch<ConvPoolKernels>("max_pool2d", {&args.grad, &x});
  Tensor indices;
  if (!args.saved.tensors.empty()) {
    indices = args.saved.tensors[0];
  } else {
    indices = Tensor::empty({g.n, g.c, g.oh, g.ow}, DType::i64, x.device());
    k.max_pool2d_indices(g, view_of(x), view_of(indices));
  }
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.max_pool2d_backward(g, view_of(args.grad), view_of(indices), view_of(gx));
  return {gx};
}

Tensor avg_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "avg_pool2d");
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "avg_pool2d");
  const Tensor& x = args.in[0];
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow}, dtype, x.device());
  dispatch<ConvPoolKernels>("avg_pool2d", {&x}).avg_pool2d_forward(g, view_of(x), view_of(y));
  return y;
}

std::vector<Tensor> avg_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = pool_geometry(args.in[0], std::get<PoolParams>(args.params), "avg_pool2d");
  const Tensor& x = args.in[0];
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch<ConvPoolKernels>("avg_pool2d", {&args.grad, &x}).avg_pool2d_backward(g, view_of(args.grad), view_of(gx));
  return {gx};
}

Tensor adaptive_avg_pool2d_forward(const ForwardArgs& args) {
  const DType dtype = pool_dtype(args.in, "adaptive_avg_pool2d");
  const PoolGeom g = adaptive_geometry(args.in[0], std::get<PoolParams>(args.params));
  const Tensor& x = args.in[0];
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow}, dtype, x.device());
  dispatch<ConvPoolKernels>("adaptive_avg_pool2d", {&x}).adaptive_avg_pool2d_forward(g, view_of(x), view_of(y));
  return y;
}

std::vector<Tensor> adaptive_avg_pool2d_backward(const BackwardArgs& args) {
  const PoolGeom g = adaptive_geometry(args.in[0], std::get<PoolParams>(args.params));
  const Tensor& x = args.in[0];
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch<ConvPoolKernels>("adaptive_avg_pool2d", {&args.grad, &x})
      .adaptive_avg_pool2d_backward(g, view_of(args.grad), view_of(gx));
  return {gx};
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
