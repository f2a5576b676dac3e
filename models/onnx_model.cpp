// The ONNX graph as an engine model: one table from op type to the builders that run a node
// (on tensors, on host arrays, and the check of its attributes made before anything runs),
// the model that runs the nodes in order in the modules their names give, and the helpers
// every builder shares. The builders themselves live in a file per op family (onnx_exec.h).
#include "models/onnx_model.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

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
    // F.scaled_dot_product_attention's nodes, ending at this one (onnx_attention.cpp): run
    // as one op where the values allow, else `members` one by one.
    std::shared_ptr<const AttentionGroup> attention = nullptr;
    std::vector<Step> members = {};
  };
  Step step_of(const Node& n);
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
  // Attention as F.scaled_dot_product_attention wrote it: one step at its last node.
  std::set<std::string> outputs = {output_};
  for (const auto& o : graph.outputs) outputs.insert(o.name);
  std::map<std::size_t, AttentionGroup> attention_at;
  std::set<std::size_t> in_attention;
  for (const AttentionGroup& a : find_attention(graph, outputs)) {
    attention_at.emplace(a.out, a);
    for (std::size_t k : a.nodes()) in_attention.insert(k);
  }
  for (std::size_t k = 0; k < graph.nodes.size(); ++k) {
    const auto a = attention_at.find(k);
    if (a == attention_at.end() && in_attention.count(k)) continue;
    Step step = step_of(graph.nodes[k]);
    if (a != attention_at.end()) {
      step.attention = std::make_shared<const AttentionGroup>(a->second);
      for (std::size_t m : a->second.nodes()) step.members.push_back(step_of(graph.nodes[m]));
    }
    steps_.push_back(std::move(step));
  }
}

OnnxModel::Step OnnxModel::step_of(const Node& n) {
  return {&n, find_def(n.op_type), scope_for(module_path_of(*g_, n))};
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
  const auto value = [&](const std::string& name) { return name.empty() ? Value{} : values.at(name); };
  std::function<void(const Step&)> run_step = [&](const Step& step) {
    const Node& n = *step.node;
    if (step.attention) {
      std::optional<Tensor> fused;
      try {
        step.scope->call([&] {
          fused = run_attention(*step.attention, *g_, value, device, *this);
          return Tensor();
        });
      } catch (const std::exception& ex) {
        throw OnnxError(g_->path + ": " + n.label() +
                        " with the attention nodes before it (run as one scaled_dot_product_attention, as PyTorch "
                        "exported it) fails: " + ex.what());
      }
      if (fused) {
        values[n.outputs[0]].t = *fused;
        return;
      }
      for (const Step& m : step.members) run_step(m);
      return;
    }
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
  };
  for (const Step& step : steps_) run_step(step);
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
