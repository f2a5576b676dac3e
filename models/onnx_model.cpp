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

namespace ampcheck::models {
namespace {

using onnx_file::Attribute;
using onnx_file::Graph;
using onnx_file::Node;
using onnx_file::OnnxError;

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

// ---- values: a tensor of the model, or a host array (shapes, constants, indices) ----

struct Value {
  Tensor t;
  std::shared_ptr<const Array> host;
  bool defined() const { return t.defined() || host != nullptr; }
};

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

// For each element of `out` (row-major), the index of the element of `in` it reads when
// `in` broadcasts to `out`.
std::vector<std::int64_t> broadcast_index(const Shape& out, const Shape& in) {
  const std::int64_t n = numel(out);
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

// Copies elements `idx` of `a` into a new array of `shape`.
Array gather_elements(const Array& a, const Shape& shape, const std::vector<std::int64_t>& idx) {
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

// The ONNX elem type names of the Cast `to` attribute.
struct CastTarget {
  bool integer;
  DType dtype;  // floats: f16, bf16, f32, f64; integers: i64
  std::string stored;
};
CastTarget cast_target(std::int64_t to) {
  switch (to) {
    case 1: return {false, DType::f32, "float32"};
    case 10: return {false, DType::f16, "float16"};
    case 11: return {false, DType::f64, "float64"};
    case 16: return {false, DType::bf16, "bfloat16"};
    case 9: return {true, DType::i64, "bool"};
    case 2: return {true, DType::i64, "uint8"};
    case 3: return {true, DType::i64, "int8"};
    case 4: return {true, DType::i64, "uint16"};
    case 5: return {true, DType::i64, "int16"};
    case 6: return {true, DType::i64, "int32"};
    case 7: return {true, DType::i64, "int64"};
    case 12: return {true, DType::i64, "uint32"};
    case 13: return {true, DType::i64, "uint64"};
    default: throw std::invalid_argument("Cast to ONNX type " + std::to_string(to) + " is not supported");
  }
}

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

class OnnxModel;

struct Exec {
  const Node& node;
  std::vector<Value> in;
  std::vector<Value> out;
  OnnxModel& model;
  Device device;

  [[noreturn]] void fail(const std::string& msg) const { throw OnnxError(node.label() + ": " + msg); }
  bool has(std::size_t i) const { return i < in.size() && in[i].defined(); }
  bool is_host(std::size_t i) const { return has(i) && in[i].host != nullptr; }
  const Array& host(std::size_t i, std::string_view what) const {
    if (!has(i)) fail("input " + std::to_string(i) + " (" + std::string(what) + ") is missing");
    if (!in[i].host)
      fail("input " + std::to_string(i) + " (" + std::string(what) + ", \"" + node.inputs[i] +
           "\") must be known before the run: a constant, an initializer or computed from shapes, not from the data");
    return *in[i].host;
  }
  Tensor tensor(std::size_t i) const;
  // A one-element host input's value.
  std::optional<double> scalar(std::size_t i) const {
    if (is_host(i) && in[i].host->numel() == 1 && !in[i].host->integer()) return in[i].host->at(0);
    return std::nullopt;
  }
  const Attribute* attr(const std::string& name) const {
    auto it = node.attributes.find(name);
    return it == node.attributes.end() ? nullptr : &it->second;
  }
  std::int64_t attr_i(const std::string& name, std::int64_t fallback) const {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (a->kind != Attribute::Kind::i) fail("attribute \"" + name + "\" must be an int");
    return a->i;
  }
  double attr_f(const std::string& name, double fallback) const {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (a->kind != Attribute::Kind::f && a->kind != Attribute::Kind::i) fail("attribute \"" + name + "\" must be a float");
    return a->kind == Attribute::Kind::f ? a->f : static_cast<double>(a->i);
  }
  std::string attr_s(const std::string& name, const std::string& fallback) const {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (a->kind != Attribute::Kind::s) fail("attribute \"" + name + "\" must be a string");
    return a->s;
  }
  std::optional<std::vector<std::int64_t>> attr_ints(const std::string& name) const {
    const Attribute* a = attr(name);
    if (!a) return std::nullopt;
    if (a->kind != Attribute::Kind::ints) fail("attribute \"" + name + "\" must be a list of ints");
    return a->ints;
  }
  // An int list given as an attribute (older opsets) or as a host input (newer ones).
  std::optional<std::vector<std::int64_t>> ints_from(const std::string& attr_name, std::size_t input,
                                                     std::int64_t since_opset) const {
    if (node.opset < since_opset) return attr_ints(attr_name);
    if (!has(input)) return std::nullopt;
    const Array& a = host(input, attr_name);
    std::vector<std::int64_t> v;
    for (std::int64_t k = 0; k < a.numel(); ++k) v.push_back(a.int_at(k));
    return v;
  }
  void set(std::size_t k, Tensor t) {
    if (out.size() <= k) out.resize(k + 1);
    out[k].t = std::move(t);
  }
  void set(std::size_t k, Array a) {
    if (out.size() <= k) out.resize(k + 1);
    out[k].host = std::make_shared<const Array>(std::move(a));
  }
  // Fails when a node's optional output that the importer does not compute is used.
  void only_outputs(std::size_t n, const std::string& why) const;
  bool training() const;
  Generator& generator() const;
};

using Run = void (*)(Exec&);

struct OpDef {
  OnnxOpInfo info;
  Run tensor;  // with tensors among the inputs; null: always on the host
  Run host;    // every input on the host; null: never on the host
};

class OnnxModel : public Scope {
 public:
  OnnxModel(std::shared_ptr<const Graph> g, std::string output, std::uint64_t seed);
  Tensor forward(const Tensor& x) override;
  void set_side(std::vector<Tensor> more) { side_ = std::move(more); }
  // Every data input in graph order; the values named (graph outputs or any other value).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                          const std::vector<bool>& constant = {});
  bool consumed(const std::string& value) const { return consumed_.count(value) > 0; }
  Generator& generator() { return gen_; }
  Tensor host_tensor(const std::shared_ptr<const Array>& a, Device device) {
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

Tensor Exec::tensor(std::size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  if (in[i].t.defined()) return in[i].t;
  return model.host_tensor(in[i].host, device);
}

void Exec::only_outputs(std::size_t n, const std::string& why) const {
  for (std::size_t k = n; k < node.outputs.size(); ++k)
    if (!node.outputs[k].empty() && model.consumed(node.outputs[k]))
      fail("output " + std::to_string(k) + " (\"" + node.outputs[k] + "\") is read by a later node: " + why);
}
bool Exec::training() const { return model.training(); }
Generator& Exec::generator() const { return model.generator(); }

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
      if (op == "Add") r = x + y;
      else if (op == "Sub") r = x - y;
      else if (op == "Mul") r = x * y;
      else if (op == "Div") {
        if (y == 0) e.fail("integer division by zero in a shape computation");
        r = x / y;
      } else if (op == "Mod") {
        if (y == 0) e.fail("integer modulo by zero in a shape computation");
        r = x % y;
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

void host_unary_op(Exec& e) {
  const Array& a = e.host(0, "X");
  const std::string& op = e.node.op_type;
  Array o = a;
  if (op == "Not") {
    if (!a.integer()) e.fail("Not takes a bool input");
    for (auto& v : o.i) v = v == 0;
    return e.set(0, std::move(o));
  }
  if (a.integer() && (op == "Neg" || op == "Abs" || op == "Identity" || op == "Floor" || op == "Ceil" || op == "Sign")) {
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
    else if (op == "Erf") v = std::erf(v);
    else if (op == "Sin") v = std::sin(v);
    else if (op == "Cos") v = std::cos(v);
    else if (op == "Sign") v = v > 0 ? 1 : v < 0 ? -1 : v;
    else if (op == "Relu") v = v > 0 ? v : 0;
    else if (op == "Sigmoid") v = 1 / (1 + std::exp(-v));
    else if (op == "Tanh") v = std::tanh(v);
    if (o.dtype == DType::f32) v = static_cast<float>(v);
  }
  e.set(0, std::move(o));
}

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
    } else {
      known *= shape[d];
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
Shape shape_of(const Exec& e, std::size_t i) { return e.in[i].t.defined() ? e.in[i].t.shape() : e.in[i].host->shape; }

void op_shape(Exec& e) {
  if (!e.has(0)) e.fail("input 0 is missing");
  const Shape s = shape_of(e, 0);
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
  if (v.integer()) o.i.assign(static_cast<std::size_t>(numel(shape)), v.i[0]);
  else o.f.assign(static_cast<std::size_t>(numel(shape)), v.f[0]);
  e.set(0, std::move(o));
}

void op_range(Exec& e) {
  const Array &s = e.host(0, "start"), &l = e.host(1, "limit"), &d = e.host(2, "delta");
  if (s.integer()) {
    const std::int64_t a = s.int_at(0), b = l.int_at(0), st = d.int_at(0);
    if (st == 0) e.fail("delta is 0");
    std::vector<std::int64_t> v;
    for (std::int64_t x = a; st > 0 ? x < b : x > b; x += st) v.push_back(x);
    return e.set(0, Array::ints({static_cast<std::int64_t>(v.size())}, v));
  }
  const double a = s.at(0), b = l.at(0), st = d.at(0);
  if (st == 0) e.fail("delta is 0");
  const auto n = static_cast<std::int64_t>(std::max(0.0, std::ceil((b - a) / st)));
  std::vector<double> v;
  for (std::int64_t k = 0; k < n; ++k) v.push_back(a + static_cast<double>(k) * st);
  e.set(0, Array::floats({n}, v, s.dtype));
}

Array host_cast(const Exec& e, const Array& a, std::int64_t to) {
  CastTarget t;
  try {
    t = cast_target(to);
  } catch (const std::invalid_argument& x) {
    e.fail(x.what());
  }
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

void host_cast_op(Exec& e) { e.set(0, host_cast(e, e.host(0, "input"), e.attr_i("to", 1))); }

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

// Normalised Slice arguments for one axis.
struct SliceAxis {
  std::int64_t axis, start, end, step;
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
    if (steps[k] <= 0) e.fail("a step of " + std::to_string(steps[k]) + " (reversal) is not supported; steps must be positive");
    auto clampi = [size](std::int64_t v) {
      if (v < 0) v = v < -size ? 0 : v + size;
      return std::min(v, size);
    };
    out.push_back({axis, clampi(starts[k]), clampi(ends[k]), steps[k]});
  }
  return out;
}

void host_slice(Exec& e) {
  Array cur = e.host(0, "data");
  for (const SliceAxis& s : slice_axes(e, cur.shape)) {
    const Shape st = strides_of(cur.shape);
    const std::int64_t count = s.end > s.start ? (s.end - s.start + s.step - 1) / s.step : 0;
    Shape shape = cur.shape;
    shape[static_cast<std::size_t>(s.axis)] = count;
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
    cur = gather_elements(cur, shape, idx);
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
  e.set(0, gather_elements(data, shape, idx));
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
  e.set(0, gather_elements(a, shape, idx));
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
  e.set(0, gather_elements(a, shape, broadcast_index(shape, a.shape)));
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

void op_pow(Exec& e) {
  const auto y = e.scalar(1);
  if (!y || e.is_host(0)) {
    if (e.is_host(1) && e.in[1].host->numel() == 1) {
      e.set(0, pow(e.tensor(0), e.in[1].host->at(0)));
      return;
    }
    e.fail("Pow needs a constant one-element exponent (x ** 2, x ** 0.5); a tensor exponent is not supported");
  }
  e.set(0, pow(e.tensor(0), *y));
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
  const std::string approx = e.attr_s("approximate", "none");
  if (approx != "none" && approx != "tanh") e.fail("approximate \"" + approx + "\" is not \"none\" or \"tanh\"");
  e.set(0, gelu(e.tensor(0), approx == "tanh"));
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

// Symmetric pads of a 2-D window op ([top, left, bottom, right]).
std::array<std::int64_t, 2> pads2(const Exec& e, int spatial) {
  const std::string auto_pad = e.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    e.fail("auto_pad " + auto_pad + " is not supported: export with explicit padding");
  const auto p = e.attr_ints("pads").value_or(std::vector<std::int64_t>(static_cast<std::size_t>(2 * spatial), 0));
  if (static_cast<int>(p.size()) != 2 * spatial) e.fail("pads has " + std::to_string(p.size()) + " values");
  for (int d = 0; d < spatial; ++d)
    if (p[static_cast<std::size_t>(d)] != p[static_cast<std::size_t>(d + spatial)])
      e.fail("asymmetric pads " + fmt_ints(p) + " are not supported (begin and end padding must match)");
  return spatial == 1 ? std::array<std::int64_t, 2>{0, p[0]} : std::array<std::int64_t, 2>{p[0], p[1]};
}

std::array<std::int64_t, 2> pair_attr(const Exec& e, const std::string& name, int spatial, std::int64_t fallback) {
  const auto v = e.attr_ints(name).value_or(std::vector<std::int64_t>(static_cast<std::size_t>(spatial), fallback));
  if (static_cast<int>(v.size()) != spatial) e.fail(name + " has " + std::to_string(v.size()) + " values for " + std::to_string(spatial) + " spatial dims");
  return spatial == 1 ? std::array<std::int64_t, 2>{fallback == 0 ? 0 : 1, v[0]} : std::array<std::int64_t, 2>{v[0], v[1]};
}

// [N, C, L] runs as [N, C, 1, L]; returns the spatial rank (1 or 2).
int spatial_rank(const Exec& e, const Tensor& x) {
  if (x.dim() == 4) return 2;
  if (x.dim() == 3) return 1;
  e.fail("takes [N, C, H, W] (or [N, C, L]), got " + to_string(x.shape()) + "; 3-D convolution and pooling are not supported");
}

void op_conv(Exec& e) {
  Tensor x = e.tensor(0), w = e.tensor(1);
  const int sp = spatial_rank(e, x);
  if (w.dim() != sp + 2) e.fail("weight " + to_string(w.shape()) + " does not match the input " + to_string(x.shape()));
  Conv2dOptions o;
  o.stride = pair_attr(e, "strides", sp, 1);
  o.dilation = pair_attr(e, "dilations", sp, 1);
  o.padding = pads2(e, sp);
  o.groups = e.attr_i("group", 1);
  if (auto k = e.attr_ints("kernel_shape")) {
    for (int d = 0; d < sp; ++d)
      if ((*k)[static_cast<std::size_t>(d)] != w.size(2 + d)) e.fail("kernel_shape does not match the weight");
  }
  if (sp == 1) {
    x = reshape(x, {x.size(0), x.size(1), 1, x.size(2)});
    w = reshape(w, {w.size(0), w.size(1), 1, w.size(2)});
  }
  Tensor y = conv2d(x, w, e.has(2) ? e.tensor(2) : Tensor{}, o);
  if (sp == 1) y = reshape(y, {y.size(0), y.size(1), y.size(3)});
  e.set(0, y);
}

void op_pool(Exec& e) {
  const std::string& op = e.node.op_type;
  Tensor x = e.tensor(0);
  const int sp = spatial_rank(e, x);
  if (sp == 1) x = reshape(x, {x.size(0), x.size(1), 1, x.size(2)});
  Tensor y;
  if (op == "GlobalAveragePool") {
    y = adaptive_avg_pool2d(x, {1, 1});
  } else if (op == "GlobalMaxPool") {
    y = max(x, {2, 3}, true);
  } else {
    if (e.attr_i("ceil_mode", 0) != 0) e.fail("ceil_mode 1 is not supported: export with ceil_mode=False");
    if (op == "MaxPool") {
      if (e.attr_i("storage_order", 0) != 0) e.fail("storage_order 1 is not supported");
      e.only_outputs(1, "MaxPool's Indices output is not supported");
    }
    const auto k = e.attr_ints("kernel_shape");
    if (!k || static_cast<int>(k->size()) != sp) e.fail("kernel_shape is missing or of the wrong length");
    const std::array<std::int64_t, 2> kernel = sp == 1 ? std::array<std::int64_t, 2>{1, (*k)[0]}
                                                       : std::array<std::int64_t, 2>{(*k)[0], (*k)[1]};
    const auto stride = pair_attr(e, "strides", sp, 1);
    const auto pad = pads2(e, sp);
    for (int d = 0; d < 2; ++d)
      if (pad[static_cast<std::size_t>(d)] * 2 > kernel[static_cast<std::size_t>(d)])
        e.fail("padding " + std::to_string(pad[static_cast<std::size_t>(d)]) + " wider than half the window " +
               std::to_string(kernel[static_cast<std::size_t>(d)]) + " is not supported");
    if (op == "MaxPool") {
      if (pair_attr(e, "dilations", sp, 1) != std::array<std::int64_t, 2>{1, 1}) e.fail("dilated max pooling is not supported");
      y = max_pool2d(x, kernel, stride, pad);
    } else {
      y = avg_pool2d(x, kernel, stride, pad);  // padding counts as zeros in the average
      if ((pad[0] || pad[1]) && e.attr_i("count_include_pad", 0) == 0) {
        // ONNX's default averages over the window's real elements only: divide by the
        // share of each window that lies inside the input.
        const Tensor ones = Tensor::ones({1, 1, x.size(2), x.size(3)}, DType::f32, x.device());
        Tensor share;
        {
          NoGradGuard no_grad;
          share = avg_pool2d(ones, kernel, stride, pad).to(y.dtype());
        }
        y = div(y, share);
      }
    }
  }
  if (sp == 1) y = reshape(y, {y.size(0), y.size(1), y.size(3)});
  e.set(0, y);
}

void op_batch_norm(Exec& e) {
  if (e.node.opset < 9 && e.attr_i("spatial", 1) != 1) e.fail("spatial=0 (per-activation statistics) is not supported");
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

void op_reduce(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t since = e.node.op_type == "ReduceSum" ? 13 : 18;
  auto axes = e.ints_from("axes", 1, since);
  const bool keep = e.attr_i("keepdims", 1) != 0;
  if (!axes || axes->empty()) {
    if (e.attr_i("noop_with_empty_axes", 0) != 0) return e.set(0, x);
    axes = std::vector<std::int64_t>();
    for (std::int64_t d = 0; d < x.dim(); ++d) axes->push_back(d);
  }
  for (auto& a : *axes) a = norm_axis(a, x.dim(), "axis");
  const std::string& op = e.node.op_type;
  Tensor y;
  if (op == "ReduceSum") y = sum(x, *axes, keep);
  else if (op == "ReduceMean") y = mean(x, *axes, keep);
  else if (op == "ReduceMax") y = max(x, *axes, keep);
  else if (op == "ReduceMin") y = neg(max(neg(x), *axes, keep));
  else if (op == "ReduceSumSquare") y = sum(square(x), *axes, keep);
  else if (op == "ReduceL1") y = sum(abs(x), *axes, keep);
  else if (op == "ReduceL2") y = sqrt(sum(square(x), *axes, keep));
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
  if (mode != "constant" && mode != "reflect" && mode != "edge") e.fail("mode " + mode + " is not supported");
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

// Resize and Upsample, mode nearest with whole scale factors: each element repeated along
// each axis (a broadcast add of zeros, whose gradient sums the copies).
void op_resize(Exec& e) {
  Tensor x = e.tensor(0);
  const std::string mode = e.attr_s("mode", "nearest");
  if (mode != "nearest")
    e.fail("mode " + mode + " is not supported (nearest with whole scale factors is: F.interpolate(mode='nearest'))");
  std::vector<double> scales;
  if (e.node.op_type == "Upsample") {
    if (e.node.opset < 9) {
      const Attribute* a = e.attr("scales");
      if (!a) e.fail("scales are missing");
      scales = a->floats;
    } else {
      const Array& s = e.host(1, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    }
  } else {
    // Whole factors repeat each element exactly when the sampling position rounds back to
    // floor(i / s): asymmetric with floor (F.interpolate's nearest), or half-pixel with
    // either round mode (its positions are never halfway).
    const std::string coords = e.attr_s("coordinate_transformation_mode", "half_pixel");
    const std::string rounding = e.attr_s("nearest_mode", "round_prefer_floor");
    const bool repeats = coords == "asymmetric" ? rounding == "floor"
                         : coords == "half_pixel" || coords == "pytorch_half_pixel"
                             ? rounding == "round_prefer_floor" || rounding == "round_prefer_ceil"
                             : false;
    if (!repeats)
      e.fail("coordinate_transformation_mode " + coords + " with nearest_mode " + rounding +
             " is not supported (asymmetric with floor, and half_pixel with rounding, are)");
    const std::size_t scales_at = e.node.opset < 11 ? 1 : 2;
    if (e.has(scales_at) && e.host(scales_at, "scales").numel() > 0) {
      const Array& s = e.host(scales_at, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    } else if (e.has(3)) {
      const Array& sizes = e.host(3, "sizes");
      for (std::int64_t k = 0; k < sizes.numel(); ++k)
        scales.push_back(static_cast<double>(sizes.int_at(k)) / static_cast<double>(x.size(k)));
    }
  }
  if (static_cast<std::int64_t>(scales.size()) != x.dim()) e.fail("scales or sizes do not match the input's rank");
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    const double s = scales[static_cast<std::size_t>(d)];
    const auto n = static_cast<std::int64_t>(std::llround(s));
    if (n < 1 || std::fabs(s - static_cast<double>(n)) > 1e-9)
      e.fail("scale " + std::to_string(s) + " is not supported: nearest resizing by whole factors only");
    if (n == 1) continue;
    Shape split = x.shape(), repeated = x.shape(), merged = x.shape();
    split.insert(split.begin() + d + 1, 1);
    repeated.insert(repeated.begin() + d + 1, n);
    merged[static_cast<std::size_t>(d)] *= n;
    x = reshape(add(reshape(x, split), Tensor::zeros(repeated, x.dtype(), x.device())), merged);
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

void op_slice(Exec& e) {
  Tensor x = e.tensor(0);
  for (const SliceAxis& s : slice_axes(e, x.shape())) {
    if (s.start == 0 && s.end == x.size(s.axis) && s.step == 1) continue;
    x = slice(x, s.axis, s.start, s.end, s.step);
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

void op_cast(Exec& e) {
  const Tensor x = e.tensor(0);
  CastTarget t;
  try {
    t = cast_target(e.attr_i("to", 1));
  } catch (const std::invalid_argument& x_) {
    e.fail(x_.what());
  }
  if (t.integer && is_floating(x.dtype()))
    e.fail("a cast of floating data to " + t.stored + " is not supported (it has no gradient)");
  e.set(0, x.dtype() == t.dtype ? x : cast(x, t.dtype));
}

void op_where(Exec& e) {
  const auto sa = e.scalar(1), sb = e.scalar(2);
  if (sa && !e.is_host(2)) {
    // where(c, s, x): x with s where c holds, as PyTorch's masked_fill exports.
    const Tensor x = e.tensor(2);
    Tensor cond = e.tensor(0);
    if (is_floating(cond.dtype())) e.fail("the condition must be bool");
    return e.set(0, masked_fill(x, cond, *sa));
  }
  if (sb && !e.is_host(1) && e.is_host(0)) {
    Array inverse = *e.in[0].host;
    for (auto& v : inverse.i) v = v == 0;
    return e.set(0, masked_fill(e.tensor(1), inverse.to_tensor().to(e.device), *sb));
  }
  Tensor a = e.tensor(1), b = e.tensor(2);
  if (sb && !e.is_host(1)) b = Tensor::full({}, *sb, a.dtype(), a.device());
  Tensor cond = e.tensor(0);
  if (is_floating(cond.dtype())) e.fail("the condition must be bool");
  e.set(0, where(cond, a, b));
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

// ---- the table ----

#define HOST_ONLY nullptr
const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t = {
        {{"Abs", {"abs"}, "elementwise"}, op_unary, host_unary_op},
        {{"Add", {"add", "add_scalar"}, "broadcasting; a one-element constant operand runs as add_scalar"}, op_binary, host_binary_op},
        {{"And", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"AveragePool", {"avg_pool2d"}, "2-D and 1-D, symmetric pads, ceil_mode 0, count_include_pad 0 and 1"}, op_pool, nullptr},
        {{"BatchNormalization", {"batch_norm"}, "batch statistics and running-stat updates when training (PyTorch momentum = 1 - ONNX momentum), running statistics in eval"}, op_batch_norm, nullptr},
        {{"Cast", {"cast"}, "between float types; integer and bool casts on the host"}, op_cast, host_cast_op},
        {{"Ceil", {}, "on constants and shapes (host)"}, HOST_ONLY, host_unary_op},
        {{"Celu", {"neg", "relu", "div_scalar", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha; composed of registry ops"}, op_activation, nullptr},
        {{"Clip", {"clamp"}, "constant min and max (ReLU6)"}, op_clip, nullptr},
        {{"Concat", {"concat"}, "any axis"}, op_concat, host_concat},
        {{"Constant", {}, "tensor, float(s) and int(s) values (host)"}, HOST_ONLY, op_constant},
        {{"ConstantOfShape", {}, "host"}, HOST_ONLY, op_constant_of_shape},
        {{"Cos", {}, "on constants (host: positional encodings)"}, HOST_ONLY, host_unary_op},
        {{"CumSum", {}, "exclusive, reverse; on constants and shapes (host: position ids)"}, HOST_ONLY, host_cumsum},
        {{"Conv", {"conv2d"}, "2-D and 1-D, groups, dilations, strides, symmetric pads"}, op_conv, nullptr},
        {{"Div", {"div", "div_scalar", "reciprocal"}, "broadcasting; x / constant runs as div_scalar, constant / x as reciprocal"}, op_binary, host_binary_op},
        {{"Dropout", {"dropout"}, "ratio and training_mode; identity in eval"}, op_dropout, op_identity},
        {{"Elu", {"neg", "relu", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha; composed of registry ops"}, op_activation, nullptr},
        {{"Equal", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"Erf", {"erf"}, "elementwise"}, op_unary, host_unary_op},
        {{"Exp", {"exp"}, "elementwise"}, op_unary, host_unary_op},
        {{"Expand", {"add"}, "broadcast to a shape (an add of zeros)"}, op_expand, host_expand},
        {{"Flatten", {"reshape"}, "any axis"}, op_reshape_like, host_shape_op},
        {{"Floor", {}, "on constants and shapes (host)"}, HOST_ONLY, host_unary_op},
        {{"Gather", {"embedding", "slice"}, "any axis; a table lookup (embedding) or, for one index, a slice"}, op_gather, host_gather},
        {{"Gelu", {"gelu"}, "approximate none and tanh"}, op_gelu, nullptr},
        {{"Gemm", {"linear", "matmul"}, "alpha, beta, transA, transB; A B^T + c is one linear"}, op_gemm, nullptr},
        {{"GlobalAveragePool", {"adaptive_avg_pool2d"}, "2-D and 1-D"}, op_pool, nullptr},
        {{"GlobalMaxPool", {"max"}, "2-D"}, op_pool, nullptr},
        {{"Greater", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"GreaterOrEqual", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"HardSigmoid", {"hardsigmoid"}, "alpha 1/6, beta 0.5 as hardsigmoid; other alpha, beta as mul, add, clamp"}, op_hard_sigmoid, nullptr},
        {{"HardSwish", {"hardswish"}, "elementwise"}, op_unary, nullptr},
        {{"Identity", {}, "passes its input on"}, op_identity, op_identity},
        {{"InstanceNormalization", {"mean", "sub", "square", "add_scalar", "rsqrt", "mul", "reshape", "add"}, "over the spatial dims, per sample and channel; composed of registry ops"}, op_instance_norm, nullptr},
        {{"LeakyRelu", {"relu", "neg", "mul_scalar", "sub"}, "alpha; relu(x) - alpha relu(-x)"}, op_activation, nullptr},
        {{"LayerNormalization", {"layer_norm"}, "any axis (normalised over the trailing dims), scale and optional bias"}, op_layer_norm, nullptr},
        {{"Less", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"LessOrEqual", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"Log", {"log"}, "elementwise"}, op_unary, host_unary_op},
        {{"LogSoftmax", {"log_softmax"}, "any axis (opset < 13: the 2-D coercion)"}, op_softmax, nullptr},
        {{"MatMul", {"matmul"}, "numpy.matmul semantics, batched"}, op_matmul, nullptr},
        {{"Max", {}, "any number of inputs, on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"Mean", {"add", "div_scalar"}, "any number of inputs, broadcasting"}, op_variadic, host_variadic},
        {{"MaxPool", {"max_pool2d"}, "2-D and 1-D, symmetric pads, ceil_mode 0, no dilation"}, op_pool, nullptr},
        {{"Min", {}, "any number of inputs, on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"Mod", {}, "fmod 0 and 1, on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"Mul", {"mul", "mul_scalar"}, "broadcasting; a one-element constant operand runs as mul_scalar"}, op_binary, host_binary_op},
        {{"Neg", {"neg"}, "elementwise"}, op_unary, host_unary_op},
        {{"Not", {}, "on constants and shapes (host)"}, HOST_ONLY, host_unary_op},
        {{"Or", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
        {{"PRelu", {"relu", "neg", "mul", "sub"}, "a learnt slope (broadcast); relu(x) - slope relu(-x)"}, op_activation, nullptr},
        {{"Pad", {"concat", "slice"}, "constant (any value), reflect and edge; negative pads crop"}, op_pad, nullptr},
        {{"Pow", {"pow"}, "a constant one-element exponent"}, op_pow, host_binary_op},
        {{"Range", {}, "host"}, HOST_ONLY, op_range},
        {{"Reciprocal", {"reciprocal"}, "elementwise"}, op_unary, host_unary_op},
        {{"ReduceL1", {"abs", "sum"}, "axes, keepdims"}, op_reduce, nullptr},
        {{"ReduceL2", {"square", "sum", "sqrt"}, "axes, keepdims"}, op_reduce, nullptr},
        {{"ReduceLogSumExp", {"max", "sub", "exp", "sum", "log", "add"}, "axes, keepdims; shifted by the maximum"}, op_reduce, nullptr},
        {{"ReduceMax", {"max"}, "axes, keepdims"}, op_reduce, nullptr},
        {{"ReduceMean", {"mean"}, "axes (attribute before opset 18, input since), keepdims, noop_with_empty_axes"}, op_reduce, nullptr},
        {{"ReduceMin", {"neg", "max"}, "axes, keepdims"}, op_reduce, nullptr},
        {{"ReduceSum", {"sum"}, "axes (attribute before opset 13, input since), keepdims, noop_with_empty_axes"}, op_reduce, nullptr},
        {{"Relu", {"relu"}, "elementwise"}, op_unary, host_unary_op},
        {{"ReduceSumSquare", {"square", "sum"}, "axes, keepdims"}, op_reduce, nullptr},
        {{"Reshape", {"reshape"}, "0 (copy) and -1 (infer), allowzero"}, op_reshape_like, host_shape_op},
        {{"Resize", {"reshape", "add"}, "mode nearest with whole scale factors (scales or sizes)"}, op_resize, nullptr},
        {{"Selu", {"neg", "relu", "exp", "sub_scalar", "mul_scalar", "add"}, "alpha, gamma; composed of registry ops"}, op_activation, nullptr},
        {{"Shape", {}, "start and end (host)"}, op_shape, op_shape},
        {{"Sigmoid", {"sigmoid"}, "elementwise"}, op_unary, host_unary_op},
        {{"Sign", {}, "on constants and shapes (host)"}, HOST_ONLY, host_unary_op},
        {{"Sin", {}, "on constants (host: positional encodings)"}, HOST_ONLY, host_unary_op},
        {{"Size", {}, "host"}, op_shape, op_shape},
        {{"Slice", {"slice"}, "any axes, positive steps"}, op_slice, host_slice},
        {{"Softplus", {"relu", "abs", "neg", "exp", "add_scalar", "log", "add"}, "relu(x) + log(1 + exp(-|x|))"}, op_activation, nullptr},
        {{"Softsign", {"abs", "add_scalar", "div"}, "x / (1 + |x|)"}, op_activation, nullptr},
        {{"Softmax", {"softmax"}, "any axis (opset < 13: the 2-D coercion)"}, op_softmax, nullptr},
        {{"Split", {"slice"}, "split sizes (attribute or input) or equal parts"}, op_split, nullptr},
        {{"Sqrt", {"sqrt"}, "elementwise"}, op_unary, host_unary_op},
        {{"Squeeze", {"reshape"}, "axes (attribute before opset 13, input since)"}, op_reshape_like, host_shape_op},
        {{"Sub", {"sub", "sub_scalar", "neg", "add_scalar"}, "broadcasting; x - constant runs as sub_scalar, constant - x as neg and add_scalar"}, op_binary, host_binary_op},
        {{"Sum", {"add"}, "any number of inputs, broadcasting"}, op_variadic, host_variadic},
        {{"Tanh", {"tanh"}, "elementwise"}, op_unary, host_unary_op},
        {{"Tile", {"concat", "slice"}, "constant repeats"}, op_tile, nullptr},
        {{"Transpose", {"permute"}, "any perm"}, op_transpose, host_transpose},
        {{"Trilu", {}, "upper and lower, k; on constants (host: causal masks)"}, HOST_ONLY, host_trilu},
        {{"Unsqueeze", {"reshape"}, "axes (attribute before opset 13, input since)"}, op_reshape_like, host_shape_op},
        {{"Upsample", {"reshape", "add"}, "mode nearest with whole scale factors"}, op_resize, nullptr},
        {{"Where", {"where", "masked_fill"}, "a bool condition; a constant fill value runs as masked_fill"}, op_where, host_where},
        {{"Xor", {}, "on constants and shapes (host)"}, HOST_ONLY, host_binary_op},
    };
    return t;
  }();
  return table;
}
#undef HOST_ONLY

const OpDef* find_def(std::string_view op_type) {
  for (const OpDef& d : op_table())
    if (d.info.op_type == op_type) return &d;
  return nullptr;
}

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
  if (op == "Conv" || op == "Gemm" || op == "LayerNormalization") return k >= 1;
  if (op == "BatchNormalization") return k == 1 || k == 2;
  if (op == "MatMul") return true;
  if (op == "Gather") return k == 0;
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
    Exec e{n, {}, {}, *this, device};
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
    } catch (const OnnxError&) {
      throw;
    } catch (const std::exception& ex) {
      std::string what = ex.what();
      if (what.find("floating-point tensor") != std::string::npos)
        what = "integer tensors are not supported here (ampcheck's ops compute in floating point): " + what;
      std::string shapes;
      for (std::size_t k = 0; k < e.in.size(); ++k)
        if (e.in[k].defined())
          shapes += (shapes.empty() ? "" : ", ") + ("\"" + n.inputs[k] + "\" " + to_string(shape_of(e, k)));
      throw OnnxError(g_->path + ": " + n.label() + " fails on its inputs (" + shapes + "): " + what);
    }
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      if (k >= e.out.size() || !e.out[k].defined()) {
        if (consumed_.count(n.outputs[k]))
          e.fail("output " + std::to_string(k) + " (\"" + n.outputs[k] + "\") is not supported");
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
  if (op == "Pow") return k == 1;
  return false;
}

std::vector<OnnxOpUse> onnx_op_uses(const Graph& g) {
  std::vector<OnnxOpUse> out;
  std::map<std::string, std::size_t> at;
  for (const Node& n : g.nodes) {
    const std::string type = n.op_type + (n.domain.empty() ? "" : " (domain " + n.domain + ")");
    auto [it, added] = at.emplace(type, out.size());
    if (added) out.push_back({type, 0, n.domain.empty() ? find_onnx_op(n.op_type) : nullptr, {}});
    OnnxOpUse& u = out[it->second];
    ++u.count;
    const std::string m = module_path_of(g, n);
    if (u.modules.size() < 3 && std::find(u.modules.begin(), u.modules.end(), m) == u.modules.end()) u.modules.push_back(m);
  }
  std::sort(out.begin(), out.end(), [](const OnnxOpUse& a, const OnnxOpUse& b) { return a.op_type < b.op_type; });
  return out;
}

}  // namespace ampcheck::models
