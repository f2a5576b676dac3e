// Elementwise ops: the arithmetic (Add, Sub, Mul, Div, Pow, Mod, Max, Min, Sum, Mean), the
// unary math, comparisons and logic, Clip, Where, Identity, Dropout, Cast and the
// activations. Most have two forms. On tensors they are registry ops, so autograd, the AMP
// policy and the inspector see them; an activation the registry lacks is composed of them,
// with the framework's value and gradient. On host arrays they compute the shape arithmetic
// and constants (integers exactly, in int64: an overflow is the node's error).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "engine/dtype/convert.h"
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {

// ---- on host arrays: shape arithmetic and constants ----

namespace {

Array host_binary(const Exec& e, const Array& a, const Array& b, const std::string& op) {
  const Shape shape = broadcast(a.shape, b.shape);
  const auto ia = broadcast_index(shape, a.shape), ib = broadcast_index(shape, b.shape);
  const bool compare = op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
                       op == "GreaterOrEqual" || op == "And" || op == "Or" || op == "Xor";
  const bool integer = compare || (a.integer() && b.integer() && op != "Pow");
  Array o;
  o.shape = shape;
  o.dtype = integer ? DType::i64 : (a.dtype == DType::f64 || b.dtype == DType::f64 ? DType::f64 : DType::f32);
  o.stored = compare ? "bool" : integer ? a.stored : std::string(info(o.dtype).long_name);
  for (std::size_t k = 0; k < ia.size(); ++k) {
    if (integer && !compare) {
      const std::int64_t x = a.i[static_cast<std::size_t>(ia[k])], y = b.i[static_cast<std::size_t>(ib[k])];
      std::int64_t r = 0;
      const auto overflow = [&] {
        e.fail("integer " + op + " of " + std::to_string(x) + " and " + std::to_string(y) + " overflows int64 in a shape computation");
      };
      if (op == "Add") {
        if (__builtin_add_overflow(x, y, &r)) overflow();
      } else if (op == "Sub") {
        if (__builtin_sub_overflow(x, y, &r)) overflow();
      } else if (op == "Mul") {
        if (__builtin_mul_overflow(x, y, &r)) overflow();
      } else if (op == "Div") {
        if (y == 0) e.fail("integer division by zero in a shape computation");
        if (y == -1 && x == std::numeric_limits<std::int64_t>::min()) overflow();
        r = x / y;
      } else if (op == "Mod") {
        if (y == 0) e.fail("integer modulo by zero in a shape computation");
        r = y == -1 ? 0 : x % y;  // INT64_MIN % -1 traps; any x % -1 is 0
        if (r != 0 && ((r < 0) != (y < 0))) r += y;  // Python's sign, as ONNX's fmod=0
      } else if (op == "Max") r = std::max(x, y);
      else if (op == "Min") r = std::min(x, y);
      o.i.push_back(r);
    } else {
      const double x = a.at(ia[k]), y = b.at(ib[k]);
      if (compare) {
        bool r = false;
        if (op == "Equal") r = x == y;
        else if (op == "Less") r = x < y;
        else if (op == "Greater") r = x > y;
        else if (op == "LessOrEqual") r = x <= y;
        else if (op == "GreaterOrEqual") r = x >= y;
        else if (op == "And") r = x != 0 && y != 0;
        else if (op == "Or") r = x != 0 || y != 0;
        else r = (x != 0) != (y != 0);
        o.i.push_back(r);
      } else {
        double r = 0;
        if (op == "Add") r = x + y;
        else if (op == "Sub") r = x - y;
        else if (op == "Mul") r = x * y;
        else if (op == "Div") r = x / y;
        else if (op == "Pow") r = std::pow(x, y);
        else if (op == "Mod") r = std::fmod(x, y);
        else if (op == "Max") r = std::max(x, y);
        else if (op == "Min") r = std::min(x, y);
        // Rounded to the result's dtype, as the framework's f32 arithmetic would.
        o.f.push_back(o.dtype == DType::f32 ? static_cast<double>(static_cast<float>(r)) : r);
      }
    }
  }
  return o;
}

// Clip's bounds: attributes before opset 11, optional inputs since; a missing one is
// unbounded.
std::pair<double, double> clip_bounds(const Exec& e) {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (e.node.opset < 11) {
    lo = e.attr_f("min", lo);
    hi = e.attr_f("max", hi);
  } else {
    if (e.has(1)) lo = e.host(1, "min").at(0);
    if (e.has(2)) hi = e.host(2, "max").at(0);
  }
  return {lo, hi};
}

}  // namespace

void host_binary_op(Exec& e) {
  const std::string& op = e.node.op_type;
  if (op == "Max" || op == "Min") {  // variadic
    Array acc = e.host(0, "data_0");
    for (std::size_t k = 1; k < e.in.size(); ++k)
      if (e.has(k)) acc = host_binary(e, acc, e.host(k, "data"), op);
    return e.set(0, std::move(acc));
  }
  if (op == "Mod" && e.attr_i("fmod", 0) != 0) {
    const Array &a = e.host(0, "A"), &b = e.host(1, "B");
    if (a.integer() && b.integer()) {  // C's remainder: the dividend's sign
      Array o = host_binary(e, a, b, "Mod");
      const Shape shape = o.shape;
      const auto ia = broadcast_index(shape, a.shape), ib = broadcast_index(shape, b.shape);
      for (std::size_t k = 0; k < ia.size(); ++k) o.i[k] = a.i[static_cast<std::size_t>(ia[k])] % b.i[static_cast<std::size_t>(ib[k])];
      return e.set(0, std::move(o));
    }
  }
  e.set(0, host_binary(e, e.host(0, "A"), e.host(1, "B"), op));
}

// Unary ops on the host. Piecewise-constant ones (Floor, Ceil, Round, Sign, IsNaN, IsInf)
// also take float data, read to the host: their gradient is zero, as in the framework.
void host_unary_op(Exec& e) {
  const auto in = e.values(0, "X");
  const Array& a = *in;
  const std::string& op = e.node.op_type;
  Array o = a;
  if (op == "Not") {
    if (!a.integer()) e.fail("Not takes a bool input");
    for (auto& v : o.i) v = v == 0;
    return e.set(0, std::move(o));
  }
  if (op == "IsNaN" || op == "IsInf") {
    const bool negative = e.attr_i("detect_negative", 1) != 0, positive = e.attr_i("detect_positive", 1) != 0;
    std::vector<std::int64_t> r;
    for (std::int64_t k = 0; k < a.numel(); ++k) {
      const double v = a.at(k);
      r.push_back(op == "IsNaN" ? std::isnan(v) : std::isinf(v) && (v > 0 ? positive : negative));
    }
    Array b = Array::ints(a.shape, r);
    b.stored = "bool";
    return e.set(0, std::move(b));
  }
  if (a.integer() && (op == "Neg" || op == "Abs" || op == "Identity" || op == "Floor" || op == "Ceil" || op == "Sign" || op == "Round")) {
    for (auto& v : o.i) v = op == "Neg" ? -v : op == "Abs" ? std::abs(v) : op == "Sign" ? (v > 0) - (v < 0) : v;
    return e.set(0, std::move(o));
  }
  if (a.integer()) e.fail(op + " of an integer tensor is not supported");
  for (auto& v : o.f) {
    if (op == "Neg") v = -v;
    else if (op == "Abs") v = std::fabs(v);
    else if (op == "Sqrt") v = std::sqrt(v);
    else if (op == "Reciprocal") v = 1 / v;
    else if (op == "Exp") v = std::exp(v);
    else if (op == "Log") v = std::log(v);
    else if (op == "Floor") v = std::floor(v);
    else if (op == "Ceil") v = std::ceil(v);
    else if (op == "Round") v = std::nearbyint(v);  // half to even
    else if (op == "Erf") v = std::erf(v);
    else if (op == "Sin") v = std::sin(v);
    else if (op == "Cos") v = std::cos(v);
    else if (op == "Sign") v = v > 0 ? 1 : v < 0 ? -1 : v;
    else if (op == "Relu") v = v > 0 ? v : 0;
    else if (op == "Sigmoid") v = 1 / (1 + std::exp(-v));
    else if (op == "Tanh") v = std::tanh(v);
    if (o.dtype != DType::f64) v = round_to(v, o.dtype);
  }
  e.set(0, std::move(o));
}

// Comparisons (Equal, Less, ...) and logic: bools, on the host; float data is read there
// (the framework's comparison has no gradient either).
void host_compare(Exec& e) { e.set(0, host_binary(e, *e.values(0, "A"), *e.values(1, "B"), e.node.op_type)); }

void host_variadic(Exec& e) {
  Array acc = e.host(0, "data_0");
  std::int64_t n = 1;
  for (std::size_t k = 1; k < e.in.size(); ++k)
    if (e.has(k)) {
      acc = host_binary(e, acc, e.host(k, "data"), "Add");
      ++n;
    }
  if (e.node.op_type == "Mean" && n > 1) acc = host_binary(e, acc, Array::floats({}, {static_cast<double>(n)}), "Div");
  e.set(0, std::move(acc));
}

// Clip of host values (integer data: token ids, sizes).
void host_clip(Exec& e) {
  Array o = e.host(0, "input");
  const auto [lo, hi] = clip_bounds(e);
  for (auto& v : o.i) {
    if (static_cast<double>(v) < lo) v = static_cast<std::int64_t>(lo);
    if (static_cast<double>(v) > hi) v = static_cast<std::int64_t>(hi);
  }
  for (auto& v : o.f) v = v < lo ? lo : v > hi ? hi : v;
  e.set(0, std::move(o));
}

void host_where(Exec& e) {
  const Array &c = e.host(0, "condition"), &a = e.host(1, "X"), &b = e.host(2, "Y");
  Shape shape;
  try {
    shape = broadcast(broadcast(c.shape, a.shape), b.shape);
  } catch (const std::invalid_argument& x) {
    e.fail(x.what());
  }
  const auto ic = broadcast_index(shape, c.shape), ia = broadcast_index(shape, a.shape), ib = broadcast_index(shape, b.shape);
  Array o;
  o.shape = shape;
  o.dtype = a.dtype;
  o.stored = a.stored;
  for (std::size_t k = 0; k < ic.size(); ++k) {
    const bool take = c.at(ic[k]) != 0;
    if (a.integer()) o.i.push_back(take ? a.int_at(ia[k]) : b.int_at(ib[k]));
    else o.f.push_back(take ? a.at(ia[k]) : b.at(ib[k]));
  }
  e.set(0, std::move(o));
}

// ---- on tensors: registry ops ----

namespace {

Tensor apply_binary(Exec& e, const std::string& op) {
  // A one-element float constant is a scalar operand, as a Python number is in the
  // framework (x * 0.5, x + 1e-5): the op runs in x's dtype.
  const auto sa = e.scalar(0), sb = e.scalar(1);
  if (sb && !e.is_host(0)) {
    const Tensor x = e.tensor(0);
    const Shape shape = broadcast(x.shape(), e.in[1].host->shape);
    Tensor y = op == "Add" ? add(x, *sb) : op == "Sub" ? sub(x, *sb) : op == "Mul" ? mul(x, *sb) : div(x, *sb);
    return y.shape() == shape ? y : reshape(y, shape);
  }
  if (sa && !e.is_host(1) && op != "Div") {
    const Tensor x = e.tensor(1);
    const Shape shape = broadcast(x.shape(), e.in[0].host->shape);
    Tensor y = op == "Add" ? add(x, *sa) : op == "Mul" ? mul(x, *sa) : add(neg(x), *sa);
    return y.shape() == shape ? y : reshape(y, shape);
  }
  if (sa && !e.is_host(1) && op == "Div") {  // s / x: PyTorch's __rtruediv__, reciprocal(x) * s
    const Tensor y = reciprocal(e.tensor(1));
    return *sa == 1 ? y : mul(y, *sa);
  }
  const Tensor a = e.tensor(0), b = e.tensor(1);
  if (!is_floating(a.dtype()) || !is_floating(b.dtype()))
    e.fail(op + " of integer tensors computed from the data is not supported (only shape arithmetic, on the host)");
  return op == "Add" ? add(a, b) : op == "Sub" ? sub(a, b) : op == "Mul" ? mul(a, b) : div(a, b);
}

}  // namespace

void op_binary(Exec& e) { e.set(0, apply_binary(e, e.node.op_type)); }

// Pow: a one-element constant exponent is the registry's pow (x ** 2). A tensor of
// exponents is exp(y log|x|), with the sign and the special cases std::pow gives (-1 for
// a negative x to an odd power, NaN to a non-integer one, 0 ** y) taken from the values on
// the host; x = 0 enters the log as 1, so no NaN reaches the gradient.
void op_pow(Exec& e) {
  if (!e.is_host(0)) {
    if (const auto y = e.scalar(1)) return e.set(0, pow(e.tensor(0), *y));
    if (e.is_host(1) && e.in[1].host->numel() == 1) return e.set(0, pow(e.tensor(0), e.in[1].host->at(0)));
  }
  const auto xv = e.values(0, "X"), yv = e.values(1, "Y");
  if (xv->integer()) {  // an integer base gives integers (ONNX: the base's type): no gradient
    Array o = host_binary(e, *xv, *yv, "Pow");
    Array r = Array::ints(o.shape, {});
    for (double v : o.f) r.i.push_back(static_cast<std::int64_t>(v));
    r.stored = xv->stored;
    return e.set(0, std::move(r));
  }
  const Tensor x = e.tensor(0);
  Tensor y = e.tensor(1);
  if (!is_floating(y.dtype())) y = Array::floats(yv->shape, std::vector<double>(yv->i.begin(), yv->i.end()), x.dtype()).to_tensor().to(e.device);
  Shape shape;
  try {
    shape = broadcast(xv->shape, yv->shape);
  } catch (const std::invalid_argument& err) {
    e.fail(err.what());
  }
  const auto ix = broadcast_index(shape, xv->shape), iy = broadcast_index(shape, yv->shape);
  std::vector<double> sign, at_zero;
  std::vector<std::int64_t> zero_x, zero_base;
  for (std::size_t k = 0; k < ix.size(); ++k) {
    const double a = xv->at(ix[k]), b = yv->at(iy[k]);
    const bool integral = std::isfinite(b) && b == std::floor(b);
    sign.push_back(a < 0 ? (integral ? (std::fmod(std::fabs(b), 2) == 1 ? -1 : 1) : std::nan("")) : 1);
    zero_base.push_back(a == 0);
    at_zero.push_back(std::pow(0.0, b));
  }
  for (std::int64_t k = 0; k < xv->numel(); ++k) zero_x.push_back(xv->at(k) == 0);
  auto host = [&](const std::vector<double>& v) { return Tensor::from(v, shape, DType::f64).to(x.dtype()).to(e.device); };
  const Tensor x_zero = Tensor::from(zero_x, xv->shape).to(e.device);
  const Tensor base = where(x_zero, Tensor::ones({}, x.dtype(), e.device), abs(x));
  const Tensor magnitude = exp(mul(y, log(base)));
  e.set(0, where(Tensor::from(zero_base, shape).to(e.device), host(at_zero), mul(magnitude, host(sign))));
}

// Mod of float tensors: x - q y with the quotient q = trunc(x / y) (fmod 1, C's fmod) or
// floor(x / y) (fmod 0, Python's %) found on the host; its gradient is 1 for x and -q for
// y, as the framework's.
void op_mod(Exec& e) {
  const Tensor x = e.tensor(0), y = e.tensor(1);
  if (!is_floating(x.dtype()) || !is_floating(y.dtype())) e.fail("Mod of integer tensors computed from the data is not supported");
  const auto a = e.values(0, "A"), b = e.values(1, "B");
  const bool c_style = e.attr_i("fmod", 0) != 0;
  Shape shape;
  try {
    shape = broadcast(a->shape, b->shape);
  } catch (const std::invalid_argument& err) {
    e.fail(err.what());
  }
  const auto ia = broadcast_index(shape, a->shape), ib = broadcast_index(shape, b->shape);
  std::vector<double> q;
  for (std::size_t k = 0; k < ia.size(); ++k) {
    const double u = a->at(ia[k]), v = b->at(ib[k]);
    const double r = std::fmod(u, v);
    double quotient = std::isfinite(r) && v != 0 ? std::round((u - r) / v) : 0;
    if (!c_style && r != 0 && std::isfinite(r) && ((r < 0) != (v < 0))) quotient -= 1;
    q.push_back(quotient);
  }
  const Tensor qt = Tensor::from(q, shape, DType::f64).to(y.dtype()).to(e.device);
  e.set(0, sub(x, mul(qt, y)));
}

// Sum and Mean of any number of inputs (broadcasting).
void op_variadic(Exec& e) {
  Tensor acc;
  std::int64_t n = 0;
  for (std::size_t k = 0; k < e.in.size(); ++k)
    if (e.has(k)) {
      acc = acc.defined() ? add(acc, e.tensor(k)) : e.tensor(k);
      ++n;
    }
  if (!acc.defined()) e.fail("no inputs");
  e.set(0, e.node.op_type == "Mean" && n > 1 ? div(acc, static_cast<double>(n)) : acc);
}

// Max and Min of tensors, pairwise: the larger (smaller) of each pair chosen on the host from
// the values (NaN wins, as torch.maximum), taken with `where`, so the gradient goes to the
// operand chosen.
void op_minmax(Exec& e) {
  const bool is_max = e.node.op_type == "Max";
  Tensor acc;
  std::shared_ptr<const Array> acc_values;
  for (std::size_t k = 0; k < e.in.size(); ++k) {
    if (!e.has(k)) continue;
    const auto v = e.values(k, "data");
    if (!acc.defined()) {
      acc = e.tensor(k);
      acc_values = v;
      continue;
    }
    Shape shape;
    try {
      shape = broadcast(acc_values->shape, v->shape);
    } catch (const std::invalid_argument& err) {
      e.fail(err.what());
    }
    const auto ia = broadcast_index(shape, acc_values->shape), ib = broadcast_index(shape, v->shape);
    std::vector<std::int64_t> keep;
    Array next = Array::floats(shape, {}, acc_values->dtype);
    for (std::size_t i = 0; i < ia.size(); ++i) {
      const double a = acc_values->at(ia[i]), b = v->at(ib[i]);
      const bool first = std::isnan(a) || (!std::isnan(b) && (is_max ? a >= b : a <= b));
      keep.push_back(first);
      next.f.push_back(first ? a : b);
    }
    acc = where(Tensor::from(keep, shape).to(e.device), acc, e.tensor(k));
    acc_values = std::make_shared<const Array>(std::move(next));
  }
  if (!acc.defined()) e.fail("no inputs");
  e.set(0, acc);
}

void op_unary(Exec& e) {
  const std::string& op = e.node.op_type;
  const Tensor x = e.tensor(0);
  Tensor y;
  if (op == "Relu") y = relu(x);
  else if (op == "Sigmoid") y = sigmoid(x);
  else if (op == "Tanh") y = tanh(x);
  else if (op == "Exp") y = exp(x);
  else if (op == "Log") y = log(x);
  else if (op == "Neg") y = neg(x);
  else if (op == "Abs") y = abs(x);
  else if (op == "Sqrt") y = sqrt(x);
  else if (op == "Reciprocal") y = reciprocal(x);
  else if (op == "Erf") y = erf(x);
  else if (op == "HardSwish") y = hardswish(x);
  else e.fail("no tensor form");
  e.set(0, y);
}

void op_clip(Exec& e) {
  const auto [lo, hi] = clip_bounds(e);
  e.set(0, clamp(e.tensor(0), lo, hi));
}

// Where broadcasts its three operands. A one-element constant branch is a Python number in
// the framework (x.masked_fill(c, v), torch.where(c, x, v)): masked_fill where the other
// branch has the output's shape, else a full tensor in the other branch's dtype.
void op_where(Exec& e) {
  Shape shape;
  try {
    shape = broadcast(broadcast(e.shape_of(0), e.shape_of(1)), e.shape_of(2));
  } catch (const std::invalid_argument& x) {
    e.fail(x.what());
  }
  auto condition = [&] {
    const Tensor c = e.tensor(0);
    if (is_floating(c.dtype())) e.fail("the condition must be bool");
    return c;
  };
  const auto sa = e.scalar(1), sb = e.scalar(2);
  if (sa && !e.is_host(2) && e.shape_of(2) == shape) return e.set(0, masked_fill(e.tensor(2), condition(), *sa));
  if (sb && !e.is_host(1) && e.is_host(0) && e.shape_of(1) == shape) {
    Array inverse = *e.in[0].host;
    for (auto& v : inverse.i) v = v == 0;
    return e.set(0, masked_fill(e.tensor(1), inverse.to_tensor().to(e.device), *sb));
  }
  Tensor a = e.tensor(1), b = e.tensor(2);
  if (sb && !e.is_host(1)) b = Tensor::full(e.shape_of(2), *sb, a.dtype(), a.device());
  if (sa && !e.is_host(2)) a = Tensor::full(e.shape_of(1), *sa, b.dtype(), b.device());
  e.set(0, where(condition(), a, b));
}

void op_identity(Exec& e) {
  if (!e.has(0)) e.fail("input 0 is missing");
  if (e.out.empty()) e.out.resize(1);
  e.out[0] = e.in[0];
}

void op_dropout(Exec& e) {
  const Tensor x = e.tensor(0);
  double p = e.node.opset < 12 ? e.attr_f("ratio", 0.5) : (e.has(1) ? e.host(1, "ratio").at(0) : 0.5);
  bool training = e.training();
  if (e.node.opset >= 12 && e.has(2)) training = e.host(2, "training_mode").at(0) != 0 || training;
  if (!training || p == 0) {
    if (e.node.outputs.size() > 1 && !e.node.outputs[1].empty())  // the mask keeps everything
      e.set(1, Array::ints(x.shape(), std::vector<std::int64_t>(static_cast<std::size_t>(x.numel()), 1)));
    return e.set(0, x);
  }
  e.only_outputs(1, "Dropout's mask output in training is not supported");
  e.set(0, dropout(x, p, true, e.generator()));
}

// ---- Cast ----

namespace {

// CastLike: the type of input 1.
std::int64_t cast_to(const Exec& e) {
  if (e.node.op_type != "CastLike") return e.attr_i("to", 1);
  const DType d = e.in.at(1).t.defined() ? e.in[1].t.dtype() : e.host(1, "target_type").dtype;
  const std::string stored = e.in[1].t.defined() ? std::string(info(d).long_name) : e.in[1].host->stored;
  for (std::int64_t to : {1, 10, 11, 16, 9, 2, 3, 4, 5, 6, 7, 12, 13})
    if (cast_target(to)->stored == stored) return to;
  e.fail("CastLike to " + stored + " is not supported");
}

Array host_cast(const Exec& e, const Array& a, std::int64_t to) {
  const auto target = cast_target(to);
  if (!target) e.fail("Cast to ONNX type " + std::to_string(to) + " is not supported");
  const CastTarget& t = *target;
  Array o;
  o.shape = a.shape;
  o.dtype = t.dtype;
  o.stored = t.stored;
  for (std::int64_t k = 0; k < a.numel(); ++k) {
    if (t.integer) {
      const std::int64_t v = a.integer() ? a.i[static_cast<std::size_t>(k)] : a.int_at(k);
      o.i.push_back(t.stored == "bool" ? (a.integer() ? v != 0 : a.at(k) != 0) : v);
    } else {
      o.f.push_back(round_to(a.at(k), t.dtype));
    }
  }
  return o;
}

}  // namespace

void host_cast_op(Exec& e) { e.set(0, host_cast(e, e.host(0, "input"), cast_to(e))); }

// A cast between float types is a registry op (its gradient casts back); a cast of float
// data to an integer or bool type reads the data to the host (truncating, as numpy and
// the framework do): the result has no gradient, in the framework neither.
void op_cast(Exec& e) {
  const auto t = cast_target(cast_to(e));
  if (!t) e.fail("Cast to ONNX type " + std::to_string(cast_to(e)) + " is not supported");
  if (t->integer) return e.set(0, host_cast(e, *e.values(0, "input"), cast_to(e)));
  const Tensor x = e.tensor(0);
  e.set(0, x.dtype() == t->dtype ? x : cast(x, t->dtype));
}

std::optional<OnnxRefusal> check_cast(const NodeAttrs& a) {
  if (a.node.op_type == "Cast" && !cast_target(a.attr_i("to", 1)))
    return OnnxRefusal{"to", "ONNX type " + std::to_string(a.attr_i("to", 1)) + " (float, integer and bool types are supported)",
                       "cast to a float, integer or bool type"};
  return std::nullopt;
}

// ---- activations composed of registry ops (value and gradient as the framework's) ----

namespace {

// relu(x) - a relu(-x): x where x > 0, a x elsewhere (LeakyRelu, PRelu)
Tensor leaky(const Tensor& x, const Tensor& slope, double alpha) {
  const Tensor negative = relu(neg(x));
  return sub(relu(x), slope.defined() ? mul(slope, negative) : mul(negative, alpha));
}

// relu(x) + alpha (exp(min(x, 0) / beta) - 1): Elu (beta 1), Celu (beta alpha)
Tensor exponential_linear(const Tensor& x, double alpha, double beta) {
  Tensor low = neg(relu(neg(x)));  // min(x, 0)
  if (beta != 1) low = div(low, beta);
  return add(relu(x), mul(sub(exp(low), 1.0), alpha));
}

// A mask of where a float input's values satisfy `keep`, read on the host, as a tensor
// on the model's device (the framework's comparison has no gradient either).
Tensor mask_where(const Exec& e, std::size_t i, const std::function<bool(double)>& keep) {
  const auto a = e.values(i, "X");
  std::vector<std::int64_t> m;
  for (std::int64_t k = 0; k < a->numel(); ++k) m.push_back(keep(a->at(k)));
  return Tensor::from(m, a->shape).to(e.device);
}

}  // namespace

void op_gelu(Exec& e) {
  e.set(0, gelu(e.tensor(0), e.attr_s("approximate", "none") == "tanh"));
}

std::optional<OnnxRefusal> check_gelu(const NodeAttrs& a) {
  const std::string approx = a.attr_s("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return OnnxRefusal{"approximate", "\"" + approx + "\" (none and tanh are supported)", "export nn.GELU() or nn.GELU(approximate='tanh')"};
  return std::nullopt;
}

void op_hard_sigmoid(Exec& e) {
  const double alpha = e.attr_f("alpha", 0.2), beta = e.attr_f("beta", 0.5);
  const Tensor x = e.tensor(0);
  // PyTorch's and Paddle's hardsigmoid are alpha = 1/6, beta = 0.5 (as float32 values).
  if (std::fabs(alpha - 1.0 / 6) < 1e-7 && beta == 0.5) return e.set(0, hardsigmoid(x));
  e.set(0, clamp(add(mul(x, alpha), beta), 0, 1));
}

void op_activation(Exec& e) {
  const std::string& op = e.node.op_type;
  const Tensor x = e.tensor(0);
  if (op == "LeakyRelu") return e.set(0, leaky(x, Tensor(), e.attr_f("alpha", 0.01)));
  if (op == "PRelu") {
    Tensor slope = e.tensor(1);
    // Before opset 7 a 1-D slope of C values is per channel (dim 1); since, it broadcasts.
    if (e.node.opset < 7 && slope.dim() == 1 && x.dim() > 2 && slope.size(0) == x.size(1) && slope.size(0) != x.size(-1)) {
      Shape per_channel = {slope.size(0)};
      for (std::int64_t d = 2; d < x.dim(); ++d) per_channel.push_back(1);
      slope = reshape(slope, per_channel);
    }
    return e.set(0, leaky(x, slope, 0));
  }
  if (op == "Elu") return e.set(0, exponential_linear(x, e.attr_f("alpha", 1), 1));
  if (op == "Celu") {
    const double alpha = e.attr_f("alpha", 1);
    return e.set(0, exponential_linear(x, alpha, alpha));
  }
  if (op == "Selu")
    return e.set(0, mul(exponential_linear(x, e.attr_f("alpha", 1.67326319217681884765625), 1),
                        e.attr_f("gamma", 1.05070102214813232421875)));
  if (op == "Softplus")  // relu(x) + log(1 + exp(-|x|)): no overflow for large x
    return e.set(0, add(relu(x), log(add(exp(neg(abs(x))), 1.0))));
  if (op == "Softsign") return e.set(0, div(x, add(abs(x), 1.0)));
  e.fail("no composition");
}

// ThresholdedRelu: x where x > alpha, else 0; Shrink: x - bias above lambd, x + bias below
// -lambd, else 0. The masks from the data, the values registry ops.
void op_threshold(Exec& e) {
  const Tensor x = e.tensor(0);
  if (e.node.op_type == "ThresholdedRelu") {
    const double alpha = e.attr_f("alpha", 1.0);
    return e.set(0, masked_fill(x, mask_where(e, 0, [&](double v) { return !(v > alpha); }), 0));
  }
  const double lambd = e.attr_f("lambd", 0.5), bias = e.attr_f("bias", 0.0);
  const auto a = e.values(0, "input");
  std::vector<double> shift;
  for (std::int64_t k = 0; k < a->numel(); ++k) shift.push_back(a->at(k) > lambd ? -bias : a->at(k) < -lambd ? bias : 0);
  const Tensor shifted = add(x, Tensor::from(shift, x.shape(), DType::f64).to(x.dtype()).to(e.device));
  e.set(0, masked_fill(shifted, mask_where(e, 0, [&](double v) { return !(v > lambd || v < -lambd); }), 0));
}

}  // namespace ampcheck::models::onnx_impl
