#include "models/onnx_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "engine/autograd.h"
#include "engine/dtype/convert.h"
#include "engine/memory_budget.h"  // over_budget: host arrays a file sizes
#include "models/onnx_exec.h"

namespace ampcheck::models {
namespace onnx_impl {

std::string fmt_ints(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

std::int64_t norm_axis(std::int64_t axis, std::int64_t rank, const std::string& what) {
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw std::invalid_argument(what + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

Shape broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::int64_t da = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
    const std::int64_t db = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument("shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

std::int64_t host_elements(const Shape& shape) {
  const std::optional<std::int64_t> n = checked_numel(shape);
  if (!n) throw std::invalid_argument("shape " + to_string(shape) + " has a negative size or more elements than int64 counts");
  // Host arrays hold 8 bytes an element (int64 or double), and an index of as many.
  if (const auto why = over_budget(static_cast<std::uint64_t>(*n) * 16))
    throw std::invalid_argument("an array of shape " + to_string(shape) + " " + *why +
                                "; run with a smaller size, or raise --max-memory");
  return *n;
}

std::vector<std::int64_t> broadcast_index(const Shape& out, const Shape& in) {
  const std::int64_t n = host_elements(out);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  const Shape ost = strides_of(out), ist = strides_of(in);
  const std::size_t lead = out.size() - in.size();
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t rem = k, at = 0;
    for (std::size_t d = 0; d < out.size(); ++d) {
      const std::int64_t c = rem / ost[d];
      rem %= ost[d];
      if (d >= lead && in[d - lead] != 1) at += c * ist[d - lead];
    }
    idx[static_cast<std::size_t>(k)] = at;
  }
  return idx;
}

Array take(const Array& a, const Shape& shape, const std::vector<std::int64_t>& idx) {
  Array o;
  o.shape = shape;
  o.dtype = a.dtype;
  o.stored = a.stored;
  if (a.integer()) {
    o.i.reserve(idx.size());
    for (std::int64_t k : idx) o.i.push_back(a.i[static_cast<std::size_t>(k)]);
  } else {
    o.f.reserve(idx.size());
    for (std::int64_t k : idx) o.f.push_back(a.f[static_cast<std::size_t>(k)]);
  }
  return o;
}

std::optional<CastTarget> cast_target(std::int64_t to) {
  switch (to) {
    case 1: return CastTarget{false, DType::f32, "float32"};
    case 10: return CastTarget{false, DType::f16, "float16"};
    case 11: return CastTarget{false, DType::f64, "float64"};
    case 16: return CastTarget{false, DType::bf16, "bfloat16"};
    case 9: return CastTarget{true, DType::i64, "bool"};
    case 2: return CastTarget{true, DType::i64, "uint8"};
    case 3: return CastTarget{true, DType::i64, "int8"};
    case 4: return CastTarget{true, DType::i64, "uint16"};
    case 5: return CastTarget{true, DType::i64, "int16"};
    case 6: return CastTarget{true, DType::i64, "int32"};
    case 7: return CastTarget{true, DType::i64, "int64"};
    case 12: return CastTarget{true, DType::i64, "uint32"};
    case 13: return CastTarget{true, DType::i64, "uint64"};
    default: return std::nullopt;
  }
}

// ---- attributes ----

const Attribute* NodeAttrs::attr(const std::string& name) const {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? nullptr : &it->second;
}
std::int64_t NodeAttrs::attr_i(const std::string& name, std::int64_t fallback) const {
  const Attribute* a = attr(name);
  if (!a) return fallback;
  if (a->kind != Attribute::Kind::i) fail("attribute \"" + name + "\" must be an int");
  return a->i;
}
double NodeAttrs::attr_f(const std::string& name, double fallback) const {
  const Attribute* a = attr(name);
  if (!a) return fallback;
  if (a->kind != Attribute::Kind::f && a->kind != Attribute::Kind::i) fail("attribute \"" + name + "\" must be a float");
  return a->kind == Attribute::Kind::f ? a->f : static_cast<double>(a->i);
}
std::string NodeAttrs::attr_s(const std::string& name, const std::string& fallback) const {
  const Attribute* a = attr(name);
  if (!a) return fallback;
  if (a->kind != Attribute::Kind::s) fail("attribute \"" + name + "\" must be a string");
  return a->s;
}
std::optional<std::vector<std::int64_t>> NodeAttrs::attr_ints(const std::string& name) const {
  const Attribute* a = attr(name);
  if (!a) return std::nullopt;
  if (a->kind != Attribute::Kind::ints) fail("attribute \"" + name + "\" must be a list of ints");
  return a->ints;
}
std::optional<std::vector<double>> NodeAttrs::attr_floats(const std::string& name) const {
  const Attribute* a = attr(name);
  if (!a) return std::nullopt;
  if (a->kind != Attribute::Kind::floats) fail("attribute \"" + name + "\" must be a list of floats");
  return a->floats;
}
std::optional<std::vector<std::string>> NodeAttrs::attr_strings(const std::string& name) const {
  const Attribute* a = attr(name);
  if (!a) return std::nullopt;
  if (a->kind != Attribute::Kind::strings) fail("attribute \"" + name + "\" must be a list of strings");
  return a->strings;
}

// ---- a node's inputs and outputs ----

const Array& Exec::host(std::size_t i, std::string_view what) const {
  if (!has(i)) fail("input " + std::to_string(i) + " (" + std::string(what) + ") is missing");
  if (!in[i].host)
    fail("input " + std::to_string(i) + " (" + std::string(what) + ", \"" + node.inputs[i] +
         "\") must be known before the run: a constant, an initializer or computed from shapes, not from the data");
  return *in[i].host;
}

Tensor Exec::tensor(std::size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  if (in[i].t.defined()) return in[i].t;
  return model.host_tensor(in[i].host, device);
}

std::shared_ptr<const Array> Exec::values(std::size_t i, std::string_view what) const {
  if (!has(i)) fail("input " + std::to_string(i) + " (" + std::string(what) + ") is missing");
  if (in[i].host) return in[i].host;
  return std::make_shared<const Array>(Array::of_tensor(in[i].t.detach()));
}

Shape Exec::shape_of(std::size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  return in[i].t.defined() ? in[i].t.shape() : in[i].host->shape;
}

std::optional<double> Exec::scalar(std::size_t i) const {
  if (is_host(i) && in[i].host->numel() == 1 && !in[i].host->integer()) return in[i].host->at(0);
  return std::nullopt;
}

std::optional<std::vector<std::int64_t>> Exec::ints_from(const std::string& attr_name, std::size_t input,
                                                         std::int64_t since_opset) const {
  if (node.opset < since_opset) return attr_ints(attr_name);
  if (!has(input)) return std::nullopt;
  const Array& a = host(input, attr_name);
  std::vector<std::int64_t> v;
  for (std::int64_t k = 0; k < a.numel(); ++k) v.push_back(a.int_at(k));
  return v;
}

void Exec::set(std::size_t k, Tensor t) {
  if (out.size() <= k) out.resize(k + 1);
  out[k].t = std::move(t);
}
void Exec::set(std::size_t k, Array a) { set(k, std::make_shared<const Array>(std::move(a))); }
void Exec::set(std::size_t k, std::shared_ptr<const Array> a) {
  if (out.size() <= k) out.resize(k + 1);
  out[k].host = std::move(a);
}

void Exec::only_outputs(std::size_t n, const std::string& why) const {
  for (std::size_t k = n; k < node.outputs.size(); ++k)
    if (!node.outputs[k].empty() && model.consumed(node.outputs[k]))
      fail("output " + std::to_string(k) + " (\"" + node.outputs[k] + "\") is read by a later node: " + why);
}

}  // namespace onnx_impl

namespace {

using namespace onnx_impl;

// ---- the model ----

class Scope : public nn::Module {
 public:
  explicit Scope(std::string type) : nn::Module(std::move(type)) {}
  Tensor forward(const Tensor&) override { throw std::logic_error("an ONNX scope module is not called itself"); }
  // `type` names the layer a scope is ("LayerNorm", "BatchNorm2d": AMP O2 keeps their
  // parameters fp32, as decorate does for the framework's norm layers), given when the
  // scope is created.
  Scope* child(const std::string& name, const std::string& type = "Module") {
    auto& c = children_[name];
    if (!c) c = register_module(name, std::make_shared<Scope>(type));
    return c.get();
  }
  Tensor add_parameter(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  Tensor add_buffer(const std::string& name, Tensor t) { return register_buffer(name, std::move(t)); }

 private:
  std::map<std::string, std::shared_ptr<Scope>> children_;
};

class OnnxModel : public Scope, public ExecContext {
 public:
  OnnxModel(std::shared_ptr<const Graph> g, std::string output, std::uint64_t seed);
  Tensor forward(const Tensor& x) override;
  void set_side(std::vector<Tensor> more) { side_ = std::move(more); }
  // Every data input in graph order; the values named (graph outputs or any other value).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                          const std::vector<bool>& constant = {});
  bool consumed(const std::string& value) const override { return consumed_.count(value) > 0; }
  bool training() const override { return nn::Module::training(); }
  Generator& generator() override { return gen_; }
  Tensor host_tensor(const std::shared_ptr<const Array>& a, Device device) override {
    if (!fixed_.count(a.get())) return a->to_tensor().to(device);
    auto& slot = cache_[{a.get(), device}];
    if (!slot.defined()) slot = a->to_tensor().to(device);
    return slot;
  }

 private:
  struct Step {
    const Node* node;
    const OpDef* def;
    Scope* scope;
  };
  Scope* scope_for(const std::string& path);

  std::shared_ptr<const Graph> g_;
  std::string output_;
  std::vector<Step> steps_;
  std::unordered_map<std::string, Value> base_;  // initializers: parameters, buffers, constants
  std::set<std::string> consumed_;
  std::set<const Array*> fixed_;  // host arrays that never change (their tensors are cached)
  std::map<std::string, std::string> layer_types_;  // module path -> the layer it is
  std::map<std::pair<const Array*, Device>, Tensor> cache_;
  Generator gen_;
  std::vector<Tensor> side_;  // the inputs after the first (set_side_inputs)
};

// ---- host evaluation (shapes and constants) ----

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

// The shape Reshape asks for, with 0 (copy) and -1 (infer) resolved against `in`.
Shape reshape_target(const Exec& e, const Shape& in) {
  const Array& s = e.host(1, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  const bool allowzero = e.attr_i("allowzero", 0) != 0;
  std::int64_t known = 1, infer = -1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allowzero) {
      if (d >= in.size()) e.fail("shape " + to_string(shape) + " copies a dimension the input " + to_string(in) + " lacks");
      shape[d] = in[d];
    }
    if (shape[d] == -1) {
      if (infer >= 0) e.fail("shape " + to_string(shape) + " has more than one -1");
      infer = static_cast<std::int64_t>(d);
    } else if (shape[d] < 0) {
      e.fail("shape " + to_string(shape) + " has a negative size");
    } else if (__builtin_mul_overflow(known, shape[d], &known)) {
      e.fail("shape " + to_string(shape) + " has more elements than int64 counts");
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel(in) % known != 0) e.fail("cannot reshape " + to_string(in) + " to " + to_string(shape));
    shape[static_cast<std::size_t>(infer)] = numel(in) / known;
  }
  if (numel(shape) != numel(in)) e.fail("cannot reshape " + to_string(in) + " to " + to_string(shape));
  return shape;
}

Shape unsqueeze_shape(const Exec& e, const Shape& in) {
  const auto axes = e.ints_from("axes", 1, 13);
  if (!axes) e.fail("Unsqueeze needs axes");
  const std::int64_t rank = static_cast<std::int64_t>(in.size() + axes->size());
  std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
  for (std::int64_t a : *axes) {
    const std::int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank || inserted[static_cast<std::size_t>(n)]) e.fail("axes are out of range or repeated");
    inserted[static_cast<std::size_t>(n)] = true;
  }
  Shape out;
  std::size_t from = 0;
  for (std::int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<std::size_t>(d)] ? 1 : in[from++]);
  return out;
}

Shape squeeze_shape(const Exec& e, const Shape& in) {
  const auto axes = e.ints_from("axes", 1, 13);
  std::set<std::int64_t> drop;
  const auto rank = static_cast<std::int64_t>(in.size());
  if (axes) {
    for (std::int64_t a : *axes) {
      const std::int64_t n = a < 0 ? a + rank : a;
      if (n < 0 || n >= rank) e.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
      if (in[static_cast<std::size_t>(n)] != 1) e.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[static_cast<std::size_t>(n)]));
      drop.insert(n);
    }
  } else {
    for (std::int64_t d = 0; d < rank; ++d)
      if (in[static_cast<std::size_t>(d)] == 1) drop.insert(d);
  }
  Shape out;
  for (std::int64_t d = 0; d < rank; ++d)
    if (!drop.count(d)) out.push_back(in[static_cast<std::size_t>(d)]);
  return out;
}

Shape flatten_shape(const Exec& e, const Shape& in) {
  const auto rank = static_cast<std::int64_t>(in.size());
  std::int64_t axis = e.attr_i("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) e.fail("axis is out of range");
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= in[static_cast<std::size_t>(d)];
  return {outer, inner};
}

void host_shape_op(Exec& e) {
  const Array& a = e.host(0, "data");
  const std::string& op = e.node.op_type;
  if (op == "Reshape") {
    Array o = a;
    o.shape = reshape_target(e, a.shape);
    return e.set(0, std::move(o));
  }
  Array o = a;
  if (op == "Unsqueeze") o.shape = unsqueeze_shape(e, a.shape);
  else if (op == "Squeeze") o.shape = squeeze_shape(e, a.shape);
  else if (op == "Flatten") o.shape = flatten_shape(e, a.shape);
  e.set(0, std::move(o));
}

// Shape and Size of a tensor or of a host array.
void op_shape(Exec& e) {
  const Shape s = e.shape_of(0);
  const auto rank = static_cast<std::int64_t>(s.size());
  if (e.node.op_type == "Size") return e.set(0, Array::ints({}, {numel(s)}));
  auto clampi = [rank](std::int64_t v) { return std::clamp(v < 0 ? v + rank : v, std::int64_t{0}, rank); };
  const std::int64_t start = clampi(e.attr_i("start", 0)), end = clampi(e.attr_i("end", rank));
  std::vector<std::int64_t> v;
  for (std::int64_t d = start; d < end; ++d) v.push_back(s[static_cast<std::size_t>(d)]);
  e.set(0, Array::ints({static_cast<std::int64_t>(v.size())}, v));
}

void op_constant(Exec& e) {
  if (const Attribute* a = e.attr("value")) {
    if (a->kind != Attribute::Kind::t) e.fail("attribute \"value\" must be a tensor");
    return e.set(0, a->t);
  }
  if (const Attribute* a = e.attr("value_float")) return e.set(0, Array::floats({}, {a->f}));
  if (const Attribute* a = e.attr("value_floats"))
    return e.set(0, Array::floats({static_cast<std::int64_t>(a->floats.size())}, a->floats));
  if (const Attribute* a = e.attr("value_int")) return e.set(0, Array::ints({}, {a->i}));
  if (const Attribute* a = e.attr("value_ints"))
    return e.set(0, Array::ints({static_cast<std::int64_t>(a->ints.size())}, a->ints));
  e.fail("a Constant needs \"value\", \"value_float(s)\" or \"value_int(s)\" (sparse and string constants are not supported)");
}

void op_constant_of_shape(Exec& e) {
  const Array& s = e.host(0, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  Array v = Array::floats({1}, {0.0});
  if (const Attribute* a = e.attr("value")) {
    if (a->kind != Attribute::Kind::t || a->t.numel() != 1) e.fail("attribute \"value\" must be a one-element tensor");
    v = a->t;
  }
  Array o = v;
  o.shape = shape;
  const std::int64_t n = host_elements(shape);
  if (v.integer()) o.i.assign(static_cast<std::size_t>(n), v.i[0]);
  else o.f.assign(static_cast<std::size_t>(n), v.f[0]);
  e.set(0, std::move(o));
}

void op_range(Exec& e) {
  const Array &s = e.host(0, "start"), &l = e.host(1, "limit"), &d = e.host(2, "delta");
  if (s.integer()) {
    const std::int64_t a = s.int_at(0), b = l.int_at(0), st = d.int_at(0);
    if (st == 0) e.fail("delta is 0");
    // The count as ONNX defines it, max(ceil((limit - start) / delta), 0), in 128 bits: the
    // difference of two int64 can overflow, and x += delta past INT64_MAX would never end.
    __extension__ typedef __int128 Wide;  // GCC's and clang's 128-bit integer
    const Wide span = static_cast<Wide>(b) - a;
    const Wide count = span / st + (span % st != 0 && (span > 0) == (st > 0) ? 1 : 0);
    const std::int64_t n = count <= 0 ? 0 : count > std::numeric_limits<std::int64_t>::max() ? -1 : static_cast<std::int64_t>(count);
    if (n < 0) e.fail("start " + std::to_string(a) + ", limit " + std::to_string(b) + ", delta " + std::to_string(st) + " make more elements than int64 counts");
    host_elements({n});
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    // Each element lies between start and limit, but k * delta alone may not fit in int64.
    for (std::int64_t k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(a + static_cast<Wide>(k) * st);
    return e.set(0, Array::ints({n}, v));
  }
  const double a = s.at(0), b = l.at(0), st = d.at(0);
  if (st == 0) e.fail("delta is 0");
  const double count = std::max(0.0, std::ceil((b - a) / st));
  if (!std::isfinite(count) || count > 9.0e18)
    e.fail("start " + std::to_string(a) + ", limit " + std::to_string(b) + ", delta " + std::to_string(st) + " make no finite count of elements");
  const auto n = static_cast<std::int64_t>(count);
  host_elements({n});
  std::vector<double> v;
  for (std::int64_t k = 0; k < n; ++k) v.push_back(a + static_cast<double>(k) * st);
  e.set(0, Array::floats({n}, v, s.dtype));
}

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

void host_cast_op(Exec& e) { e.set(0, host_cast(e, e.host(0, "input"), cast_to(e))); }

void host_concat(Exec& e) {
  std::vector<const Array*> parts;
  for (std::size_t k = 0; k < e.in.size(); ++k)
    if (e.has(k)) parts.push_back(&e.host(k, "inputs"));
  if (parts.empty()) e.fail("Concat has no inputs");
  const auto rank = static_cast<std::int64_t>(parts[0]->shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), rank, "axis");
  Shape shape = parts[0]->shape;
  shape[static_cast<std::size_t>(axis)] = 0;
  bool integer = true;
  for (const Array* p : parts) {
    if (p->shape.size() != shape.size()) e.fail("inputs of different ranks");
    shape[static_cast<std::size_t>(axis)] += p->shape[static_cast<std::size_t>(axis)];
    integer = integer && p->integer();
  }
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<std::size_t>(d)];
  Array o;
  o.shape = shape;
  o.dtype = integer ? DType::i64 : parts[0]->dtype;
  o.stored = parts[0]->stored;
  for (std::int64_t r = 0; r < outer; ++r)
    for (const Array* p : parts) {
      const std::int64_t block = p->numel() / std::max<std::int64_t>(outer, 1);
      for (std::int64_t k = 0; k < block; ++k) {
        if (integer) o.i.push_back(p->i[static_cast<std::size_t>(r * block + k)]);
        else o.f.push_back(p->at(r * block + k));
      }
    }
  e.set(0, std::move(o));
}

// Normalised Slice arguments for one axis; a negative step walks from start down to end
// (exclusive), as numpy's.
struct SliceAxis {
  std::int64_t axis, start, end, step;
  std::int64_t count() const {
    if (step > 0) return end > start ? (end - start + step - 1) / step : 0;
    return start > end ? (start - end - step - 1) / -step : 0;
  }
  std::vector<std::int64_t> indices() const {
    std::vector<std::int64_t> v;
    for (std::int64_t k = 0; k < count(); ++k) v.push_back(start + k * step);
    return v;
  }
};
std::vector<SliceAxis> slice_axes(const Exec& e, const Shape& shape) {
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (e.node.opset < 10) {
    starts = e.attr_ints("starts").value_or(std::vector<std::int64_t>{});
    ends = e.attr_ints("ends").value_or(std::vector<std::int64_t>{});
    axes = e.attr_ints("axes").value_or(std::vector<std::int64_t>{});
  } else {
    starts = e.ints_from("starts", 1, 10).value_or(std::vector<std::int64_t>{});
    ends = e.ints_from("ends", 2, 10).value_or(std::vector<std::int64_t>{});
    if (auto a = e.ints_from("axes", 3, 10)) axes = *a;
    if (auto s = e.ints_from("steps", 4, 10)) steps = *s;
  }
  if (starts.size() != ends.size()) e.fail("starts and ends differ in length");
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) e.fail("starts, ends, axes and steps differ in length");
  std::vector<SliceAxis> out;
  const auto rank = static_cast<std::int64_t>(shape.size());
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::int64_t axis = norm_axis(axes[k], rank, "axis");
    const std::int64_t size = shape[static_cast<std::size_t>(axis)];
    if (steps[k] == 0) e.fail("a step of 0");
    // Negative positions count from the end; then clamped to [0, size] (forward) or
    // [-1, size - 1] (backward).
    const bool up = steps[k] > 0;
    auto clampi = [&](std::int64_t v) {
      if (v < 0) v = v < -size ? (up ? 0 : -1) : v + size;
      return up ? std::min(v, size) : std::min(v, size - 1);
    };
    out.push_back({axis, clampi(starts[k]), clampi(ends[k]), steps[k]});
  }
  return out;
}

void host_slice(Exec& e) {
  Array cur = e.host(0, "data");
  for (const SliceAxis& s : slice_axes(e, cur.shape)) {
    const Shape st = strides_of(cur.shape);
    Shape shape = cur.shape;
    shape[static_cast<std::size_t>(s.axis)] = s.count();
    std::vector<std::int64_t> idx;
    const Shape ost = strides_of(shape);
    for (std::int64_t k = 0; k < numel(shape); ++k) {
      std::int64_t rem = k, at = 0;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        std::int64_t c = rem / ost[d];
        rem %= ost[d];
        if (static_cast<std::int64_t>(d) == s.axis) c = s.start + c * s.step;
        at += c * st[d];
      }
      idx.push_back(at);
    }
    cur = take(cur, shape, idx);
  }
  e.set(0, std::move(cur));
}

void host_gather(Exec& e) {
  const Array& data = e.host(0, "data");
  const Array& ind = e.host(1, "indices");
  const auto rank = static_cast<std::int64_t>(data.shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), rank, "axis");
  const std::int64_t size = data.shape[static_cast<std::size_t>(axis)];
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d)
    if (d < axis) outer *= data.shape[static_cast<std::size_t>(d)];
    else if (d > axis) inner *= data.shape[static_cast<std::size_t>(d)];
  Shape shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), ind.shape.begin(), ind.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  std::vector<std::int64_t> idx;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < ind.numel(); ++j) {
      std::int64_t i = ind.int_at(j);
      if (i < 0) i += size;
      if (i < 0 || i >= size) e.fail("index " + std::to_string(ind.int_at(j)) + " is out of range for size " + std::to_string(size));
      for (std::int64_t k = 0; k < inner; ++k) idx.push_back((o * size + i) * inner + k);
    }
  e.set(0, take(data, shape, idx));
}

std::vector<std::int64_t> transpose_perm(const Exec& e, std::int64_t rank) {
  std::vector<std::int64_t> perm;
  if (auto p = e.attr_ints("perm")) perm = *p;
  else
    for (std::int64_t d = rank; d-- > 0;) perm.push_back(d);
  if (static_cast<std::int64_t>(perm.size()) != rank) e.fail("perm has " + std::to_string(perm.size()) + " axes for rank " + std::to_string(rank));
  return perm;
}

void host_transpose(Exec& e) {
  const Array& a = e.host(0, "data");
  const auto rank = static_cast<std::int64_t>(a.shape.size());
  const auto perm = transpose_perm(e, rank);
  Shape shape;
  for (std::int64_t p : perm) shape.push_back(a.shape[static_cast<std::size_t>(norm_axis(p, rank, "perm axis"))]);
  const Shape ist = strides_of(a.shape), ost = strides_of(shape);
  std::vector<std::int64_t> idx;
  for (std::int64_t k = 0; k < numel(shape); ++k) {
    std::int64_t rem = k, at = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t c = rem / ost[d];
      rem %= ost[d];
      at += c * ist[static_cast<std::size_t>(perm[d])];
    }
    idx.push_back(at);
  }
  e.set(0, take(a, shape, idx));
}

Shape expand_target(const Exec& e, const Shape& in) {
  const Array& s = e.host(1, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  try {
    return broadcast(in, shape);
  } catch (const std::invalid_argument& x) {
    e.fail(x.what());
  }
}

void host_expand(Exec& e) {
  const Array& a = e.host(0, "input");
  const Shape shape = expand_target(e, a.shape);
  e.set(0, take(a, shape, broadcast_index(shape, a.shape)));
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

void op_identity(Exec& e) {
  if (!e.has(0)) e.fail("input 0 is missing");
  if (e.out.empty()) e.out.resize(1);
  e.out[0] = e.in[0];
}

// ---- tensor ops: each node as registry ops ----

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

void op_gelu(Exec& e) {
  e.set(0, gelu(e.tensor(0), e.attr_s("approximate", "none") == "tanh"));
}

void op_hard_sigmoid(Exec& e) {
  const double alpha = e.attr_f("alpha", 0.2), beta = e.attr_f("beta", 0.5);
  const Tensor x = e.tensor(0);
  // PyTorch's and Paddle's hardsigmoid are alpha = 1/6, beta = 0.5 (as float32 values).
  if (std::fabs(alpha - 1.0 / 6) < 1e-7 && beta == 0.5) return e.set(0, hardsigmoid(x));
  e.set(0, clamp(add(mul(x, alpha), beta), 0, 1));
}

void op_clip(Exec& e) {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (e.node.opset < 11) {
    lo = e.attr_f("min", lo);
    hi = e.attr_f("max", hi);
  } else {
    if (e.has(1)) lo = e.host(1, "min").at(0);
    if (e.has(2)) hi = e.host(2, "max").at(0);
  }
  e.set(0, clamp(e.tensor(0), lo, hi));
}

// Clip of host values (integer data: token ids, sizes).
void host_clip(Exec& e) {
  Array o = e.host(0, "input");
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (e.node.opset < 11) {
    lo = e.attr_f("min", lo);
    hi = e.attr_f("max", hi);
  } else {
    if (e.has(1)) lo = e.host(1, "min").at(0);
    if (e.has(2)) hi = e.host(2, "max").at(0);
  }
  for (auto& v : o.i) {
    if (static_cast<double>(v) < lo) v = static_cast<std::int64_t>(lo);
    if (static_cast<double>(v) > hi) v = static_cast<std::int64_t>(hi);
  }
  for (auto& v : o.f) v = v < lo ? lo : v > hi ? hi : v;
  e.set(0, std::move(o));
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

void op_matmul(Exec& e) {
  const Tensor a = e.tensor(0), b = e.tensor(1);
  e.set(0, matmul(a, b));
}

void op_gemm(Exec& e) {
  Tensor a = e.tensor(0);
  const Tensor b = e.tensor(1);
  const double alpha = e.attr_f("alpha", 1), beta = e.attr_f("beta", 1);
  const bool ta = e.attr_i("transA", 0) != 0, tb = e.attr_i("transB", 0) != 0;
  if (a.dim() != 2 || b.dim() != 2) e.fail("Gemm takes 2-D A and B, got " + to_string(a.shape()) + " and " + to_string(b.shape()));
  if (ta) a = transpose(a, 0, 1);
  Tensor c;
  if (e.has(2)) c = e.tensor(2);
  // x W^T + b is a Linear layer: one linear op, as the framework ran it.
  const bool bias_fits = !c.defined() || (beta == 1 && c.dim() == 1 && tb && c.size(0) == b.size(0));
  Tensor y = tb ? linear(a, b, bias_fits ? c : Tensor{}) : matmul(a, b);
  if (alpha != 1) y = mul(y, alpha);
  if (c.defined() && !(tb && bias_fits)) y = add(y, beta == 1 ? c : mul(c, beta));
  e.set(0, y);
}

void op_batch_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  const Tensor scale = e.tensor(1), bias = e.tensor(2), mean = e.tensor(3), var = e.tensor(4);
  // ONNX: running = running * momentum + batch * (1 - momentum); PyTorch's momentum is 1 - that.
  const double momentum = 1 - e.attr_f("momentum", 0.9);
  const double eps = e.attr_f("epsilon", 1e-5);
  const bool training = e.training() || e.attr_i("training_mode", 0) != 0;
  Tensor y = batch_norm(x, scale, bias, mean, var, training, momentum, eps);
  e.set(0, y);
  if (e.node.outputs.size() > 1) {
    if (!training) e.only_outputs(1, "running statistics are outputs only in training mode");
    e.set(1, mean.detach().clone());
    if (e.node.outputs.size() > 2) e.set(2, var.detach().clone());
    e.only_outputs(3, "saved mean/variance outputs (opset < 9) are not supported");
  }
}

void op_layer_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", -1), x.dim(), "axis");
  const Tensor w = e.tensor(1);
  const Tensor b = e.has(2) ? e.tensor(2) : Tensor{};
  const double eps = e.attr_f("epsilon", 1e-5);
  e.set(0, layer_norm(x, x.dim() - axis, w, b, eps));
  // The optional Mean and InvStdDev outputs (training graphs), over the normalised dims.
  const bool mean_out = e.node.outputs.size() > 1 && !e.node.outputs[1].empty();
  const bool inv_out = e.node.outputs.size() > 2 && !e.node.outputs[2].empty();
  if (mean_out || inv_out) {
    std::vector<std::int64_t> dims;
    for (std::int64_t d = axis; d < x.dim(); ++d) dims.push_back(d);
    const Tensor m = mean(x, dims, true);
    if (mean_out) e.set(1, m);
    if (inv_out) e.set(2, rsqrt(add(mean(square(sub(x, m)), dims, true), eps)));
  }
}

void op_softmax(Exec& e) {
  const Tensor x = e.tensor(0);
  const bool log_form = e.node.op_type == "LogSoftmax";
  const std::int64_t axis = norm_axis(e.attr_i("axis", e.node.opset < 13 ? 1 : -1), x.dim(), "axis");
  if (e.node.opset < 13 && axis != x.dim() - 1) {
    // Before opset 13 the input is flattened to 2-D at `axis` and normalised over the rest.
    const Tensor flat = reshape(x, flatten_shape(e, x.shape()));
    const Tensor y = log_form ? log_softmax(flat, 1) : softmax(flat, 1);
    return e.set(0, reshape(y, x.shape()));
  }
  e.set(0, log_form ? log_softmax(x, axis) : softmax(x, axis));
}

// The product over `axes`: the reduced dims moved last and merged, then halves multiplied
// until one column is left (mul's gradient is the product of the others, zeros included).
Tensor product(const Tensor& x, const std::vector<std::int64_t>& axes, bool keep) {
  std::vector<std::int64_t> perm;
  Shape kept, kept_dims = x.shape();
  std::int64_t n = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      perm.push_back(d);
      kept.push_back(x.size(d));
    } else {
      kept_dims[static_cast<std::size_t>(d)] = 1;
    }
  for (std::int64_t a : axes) {
    perm.push_back(a);
    n *= x.size(a);
  }
  Tensor t = reshape(permute(x, perm), {numel(kept), n});
  if (n == 0) return Tensor::ones(keep ? kept_dims : kept, x.dtype(), x.device());
  while (t.size(1) > 1) {
    const std::int64_t half = t.size(1) / 2;
    Tensor p = mul(slice(t, 1, 0, half), slice(t, 1, half, 2 * half));
    t = t.size(1) % 2 ? concat({p, slice(t, 1, 2 * half, t.size(1))}, 1) : p;
  }
  return reshape(t, keep ? kept_dims : kept);
}

// The axes a Reduce* node reduces (every axis when none are given); nullopt: none at all
// (noop_with_empty_axes).
std::optional<std::vector<std::int64_t>> reduce_axes(const Exec& e, std::int64_t rank) {
  const std::int64_t since = e.node.op_type == "ReduceSum" ? 13 : 18;
  auto axes = e.ints_from("axes", 1, since);
  if (!axes || axes->empty()) {
    if (e.attr_i("noop_with_empty_axes", 0) != 0) return std::nullopt;
    axes = std::vector<std::int64_t>();
    for (std::int64_t d = 0; d < rank; ++d) axes->push_back(d);
  }
  for (auto& a : *axes) a = norm_axis(a, rank, "axis");
  std::sort(axes->begin(), axes->end());
  axes->erase(std::unique(axes->begin(), axes->end()), axes->end());
  return axes;
}

// Reductions of host arrays: an integer mask's sum (the lengths of token sequences), a
// constant's maximum. Integer inputs give integers (a mean truncated, as ONNX's integer
// division); the logarithmic ones take floats only.
void host_reduce(Exec& e) {
  const Array& x = e.host(0, "data");
  const std::string& op = e.node.op_type;
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  const auto axes = reduce_axes(e, rank);
  if (!axes) return e.set(0, x);
  const bool keep = e.attr_i("keepdims", 1) != 0;
  const bool logs = op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp";
  if (x.integer() && logs) e.fail(op + " of integers is not supported");
  Shape kept = x.shape, dropped;
  for (std::int64_t d = 0; d < rank; ++d) {
    const bool reduced = std::find(axes->begin(), axes->end(), d) != axes->end();
    if (reduced) kept[static_cast<std::size_t>(d)] = 1;
    else dropped.push_back(x.shape[static_cast<std::size_t>(d)]);
  }
  const auto to = broadcast_index(x.shape, kept);  // each element's output position
  const std::int64_t n = numel(kept), count = n ? x.numel() / n : 0;
  std::vector<double> acc(static_cast<std::size_t>(n), op == "ReduceProd" ? 1.0 : 0.0);
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::int64_t k = 0; k < x.numel(); ++k) {
    const double v = x.at(k);
    double& a = acc[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])];
    const bool first = !seen[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])];
    seen[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])] = true;
    if (op == "ReduceMax") a = first || v > a || std::isnan(v) ? v : a;
    else if (op == "ReduceMin") a = first || v < a || std::isnan(v) ? v : a;
    else if (op == "ReduceProd") a *= v;
    else if (op == "ReduceSumSquare" || op == "ReduceL2") a += v * v;
    else if (op == "ReduceL1") a += std::fabs(v);
    else if (op == "ReduceLogSumExp") a += std::exp(v);
    else a += v;
  }
  for (double& a : acc) {
    if (op == "ReduceMean") a = x.integer() ? std::trunc(a / static_cast<double>(count)) : a / static_cast<double>(count);
    else if (op == "ReduceL2") a = std::sqrt(a);
    else if (op == "ReduceLogSum" || op == "ReduceLogSumExp") a = std::log(a);
  }
  const Shape shape = keep ? kept : dropped;
  if (x.integer()) {
    Array o = Array::ints(shape, std::vector<std::int64_t>(acc.begin(), acc.end()));
    o.stored = x.stored;
    return e.set(0, std::move(o));
  }
  for (double& a : acc) a = x.dtype == DType::f64 ? a : round_to(a, x.dtype);
  e.set(0, Array::floats(shape, acc, x.dtype));
}

void op_reduce(Exec& e) {
  const Tensor x = e.tensor(0);
  const auto axes = reduce_axes(e, x.dim());
  if (!axes) return e.set(0, x);
  const bool keep = e.attr_i("keepdims", 1) != 0;
  const std::string& op = e.node.op_type;
  Tensor y;
  if (op == "ReduceSum") y = sum(x, *axes, keep);
  else if (op == "ReduceMean") y = mean(x, *axes, keep);
  else if (op == "ReduceMax") y = max(x, *axes, keep);
  else if (op == "ReduceMin") y = neg(max(neg(x), *axes, keep));
  else if (op == "ReduceSumSquare") y = sum(square(x), *axes, keep);
  else if (op == "ReduceL1") y = sum(abs(x), *axes, keep);
  else if (op == "ReduceL2") y = sqrt(sum(square(x), *axes, keep));
  else if (op == "ReduceLogSum") y = log(sum(x, *axes, keep));
  else if (op == "ReduceProd") y = product(x, *axes, keep);
  else {  // ReduceLogSumExp, shifted by the maximum (whose gradient cancels)
    const Tensor m = max(x, *axes, true);
    y = add(log(sum(exp(sub(x, m)), *axes, true)), m);
    if (!keep) {
      Shape shape;
      for (std::int64_t d = 0; d < y.dim(); ++d)
        if (std::find(axes->begin(), axes->end(), d) == axes->end()) shape.push_back(y.size(d));
      y = reshape(y, shape);
    }
  }
  e.set(0, y);
}

// ---- activations composed of registry ops (value and gradient as the framework's) ----

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

// A mask of where a float input's values satisfy `keep`, read on the host, as a tensor
// on the model's device (the framework's comparison has no gradient either).
Tensor mask_where(const Exec& e, std::size_t i, const std::function<bool(double)>& keep) {
  const auto a = e.values(i, "X");
  std::vector<std::int64_t> m;
  for (std::int64_t k = 0; k < a->numel(); ++k) m.push_back(keep(a->at(k)));
  return Tensor::from(m, a->shape).to(e.device);
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

// MeanVarianceNormalization: (x - mean) / sqrt(variance + 1e-9) over `axes` (ONNX's
// function body).
void op_mvn(Exec& e) {
  const Tensor x = e.tensor(0);
  std::vector<std::int64_t> axes = e.attr_ints("axes").value_or(std::vector<std::int64_t>{0, 2, 3});
  for (auto& a : axes) a = norm_axis(a, x.dim(), "axis");
  const Tensor centred = sub(x, mean(x, axes, true));
  e.set(0, div(centred, sqrt(add(mean(square(centred), axes, true), 1e-9))));
}

// EyeLike: ones on diagonal k of a 2-D shape, on the host (a constant of the input's shape).
void host_eye_like(Exec& e) {
  const Shape s = e.shape_of(0);
  if (s.size() != 2) e.fail("takes a 2-D input, got " + to_string(s));
  const std::int64_t k = e.attr_i("k", 0);
  const Attribute* dt = e.attr("dtype");
  std::optional<CastTarget> t = dt ? cast_target(e.attr_i("dtype", 1)) : std::nullopt;
  if (dt && !t) e.fail("dtype " + std::to_string(e.attr_i("dtype", 1)) + " is not supported");
  const bool integer = t ? t->integer : e.in[0].host ? e.in[0].host->integer() : !is_floating(e.in[0].t.dtype());
  std::vector<double> v;
  for (std::int64_t r = 0; r < s[0]; ++r)
    for (std::int64_t c = 0; c < s[1]; ++c) v.push_back(c - r == k ? 1 : 0);
  if (integer) {
    Array o = Array::ints(s, std::vector<std::int64_t>(v.begin(), v.end()));
    if (t) o.stored = t->stored;
    return e.set(0, std::move(o));
  }
  e.set(0, Array::floats(s, v, t ? t->dtype : e.in[0].host ? e.in[0].host->dtype : e.in[0].t.dtype()));
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

void op_instance_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  if (x.dim() < 3) e.fail("takes [N, C, ...], got " + to_string(x.shape()));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor m = mean(x, dims, true);
  const Tensor centred = sub(x, m);
  const Tensor normed = mul(centred, rsqrt(add(mean(square(centred), dims, true), e.attr_f("epsilon", 1e-5))));
  Shape per_channel = {x.size(1)};
  for (std::int64_t d = 2; d < x.dim(); ++d) per_channel.push_back(1);
  e.set(0, add(mul(normed, reshape(e.tensor(1), per_channel)), reshape(e.tensor(2), per_channel)));
}

// Pad: constant (any value), reflect and edge, per axis; negative pads crop.
void op_pad(Exec& e) {
  Tensor x = e.tensor(0);
  const std::string mode = e.attr_s("mode", "constant");
  std::vector<std::int64_t> pads;
  double value = 0;
  if (e.node.opset < 11) {
    pads = e.attr_ints("pads").value_or(std::vector<std::int64_t>{});
    value = e.attr_f("value", 0);
  } else {
    pads = e.ints_from("pads", 1, 11).value_or(std::vector<std::int64_t>{});
    if (e.has(2) && e.host(2, "constant_value").numel() > 0) value = e.host(2, "constant_value").at(0);
  }
  const auto rank = x.dim();
  std::vector<std::int64_t> axes;
  if (e.node.opset >= 18 && e.has(3)) {
    const std::vector<std::int64_t> given = e.ints_from("axes", 3, 18).value_or(std::vector<std::int64_t>{});
    for (std::int64_t a : given) axes.push_back(norm_axis(a, rank, "axis"));
  } else {
    for (std::int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) e.fail("pads has " + std::to_string(pads.size()) + " values for " + std::to_string(axes.size()) + " axes");
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t axis = axes[k];
    std::int64_t before = pads[k], after = pads[k + axes.size()];
    if (before < 0 || after < 0) {  // crop first
      const std::int64_t size = x.size(axis);
      x = slice(x, axis, std::max<std::int64_t>(0, -before), size - std::max<std::int64_t>(0, -after));
      before = std::max<std::int64_t>(0, before);
      after = std::max<std::int64_t>(0, after);
    }
    if (before == 0 && after == 0) continue;
    const std::int64_t size = x.size(axis);
    std::vector<Tensor> parts;
    auto fill = [&](std::int64_t n) {
      Shape s = x.shape();
      s[static_cast<std::size_t>(axis)] = n;
      return Tensor::full(s, value, x.dtype(), x.device());
    };
    auto row = [&](std::int64_t i) { return slice(x, axis, i, i + 1); };
    if (mode == "reflect" && (before >= size || after >= size))
      e.fail("reflect padding of " + std::to_string(std::max(before, after)) + " needs more than " + std::to_string(size) + " elements");
    if (before > 0) {
      if (mode == "constant") parts.push_back(fill(before));
      else
        for (std::int64_t i = before; i >= 1; --i) parts.push_back(row(mode == "reflect" ? i : 0));
    }
    parts.push_back(x);
    if (after > 0) {
      if (mode == "constant") parts.push_back(fill(after));
      else
        for (std::int64_t i = 1; i <= after; ++i) parts.push_back(row(mode == "reflect" ? size - 1 - i : size - 1));
    }
    x = concat(parts, axis);
  }
  e.set(0, x);
}

void op_tile(Exec& e) {
  Tensor x = e.tensor(0);
  const Array& r = e.host(1, "repeats");
  if (r.numel() != x.dim()) e.fail("repeats has " + std::to_string(r.numel()) + " values for rank " + std::to_string(x.dim()));
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    const std::int64_t n = r.int_at(d);
    if (n < 0) e.fail("a negative repeat");
    if (n == 1) continue;
    x = n == 0 ? slice(x, d, 0, 0) : concat(std::vector<Tensor>(static_cast<std::size_t>(n), x), d);
  }
  e.set(0, x);
}

// Resize and Upsample, mode nearest. Each axis resized maps output index i to an input
// index (ONNX's coordinate_transformation_mode, then nearest_mode, clamped to the input) and
// gathers those slices (take_along, whose gradient adds into the elements read). A whole
// factor whose mapping repeats each element (asymmetric with floor, F.interpolate's
// nearest; half-pixel with either rounding) is a broadcast add of zeros instead, as cheap as
// a copy.
void op_resize(Exec& e) {
  Tensor x = e.tensor(0);
  const bool upsample = e.node.op_type == "Upsample";
  std::vector<double> scales;
  std::vector<std::int64_t> sizes;
  if (upsample) {
    if (e.node.opset < 9) {
      const Attribute* a = e.attr("scales");
      if (!a) e.fail("scales are missing");
      scales = a->floats;
    } else {
      const Array& s = e.host(1, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    }
  } else {
    const std::size_t scales_at = e.node.opset < 11 ? 1 : 2;
    if (e.has(scales_at) && e.host(scales_at, "scales").numel() > 0) {
      const Array& s = e.host(scales_at, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    } else if (e.has(3)) {
      const Array& given = e.host(3, "sizes");
      for (std::int64_t k = 0; k < given.numel(); ++k) sizes.push_back(given.int_at(k));
    }
  }
  const auto rank = static_cast<std::size_t>(x.dim());
  if (scales.size() != rank && sizes.size() != rank) e.fail("scales or sizes do not match the input's rank");
  // Resize before opset 11 is Upsample's mapping: asymmetric, floor.
  const bool legacy = upsample || e.node.opset < 11;
  const std::string coords = legacy ? "asymmetric" : e.attr_s("coordinate_transformation_mode", "half_pixel");
  const std::string rounding = legacy ? "floor" : e.attr_s("nearest_mode", "round_prefer_floor");
  const bool repeats = coords == "asymmetric" ? rounding == "floor"
                       : coords == "half_pixel" || coords == "pytorch_half_pixel"
                           ? rounding == "round_prefer_floor" || rounding == "round_prefer_ceil"
                           : false;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    const std::int64_t in = x.size(d);
    const double given = sizes.empty() ? scales[static_cast<std::size_t>(d)] : 0;
    const std::int64_t out = sizes.empty() ? static_cast<std::int64_t>(std::floor(static_cast<double>(in) * given))
                                           : sizes[static_cast<std::size_t>(d)];
    const double scale = sizes.empty() ? given : static_cast<double>(out) / static_cast<double>(in);
    if (out < 0 || scale <= 0) e.fail("scale or size of axis " + std::to_string(d) + " must be positive");
    if (out == in && scale == 1) continue;
    const auto n = static_cast<std::int64_t>(std::llround(scale));
    if (repeats && n >= 1 && out == in * n && std::fabs(scale - static_cast<double>(n)) < 1e-9) {
      Shape split = x.shape(), repeated = x.shape(), merged = x.shape();
      split.insert(split.begin() + d + 1, 1);
      repeated.insert(repeated.begin() + d + 1, n);
      merged[static_cast<std::size_t>(d)] *= n;
      x = reshape(add(reshape(x, split), Tensor::zeros(repeated, x.dtype(), x.device())), merged);
      continue;
    }
    std::vector<std::int64_t> index;
    for (std::int64_t i = 0; i < out; ++i) {
      const double o = static_cast<double>(i);
      double at = o / scale;  // asymmetric
      if (coords == "half_pixel") at = (o + 0.5) / scale - 0.5;
      else if (coords == "pytorch_half_pixel") at = out > 1 ? (o + 0.5) / scale - 0.5 : 0;
      else if (coords == "align_corners") at = out == 1 ? 0 : o * static_cast<double>(in - 1) / static_cast<double>(out - 1);
      else if (coords == "tf_half_pixel_for_nn") at = (o + 0.5) / scale;
      const bool half = at == std::floor(at) + 0.5;
      double r = std::round(at);
      if (rounding == "floor") r = std::floor(at);
      else if (rounding == "ceil") r = std::ceil(at);
      else if (half) r = rounding == "round_prefer_ceil" ? std::ceil(at) : std::floor(at);
      index.push_back(std::clamp<std::int64_t>(static_cast<std::int64_t>(r), 0, in - 1));
    }
    x = take_along(e, x, d, index);
  }
  e.set(0, x);
}

// Trilu and CumSum on the host (masks and position ids).
void host_trilu(Exec& e) {
  Array a = e.host(0, "input");
  if (a.shape.size() < 2) e.fail("takes at least 2 dims");
  const std::int64_t k = e.has(1) ? e.host(1, "k").int_at(0) : 0;
  const bool upper = e.attr_i("upper", 1) != 0;
  const std::int64_t rows = a.shape[a.shape.size() - 2], cols = a.shape.back();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    if (keep) continue;
    if (a.integer()) a.i[static_cast<std::size_t>(i)] = 0;
    else a.f[static_cast<std::size_t>(i)] = 0;
  }
  e.set(0, std::move(a));
}

void host_cumsum(Exec& e) {
  Array a = e.host(0, "x");
  const auto rank = static_cast<std::int64_t>(a.shape.size());
  const std::int64_t axis = norm_axis(e.host(1, "axis").int_at(0), rank, "axis");
  const bool exclusive = e.attr_i("exclusive", 0) != 0, reverse = e.attr_i("reverse", 0) != 0;
  const Shape st = strides_of(a.shape);
  const std::int64_t size = a.shape[static_cast<std::size_t>(axis)], stride = st[static_cast<std::size_t>(axis)];
  const Array src = a;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t pos = (i / stride) % size, base = i - pos * stride;
    double f = 0;
    std::int64_t n = 0;
    for (std::int64_t j = 0; j < size; ++j) {
      const bool in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
      if (!in) continue;
      if (a.integer()) n += src.i[static_cast<std::size_t>(base + j * stride)];
      else f += src.f[static_cast<std::size_t>(base + j * stride)];
    }
    if (a.integer()) a.i[static_cast<std::size_t>(i)] = n;
    else a.f[static_cast<std::size_t>(i)] = a.dtype == DType::f32 ? static_cast<double>(static_cast<float>(f)) : f;
  }
  e.set(0, std::move(a));
}

// CumSum of a tensor: log2(n) adds of the running sums shifted by 1, 2, 4, ... places
// (zeros shifted in), so its gradient is autograd's; exclusive shifts the input by one first.
void op_cumsum(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.host(1, "axis").int_at(0), x.dim(), "axis");
  const bool exclusive = e.attr_i("exclusive", 0) != 0, reverse = e.attr_i("reverse", 0) != 0;
  const std::int64_t n = x.size(axis);
  auto shift = [&](const Tensor& t, std::int64_t k) {
    Shape zs = t.shape();
    zs[static_cast<std::size_t>(axis)] = std::min(k, n);
    const Tensor z = Tensor::zeros(zs, t.dtype(), t.device());
    if (k >= n) return z;
    return reverse ? concat({slice(t, axis, k, n), z}, axis) : concat({z, slice(t, axis, 0, n - k)}, axis);
  };
  Tensor y = exclusive ? shift(x, 1) : x;
  for (std::int64_t k = 1; k < n; k *= 2) y = add(y, shift(y, k));
  e.set(0, y);
}

void op_reshape_like(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::string& op = e.node.op_type;
  Shape shape;
  if (op == "Reshape") shape = reshape_target(e, x.shape());
  else if (op == "Unsqueeze") shape = unsqueeze_shape(e, x.shape());
  else if (op == "Squeeze") shape = squeeze_shape(e, x.shape());
  else shape = flatten_shape(e, x.shape());
  e.set(0, shape == x.shape() ? x : reshape(x, shape));
}

void op_transpose(Exec& e) {
  const Tensor x = e.tensor(0);
  auto perm = transpose_perm(e, x.dim());
  bool identity = true;
  for (std::size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == static_cast<std::int64_t>(d);
  e.set(0, identity ? x : permute(x, perm));
}

void op_concat(Exec& e) {
  std::vector<Tensor> xs;
  for (std::size_t k = 0; k < e.in.size(); ++k)
    if (e.has(k)) {
      Tensor t = e.tensor(k);
      if (t.numel() > 0 || xs.empty()) xs.push_back(t);  // ONNX allows empty parts
    }
  if (xs.empty()) e.fail("Concat has no inputs");
  e.set(0, xs.size() == 1 ? xs[0] : concat(xs, e.attr_i("axis", 0)));
}

// Slice: the registry's slice for positive steps; a negative step (torch.flip) gathers the
// elements in their reversed order (an embedding lookup along the axis).
void op_slice(Exec& e) {
  Tensor x = e.tensor(0);
  for (const SliceAxis& s : slice_axes(e, x.shape())) {
    if (s.start == 0 && s.end == x.size(s.axis) && s.step == 1) continue;
    x = s.step > 0 ? slice(x, s.axis, s.start, s.end, s.step) : take_along(e, x, s.axis, s.indices());
  }
  e.set(0, x);
}

void op_split(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), x.dim(), "axis");
  const std::int64_t size = x.size(axis);
  std::vector<std::int64_t> parts;
  if (auto s = e.ints_from("split", 1, 13)) parts = *s;
  if (parts.empty()) {
    const auto n = static_cast<std::int64_t>(e.node.opset >= 18 ? e.attr_i("num_outputs", 0) : static_cast<std::int64_t>(e.node.outputs.size()));
    if (n <= 0) e.fail("Split needs split sizes or num_outputs");
    const std::int64_t chunk = (size + n - 1) / n;
    for (std::int64_t k = 0; k < n; ++k) parts.push_back(std::max<std::int64_t>(0, std::min(chunk, size - k * chunk)));
  }
  if (std::accumulate(parts.begin(), parts.end(), std::int64_t{0}) != size) e.fail("split sizes do not add up to " + std::to_string(size));
  std::int64_t at = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    e.set(k, slice(x, axis, at, at + parts[k]));
    at += parts[k];
  }
}

void op_gather(Exec& e) {
  const Tensor data = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), data.dim(), "axis");
  const std::int64_t size = data.size(axis);
  if (e.is_host(1) && e.in[1].host->shape.empty()) {
    // One index (x[:, 0]): a slice, the axis dropped.
    std::int64_t i = e.in[1].host->int_at(0);
    if (i < 0) i += size;
    if (i < 0 || i >= size) e.fail("index is out of range for size " + std::to_string(size));
    Shape shape = data.shape();
    shape.erase(shape.begin() + axis);
    return e.set(0, reshape(slice(data, axis, i, i + 1), shape));
  }
  Tensor indices;
  if (e.is_host(1)) {
    Array a = *e.in[1].host;
    if (!a.integer()) e.fail("indices must be integers");
    for (auto& v : a.i) {
      const std::int64_t given = v;
      if (v < 0) v += size;
      if (v < 0 || v >= size)
        e.fail("index " + std::to_string(given) + " is out of range for the " + std::to_string(size) + " rows of \"" +
               e.node.inputs[0] + "\" (token ids in the data must be below the vocabulary's size)");
    }
    indices = a.to_tensor().to(e.device);
  } else {
    indices = e.tensor(1);
    if (indices.dtype() != DType::i64) e.fail("indices must be int64 or int32 data");
  }
  // An embedding lookup over axis 0 of a 2-D table; other axes move to the front and back.
  if (axis == 0 && data.dim() == 2) return e.set(0, embedding(indices, data));
  Shape rest;
  std::vector<std::int64_t> perm = {axis};
  for (std::int64_t d = 0; d < data.dim(); ++d)
    if (d != axis) {
      perm.push_back(d);
      rest.push_back(data.size(d));
    }
  Tensor table = axis == 0 ? data : permute(data, perm);
  table = reshape(table, {size, numel(rest)});
  Tensor y = embedding(indices, table);  // [indices..., prod(rest)]
  Shape shape = indices.shape();
  shape.insert(shape.end(), rest.begin(), rest.end());
  y = reshape(y, shape);
  if (axis == 0) return e.set(0, y);
  // y is [idx..., rest...] with rest in data order minus axis; put idx dims at `axis`.
  const auto q = indices.dim();
  std::vector<std::int64_t> back;
  for (std::int64_t d = 0; d < axis; ++d) back.push_back(q + d);
  for (std::int64_t d = 0; d < q; ++d) back.push_back(d);
  for (std::int64_t d = axis; d < static_cast<std::int64_t>(rest.size()); ++d) back.push_back(q + d);
  e.set(0, permute(y, back));
}

void op_expand(Exec& e) {
  const Tensor x = e.tensor(0);
  const Shape shape = expand_target(e, x.shape());
  if (shape == x.shape()) return e.set(0, x);
  // Broadcasting against zeros of x's dtype: the values and the gradient's reduction of
  // an expand.
  e.set(0, add(x, Tensor::zeros(shape, x.dtype(), x.device())));
}

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

// ---- the checks of attributes, made before anything runs (onnx_refusal) ----

std::optional<OnnxRefusal> check_gelu(const NodeAttrs& a) {
  const std::string approx = a.attr_s("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return OnnxRefusal{"approximate", "\"" + approx + "\" (none and tanh are supported)", "export nn.GELU() or nn.GELU(approximate='tanh')"};
  return std::nullopt;
}

std::optional<OnnxRefusal> check_pad(const NodeAttrs& a) {
  const std::string mode = a.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return OnnxRefusal{"mode", "\"" + mode + "\" (constant, reflect and edge are supported)", "pad with F.pad's constant, reflect or replicate modes"};
  return std::nullopt;
}

std::optional<OnnxRefusal> check_resize(const NodeAttrs& a) {
  const std::string mode = a.attr_s("mode", "nearest");
  if (mode != "nearest")
    return OnnxRefusal{"mode", "\"" + mode + "\" (nearest is supported)", "resize with F.interpolate(mode='nearest')"};
  if (a.node.op_type == "Resize" && a.node.opset >= 11) {
    const std::string coords = a.attr_s("coordinate_transformation_mode", "half_pixel");
    if (coords != "half_pixel" && coords != "pytorch_half_pixel" && coords != "align_corners" && coords != "asymmetric" &&
        coords != "tf_half_pixel_for_nn")
      return OnnxRefusal{"coordinate_transformation_mode", "\"" + coords + "\" (a region of interest)",
                         "resize the whole input (F.interpolate)"};
  }
  return std::nullopt;
}

std::optional<OnnxRefusal> check_batch_norm(const NodeAttrs& a) {
  if (a.node.opset < 9 && a.attr_i("spatial", 1) != 1)
    return OnnxRefusal{"spatial", "0 (per-activation statistics)", "export with opset 9 or newer (BatchNorm over channels)"};
  return std::nullopt;
}

std::optional<OnnxRefusal> check_cast(const NodeAttrs& a) {
  if (a.node.op_type == "Cast" && !cast_target(a.attr_i("to", 1)))
    return OnnxRefusal{"to", "ONNX type " + std::to_string(a.attr_i("to", 1)) + " (float, integer and bool types are supported)",
                       "cast to a float, integer or bool type"};
  return std::nullopt;
}

std::optional<OnnxRefusal> check_constant(const NodeAttrs& a) {
  for (const char* k : {"value", "value_float", "value_floats", "value_int", "value_ints"})
    if (a.attr(k)) return std::nullopt;
  const std::string given = a.node.attributes.empty() ? "none" : a.node.attributes.begin()->first;
  return OnnxRefusal{given, "a Constant of " + given + " (tensor, float(s) and int(s) values are supported; sparse and string ones are not)",
                     "keep string and sparse constants out of the exported graph"};
}

// ---- the table ----

#define HOST_ONLY nullptr
const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t = {
        {{"Abs", {"abs"}, "elementwise"}, op_unary, host_unary_op},
        {{"Add", {"add", "add_scalar"}, "broadcasting; a one-element constant operand runs as add_scalar"}, op_binary, host_binary_op},
        {{"And", {}, "bools (host)"}, host_compare, host_compare},
        {{"ArgMax", {}, "axis, keepdims, select_last_index; integers, on the host (float data read there)"}, op_arg_reduce, op_arg_reduce},
        {{"ArgMin", {}, "axis, keepdims, select_last_index; integers, on the host (float data read there)"}, op_arg_reduce, op_arg_reduce},
        {{"AveragePool", {"avg_pool2d", "concat", "slice", "add", "div", "div_scalar", "reshape"}, "2-D and 1-D; pads (asymmetric too), auto_pad, strides, ceil_mode, count_include_pad, dilations"}, op_pool, nullptr, check_pool},
        {{"BatchNormalization", {"batch_norm"}, "batch statistics and running-stat updates when training (PyTorch momentum = 1 - ONNX momentum), running statistics in eval"}, op_batch_norm, nullptr, check_batch_norm},
        {{"Cast", {"cast"}, "between float types; to integer and bool types on the host (float data read there)"}, op_cast, host_cast_op, check_cast},
        {{"CastLike", {"cast"}, "as Cast, to the second input's type"}, op_cast, host_cast_op},
        {{"Ceil", {}, "on the host (float data read there: no gradient, as in the framework)"}, host_unary_op, host_unary_op},
        {{"Celu", {"neg", "relu", "div_scalar", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha; composed of registry ops"}, op_activation, nullptr},
        {{"Clip", {"clamp"}, "constant min and max (ReLU6); integers on the host"}, op_clip, host_clip},
        {{"Compress", {"embedding", "reshape"}, "any axis or flattened; the condition on the host"}, op_compress, op_compress},
        {{"Concat", {"concat"}, "any axis"}, op_concat, host_concat},
        {{"Constant", {}, "tensor, float(s) and int(s) values (host)"}, HOST_ONLY, op_constant, check_constant},
        {{"ConstantOfShape", {}, "host"}, HOST_ONLY, op_constant_of_shape},
        {{"Conv", {"conv2d", "concat", "reshape"}, "2-D and 1-D, groups, dilations, strides, pads (asymmetric too), auto_pad"}, op_conv, nullptr, check_conv},
        {{"ConvTranspose", {"conv2d", "concat", "slice", "reshape", "permute", "embedding"}, "2-D and 1-D; strides, pads, dilations, group, output_padding, output_shape, auto_pad"}, op_conv_transpose, nullptr, check_conv},
        {{"Cos", {}, "on constants (host: positional encodings)"}, HOST_ONLY, host_unary_op},
        {{"CumSum", {"concat", "slice", "add"}, "exclusive, reverse; log2(n) shifted adds (integers on the host: position ids)"}, op_cumsum, host_cumsum},
        {{"DepthToSpace", {"reshape", "permute"}, "DCR and CRD"}, op_depth_space, nullptr},
        {{"Div", {"div", "div_scalar", "reciprocal"}, "broadcasting; x / constant runs as div_scalar, constant / x as reciprocal"}, op_binary, host_binary_op},
        {{"Dropout", {"dropout"}, "ratio and training_mode; identity in eval"}, op_dropout, op_identity},
        {{"Einsum", {"matmul", "permute", "reshape", "sum"}, "any equation without a repeated label in one operand (ellipsis, implicit output); one batched matmul per contraction"}, op_einsum, nullptr, check_einsum},
        {{"Elu", {"neg", "relu", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha; composed of registry ops"}, op_activation, nullptr},
        {{"Equal", {}, "bools, on the host (float data read there)"}, host_compare, host_compare},
        {{"Erf", {"erf"}, "elementwise"}, op_unary, host_unary_op},
        {{"Exp", {"exp"}, "elementwise"}, op_unary, host_unary_op},
        {{"Expand", {"add"}, "broadcast to a shape (an add of zeros)"}, op_expand, host_expand},
        {{"EyeLike", {}, "k, dtype (host)"}, host_eye_like, host_eye_like},
        {{"Flatten", {"reshape"}, "any axis"}, op_reshape_like, host_shape_op},
        {{"Floor", {}, "on the host (float data read there: no gradient, as in the framework)"}, host_unary_op, host_unary_op},
        {{"GRU", {"linear", "slice", "reshape", "sigmoid", "tanh", "relu", "mul_scalar", "add_scalar", "clamp", "mul", "add", "sub", "concat", "where", "masked_fill", "embedding", "permute"}, "forward, reverse, bidirectional; layout 0 and 1; initial_h; sequence_lens; linear_before_reset 0 and 1; activations Sigmoid, Tanh, Relu, HardSigmoid"}, op_recurrent, nullptr, check_recurrent},
        {{"Gather", {"embedding", "slice"}, "any axis; a table lookup (embedding) or, for one index, a slice"}, op_gather, host_gather},
        {{"GatherElements", {"embedding", "reshape"}, "any axis; indices on the host"}, op_gather_elements, op_gather_elements},
        {{"GatherND", {"embedding", "reshape"}, "batch_dims; indices on the host"}, op_gather_nd, op_gather_nd},
        {{"Gelu", {"gelu"}, "approximate none and tanh"}, op_gelu, nullptr, check_gelu},
        {{"Gemm", {"linear", "matmul"}, "alpha, beta, transA, transB; A B^T + c is one linear"}, op_gemm, nullptr},
        {{"GlobalAveragePool", {"adaptive_avg_pool2d"}, "2-D and 1-D"}, op_pool, nullptr, check_pool},
        {{"GlobalMaxPool", {"max"}, "2-D and 1-D"}, op_pool, nullptr, check_pool},
        {{"Greater", {}, "bools, on the host (float data read there)"}, host_compare, host_compare},
        {{"GreaterOrEqual", {}, "bools, on the host (float data read there)"}, host_compare, host_compare},
        {{"Hardmax", {}, "any axis (opset < 13: the 2-D coercion); on the host (no gradient)"}, op_hardmax, op_hardmax},
        {{"HardSigmoid", {"hardsigmoid"}, "alpha 1/6, beta 0.5 as hardsigmoid; other alpha, beta as mul, add, clamp"}, op_hard_sigmoid, nullptr},
        {{"HardSwish", {"hardswish"}, "elementwise"}, op_unary, nullptr},
        {{"Identity", {}, "passes its input on"}, op_identity, op_identity},
        {{"InstanceNormalization", {"mean", "sub", "square", "add_scalar", "rsqrt", "mul", "reshape", "add"}, "over the spatial dims, per sample and channel; composed of registry ops"}, op_instance_norm, nullptr},
        {{"IsInf", {}, "detect_negative, detect_positive; bools, on the host (float data read there)"}, host_unary_op, host_unary_op},
        {{"IsNaN", {}, "bools, on the host (float data read there)"}, host_unary_op, host_unary_op},
        {{"LRN", {"square", "reshape", "concat", "avg_pool2d", "mul_scalar", "add_scalar", "pow", "mul"}, "size, alpha, beta, bias; over channels"}, op_lrn, nullptr},
        {{"LSTM", {"linear", "slice", "reshape", "sigmoid", "tanh", "relu", "mul_scalar", "add_scalar", "clamp", "mul", "add", "sub", "concat", "where", "masked_fill", "embedding", "permute"}, "forward, reverse, bidirectional; layout 0 and 1; initial_h, initial_c; sequence_lens; peepholes; activations Sigmoid, Tanh, Relu, HardSigmoid"}, op_recurrent, nullptr, check_recurrent},
        {{"LeakyRelu", {"relu", "neg", "mul_scalar", "sub"}, "alpha; relu(x) - alpha relu(-x)"}, op_activation, nullptr},
        {{"LayerNormalization", {"layer_norm"}, "any axis (normalised over the trailing dims), scale and optional bias"}, op_layer_norm, nullptr},
        {{"Less", {}, "bools, on the host (float data read there)"}, host_compare, host_compare},
        {{"LessOrEqual", {}, "bools, on the host (float data read there)"}, host_compare, host_compare},
        {{"Log", {"log"}, "elementwise"}, op_unary, host_unary_op},
        {{"LogSoftmax", {"log_softmax"}, "any axis (opset < 13: the 2-D coercion)"}, op_softmax, nullptr},
        {{"MatMul", {"matmul"}, "numpy.matmul semantics, batched"}, op_matmul, nullptr},
        {{"Max", {"where"}, "any number of inputs, broadcasting; the larger chosen on the host from the values, taken with where"}, op_minmax, host_binary_op},
        {{"MaxPool", {"max_pool2d", "concat", "slice", "max", "reshape"}, "2-D and 1-D; pads (asymmetric too), auto_pad, strides, ceil_mode, dilations; the Indices output (host), storage_order"}, op_pool, host_max_pool, check_pool},
        {{"Mean", {"add", "div_scalar"}, "any number of inputs, broadcasting"}, op_variadic, host_variadic},
        {{"MeanVarianceNormalization", {"mean", "sub", "square", "add_scalar", "sqrt", "div"}, "axes; composed of registry ops"}, op_mvn, nullptr},
        {{"Min", {"where"}, "any number of inputs, broadcasting; the smaller chosen on the host from the values, taken with where"}, op_minmax, host_binary_op},
        {{"Mod", {"mul", "sub"}, "fmod 0 and 1; integers on the host; floats x - q y, the quotient q from the host"}, op_mod, host_binary_op},
        {{"Mul", {"mul", "mul_scalar"}, "broadcasting; a one-element constant operand runs as mul_scalar"}, op_binary, host_binary_op},
        {{"Neg", {"neg"}, "elementwise"}, op_unary, host_unary_op},
        {{"NegativeLogLikelihoodLoss", {"reshape", "embedding", "mul", "neg", "sum", "div", "div_scalar"}, "reduction none, sum, mean; weight; ignore_index; [N, C, d...]"}, op_nll_loss, nullptr, check_loss},
        {{"NonZero", {}, "on the host (float data read there)"}, host_non_zero, host_non_zero},
        {{"Not", {}, "bools (host)"}, HOST_ONLY, host_unary_op},
        {{"OneHot", {}, "axis; negative indices; on the host"}, host_one_hot, host_one_hot},
        {{"Or", {}, "bools (host)"}, host_compare, host_compare},
        {{"PRelu", {"relu", "neg", "mul", "sub"}, "a learnt slope (broadcast); relu(x) - slope relu(-x)"}, op_activation, nullptr},
        {{"Pad", {"concat", "slice"}, "constant (any value), reflect and edge; negative pads crop"}, op_pad, nullptr, check_pad},
        {{"Pow", {"pow", "abs", "log", "mul", "exp", "where"}, "a constant one-element exponent as pow; a tensor of exponents as exp(y log|x|) with std::pow's signs"}, op_pow, host_binary_op},
        {{"RNN", {"linear", "slice", "reshape", "sigmoid", "tanh", "relu", "mul_scalar", "add_scalar", "clamp", "mul", "add", "sub", "concat", "where", "masked_fill", "embedding", "permute"}, "forward, reverse, bidirectional; layout 0 and 1; initial_h; sequence_lens; activations Tanh, Relu, Sigmoid, HardSigmoid"}, op_recurrent, nullptr, check_recurrent},
        {{"Range", {}, "on the host (on sizes computed from the data too)"}, HOST_ONLY, op_range},
        {{"Reciprocal", {"reciprocal"}, "elementwise"}, op_unary, host_unary_op},
        {{"ReduceL1", {"abs", "sum"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"ReduceL2", {"square", "sum", "sqrt"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"ReduceLogSum", {"sum", "log"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"ReduceLogSumExp", {"max", "sub", "exp", "sum", "log", "add"}, "axes, keepdims; shifted by the maximum"}, op_reduce, host_reduce},
        {{"ReduceMax", {"max"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"ReduceMean", {"mean"}, "axes (attribute before opset 18, input since), keepdims, noop_with_empty_axes"}, op_reduce, host_reduce},
        {{"ReduceMin", {"neg", "max"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"ReduceProd", {"permute", "reshape", "slice", "mul", "concat"}, "axes, keepdims; products of halves"}, op_reduce, host_reduce},
        {{"ReduceSum", {"sum"}, "axes (attribute before opset 13, input since), keepdims, noop_with_empty_axes"}, op_reduce, host_reduce},
        {{"ReduceSumSquare", {"square", "sum"}, "axes, keepdims"}, op_reduce, host_reduce},
        {{"Relu", {"relu"}, "elementwise"}, op_unary, host_unary_op},
        {{"Reshape", {"reshape"}, "0 (copy) and -1 (infer), allowzero"}, op_reshape_like, host_shape_op},
        {{"Resize", {"reshape", "add", "embedding", "permute"}, "mode nearest, any scales or sizes, every coordinate_transformation_mode but tf_crop_and_resize, every nearest_mode"}, op_resize, nullptr, check_resize},
        {{"ReverseSequence", {"embedding", "reshape"}, "time_axis, batch_axis; sequence_lens on the host"}, op_reverse_sequence, op_reverse_sequence},
        {{"Round", {}, "half to even, on the host (float data read there: no gradient, as in the framework)"}, host_unary_op, host_unary_op},
        {{"Scatter", {"embedding", "concat", "where", "reshape"}, "any axis (ScatterElements before opset 11)"}, op_scatter_elements, op_scatter_elements, check_scatter},
        {{"ScatterElements", {"embedding", "concat", "where", "add", "mul", "reshape"}, "any axis; reduction none, add, mul; indices on the host"}, op_scatter_elements, op_scatter_elements, check_scatter},
        {{"ScatterND", {"embedding", "concat", "where", "add", "mul", "reshape"}, "reduction none, add, mul; indices on the host"}, op_scatter_nd, op_scatter_nd, check_scatter},
        {{"Selu", {"neg", "relu", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha, gamma; composed of registry ops"}, op_activation, nullptr},
        {{"Shape", {}, "start and end (host)"}, op_shape, op_shape},
        {{"Shrink", {"add", "masked_fill"}, "lambd, bias; the masks from the host"}, op_threshold, nullptr},
        {{"Sigmoid", {"sigmoid"}, "elementwise"}, op_unary, host_unary_op},
        {{"Sign", {}, "on the host (float data read there: no gradient, as in the framework)"}, host_unary_op, host_unary_op},
        {{"Sin", {}, "on constants (host: positional encodings)"}, HOST_ONLY, host_unary_op},
        {{"Size", {}, "host"}, op_shape, op_shape},
        {{"Slice", {"slice", "embedding"}, "any axes and steps; a negative step (torch.flip) gathers"}, op_slice, host_slice},
        {{"SoftmaxCrossEntropyLoss", {"log_softmax", "reshape", "embedding", "mul", "neg", "sum", "div", "div_scalar"}, "reduction none, sum, mean; weights; ignore_index; the log_prob output"}, op_nll_loss, nullptr, check_loss},
        {{"Softplus", {"relu", "abs", "neg", "exp", "add_scalar", "log", "add"}, "relu(x) + log(1 + exp(-|x|))"}, op_activation, nullptr},
        {{"Softsign", {"abs", "add_scalar", "div"}, "x / (1 + |x|)"}, op_activation, nullptr},
        {{"Softmax", {"softmax"}, "any axis (opset < 13: the 2-D coercion)"}, op_softmax, nullptr},
        {{"SpaceToDepth", {"reshape", "permute"}, "blocksize"}, op_depth_space, nullptr},
        {{"Split", {"slice"}, "split sizes (attribute or input) or equal parts"}, op_split, nullptr},
        {{"Sqrt", {"sqrt"}, "elementwise"}, op_unary, host_unary_op},
        {{"Squeeze", {"reshape"}, "axes (attribute before opset 13, input since)"}, op_reshape_like, host_shape_op},
        {{"Sub", {"sub", "sub_scalar", "neg", "add_scalar"}, "broadcasting; x - constant runs as sub_scalar, constant - x as neg and add_scalar"}, op_binary, host_binary_op},
        {{"Sum", {"add"}, "any number of inputs, broadcasting"}, op_variadic, host_variadic},
        {{"Tanh", {"tanh"}, "elementwise"}, op_unary, host_unary_op},
        {{"ThresholdedRelu", {"masked_fill"}, "alpha; the mask from the host"}, op_threshold, nullptr},
        {{"Tile", {"concat", "slice"}, "constant repeats"}, op_tile, nullptr},
        {{"TopK", {"embedding", "reshape"}, "axis, largest, sorted; the values gathered (with a gradient), the indices from the host"}, op_topk, host_topk},
        {{"Transpose", {"permute"}, "any perm"}, op_transpose, host_transpose},
        {{"Trilu", {}, "upper and lower, k; on constants (host: causal masks)"}, HOST_ONLY, host_trilu},
        {{"Unique", {"embedding", "reshape", "permute"}, "sorted or not, axis; Y gathered from X (with a gradient), indices, inverse_indices and counts on the host"}, op_unique, op_unique},
        {{"Unsqueeze", {"reshape"}, "axes (attribute before opset 13, input since)"}, op_reshape_like, host_shape_op},
        {{"Upsample", {"reshape", "add", "embedding", "permute"}, "mode nearest, any scales"}, op_resize, nullptr, check_resize},
        {{"Where", {"where", "masked_fill"}, "a bool condition, all three operands broadcast; a constant fill value runs as masked_fill"}, op_where, host_where},
        {{"Xor", {}, "bools (host)"}, host_compare, host_compare},
    };
    std::sort(t.begin(), t.end(), [](const OpDef& a, const OpDef& b) { return a.info.op_type < b.info.op_type; });
    return t;
  }();
  return table;
}
#undef HOST_ONLY

}  // namespace

const OpDef* onnx_impl::find_def(std::string_view op_type) {
  for (const OpDef& d : op_table())
    if (d.info.op_type == op_type) return &d;
  return nullptr;
}

namespace {

// ---- names ----

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ? c : '_';
  // No empty components: no leading, trailing or doubled dots.
  std::string clean;
  for (char c : out) {
    if (c == '.' && (clean.empty() || clean.back() == '.')) continue;
    clean += c;
  }
  while (!clean.empty() && clean.back() == '.') clean.pop_back();
  return clean.empty() ? "node" : clean;
}

// "/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1": PyTorch's scopes repeat the parent's
// path in a child's name ("layer1", then "layer1.0").
std::string scope_path(const std::string& node_name) {
  if (node_name.size() < 2 || node_name[0] != '/') return "";
  std::vector<std::string> parts;
  std::size_t at = 1;
  while (true) {
    const std::size_t next = node_name.find('/', at);
    if (next == std::string::npos) break;
    parts.push_back(node_name.substr(at, next - at));
    at = next + 1;
  }
  std::string path;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!path.empty() && p.rfind(path + ".", 0) == 0) path = p;
    else path += (path.empty() ? "" : ".") + p;
  }
  return path.empty() ? "" : sanitize(path);
}

bool is_weight_slot(const Node& n, std::size_t k) {
  const std::string& op = n.op_type;
  if (op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "LayerNormalization") return k >= 1;
  if (op == "BatchNormalization") return k == 1 || k == 2;
  if (op == "MatMul") return true;
  if (op == "Gather") return k == 0;
  if (op == "LSTM" || op == "GRU" || op == "RNN") return k == 1 || k == 2 || k == 3 || k == 7;
  return false;
}

}  // namespace

// ---- public ----

const std::vector<OnnxOpInfo>& onnx_ops() {
  static const std::vector<OnnxOpInfo> infos = [] {
    std::vector<OnnxOpInfo> out;
    for (const OpDef& d : op_table()) out.push_back(d.info);
    return out;
  }();
  return infos;
}

const OnnxOpInfo* find_onnx_op(std::string_view op_type) {
  const OpDef* d = find_def(op_type);
  return d ? &d->info : nullptr;
}

// onnx_refusal of a node of `g`, its own errors (a wrongly typed attribute: NodeAttrs::fail
// names the node) naming the file too.
std::optional<OnnxRefusal> refusal_in(const Graph& g, const Node& n);

std::optional<OnnxRefusal> onnx_refusal(const Node& n) {
  const OpDef* d = n.domain.empty() ? find_def(n.op_type) : nullptr;
  if (!d || !d->check) return std::nullopt;
  return d->check(NodeAttrs{n});
}

std::optional<OnnxRefusal> refusal_in(const Graph& g, const Node& n) {
  try {
    return onnx_refusal(n);
  } catch (const OnnxError& e) {
    const std::string what = e.what();
    if (what.rfind(g.path + ": ", 0) == 0) throw;
    throw OnnxError(g.path + ": " + what);
  }
}

std::string refusal_message(const Node& n, const OnnxRefusal& r) {
  return n.label() + ": attribute \"" + r.attribute + "\" is not supported: " + r.reason + "; " + r.fix;
}

InitializerRole initializer_role(const Graph& g, const std::string& name) {
  const Array& a = g.initializers.at(name);
  if (a.integer()) return InitializerRole::constant;
  bool weight = false, running = false, used = false, data = false;
  for (const Node& n : g.nodes)
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] != name) continue;
      used = true;
      if (n.op_type == "BatchNormalization" && (k == 3 || k == 4)) running = true;
      else if (is_weight_slot(n, k)) weight = true;
      if (!is_attribute_input(n, k)) data = true;
    }
  if (running) return InitializerRole::buffer;
  // Unused, or only read as an attribute (Resize's scales, Clip's bounds, a Pad value).
  if (!used || !data) return InitializerRole::constant;
  if (weight || a.numel() > 1) return InitializerRole::parameter;
  return InitializerRole::constant;
}

std::string module_path_of(const Graph& g, const Node& n) {
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    const std::string& in = n.inputs[k];
    if (in.empty() || !g.initializers.count(in) || initializer_role(g, in) == InitializerRole::constant) continue;
    if (in.find("::") != std::string::npos) continue;  // an exporter's folded constant: no layer name
    const std::size_t dot = in.rfind('.');
    if (dot != std::string::npos && dot > 0) return sanitize(in.substr(0, dot));
  }
  const std::string scoped = scope_path(n.name);
  if (!scoped.empty()) {
    // Ops at the top of a PyTorch graph ("/Flatten") run in a module of their own name.
    return scoped;
  }
  std::string own = n.name;
  if (!own.empty() && own[0] == '/') own = own.substr(1);
  std::replace(own.begin(), own.end(), '.', '_');
  std::replace(own.begin(), own.end(), '/', '_');
  return sanitize(own);
}

namespace {

OnnxModel::OnnxModel(std::shared_ptr<const Graph> g, std::string output, std::uint64_t seed)
    : Scope("Model:" + (g->graph_name.empty() ? std::string("onnx") : g->graph_name)),
      g_(std::move(g)),
      output_(std::move(output)),
      gen_(seed) {
  const Graph& graph = *g_;
  // Every unsupported op type at once, with the first node of each.
  std::map<std::string, std::pair<int, const Node*>> unsupported;
  for (const Node& n : graph.nodes) {
    if (!n.domain.empty() || !find_def(n.op_type)) {
      auto& u = unsupported[n.op_type + (n.domain.empty() ? "" : " (domain " + n.domain + ")")];
      if (!u.second) u.second = &n;
      ++u.first;
    }
  }
  if (!unsupported.empty()) {
    const Node& first = *unsupported.begin()->second.second;
    std::string all;
    for (const auto& [type, use] : unsupported) all += (all.empty() ? "" : ", ") + type + " x" + std::to_string(use.first);
    throw OnnxError(graph.path + ": " + first.label() + " is not supported by ampcheck's importer (unsupported op types: " +
                    all + "); `ampcheck ops --onnx` lists what is, docs/onnx.md what each covers");
  }
  // Nodes refused for an attribute, by the check `ops --onnx` shows: the first, and how many.
  const Node* refused = nullptr;
  OnnxRefusal why;
  int others = 0;
  for (const Node& n : graph.nodes)
    if (auto r = refusal_in(graph, n)) {
      if (refused) {
        ++others;
        continue;
      }
      refused = &n;
      why = *r;
    }
  if (refused)
    throw OnnxError(graph.path + ": " + refusal_message(*refused, why) +
                    (others ? " (and " + std::to_string(others) + " other node(s): `ampcheck ops --onnx` lists them)" : ""));
  if (output_.empty()) output_ = graph.outputs.empty() ? graph.nodes.back().outputs.at(0) : graph.outputs[0].name;
  bool found = false;
  for (const Node& n : graph.nodes)
    for (const std::string& o : n.outputs) found = found || o == output_;
  if (!found) {
    std::string names;
    for (const auto& v : graph.outputs) names += (names.empty() ? "" : ", ") + ("\"" + v.name + "\"");
    throw OnnxError(graph.path + ": no node computes \"" + output_ + "\"; the graph's outputs: " + names);
  }
  for (const Node& n : graph.nodes)
    for (const std::string& i : n.inputs) consumed_.insert(i);
  consumed_.insert(output_);
  for (const auto& o : graph.outputs) consumed_.insert(o.name);

  // The layers the modules are, from the op that reads their weights: normalisation
  // layers keep fp32 parameters at O2 (amp::decorate's keep_norm_fp32).
  for (const Node& n : graph.nodes) {
    const char* type = n.op_type == "BatchNormalization"   ? "BatchNorm2d"
                       : n.op_type == "LayerNormalization" ? "LayerNorm"
                       : n.op_type == "Conv"               ? "Conv2d"
                       : n.op_type == "Gemm"               ? "Linear"
                                                           : nullptr;
    if (type) layer_types_.emplace(module_path_of(graph, n), type);
  }
  // Parameters and buffers in the modules their names give; constants stay on the host.
  for (const std::string& name : graph.initializer_order) {
    const Array& a = graph.initializers.at(name);
    const InitializerRole role = initializer_role(graph, name);
    if (role == InitializerRole::constant) {
      auto host = std::make_shared<const Array>(a);
      fixed_.insert(host.get());
      base_[name].host = std::move(host);
      continue;
    }
    std::string module, leaf;
    if (name.find("::") != std::string::npos) {
      // A folded constant (PyTorch's "onnx::MatMul_123"): the module of its first reader.
      for (const Node& n : graph.nodes)
        if (std::find(n.inputs.begin(), n.inputs.end(), name) != n.inputs.end()) {
          module = module_path_of(graph, n);
          break;
        }
      leaf = sanitize(name.substr(name.rfind("::") + 2));
    } else {
      const std::string clean = sanitize(name);
      const std::size_t dot = clean.rfind('.');
      module = dot == std::string::npos ? "" : clean.substr(0, dot);
      leaf = dot == std::string::npos ? clean : clean.substr(dot + 1);
    }
    Scope* s = scope_for(module);
    Tensor t = a.to_tensor();
    if (!is_floating(t.dtype())) continue;
    base_[name].t = role == InitializerRole::parameter ? s->add_parameter(leaf, t) : s->add_buffer(leaf, t);
  }
  for (const Node& n : graph.nodes) steps_.push_back({&n, find_def(n.op_type), scope_for(module_path_of(graph, n))});
}

Scope* OnnxModel::scope_for(const std::string& path) {
  Scope* s = this;
  std::size_t at = 0;
  while (at < path.size()) {
    const std::size_t dot = path.find('.', at);
    const std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    const auto type = layer_types_.find(path.substr(0, dot));
    s = s->child(part, type == layer_types_.end() ? "Module" : type->second);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return s;
}

Tensor OnnxModel::forward(const Tensor& x) {
  if (g_->inputs.size() != 1 + side_.size()) {
    if (g_->inputs.empty()) throw OnnxError(g_->path + ": the graph has no data input");
    std::string names;
    for (const auto& v : g_->inputs) names += (names.empty() ? "" : ", ") + ("\"" + v.name + "\"");
    throw OnnxError(g_->path + ": the graph takes " + std::to_string(g_->inputs.size()) + " data inputs (" + names +
                    "); give each as an array of its name in the data (docs/onnx.md)");
  }
  std::vector<Tensor> inputs = {x};
  inputs.insert(inputs.end(), side_.begin(), side_.end());
  return run(inputs, {output_}).front();
}

std::vector<Tensor> OnnxModel::run(const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                                   const std::vector<bool>& constant) {
  if (inputs.size() != g_->inputs.size())
    throw OnnxError(g_->path + ": the graph takes " + std::to_string(g_->inputs.size()) + " inputs, " +
                    std::to_string(inputs.size()) + " given");
  std::unordered_map<std::string, Value> values = base_;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    // Integer inputs (token ids, masks, sizes) have no gradient: they live on the host, where
    // the shape arithmetic reads them, and become tensors where an op takes them.
    const bool host = inputs[k].dtype() == DType::i64 || (k < constant.size() && constant[k]);
    if (host) values[g_->inputs[k].name].host = std::make_shared<const Array>(Array::of_tensor(inputs[k]));
    else values[g_->inputs[k].name].t = inputs[k];
  }
  const Device device = inputs.empty() ? Device::cpu : inputs[0].device();
  for (const Step& step : steps_) {
    const Node& n = *step.node;
    Exec e{{n}, {}, {}, *this, device};
    bool all_host = true;
    for (const std::string& in : n.inputs) {
      Value v;
      if (!in.empty()) v = values.at(in);
      all_host = all_host && (!v.defined() || v.host);
      e.in.push_back(std::move(v));
    }
    try {
      if (all_host && step.def->host) {
        step.def->host(e);
      } else {
        if (!step.def->tensor)
          e.fail("is not supported on the model's data: it runs only on constants and shapes (on the host)");
        step.scope->call([&] {
          step.def->tensor(e);
          return Tensor();
        });
      }
    } catch (const OnnxError& ex) {
      // A node's own refusal (NodeAttrs::fail) names the node; the file is named here, once.
      const std::string what = ex.what();
      if (what.rfind(g_->path + ": ", 0) == 0) throw;
      throw OnnxError(g_->path + ": " + what);
    } catch (const std::exception& ex) {
      std::string what = ex.what();
      if (what.find("floating-point tensor") != std::string::npos)
        what = "integer tensors are not supported here (ampcheck's ops compute in floating point): " + what;
      std::string shapes;
      for (std::size_t k = 0; k < e.in.size(); ++k)
        if (e.in[k].defined())
          shapes += (shapes.empty() ? "" : ", ") + ("\"" + n.inputs[k] + "\" " + to_string(e.shape_of(k)));
      throw OnnxError(g_->path + ": " + n.label() + " fails on its inputs (" + shapes + "): " + what);
    }
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      if (k >= e.out.size() || !e.out[k].defined()) {
        // The graph reads an output the op does not give (a node declaring more outputs than
        // its op has) or one ampcheck does not compute: the file's defect or a missing feature.
        if (consumed_.count(n.outputs[k]))
          throw OnnxError(g_->path + ": " + n.label() + ": the graph reads its output " + std::to_string(k) + " (\"" +
                          n.outputs[k] + "\"), but " +
                          (k >= e.out.size() ? n.op_type + " gives " + std::to_string(e.out.size()) + " output" +
                                                   (e.out.size() == 1 ? "" : "s") + "; check the exporter's graph"
                                             : "ampcheck does not compute that output of " + n.op_type +
                                                   "; choose an output that does not depend on it (--output)"));
        continue;
      }
      values[n.outputs[k]] = std::move(e.out[k]);
    }
  }
  std::vector<Tensor> out;
  for (const std::string& name : outputs) {
    auto it = values.find(name);
    if (it == values.end() || !it->second.defined()) throw OnnxError(g_->path + ": no value \"" + name + "\" was computed");
    out.push_back(it->second.t.defined() ? it->second.t : host_tensor(it->second.host, device));
  }
  return out;
}

}  // namespace

std::shared_ptr<nn::Module> build_onnx(std::shared_ptr<const Graph> graph, const std::string& output, std::uint64_t seed) {
  return std::make_shared<OnnxModel>(std::move(graph), output, seed);
}

void set_side_inputs(nn::Module& model, std::vector<Tensor> more) {
  auto* m = dynamic_cast<OnnxModel*>(&model);
  if (!m) throw std::logic_error("set_side_inputs: not a model built by build_onnx");
  m->set_side(std::move(more));
}

std::vector<Tensor> run_onnx(nn::Module& model, const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                             const std::vector<bool>& constant) {
  auto* m = dynamic_cast<OnnxModel*>(&model);
  if (!m) throw std::logic_error("run_onnx: not a model built by build_onnx");
  return m->run(inputs, outputs, constant);
}

bool is_framework_module(const Graph& g, const std::string& path) {
  for (const Node& n : g.nodes) {
    if (scope_path(n.name) == path) return true;
    for (const std::string& in : n.inputs)
      if (g.initializers.count(in) && in.find("::") == std::string::npos && in.rfind('.') != std::string::npos &&
          sanitize(in.substr(0, in.rfind('.'))) == path)
        return true;
  }
  return false;
}

std::vector<const Node*> nodes_running(const Graph& g, const std::string& path, std::string_view op) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes) {
    const OnnxOpInfo* info = n.domain.empty() ? find_onnx_op(n.op_type) : nullptr;
    if (!info || module_path_of(g, n) != path) continue;
    if (std::find(info->runs.begin(), info->runs.end(), op) != info->runs.end()) out.push_back(&n);
  }
  return out;
}

std::string producer_framework(const Graph& g) {
  const auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  const std::string p = lower(g.producer);
  if (p.find("torch") != std::string::npos) return "pytorch";
  if (p.find("paddle") != std::string::npos) return "paddle";
  if (p.find("tf2onnx") != std::string::npos || p.find("keras") != std::string::npos) return "tensorflow";
  // paddle2onnx 2.x leaves producer_name empty; its graph is "PaddlePaddle Graph in PIR
  // mode" and the initializers it adds are "p2o.*".
  if (lower(g.graph_name).find("paddle") != std::string::npos) return "paddle";
  for (const std::string& name : g.initializer_order)
    if (name.rfind("p2o.", 0) == 0) return "paddle";
  return "";
}

bool is_attribute_input(const Node& n, std::size_t k) {
  const std::string& op = n.op_type;
  if (op == "Range" || op == "ConstantOfShape") return true;
  if (op == "Clip" || op == "Dropout") return k >= 1;
  if (op == "Reshape" || op == "Expand" || op == "Split" || op == "Squeeze" || op == "Unsqueeze" ||
      op.rfind("Reduce", 0) == 0)
    return k == 1;
  if (op == "Slice" || op == "Pad") return k >= 1 && !(op == "Pad" && k == 0);
  if (op == "Tile" || op == "CumSum" || op == "Trilu") return k == 1;
  if (op == "Resize" || op == "Upsample") return k >= 1;
  if (op == "Pow" || op == "TopK") return k == 1;
  if (op == "OneHot") return k >= 1;
  return false;
}

std::vector<OnnxOpUse> onnx_op_uses(const Graph& g) {
  std::vector<OnnxOpUse> out;
  std::map<std::string, std::size_t> at;
  for (const Node& n : g.nodes) {
    const std::string type = n.op_type + (n.domain.empty() ? "" : " (domain " + n.domain + ")");
    auto [it, added] = at.emplace(type, out.size());
    if (added) out.push_back({type, 0, n.domain.empty() ? find_onnx_op(n.op_type) : nullptr, {}, {}});
    OnnxOpUse& u = out[it->second];
    ++u.count;
    if (auto r = refusal_in(g, n)) u.refused.emplace_back(&n, *r);
    const std::string m = module_path_of(g, n);
    if (u.modules.size() < 3 && std::find(u.modules.begin(), u.modules.end(), m) == u.modules.end()) u.modules.push_back(m);
  }
  std::sort(out.begin(), out.end(), [](const OnnxOpUse& a, const OnnxOpUse& b) { return a.op_type < b.op_type; });
  return out;
}

}  // namespace ampcheck::models
