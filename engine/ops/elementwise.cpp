// Elementwise ops: activations, arithmetic, math, where / masked_fill, cast.
// Each forward is one map in the compute type, rounded once to the output dtype; each
// backward is d(in) = grad * f'(in), written next to its forward. The scalar functions
// are kernels/elementwise.h's (one MapFn each); the map runs on the inputs' device.
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/ops/op_util.h"  // broadcast_shapes, float_dtype, sum_to_shape
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/elementwise_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::MapFn;
using kernels::MapScalars;

// out = fn(inputs) of `shape` and `dtype`, on the inputs' device.
Tensor map_to(MapFn fn, std::initializer_list<const Tensor*> in, const Shape& shape, DType dtype, const char* op,
              const MapScalars& s = {}) {
  const Device device = common_device(op, in);
  Tensor out = Tensor::empty(shape, dtype, device);
  kernels::View views[3];
  int n = 0;
  for (const Tensor* t : in) views[n++] = view_of(*t);
  kernels_on<kernels::ElementwiseKernels>(device).map(fn, s, views, n, view_of(out));
  return out;
}

// out = fn(inputs) with numpy broadcasting, in `dtype` ("op" names the op in errors).
Tensor map(MapFn fn, std::initializer_list<const Tensor*> in, DType dtype, const char* op,
           const MapScalars& s = {}) {
  Shape shape = (*in.begin())->shape();
  for (auto it = in.begin() + 1; it != in.end(); ++it) shape = ops::broadcast_shapes(shape, (*it)->shape(), op);
  return map_to(fn, in, shape, dtype, op, s);
}

// ---- shared shapes of forward and backward ----
// y = fn(x) in x's float dtype.
Tensor unary(const ForwardArgs& a, const char* op, MapFn fn, const MapScalars& s = {}) {
  const Tensor& x = a.in[0];
  return map(fn, {&x}, ops::float_dtype(x, op), op, s);
}

// d x = fn(grad, x): a derivative written in terms of the input x (g * f'(x)), or one that
// selects rather than multiplies (PyTorch's hardswish_backward, clamp_backward, ...), so
// an Inf grad where the op is flat gives 0.
std::vector<Tensor> grad_from_input(const BackwardArgs& a, MapFn fn, const MapScalars& s = {}) {
  const Tensor& x = a.in[0];
  return {map(fn, {&a.grad, &x}, x.dtype(), "backward", s)};
}

// d x = fn(grad, y), with the derivative written in terms of the output y (sigmoid, tanh,
// exp, ...).
std::vector<Tensor> grad_from_output(const BackwardArgs& a, MapFn fn) {
  return {map(fn, {&a.grad, &a.out}, a.in[0].dtype(), "backward")};
}

double scalar_of(const BackwardArgs& a) { return std::get<ScalarParams>(a.params).value; }
double scalar_of(const ForwardArgs& a) { return std::get<ScalarParams>(a.params).value; }

// The gradient of operand i of a broadcasting op: make() (the gradient at the output's
// shape) summed back to the operand's shape, in its dtype; undefined, and not computed,
// when the operand needs none.
template <typename F>
Tensor operand_grad(const BackwardArgs& a, std::size_t i, F make) {
  if (!a.needs(i)) return Tensor();
  const Tensor& x = a.in[i];
  const Tensor g = ops::sum_to_shape(make(), x.shape());
  return g.dtype() == x.dtype() ? g : g.to(x.dtype());
}

DType binary_dtype(const ForwardArgs& a, const char* op) {
  return promote(ops::float_dtype(a.in[0], op), ops::float_dtype(a.in[1], op));
}

Tensor binary(const ForwardArgs& a, const char* op, MapFn fn) {
  return map(fn, {&a.in[0], &a.in[1]}, binary_dtype(a, op), op);
}

}  // namespace

// ---- activations ----
// relu(x) = max(x, 0), NaN kept; d x = y <= 0 ? 0 : g (PyTorch's threshold_backward on
// the output: a NaN input passes g through)
Tensor relu_forward(const ForwardArgs& a) { return unary(a, "relu", MapFn::relu); }
std::vector<Tensor> relu_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::relu_backward); }

// gelu(x) = x Phi(x) = x/2 (1 + erf(x/sqrt2)); d = Phi(x) + x phi(x)
// tanh form: x/2 (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3);
//            d = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi)(1 + 3*0.044715 x^2)
Tensor gelu_forward(const ForwardArgs& a) {
  return unary(a, "gelu", std::get<GeluParams>(a.params).tanh_approx ? MapFn::gelu_tanh : MapFn::gelu_erf);
}
std::vector<Tensor> gelu_backward(const BackwardArgs& a) {
  return grad_from_input(a, std::get<GeluParams>(a.params).tanh_approx ? MapFn::gelu_tanh_backward
                                                                         : MapFn::gelu_erf_backward);
}

// silu(x) = x sigmoid(x); d = s (1 + x (1 - s))
Tensor silu_forward(const ForwardArgs& a) { return unary(a, "silu", MapFn::silu); }
std::vector<Tensor> silu_backward(const BackwardArgs& a) { return grad_from_input(a, MapFn::silu_backward); }

// sigmoid: d = y (1 - y)
Tensor sigmoid_forward(const ForwardArgs& a) { return unary(a, "sigmoid", MapFn::sigmoid); }
std::vector<Tensor> sigmoid_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::sigmoid_backward); }

// tanh: d = 1 - y^2
Tensor tanh_forward(const ForwardArgs& a) { return unary(a, "tanh", MapFn::tanh); }
std::vector<Tensor> tanh_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::tanh_backward); }

// hardswish(x) = x relu6(x + 3) / 6; d x = 0 (x < -3), g (x > 3, and NaN x), g (2x + 3)/6
// between (kernels/elementwise.h)
Tensor hardswish_forward(const ForwardArgs& a) { return unary(a, "hardswish", MapFn::hardswish); }
std::vector<Tensor> hardswish_backward(const BackwardArgs& a) {
  return grad_from_input(a, MapFn::hardswish_backward);
}

// hardsigmoid(x) = relu6(x + 3) / 6; d x = g/6 on (-3, 3), else 0
Tensor hardsigmoid_forward(const ForwardArgs& a) { return unary(a, "hardsigmoid", MapFn::hardsigmoid); }
std::vector<Tensor> hardsigmoid_backward(const BackwardArgs& a) {
  return grad_from_input(a, MapFn::hardsigmoid_backward);
}

// ---- arithmetic with broadcasting ----
// add: d a = g, d b = g (summed over broadcast dims)
Tensor add_forward(const ForwardArgs& a) { return binary(a, "add", MapFn::add); }
std::vector<Tensor> add_backward(const BackwardArgs& a) {
  return {operand_grad(a, 0, [&] { return a.grad; }), operand_grad(a, 1, [&] { return a.grad; })};
}

// sub: d a = g, d b = -g
Tensor sub_forward(const ForwardArgs& a) { return binary(a, "sub", MapFn::sub); }
std::vector<Tensor> sub_backward(const BackwardArgs& a) {
  return {operand_grad(a, 0, [&] { return a.grad; }),
          operand_grad(a, 1, [&] { return map(MapFn::neg, {&a.grad}, a.grad.dtype(), "sub backward"); })};
}

// mul: d a = g b, d b = g a
Tensor mul_forward(const ForwardArgs& a) { return binary(a, "mul", MapFn::mul); }
std::vector<Tensor> mul_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  return {operand_grad(a, 0, [&] { return map(MapFn::mul, {&a.grad, &a.in[1]}, d, "mul backward"); }),
          operand_grad(a, 1, [&] { return map(MapFn::mul, {&a.grad, &a.in[0]}, d, "mul backward"); })};
}

// div: d a = g / b, d b = -g a / b^2 = -g y / b
Tensor div_forward(const ForwardArgs& a) { return binary(a, "div", MapFn::div); }
std::vector<Tensor> div_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  return {operand_grad(a, 0, [&] { return map(MapFn::div, {&a.grad, &a.in[1]}, d, "div backward"); }),
          operand_grad(a, 1, [&] {
            return map(MapFn::div_backward_divisor, {&a.grad, &a.out, &a.in[1]}, d, "div backward");
          })};
}

// Scalar operands: the scalar is converted to the compute type once, like a tensor of it.
Tensor add_scalar_forward(const ForwardArgs& a) { return unary(a, "add", MapFn::add_scalar, {scalar_of(a)}); }
std::vector<Tensor> add_scalar_backward(const BackwardArgs& a) { return {a.grad}; }

Tensor sub_scalar_forward(const ForwardArgs& a) { return unary(a, "sub", MapFn::sub_scalar, {scalar_of(a)}); }
std::vector<Tensor> sub_scalar_backward(const BackwardArgs& a) { return {a.grad}; }

// d = s
Tensor mul_scalar_forward(const ForwardArgs& a) { return unary(a, "mul", MapFn::mul_scalar, {scalar_of(a)}); }
std::vector<Tensor> mul_scalar_backward(const BackwardArgs& a) {
  return {map(MapFn::mul_scalar, {&a.grad}, a.grad.dtype(), "backward", {scalar_of(a)})};
}

// d = 1/s, as g / s
Tensor div_scalar_forward(const ForwardArgs& a) { return unary(a, "div", MapFn::div_scalar, {scalar_of(a)}); }
std::vector<Tensor> div_scalar_backward(const BackwardArgs& a) {
  return {map(MapFn::div_scalar, {&a.grad}, a.grad.dtype(), "backward", {scalar_of(a)})};
}

// neg: d = -1
Tensor neg_forward(const ForwardArgs& a) { return unary(a, "neg", MapFn::neg); }
std::vector<Tensor> neg_backward(const BackwardArgs& a) {
  return {map(MapFn::neg, {&a.grad}, a.grad.dtype(), "backward")};
}

// abs: d = sign(x) (0 at 0 and at NaN, as PyTorch's g * sgn(x))
Tensor abs_forward(const ForwardArgs& a) { return unary(a, "abs", MapFn::abs); }
std::vector<Tensor> abs_backward(const BackwardArgs& a) { return grad_from_input(a, MapFn::abs_backward); }

// square: d = 2x
Tensor square_forward(const ForwardArgs& a) { return unary(a, "square", MapFn::square); }
std::vector<Tensor> square_backward(const BackwardArgs& a) { return grad_from_input(a, MapFn::square_backward); }

// ---- math ----
// exp: d = y, so d x = g * y
Tensor exp_forward(const ForwardArgs& a) { return unary(a, "exp", MapFn::exp); }
std::vector<Tensor> exp_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::mul); }

// log: d = 1/x, as g / x
Tensor log_forward(const ForwardArgs& a) { return unary(a, "log", MapFn::log); }
std::vector<Tensor> log_backward(const BackwardArgs& a) { return grad_from_input(a, MapFn::div); }

// sqrt: d = 1 / (2y)
Tensor sqrt_forward(const ForwardArgs& a) { return unary(a, "sqrt", MapFn::sqrt); }
std::vector<Tensor> sqrt_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::sqrt_backward); }

// rsqrt: y = x^(-1/2); d = -y^3 / 2
Tensor rsqrt_forward(const ForwardArgs& a) { return unary(a, "rsqrt", MapFn::rsqrt); }
std::vector<Tensor> rsqrt_backward(const BackwardArgs& a) { return grad_from_output(a, MapFn::rsqrt_backward); }

// pow(x, p): d = p x^(p-1) (p - 1 formed in double, then converted once)
Tensor pow_forward(const ForwardArgs& a) { return unary(a, "pow", MapFn::pow, {scalar_of(a)}); }
std::vector<Tensor> pow_backward(const BackwardArgs& a) {
  const double p = scalar_of(a);
  if (p == 0) return {Tensor::zeros(a.in[0].shape(), a.in[0].dtype(), a.in[0].device())};
  return grad_from_input(a, MapFn::pow_backward, {p, p - 1});
}

// reciprocal: d = -y^2
Tensor reciprocal_forward(const ForwardArgs& a) { return unary(a, "reciprocal", MapFn::reciprocal); }
std::vector<Tensor> reciprocal_backward(const BackwardArgs& a) {
  return grad_from_output(a, MapFn::reciprocal_backward);
}

// erf (torch.erf, paddle.erf, ONNX Erf): d = 2/sqrt(pi) exp(-x^2), in terms of the input
Tensor erf_forward(const ForwardArgs& a) { return unary(a, "erf", MapFn::erf); }
std::vector<Tensor> erf_backward(const BackwardArgs& a) { return grad_from_input(a, MapFn::erf_backward); }

// clamp(x, lo, hi), NaN kept; d x = lo <= x <= hi ? g : 0 (PyTorch's where(): NaN x gives 0)
Tensor clamp_forward(const ForwardArgs& a) {
  const auto [lo, hi] = std::get<ClampParams>(a.params);
  return unary(a, "clamp", MapFn::clamp, {lo, hi});
}
std::vector<Tensor> clamp_backward(const BackwardArgs& a) {
  const auto [lo, hi] = std::get<ClampParams>(a.params);
  return grad_from_input(a, MapFn::clamp_backward, {lo, hi});
}

// ---- selection ----
// where(c, a, b) = c != 0 ? a : b; d a = g [c], d b = g [!c]
Tensor where_forward(const ForwardArgs& a) {
  const DType d = promote(ops::float_dtype(a.in[1], "where"), ops::float_dtype(a.in[2], "where"));
  return map(MapFn::where, {&a.in[0], &a.in[1], &a.in[2]}, d, "where");
}
std::vector<Tensor> where_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  auto pick = [&](MapFn fn) { return map(fn, {&a.in[0], &a.grad}, d, "where backward"); };
  return {Tensor(), operand_grad(a, 1, [&] { return pick(MapFn::where_backward_taken); }),
          operand_grad(a, 2, [&] { return pick(MapFn::where_backward_other); })};
}

// masked_fill(x, m, v) = m != 0 ? v : x; d x = g [!m]
Tensor masked_fill_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const double value = std::get<FillParams>(a.params).value;
  const Shape shape = ops::broadcast_shapes(x.shape(), a.in[1].shape(), "masked_fill");
  if (shape != x.shape())
    throw std::invalid_argument("masked_fill: mask " + to_string(a.in[1].shape()) +
                                " must broadcast to the input's shape " + to_string(x.shape()));
  return map_to(MapFn::masked_fill, {&x, &a.in[1]}, shape, ops::float_dtype(x, "masked_fill"), "masked_fill",
                {value});
}
std::vector<Tensor> masked_fill_backward(const BackwardArgs& a) {
  return {map(MapFn::masked_fill_backward, {&a.grad, &a.in[1]}, a.in[0].dtype(), "masked_fill backward"),
          Tensor()};
}

// cast: one rounding to the target; d x = g converted back to x's dtype
Tensor cast_forward(const ForwardArgs& a) { return a.in[0].to(std::get<CastParams>(a.params).dtype); }
std::vector<Tensor> cast_backward(const BackwardArgs& a) {
  if (!is_floating(a.in[0].dtype())) return {Tensor()};
  return {a.grad.dtype() == a.in[0].dtype() ? a.grad : a.grad.to(a.in[0].dtype())};
}

}  // namespace impl

// ---- public API ----
Tensor relu(const Tensor& x) { return call(Op::relu, {x}); }
Tensor gelu(const Tensor& x, bool tanh_approx) { return call(Op::gelu, {x}, GeluParams{tanh_approx}); }
Tensor silu(const Tensor& x) { return call(Op::silu, {x}); }
Tensor sigmoid(const Tensor& x) { return call(Op::sigmoid, {x}); }
Tensor tanh(const Tensor& x) { return call(Op::tanh, {x}); }
Tensor hardswish(const Tensor& x) { return call(Op::hardswish, {x}); }
Tensor hardsigmoid(const Tensor& x) { return call(Op::hardsigmoid, {x}); }
Tensor add(const Tensor& a, const Tensor& b) { return call(Op::add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call(Op::sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call(Op::mul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return call(Op::div, {a, b}); }
Tensor add(const Tensor& a, double s) { return call(Op::add_scalar, {a}, ScalarParams{s}); }
Tensor sub(const Tensor& a, double s) { return call(Op::sub_scalar, {a}, ScalarParams{s}); }
Tensor mul(const Tensor& a, double s) { return call(Op::mul_scalar, {a}, ScalarParams{s}); }
Tensor div(const Tensor& a, double s) { return call(Op::div_scalar, {a}, ScalarParams{s}); }
Tensor neg(const Tensor& x) { return call(Op::neg, {x}); }
Tensor abs(const Tensor& x) { return call(Op::abs, {x}); }
Tensor square(const Tensor& x) { return call(Op::square, {x}); }
Tensor exp(const Tensor& x) { return call(Op::exp, {x}); }
Tensor log(const Tensor& x) { return call(Op::log, {x}); }
Tensor sqrt(const Tensor& x) { return call(Op::sqrt, {x}); }
Tensor rsqrt(const Tensor& x) { return call(Op::rsqrt, {x}); }
Tensor pow(const Tensor& x, double exponent) { return call(Op::pow, {x}, ScalarParams{exponent}); }
Tensor reciprocal(const Tensor& x) { return call(Op::reciprocal, {x}); }
Tensor erf(const Tensor& x) { return call(Op::erf, {x}); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  if (lo > hi)
    throw std::invalid_argument("clamp: lo " + std::to_string(lo) + " is above hi " + std::to_string(hi));
  return call(Op::clamp, {x}, ClampParams{lo, hi});
}
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return call(Op::where, {condition, a, b});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return call(Op::masked_fill, {x, mask}, FillParams{value});
}
Tensor cast(const Tensor& x, DType dtype) { return call(Op::cast, {x}, CastParams{dtype}); }

}  // namespace ampcheck
