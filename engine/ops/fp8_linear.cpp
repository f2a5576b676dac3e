// fp8_linear: TransformerEngine's Linear in fp8 (its _Linear forward and backward).
//
//   forward:   x8 = fp8(x * s_x), w8 = fp8(W * s_w)     (saturating casts, kernels/fp8_kernels.h)
//              y  = (1/s_x)(1/s_w) x8 w8^T + b          (the fp8 GEMM, kernels/fp8_gemm_kernels.h)
//   backward:  g8 = fp8(G * s_g)                       (HYBRID: E5M2)
//              dx = (1/s_g)(1/s_w) g8 w8                (dgrad)
//              dW = (1/s_g)(1/s_x) g8^T x8              (wgrad)
//              db = sum of G's rows                     (the unquantized gradient, as TE's dbias)
// Under block scaling (MXFP8BlockScaling) each operand is cast in blocks of 32 along its
// GEMM's k, each block with the power-of-two scale of its own amax: x and W along `in`
// (rowwise) for the forward, G along `out` and W along `out` (W's columns) for dgrad, G and
// x along the rows (their columns) for wgrad, as TE's MXFP8 Linear makes its rowwise and
// columnwise copies; the GEMMs take the blocks' scales (kernels/fp8_gemm_kernels.h).
// The scales and formats come from the module's recipe state (Fp8LinearMeta), or under
// current scaling from each tensor's own amax at the cast; the casts write their amaxes
// there (the input's and the weight's in the forward, the gradient's in the backward),
// which the recipe's update reads at the end of the step. y and dx have x's dtype, dW the
// weight's, db the bias's.
//
// In f64 (an f64 x or weight: the inspector's shadow recompute, gradient checks) the op is
// the exact linear it approximates, forward and backward (linear's own), with no cast and
// no amax written: the reference the fp8 result is measured against.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/dtype/fp8.h"  // info: the formats' largest values
#include "engine/ops/impl.h"
#include "engine/ops/op_util.h"  // float_dtype
#include "engine/ops/ops.h"
#include "kernels/fp8_gemm_kernels.h"
#include "kernels/fp8_kernels.h"
#include "kernels/gemm_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::Fp8Format;

const Fp8LinearMeta& meta_of(const Params& params) {
  const auto* p = std::get_if<Fp8LinearParams>(&params);
  if (p == nullptr || !p->meta)
    throw std::invalid_argument("fp8_linear: no scaling state (call it through ops::fp8_linear with the module's meta)");
  return *p->meta;
}
Fp8LinearMeta& mutable_meta(const Params& params) { return const_cast<Fp8LinearMeta&>(meta_of(params)); }

void check_fp8_linear(const std::vector<Tensor>& in, const Fp8LinearMeta& m) {
  if (in.size() != 2 && in.size() != 3)
    throw std::invalid_argument("fp8_linear takes (x, weight) or (x, weight, bias)");
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != w.size(1))
    throw std::invalid_argument("fp8_linear: x " + to_string(x.shape()) + " and weight " + to_string(w.shape()) +
                                " need x[..., in] and weight [out, in]");
  if (in.size() == 3 && in[2].defined() && (in[2].dim() != 1 || in[2].size(0) != w.size(0)))
    throw std::invalid_argument("fp8_linear: bias " + to_string(in[2].shape()) + " must be [" +
                                std::to_string(w.size(0)) + "]");
  for (const Tensor* t : {&x, &w})
    if (t->dtype() != DType::f32 && t->dtype() != DType::f16 && t->dtype() != DType::bf16 && t->dtype() != DType::f64)
      throw std::invalid_argument("fp8_linear: x and weight must be floating point (f32, f16 or bf16), got " +
                                  std::string(name(t->dtype())));
  if (m.input_format == Fp8Format::e5m2 && m.weight_format == Fp8Format::e5m2)
    throw std::invalid_argument("fp8_linear: input and weight both in E5M2 have no fp8 GEMM; keep them in E4M3 "
                                "(HYBRID casts only the gradients to E5M2)");
}

using ops::rows_of;

bool exact_reference(const std::vector<Tensor>& in) {
  return in[0].dtype() == DType::f64 || in[1].dtype() == DType::f64;
}

// fp8 codes of a tensor, one byte each, in device memory of the tensor's device (an f32
// tensor used as a byte buffer: the engine has no byte dtype).
struct Codes {
  Tensor storage;
  std::uint8_t* data() const { return bytes(storage); }
  static std::uint8_t* bytes(const Tensor& t) { return static_cast<std::uint8_t*>(view_of(t).data); }
};
Codes quantize(const Tensor& t, float scale, Fp8Format format, float* amax) {
  Codes c{Tensor::empty({std::max<std::int64_t>(1, (t.numel() + 3) / 4)}, DType::f32, t.device())};
  kernels::Fp8QuantizeDesc d;
  d.op = "fp8_linear";
  d.x = view_of(t);
  d.codes = c.data();
  d.format = format;
  d.scale = scale;
  const float a = dispatch<kernels::Fp8Kernels>("fp8_linear", {&t}).quantize(d);
  if (amax != nullptr) *amax = std::max(*amax, a);
  return c;
}

// 1 / scale in binary32, as TE keeps scale_inv beside each scale.
float inverse(float scale) { return 1.0f / scale; }

// The scale a cast of `t` uses: the delayed one, or under current scaling the one from the
// tensor's own amax, found by a first pass with the cast's own amax rule (TE's current
// scaling computes the amax, then the scale, then casts).
float scale_for(const Tensor& t, float delayed, Fp8Format format, const Fp8LinearMeta& m) {
  if (!m.current) return delayed;
  float amax = 0.0f;
  (void)quantize(t, 1.0f, format, &amax);
  return kernels::fp8_scale_from_amax(amax, static_cast<float>(info(format).max()), m.current->power_2_scales,
                                      m.current->amax_epsilon);
}

// ---- block scaling (MXFP8) ----

// An operand cast in blocks along the rows of its [rows, cols] form: codes and E8M0 scales.
struct MxOperand {
  Codes codes, scales;
};
// t as [rows, cols], or where `transposed` the transpose of its [cols, rows] form: the
// columnwise copy TE makes for a GEMM that contracts t's rows.
MxOperand quantize_mx(const Tensor& t, std::int64_t rows, std::int64_t cols, bool transposed, Fp8Format format,
                      float* amax) {
  const std::int64_t blocks = (cols + kernels::kMxBlock - 1) / kernels::kMxBlock;
  MxOperand o{{Tensor::empty({std::max<std::int64_t>(1, (rows * cols + 3) / 4)}, DType::f32, t.device())},
              {Tensor::empty({std::max<std::int64_t>(1, (rows * blocks + 3) / 4)}, DType::f32, t.device())}};
  kernels::Fp8MxQuantizeDesc d;
  d.op = "fp8_linear";
  d.x = view_of(t);
  d.cols = transposed ? rows : cols;
  d.columnwise = transposed;
  d.codes = o.codes.data();
  d.scales = o.scales.data();
  d.format = format;
  const float a = dispatch<kernels::Fp8Kernels>("fp8_linear", {&t}).quantize_mx(d);
  if (amax != nullptr) *amax = std::max(*amax, a);
  return o;
}

// C [m, n] = A [m, k] B [n, k]^T of two block-scaled operands.
void mx_gemm(const MxOperand& a, Fp8Format a_format, const MxOperand& b, Fp8Format b_format, std::int64_t m,
             std::int64_t n, std::int64_t k, const Tensor& c, const Tensor* bias, const std::vector<Tensor>& on) {
  kernels::Fp8GemmDesc d;
  d.op = "fp8_linear";
  d.trans_b = true;
  d.m = m;
  d.n = n;
  d.k = k;
  d.a = a.codes.data();
  d.a_format = a_format;
  d.a_block_scales = a.scales.data();
  d.b = b.codes.data();
  d.b_format = b_format;
  d.b_block_scales = b.scales.data();
  d.c = view_of(c);
  if (bias != nullptr) d.bias = view_of(*bias);
  dispatch<kernels::Fp8GemmKernels>("fp8_linear", on).gemm(d);
}

Tensor mx_forward(const ForwardArgs& a, Fp8LinearMeta& meta) {
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const std::int64_t rows = rows_of(x), in = w.size(1), out = w.size(0);
  const MxOperand x8 = quantize_mx(x, rows, in, false, meta.input_format, &meta.input_amax);
  const MxOperand w8 = quantize_mx(w, out, in, false, meta.weight_format, &meta.weight_amax);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  const bool has_bias = a.in.size() == 3 && a.in[2].defined();
  mx_gemm(x8, meta.input_format, w8, meta.weight_format, rows, out, in, y, has_bias ? &a.in[2] : nullptr, a.in);
  return y;  // the backward casts x and W again, columnwise (TE keeps both copies)
}

void mx_backward(const BackwardArgs& a, Fp8LinearMeta& meta, std::vector<Tensor>& grads) {
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const Tensor& g = a.grad;
  const std::int64_t rows = rows_of(x), in = w.size(1), out = w.size(0);
  if (a.needs(0)) {  // dx [rows, in] = G [rows, out] W [out, in]: blocks along out
    const MxOperand g8 = quantize_mx(g, rows, out, false, meta.grad_format, &meta.grad_amax);
    const MxOperand wt8 = quantize_mx(w, in, out, true, meta.weight_format, nullptr);
    grads[0] = Tensor::empty(x.shape(), x.dtype(), x.device());
    mx_gemm(g8, meta.grad_format, wt8, meta.weight_format, rows, in, out, grads[0], nullptr, a.in);
  }
  if (a.needs(1)) {  // dW [out, in] = G^T [out, rows] x [rows, in]: blocks along the rows
    const MxOperand gt8 = quantize_mx(g, out, rows, true, meta.grad_format, &meta.grad_amax);
    const MxOperand xt8 = quantize_mx(x, in, rows, true, meta.input_format, nullptr);
    grads[1] = Tensor::empty(w.shape(), w.dtype(), w.device());
    mx_gemm(gt8, meta.grad_format, xt8, meta.input_format, out, in, rows, grads[1], nullptr, a.in);
  }
}

}  // namespace

Tensor fp8_linear_forward(const ForwardArgs& a) {
  const Fp8LinearMeta& m = meta_of(a.params);
  check_fp8_linear(a.in, m);
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const bool has_bias = a.in.size() == 3 && a.in[2].defined();
  if (exact_reference(a.in)) return linear_forward(a);  // linear reads no params
  Fp8LinearMeta& meta = mutable_meta(a.params);
  if (m.block_scaling) return mx_forward(a, meta);
  const float sx = scale_for(x, m.input_scale, m.input_format, m);
  const float sw = scale_for(w, m.weight_scale, m.weight_format, m);
  Codes x8 = quantize(x, sx, m.input_format, &meta.input_amax);
  Codes w8 = quantize(w, sw, m.weight_format, &meta.weight_amax);
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  kernels::Fp8GemmDesc d;
  d.op = "fp8_linear";
  d.trans_b = true;
  d.m = rows_of(x);
  d.n = w.size(0);
  d.k = w.size(1);
  d.a = x8.data();
  d.a_format = m.input_format;
  d.a_scale_inv = inverse(sx);
  d.b = w8.data();
  d.b_format = m.weight_format;
  d.b_scale_inv = inverse(sw);
  d.c = view_of(out);
  if (has_bias) d.bias = view_of(a.in[2]);
  d.split_accumulator = false;  // TE's forward GEMM: fast accumulation on Hopper
  dispatch<kernels::Fp8GemmKernels>("fp8_linear", a.in).gemm(d);
  // The inputs' codes for the backward, as TE keeps its fp8 copies, with the scales they
  // were cast with (current scaling's are this call's own; the meta shows the last ones).
  a.saved.tensors = {x8.storage, w8.storage, Tensor::from(std::vector<double>{sx}, {1}, DType::f32),
                     Tensor::from(std::vector<double>{sw}, {1}, DType::f32)};
  if (m.current) {
    meta.input_scale = sx;
    meta.weight_scale = sw;
  }
  return out;
}

std::vector<Tensor> fp8_linear_backward(const BackwardArgs& a) {
  const Fp8LinearMeta& m = meta_of(a.params);
  const Tensor& x = a.in[0];
  const Tensor& w = a.in[1];
  const Tensor& g = a.grad;
  std::vector<Tensor> grads(a.in.size());
  if (exact_reference(a.in)) return linear_backward(a);
  const std::int64_t rows = rows_of(x), in = w.size(1), out = w.size(0);
  const bool want_dx = a.needs(0), want_dw = a.needs(1);
  if (m.block_scaling) {
    mx_backward(a, mutable_meta(a.params), grads);
  } else if (want_dx || want_dw) {
    const std::uint8_t* x8 = Codes::bytes(a.saved.tensors.at(0));
    const std::uint8_t* w8 = Codes::bytes(a.saved.tensors.at(1));
    const float sx = static_cast<float>(a.saved.tensors.at(2).item());
    const float sw = static_cast<float>(a.saved.tensors.at(3).item());
    Fp8LinearMeta& meta = mutable_meta(a.params);
    const float sg = scale_for(g, m.grad_scale, m.grad_format, m);
    Codes g8 = quantize(g, sg, m.grad_format, &meta.grad_amax);
    if (m.current) meta.grad_scale = sg;
    const auto& gemm = dispatch<kernels::Fp8GemmKernels>("fp8_linear", {&x, &w, &g});
    kernels::Fp8GemmDesc d;
    d.op = "fp8_linear";
    d.split_accumulator = true;  // TE's dgrad and wgrad GEMMs
    d.a = g8.data();
    d.a_format = m.grad_format;
    d.a_scale_inv = inverse(sg);
    if (want_dx) {  // [rows, out] x [out, in]
      grads[0] = Tensor::empty(x.shape(), x.dtype(), x.device());
      d.m = rows;
      d.n = in;
      d.k = out;
      d.b = w8;
      d.b_format = m.weight_format;
      d.b_scale_inv = inverse(sw);
      d.c = view_of(grads[0]);
      gemm.gemm(d);
    }
    if (want_dw) {  // [rows, out]^T x [rows, in]
      grads[1] = Tensor::empty(w.shape(), w.dtype(), w.device());
      d.trans_a = true;
      d.m = out;
      d.n = in;
      d.k = rows;
      d.b = x8;
      d.b_format = m.input_format;
      d.b_scale_inv = inverse(sx);
      d.c = view_of(grads[1]);
      gemm.gemm(d);
    }
  }
  if (a.in.size() == 3 && a.in[2].defined() && a.needs(2)) {
    grads[2] = Tensor::empty(a.in[2].shape(), a.in[2].dtype(), g.device());
    dispatch<kernels::GemmKernels>("fp8_linear", {&g}).column_sum(view_of(g), view_of(grads[2]), g.dtype(),
                                                                    "fp8_linear");
  }
  return grads;
}

}  // namespace impl

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::shared_ptr<Fp8LinearMeta> meta) {
  if (bias.defined()) return call(Op::fp8_linear, {x, weight, bias}, Fp8LinearParams{std::move(meta)});
  return call(Op::fp8_linear, {x, weight}, Fp8LinearParams{std::move(meta)});
}

}  // namespace ampcheck
