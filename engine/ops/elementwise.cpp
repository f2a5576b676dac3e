// Elementwise ops: activations, arithmetic, math, where / masked_fill, cast.
// Each forward is one map in the compute type, rounded once to the output dtype; each
// backward is d(in) = grad * f'(in), written next to its forward.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/ops/cpu_util.h"
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/elementwise.h"  // the ops that compare or select, NaN as PyTorch

namespace ampcheck {
namespace impl {
namespace {

// ---- shared shapes of forward and backward ----
template <typename F>
Tensor unary(const ForwardArgs& a, const char* op, F f) {
  const Tensor& x = a.in[0];
  return cpu::map_unary(x, f, cpu::float_dtype(x, op));
}

// d x = grad * d(x), with d written in terms of the input x.
template <typename D>
std::vector<Tensor> grad_from_input(const BackwardArgs& a, D d) {
  const Tensor& x = a.in[0];
  return {cpu::map_binary(a.grad, x, [d](auto g, auto v) { return g * d(v); }, x.dtype(),
                          "backward")};
}

// d x = f(grad, x): a derivative that selects rather than multiplies (PyTorch's
// hardswish_backward, clamp_backward, ...), so an Inf grad where the op is flat gives 0.
template <typename F>
std::vector<Tensor> select_from_input(const BackwardArgs& a, F f) {
  const Tensor& x = a.in[0];
  return {cpu::map_binary(a.grad, x, f, x.dtype(), "backward")};
}

// d x = grad * d(y), with d written in terms of the output y (sigmoid, tanh, exp, ...).
template <typename D>
std::vector<Tensor> grad_from_output(const BackwardArgs& a, D d) {
  return {cpu::map_binary(a.grad, a.out, [d](auto g, auto y) { return g * d(y); },
                          a.in[0].dtype(), "backward")};
}

double scalar_of(const BackwardArgs& a) { return std::get<ScalarParams>(a.params).value; }
double scalar_of(const ForwardArgs& a) { return std::get<ScalarParams>(a.params).value; }

template <typename T>
T sigmoid_of(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi), tanh-form GELU
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2 pi), the normal density

// The gradient of operand i of a broadcasting op: make() (the gradient at the output's
// shape) summed back to the operand's shape, in its dtype; undefined, and not computed,
// when the operand needs none.
template <typename F>
Tensor operand_grad(const BackwardArgs& a, std::size_t i, F make) {
  if (!a.needs(i)) return Tensor();
  const Tensor& x = a.in[i];
  const Tensor g = cpu::sum_to_shape(make(), x.shape());
  return g.dtype() == x.dtype() ? g : g.to(x.dtype());
}

DType binary_dtype(const ForwardArgs& a, const char* op) {
  return promote(cpu::float_dtype(a.in[0], op), cpu::float_dtype(a.in[1], op));
}

}  // namespace

// ---- activations ----
// relu(x) = max(x, 0), NaN kept; d x = y <= 0 ? 0 : g (PyTorch's threshold_backward on
// the output: a NaN input passes g through)
Tensor relu_forward(const ForwardArgs& a) {
  return unary(a, "relu", [](auto v) { return kernels::relu(v); });
}
std::vector<Tensor> relu_backward(const BackwardArgs& a) {
  return {cpu::map_binary(a.grad, a.out, [](auto g, auto y) { return kernels::relu_backward(g, y); },
                          a.in[0].dtype(), "backward")};
}

// gelu(x) = x Phi(x) = x/2 (1 + erf(x/sqrt2)); d = Phi(x) + x phi(x)
// tanh form: x/2 (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3);
//            d = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi)(1 + 3*0.044715 x^2)
Tensor gelu_forward(const ForwardArgs& a) {
  if (std::get<GeluParams>(a.params).tanh_approx)
    return unary(a, "gelu", [](auto v) {
      using T = decltype(v);
      const T u = T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v);
      return T(0.5) * v * (T(1) + std::tanh(u));
    });
  return unary(a, "gelu", [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (T(1) + std::erf(v * T(kInvSqrt2)));
  });
}
std::vector<Tensor> gelu_backward(const BackwardArgs& a) {
  if (std::get<GeluParams>(a.params).tanh_approx)
    return grad_from_input(a, [](auto v) {
      using T = decltype(v);
      const T t = std::tanh(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v));
      return T(0.5) * (T(1) + t) +
             T(0.5) * v * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * v * v);
    });
  return grad_from_input(a, [](auto v) {
    using T = decltype(v);
    return T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2))) +
           v * T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
  });
}

// silu(x) = x sigmoid(x); d = s (1 + x (1 - s))
Tensor silu_forward(const ForwardArgs& a) {
  return unary(a, "silu", [](auto v) { return v * sigmoid_of(v); });
}
std::vector<Tensor> silu_backward(const BackwardArgs& a) {
  return grad_from_input(a, [](auto v) {
    using T = decltype(v);
    const T s = sigmoid_of(v);
    return s * (T(1) + v * (T(1) - s));
  });
}

// sigmoid: d = y (1 - y)
Tensor sigmoid_forward(const ForwardArgs& a) {
  return unary(a, "sigmoid", [](auto v) { return sigmoid_of(v); });
}
std::vector<Tensor> sigmoid_backward(const BackwardArgs& a) {
  return grad_from_output(a, [](auto y) { return y * (decltype(y)(1) - y); });
}

// tanh: d = 1 - y^2
Tensor tanh_forward(const ForwardArgs& a) {
  return unary(a, "tanh", [](auto v) { return std::tanh(v); });
}
std::vector<Tensor> tanh_backward(const BackwardArgs& a) {
  return grad_from_output(a, [](auto y) { return decltype(y)(1) - y * y; });
}

// hardswish(x) = x relu6(x + 3) / 6; d x = 0 (x < -3), g (x > 3, and NaN x), g (2x + 3)/6
// between (kernels/elementwise.h)
Tensor hardswish_forward(const ForwardArgs& a) {
  return unary(a, "hardswish", [](auto v) { return kernels::hardswish(v); });
}
std::vector<Tensor> hardswish_backward(const BackwardArgs& a) {
  return select_from_input(a, [](auto g, auto v) { return kernels::hardswish_backward(g, v); });
}

// hardsigmoid(x) = relu6(x + 3) / 6; d x = g/6 on (-3, 3), else 0
Tensor hardsigmoid_forward(const ForwardArgs& a) {
  return unary(a, "hardsigmoid", [](auto v) { return kernels::hardsigmoid(v); });
}
std::vector<Tensor> hardsigmoid_backward(const BackwardArgs& a) {
  return select_from_input(a, [](auto g, auto v) { return kernels::hardsigmoid_backward(g, v); });
}

// ---- arithmetic with broadcasting ----
// add: d a = g, d b = g (summed over broadcast dims)
Tensor add_forward(const ForwardArgs& a) {
  return cpu::map_binary(a.in[0], a.in[1], [](auto x, auto y) { return x + y; },
                         binary_dtype(a, "add"), "add");
}
std::vector<Tensor> add_backward(const BackwardArgs& a) {
  return {operand_grad(a, 0, [&] { return a.grad; }), operand_grad(a, 1, [&] { return a.grad; })};
}

// sub: d a = g, d b = -g
Tensor sub_forward(const ForwardArgs& a) {
  return cpu::map_binary(a.in[0], a.in[1], [](auto x, auto y) { return x - y; },
                         binary_dtype(a, "sub"), "sub");
}
std::vector<Tensor> sub_backward(const BackwardArgs& a) {
  return {operand_grad(a, 0, [&] { return a.grad; }),
          operand_grad(a, 1, [&] { return cpu::map_unary(a.grad, [](auto g) { return -g; }); })};
}

// mul: d a = g b, d b = g a
Tensor mul_forward(const ForwardArgs& a) {
  return cpu::map_binary(a.in[0], a.in[1], [](auto x, auto y) { return x * y; },
                         binary_dtype(a, "mul"), "mul");
}
std::vector<Tensor> mul_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  auto times = [](auto g, auto v) { return g * v; };
  return {operand_grad(a, 0, [&] { return cpu::map_binary(a.grad, a.in[1], times, d, "mul backward"); }),
          operand_grad(a, 1, [&] { return cpu::map_binary(a.grad, a.in[0], times, d, "mul backward"); })};
}

// div: d a = g / b, d b = -g a / b^2 = -g y / b
Tensor div_forward(const ForwardArgs& a) {
  return cpu::map_binary(a.in[0], a.in[1], [](auto x, auto y) { return x / y; },
                         binary_dtype(a, "div"), "div");
}
std::vector<Tensor> div_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  return {operand_grad(a, 0,
                       [&] {
                         return cpu::map_binary(a.grad, a.in[1], [](auto g, auto v) { return g / v; }, d,
                                                "div backward");
                       }),
          operand_grad(a, 1, [&] {
            return cpu::map_ternary(a.grad, a.out, a.in[1], [](auto g, auto y, auto v) { return -g * y / v; },
                                    d, "div backward");
          })};
}

// Scalar operands: the scalar is converted to the compute type once, like a tensor of it.
Tensor add_scalar_forward(const ForwardArgs& a) {
  const double s = scalar_of(a);
  return unary(a, "add", [s](auto v) { return v + decltype(v)(s); });
}
std::vector<Tensor> add_scalar_backward(const BackwardArgs& a) { return {a.grad}; }

Tensor sub_scalar_forward(const ForwardArgs& a) {
  const double s = scalar_of(a);
  return unary(a, "sub", [s](auto v) { return v - decltype(v)(s); });
}
std::vector<Tensor> sub_scalar_backward(const BackwardArgs& a) { return {a.grad}; }

Tensor mul_scalar_forward(const ForwardArgs& a) {
  const double s = scalar_of(a);
  return unary(a, "mul", [s](auto v) { return v * decltype(v)(s); });
}
std::vector<Tensor> mul_scalar_backward(const BackwardArgs& a) {
  const double s = scalar_of(a);
  return {cpu::map_unary(a.grad, [s](auto g) { return g * decltype(g)(s); })};
}

Tensor div_scalar_forward(const ForwardArgs& a) {
  const double s = scalar_of(a);
  return unary(a, "div", [s](auto v) { return v / decltype(v)(s); });
}
std::vector<Tensor> div_scalar_backward(const BackwardArgs& a) {
  const double s = scalar_of(a);
  return {cpu::map_unary(a.grad, [s](auto g) { return g / decltype(g)(s); })};
}

// neg: d = -1
Tensor neg_forward(const ForwardArgs& a) { return unary(a, "neg", [](auto v) { return -v; }); }
std::vector<Tensor> neg_backward(const BackwardArgs& a) {
  return {cpu::map_unary(a.grad, [](auto g) { return -g; })};
}

// abs: d = sign(x) (0 at 0 and at NaN, as PyTorch's g * sgn(x))
Tensor abs_forward(const ForwardArgs& a) {
  return unary(a, "abs", [](auto v) { return std::abs(v); });
}
std::vector<Tensor> abs_backward(const BackwardArgs& a) {
  return grad_from_input(a, [](auto v) { return kernels::sign(v); });
}

// square: d = 2x
Tensor square_forward(const ForwardArgs& a) {
  return unary(a, "square", [](auto v) { return v * v; });
}
std::vector<Tensor> square_backward(const BackwardArgs& a) {
  return grad_from_input(a, [](auto v) { return decltype(v)(2) * v; });
}

// ---- math ----
// exp: d = y
Tensor exp_forward(const ForwardArgs& a) { return unary(a, "exp", [](auto v) { return std::exp(v); }); }
std::vector<Tensor> exp_backward(const BackwardArgs& a) {
  return grad_from_output(a, [](auto y) { return y; });
}

// log: d = 1/x
Tensor log_forward(const ForwardArgs& a) { return unary(a, "log", [](auto v) { return std::log(v); }); }
std::vector<Tensor> log_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  return {cpu::map_binary(a.grad, x, [](auto g, auto v) { return g / v; }, x.dtype(), "backward")};
}

// sqrt: d = 1 / (2y)
Tensor sqrt_forward(const ForwardArgs& a) { return unary(a, "sqrt", [](auto v) { return std::sqrt(v); }); }
std::vector<Tensor> sqrt_backward(const BackwardArgs& a) {
  return {cpu::map_binary(a.grad, a.out, [](auto g, auto y) { return g / (decltype(y)(2) * y); },
                          a.in[0].dtype(), "backward")};
}

// rsqrt: y = x^(-1/2); d = -y^3 / 2
Tensor rsqrt_forward(const ForwardArgs& a) {
  return unary(a, "rsqrt", [](auto v) { return decltype(v)(1) / std::sqrt(v); });
}
std::vector<Tensor> rsqrt_backward(const BackwardArgs& a) {
  return grad_from_output(a, [](auto y) { return decltype(y)(-0.5) * y * y * y; });
}

// pow(x, p): d = p x^(p-1)
Tensor pow_forward(const ForwardArgs& a) {
  const double p = scalar_of(a);
  return unary(a, "pow", [p](auto v) { return std::pow(v, decltype(v)(p)); });
}
std::vector<Tensor> pow_backward(const BackwardArgs& a) {
  const double p = scalar_of(a);
  if (p == 0) return {Tensor::zeros(a.in[0].shape(), a.in[0].dtype())};
  return grad_from_input(a, [p](auto v) {
    using T = decltype(v);
    return T(p) * std::pow(v, T(p - 1));
  });
}

// reciprocal: d = -y^2
Tensor reciprocal_forward(const ForwardArgs& a) {
  return unary(a, "reciprocal", [](auto v) { return decltype(v)(1) / v; });
}
std::vector<Tensor> reciprocal_backward(const BackwardArgs& a) {
  return grad_from_output(a, [](auto y) { return -y * y; });
}

// clamp(x, lo, hi), NaN kept; d x = lo <= x <= hi ? g : 0 (PyTorch's where(): NaN x gives 0)
Tensor clamp_forward(const ForwardArgs& a) {
  const auto [lo, hi] = std::get<ClampParams>(a.params);
  return unary(a, "clamp", [lo = lo, hi = hi](auto v) {
    using T = decltype(v);
    return kernels::clamp(v, T(lo), T(hi));
  });
}
std::vector<Tensor> clamp_backward(const BackwardArgs& a) {
  const auto [lo, hi] = std::get<ClampParams>(a.params);
  return select_from_input(a, [lo = lo, hi = hi](auto g, auto v) {
    using T = decltype(v);
    return kernels::clamp_backward(g, v, T(lo), T(hi));
  });
}

// ---- selection ----
// where(c, a, b) = c != 0 ? a : b; d a = g [c], d b = g [!c]
Tensor where_forward(const ForwardArgs& a) {
  const DType d = promote(cpu::float_dtype(a.in[1], "where"), cpu::float_dtype(a.in[2], "where"));
  return cpu::map_ternary(a.in[0], a.in[1], a.in[2],
                          [](auto c, auto x, auto y) { return c != 0 ? x : y; }, d, "where");
}
std::vector<Tensor> where_backward(const BackwardArgs& a) {
  const DType d = a.grad.dtype();
  auto pick = [&](bool take_a) {
    return cpu::map_binary(
        a.in[0], a.grad, [take_a](auto c, auto g) { return (c != 0) == take_a ? g : decltype(g)(0); }, d,
        "where backward");
  };
  return {Tensor(), operand_grad(a, 1, [&] { return pick(true); }),
          operand_grad(a, 2, [&] { return pick(false); })};
}

// masked_fill(x, m, v) = m != 0 ? v : x; d x = g [!m]
Tensor masked_fill_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const double value = std::get<FillParams>(a.params).value;
  const Shape shape = cpu::broadcast_shapes(x.shape(), a.in[1].shape(), "masked_fill");
  if (shape != x.shape())
    throw std::invalid_argument("masked_fill: mask " + to_string(a.in[1].shape()) +
                                " must broadcast to the input's shape " + to_string(x.shape()));
  return cpu::map_binary(x, a.in[1], [value](auto v, auto m) { return m != 0 ? decltype(v)(value) : v; },
                         cpu::float_dtype(x, "masked_fill"), "masked_fill");
}
std::vector<Tensor> masked_fill_backward(const BackwardArgs& a) {
  return {cpu::map_binary(a.grad, a.in[1], [](auto g, auto m) { return m != 0 ? decltype(g)(0) : g; },
                          a.in[0].dtype(), "masked_fill backward"),
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
