#include "models/model_file.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/json_text.h"
#include "engine/autograd.h"
#include "engine/nn/layers.h"
#include "engine/util/strings.h"
#include "models/arrays.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"

namespace ampcheck::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& msg) { throw ModelFileError(where + ": " + msg); }

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& known) {
  const std::string_view best = closest(word, known, 3);
  return best.empty() ? std::string() : " (did you mean " + in_quotes(best) + "?)";
}

std::string list(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// ---- typed fields ----------------------------------------------------------------

enum class Type {
  count,     // an integer >= 1
  integer,   // any integer
  number,    // any finite number
  extended,  // a finite number, or "inf" / "-inf" (JSON has no infinity)
  positive,  // a number > 0
  fraction,  // a number in [0, 1)
  unit,      // a number in [0, 1]
  boolean,
  pair,      // a count or [count, count]
  pair0,     // an integer >= 0 or [a, b] of them
  dims,      // an array of integers
  numbers,   // an array of finite numbers
  shape,     // an array of counts, one of which may be -1
  constant,  // the name of a tensor constant
  text,
  texts,     // an array of strings
  array,     // any array (inline samples, checked when read)
};

struct Field {
  std::string_view name;
  Type type;
  bool required = false;
};

std::string type_text(Type t) {
  switch (t) {
    case Type::count: return "a positive integer";
    case Type::integer: return "an integer";
    case Type::number: return "a finite number";
    case Type::extended: return "a finite number, \"inf\" or \"-inf\"";
    case Type::positive: return "a number > 0";
    case Type::fraction: return "a number in [0, 1)";
    case Type::unit: return "a number in [0, 1]";
    case Type::boolean: return "true or false";
    case Type::pair: return "a positive integer or a pair [h, w] of them";
    case Type::pair0: return "an integer >= 0 or a pair [h, w] of them";
    case Type::dims: return "an array of dimension indices";
    case Type::numbers: return "an array of finite numbers";
    case Type::array: return "an array";
    case Type::shape: return "an array of positive sizes (one may be -1)";
    case Type::constant: return "the name of a tensor constant";
    case Type::text: return "a string";
    case Type::texts: return "an array of strings";
  }
  return "?";
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

bool valid(const json& v, Type t) {
  switch (t) {
    case Type::count: return is_int(v) && v.get<std::int64_t>() >= 1;
    case Type::integer: return is_int(v);
    case Type::number: return v.is_number() && std::isfinite(v.get<double>());
    case Type::extended:
      return (v.is_number() && std::isfinite(v.get<double>())) ||
             (v.is_string() && (v == "inf" || v == "+inf" || v == "-inf"));
    case Type::positive: return v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>());
    case Type::fraction: return v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1;
    case Type::unit: return v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1;
    case Type::boolean: return v.is_boolean();
    case Type::pair:
    case Type::pair0: {
      const std::int64_t lo = t == Type::pair ? 1 : 0;
      auto ok = [&](const json& e) { return is_int(e) && e.get<std::int64_t>() >= lo; };
      return ok(v) || (v.is_array() && v.size() == 2 && ok(v[0]) && ok(v[1]));
    }
    case Type::dims: return v.is_array() && std::all_of(v.begin(), v.end(), is_int);
    case Type::array: return v.is_array();
    case Type::numbers:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) {
               return e.is_number() && std::isfinite(e.get<double>());
             });
    case Type::shape: {
      if (!v.is_array()) return false;
      int inferred = 0;
      for (const json& e : v) {
        if (!is_int(e)) return false;
        const auto n = e.get<std::int64_t>();
        if (n == -1) ++inferred;
        else if (n < 1) return false;
      }
      return inferred <= 1;
    }
    case Type::constant:
    case Type::text: return v.is_string();
    case Type::texts: return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
  }
  return false;
}

// Checks `object`'s keys against `fields` (skipping `structural` ones): unknown keys,
// missing required ones and mistyped values are errors naming `where` and the key.
void check_fields(const json& object, const std::vector<Field>& fields, const std::string& where,
                  const std::vector<std::string_view>& structural = {}) {
  std::vector<std::string_view> known(structural);
  for (const Field& f : fields) known.push_back(f.name);
  for (const auto& item : object.items()) {
    const std::string& key = item.key();  // named: the lambda below captures it
    const json& value = item.value();
    if (std::find(structural.begin(), structural.end(), key) != structural.end()) continue;
    const auto f = std::find_if(fields.begin(), fields.end(), [&](const Field& x) { return x.name == key; });
    if (f == fields.end())
      fail(where, "unknown field " + in_quotes(key) + did_you_mean(key, known) + "; fields: " + list(known));
    if (!valid(value, f->type))
      fail(where, "field " + in_quotes(key) + " must be " + type_text(f->type) + ", got " + value.dump());
  }
  for (const Field& f : fields)
    if (f.required && !object.contains(f.name))
      fail(where, "missing field " + in_quotes(f.name) + " (" + type_text(f.type) + ")");
}

std::array<std::int64_t, 2> pair_of(const json& v) {
  if (v.is_array()) return {v[0].get<std::int64_t>(), v[1].get<std::int64_t>()};
  return {v.get<std::int64_t>(), v.get<std::int64_t>()};
}

template <typename T>
T get(const json& object, std::string_view key, T fallback) {
  const auto it = object.find(key);
  return it == object.end() ? fallback : it->template get<T>();
}

// ---- node kinds -----------------------------------------------------------------

// What a node's builder sees: its fields, its inputs (probe tensors), the constants.
struct NodeContext {
  const NodeSpec& spec;
  const std::vector<Tensor>& inputs;  // probe values; scalar constants are undefined
  const std::vector<std::optional<double>>& scalars;  // per input: a scalar constant
  const std::map<std::string, Tensor>& tensors;       // tensor constants by name
  Generator& gen;
  std::string where;
  double number(std::string_view k, double fallback) const { return get<double>(spec.fields, k, fallback); }
  // A Type::extended field: its number, or +-infinity for "inf"/"+inf"/"-inf".
  double extended(std::string_view k, double fallback) const {
    const auto it = spec.fields.find(k);
    if (it == spec.fields.end()) return fallback;
    if (it->is_string()) return *it == "-inf" ? -std::numeric_limits<double>::infinity()
                                              : std::numeric_limits<double>::infinity();
    return it->get<double>();
  }
  std::int64_t integer(std::string_view k, std::int64_t fallback) const {
    return get<std::int64_t>(spec.fields, k, fallback);
  }
  bool flag(std::string_view k, bool fallback) const { return get<bool>(spec.fields, k, fallback); }
  std::array<std::int64_t, 2> pair(std::string_view k, std::array<std::int64_t, 2> fallback) const {
    const auto it = spec.fields.find(k);
    return it == spec.fields.end() ? fallback : pair_of(*it);
  }
  std::vector<std::int64_t> ints(std::string_view k) const {
    const auto it = spec.fields.find(k);
    return it == spec.fields.end() ? std::vector<std::int64_t>{} : it->get<std::vector<std::int64_t>>();
  }
  Tensor constant(std::string_view k) const {
    const auto it = spec.fields.find(k);
    return it == spec.fields.end() ? Tensor{} : tensors.at(it->get<std::string>());
  }
  const Tensor& in(std::size_t i = 0) const { return inputs[i]; }
  // The input's size along `dim`, requiring at least `rank` dims (else an error naming "inputs").
  std::int64_t size_of(std::int64_t dim, std::int64_t rank, std::string_view layout) const {
    const Tensor& x = inputs[0];
    if (x.dim() < rank)
      fail(where, "field \"inputs\": expects " + std::string(layout) + ", got a " + std::to_string(x.dim()) +
                      "-d input");
    return x.size(dim < 0 ? x.dim() + dim : dim);
  }
  void require_float(std::size_t i = 0) const {
    if (inputs[i].defined() && !is_floating(inputs[i].dtype()))
      fail(where, "field \"inputs\": expects a floating input, got " + std::string(name(inputs[i].dtype())) +
                      " (token indices go into an embedding node)");
  }
};

using Run = std::function<Tensor(const std::vector<Tensor>&)>;
struct Built {
  std::shared_ptr<nn::Module> module;  // a layer, or null for a plain op
  Run run;
};
using Builder = std::function<Built(const NodeContext&)>;

struct Kind {
  std::string_view kind;
  std::string_view summary;
  int min_inputs, max_inputs;
  std::vector<Field> fields;
  Builder build;
};

Built unary(Tensor (*op)(const Tensor&)) {
  return {nullptr, [op](const std::vector<Tensor>& in) { return op(in[0]); }};
}

template <typename Layer>
Built layer(std::shared_ptr<Layer> m) {
  return {m, [m](const std::vector<Tensor>& in) { return m->forward(in[0]); }};
}

// add/sub/mul/div: two tensors (broadcasting), or a tensor and a scalar (a scalar
// constant as the second input, or the "scalar" field).
Builder binary(Tensor (*tensors)(const Tensor&, const Tensor&), Tensor (*with_scalar)(const Tensor&, double)) {
  return [=](const NodeContext& c) -> Built {
    const bool has_field = c.spec.fields.contains("scalar");
    const std::size_t n = c.inputs.size();
    if (has_field && n != 1) fail(c.where, "field \"scalar\": give one input with it, or two inputs without it");
    if (!has_field && n != 2) fail(c.where, "field \"inputs\": expects two inputs, or one and a \"scalar\" field");
    if (c.scalars[0]) fail(c.where, "field \"inputs\": a scalar constant can only be the second input");
    std::optional<double> s = has_field ? std::optional<double>(c.number("scalar", 0)) : c.scalars[1];
    if (s) return {nullptr, [=, v = *s](const std::vector<Tensor>& in) { return with_scalar(in[0], v); }};
    return {nullptr, [=](const std::vector<Tensor>& in) { return tensors(in[0], in[1]); }};
  };
}

// sum/mean/max over "dims", keepdim optional.
Builder reduction(Tensor (*op)(const Tensor&, std::vector<std::int64_t>, bool)) {
  return [op](const NodeContext& c) -> Built {
    const auto d = c.ints("dims");
    const bool k = c.flag("keepdim", false);
    return {nullptr, [op, d, k](const std::vector<Tensor>& in) { return op(in[0], d, k); }};
  };
}

// max/avg pooling: kernel, stride (default: the kernel), padding.
Builder pooling(Tensor (*op)(const Tensor&, std::array<std::int64_t, 2>, std::array<std::int64_t, 2>,
                             std::array<std::int64_t, 2>)) {
  return [op](const NodeContext& c) -> Built {
    const auto k = c.pair("kernel", {1, 1}), st = c.pair("stride", k), p = c.pair("padding", {0, 0});
    return {nullptr, [op, k, st, p](const std::vector<Tensor>& in) { return op(in[0], k, st, p); }};
  };
}

const std::vector<Kind>& kinds() {
  using T = Type;
  static const std::vector<Kind> table = {
      // ---- layers (parameters drawn from the run's seed, in node order) ----
      {"linear", "x W^T + b over the last dim; W [out, in] (in read from the input)", 1, 1,
       {{"out", T::count, true}, {"bias", T::boolean}, {"init", T::text}},
       [](const NodeContext& c) {
         c.require_float();
         const std::int64_t in = c.size_of(-1, 1, "[..., features]");
         const std::string init = get<std::string>(c.spec.fields, "init", "uniform");
         if (init != "uniform" && init != "zeros")
           fail(c.where, "field \"init\": \"" + init + "\" is not an initialisation; use \"uniform\" (PyTorch's "
                         "nn.Linear default) or \"zeros\" (a LoRA B matrix, an adaLN-Zero projection)");
         auto l = std::make_shared<nn::Linear>(in, c.integer("out", 0), c.gen, c.flag("bias", true));
         if (init == "zeros") {  // drawn, then zeroed: the other layers get the parameters they would have
           l->weight.fill(0.0);
           if (l->bias.defined()) l->bias.fill(0.0);
         }
         return layer(l);
       }},
      {"conv2d", "2-D convolution on [N, C, H, W]; groups = C makes it depthwise", 1, 1,
       {{"out", T::count, true}, {"kernel", T::pair, true}, {"stride", T::pair}, {"padding", T::pair0},
        {"dilation", T::pair}, {"groups", T::count}, {"bias", T::boolean}},
       [](const NodeContext& c) {
         c.require_float();
         const std::int64_t in = c.size_of(1, 4, "[N, C, H, W]");
         const std::int64_t groups = c.integer("groups", 1), out = c.integer("out", 0);
         if (in % groups != 0 || out % groups != 0)
           fail(c.where, "field \"groups\": " + std::to_string(groups) + " must divide the input channels (" +
                             std::to_string(in) + ") and \"out\" (" + std::to_string(out) + ")");
         Conv2dOptions o;
         o.stride = c.pair("stride", {1, 1});
         o.padding = c.pair("padding", {0, 0});
         o.dilation = c.pair("dilation", {1, 1});
         o.groups = groups;
         return layer(std::make_shared<nn::Conv2d>(in, out, c.pair("kernel", {1, 1}), c.gen, o, c.flag("bias", true)));
       }},
      {"batch_norm", "BatchNorm over dim 1 of [N, C, ...] (batch statistics in training)", 1, 1,
       {{"eps", T::positive}, {"momentum", T::fraction}},
       [](const NodeContext& c) {
         c.require_float();
         return layer(std::make_shared<nn::BatchNorm2d>(c.size_of(1, 2, "[N, C, ...]"), c.number("eps", 1e-5),
                                                        c.number("momentum", 0.1)));
       }},
      {"layer_norm", "LayerNorm over the last dim", 1, 1, {{"eps", T::positive}},
       [](const NodeContext& c) {
         c.require_float();
         return layer(std::make_shared<nn::LayerNorm>(Shape{c.size_of(-1, 1, "[..., features]")}, c.number("eps", 1e-5)));
       }},
      {"embedding", "a table [num, dim] looked up by i64 indices", 1, 1,
       {{"num", T::count, true}, {"dim", T::count, true}},
       [](const NodeContext& c) {
         if (c.in().dtype() != DType::i64)
           fail(c.where, "field \"inputs\": expects i64 indices, got " + std::string(name(c.in().dtype())));
         return layer(std::make_shared<nn::Embedding>(c.integer("num", 0), c.integer("dim", 0), c.gen));
       }},
      {"attention", "multi-head scaled dot-product attention on [B, T, D]: self (1 input) or query, key, value (3)",
       1, 3, {{"heads", T::count, true}, {"mask", T::constant}},
       [](const NodeContext& c) -> Built {
         if (c.inputs.size() == 2) fail(c.where, "field \"inputs\": expects 1 input (self-attention) or 3 (query, key, value)");
         c.require_float();
         const std::int64_t dim = c.size_of(-1, 3, "[B, T, D]"), heads = c.integer("heads", 1);
         if (dim % heads != 0)
           fail(c.where, "field \"heads\": " + std::to_string(heads) + " does not divide the model dim " + std::to_string(dim));
         auto m = std::make_shared<nn::MultiHeadAttention>(dim, heads, c.gen);
         const Tensor mask = c.constant("mask");
         return {m, [m, mask](const std::vector<Tensor>& in) {
                   return in.size() == 1 ? m->forward(in[0], in[0], in[0], mask) : m->forward(in[0], in[1], in[2], mask);
                 }};
       }},
      {"dropout", "zeroes a fraction p in training (its own seeded generator), identity in eval", 1, 1,
       {{"p", T::fraction, true}},
       [](const NodeContext& c) {
         // The mask stream: the run's seed, and a counter that says which dropout node.
         const std::uint64_t seed = c.gen.seed() ^ (0x9E3779B97F4A7C15ULL * (c.gen.advance(1) + 1));
         return layer(std::make_shared<nn::Dropout>(c.number("p", 0), seed));
       }},
      // ---- activations and elementwise ops (registry ops) ----
      {"relu", "max(x, 0)", 1, 1, {}, [](const NodeContext&) { return unary(relu); }},
      {"gelu", "GELU (erf; \"tanh\": true for the tanh approximation)", 1, 1, {{"tanh", T::boolean}},
       [](const NodeContext& c) -> Built {
         const bool approx = c.flag("tanh", false);
         return {nullptr, [approx](const std::vector<Tensor>& in) { return gelu(in[0], approx); }};
       }},
      {"silu", "x sigmoid(x)", 1, 1, {}, [](const NodeContext&) { return unary(silu); }},
      {"sigmoid", "1 / (1 + exp(-x))", 1, 1, {}, [](const NodeContext&) { return unary(sigmoid); }},
      {"tanh", "tanh(x)", 1, 1, {}, [](const NodeContext&) { return unary(tanh); }},
      {"hardswish", "x relu6(x + 3) / 6", 1, 1, {}, [](const NodeContext&) { return unary(hardswish); }},
      {"hardsigmoid", "relu6(x + 3) / 6", 1, 1, {}, [](const NodeContext&) { return unary(hardsigmoid); }},
      {"add", "a + b (broadcasting), or a + scalar", 1, 2, {{"scalar", T::number}}, binary(add, add)},
      {"sub", "a - b, or a - scalar", 1, 2, {{"scalar", T::number}}, binary(sub, sub)},
      {"mul", "a * b, or a * scalar", 1, 2, {{"scalar", T::number}}, binary(mul, mul)},
      {"div", "a / b, or a / scalar", 1, 2, {{"scalar", T::number}}, binary(div, div)},
      {"neg", "-x", 1, 1, {}, [](const NodeContext&) { return unary(neg); }},
      {"abs", "|x|", 1, 1, {}, [](const NodeContext&) { return unary(abs); }},
      {"square", "x * x", 1, 1, {}, [](const NodeContext&) { return unary(square); }},
      {"exp", "e^x", 1, 1, {}, [](const NodeContext&) { return unary(exp); }},
      {"log", "ln x", 1, 1, {}, [](const NodeContext&) { return unary(log); }},
      {"sqrt", "sqrt x", 1, 1, {}, [](const NodeContext&) { return unary(sqrt); }},
      {"rsqrt", "1 / sqrt x", 1, 1, {}, [](const NodeContext&) { return unary(rsqrt); }},
      {"reciprocal", "1 / x", 1, 1, {}, [](const NodeContext&) { return unary(reciprocal); }},
      {"pow", "x ^ exponent", 1, 1, {{"exponent", T::number, true}},
       [](const NodeContext& c) -> Built {
         const double e = c.number("exponent", 1);
         return {nullptr, [e](const std::vector<Tensor>& in) { return pow(in[0], e); }};
       }},
      {"clamp", "min(max(x, min), max); either bound may be left out", 1, 1, {{"min", T::number}, {"max", T::number}},
       [](const NodeContext& c) -> Built {
         const double inf = std::numeric_limits<double>::infinity();
         const double lo = c.number("min", -inf), hi = c.number("max", inf);
         if (lo > hi) fail(c.where, "field \"min\": " + std::to_string(lo) + " is above \"max\"");
         return {nullptr, [lo, hi](const std::vector<Tensor>& in) { return clamp(in[0], lo, hi); }};
       }},
      // ---- GEMM ----
      {"matmul", "a @ b (batched, broadcasting)", 2, 2, {}, [](const NodeContext&) -> Built {
         return {nullptr, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }};
       }},
      {"bmm", "[B, M, K] @ [B, K, N]", 2, 2, {}, [](const NodeContext&) -> Built {
         return {nullptr, [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }};
       }},
      // ---- reductions ----
      {"sum", "sum over \"dims\" (dim 0 is the batch)", 1, 1, {{"dims", T::dims, true}, {"keepdim", T::boolean}}, reduction(sum)},
      {"mean", "mean over \"dims\"", 1, 1, {{"dims", T::dims, true}, {"keepdim", T::boolean}}, reduction(mean)},
      {"max", "max over \"dims\"", 1, 1, {{"dims", T::dims, true}, {"keepdim", T::boolean}}, reduction(max)},
      {"softmax", "softmax over \"dim\" (default -1)", 1, 1, {{"dim", T::integer}},
       [](const NodeContext& c) -> Built {
         const std::int64_t d = c.integer("dim", -1);
         return {nullptr, [d](const std::vector<Tensor>& in) { return softmax(in[0], d); }};
       }},
      {"log_softmax", "log softmax over \"dim\" (default -1)", 1, 1, {{"dim", T::integer}},
       [](const NodeContext& c) -> Built {
         const std::int64_t d = c.integer("dim", -1);
         return {nullptr, [d](const std::vector<Tensor>& in) { return log_softmax(in[0], d); }};
       }},
      // ---- pooling ----
      {"max_pool2d", "max pooling on [N, C, H, W] (stride defaults to kernel)", 1, 1,
       {{"kernel", T::pair, true}, {"stride", T::pair}, {"padding", T::pair0}},
       pooling(max_pool2d)},
      {"avg_pool2d", "average pooling on [N, C, H, W] (padding counts as zeros)", 1, 1,
       {{"kernel", T::pair, true}, {"stride", T::pair}, {"padding", T::pair0}},
       pooling(avg_pool2d)},
      {"adaptive_avg_pool2d", "average pooling to an \"output\" size [h, w]", 1, 1, {{"output", T::pair, true}},
       [](const NodeContext& c) -> Built {
         const auto o = c.pair("output", {1, 1});
         return {nullptr, [o](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], o); }};
       }},
      // ---- shape ----
      {"reshape", "to [N] + \"shape\" (per sample: the batch dim is kept; one size may be -1)", 1, 1,
       {{"shape", T::shape, true}},
       [](const NodeContext& c) -> Built {
         const auto shape = c.ints("shape");
         return {nullptr, [shape](const std::vector<Tensor>& in) {
                   Shape full{in[0].size(0)};
                   full.insert(full.end(), shape.begin(), shape.end());
                   return reshape(in[0], full);
                 }};
       }},
      {"flatten", "merges dims start_dim.. (default 1: [N, everything])", 1, 1, {{"start_dim", T::integer}},
       [](const NodeContext& c) -> Built {
         const std::int64_t d = c.integer("start_dim", 1);
         return {nullptr, [d](const std::vector<Tensor>& in) { return flatten(in[0], d); }};
       }},
      {"permute", "reorders all dims (\"dims\" includes the batch dim 0)", 1, 1, {{"dims", T::dims, true}},
       [](const NodeContext& c) -> Built {
         const auto d = c.ints("dims");
         return {nullptr, [d](const std::vector<Tensor>& in) { return permute(in[0], d); }};
       }},
      {"transpose", "swaps two dims, \"dims\": [a, b]", 1, 1, {{"dims", T::dims, true}},
       [](const NodeContext& c) -> Built {
         const auto d = c.ints("dims");
         if (d.size() != 2) fail(c.where, "field \"dims\": expects two dims [a, b]");
         return {nullptr, [d](const std::vector<Tensor>& in) { return transpose(in[0], d[0], d[1]); }};
       }},
      {"concat", "joins its inputs along \"dim\"", 2, 64, {{"dim", T::integer, true}},
       [](const NodeContext& c) -> Built {
         const std::int64_t d = c.integer("dim", 0);
         return {nullptr, [d](const std::vector<Tensor>& in) { return concat(in, d); }};
       }},
      {"slice", "rows start..end (step) of \"dim\"", 1, 1,
       {{"dim", T::integer, true}, {"start", T::integer, true}, {"end", T::integer, true}, {"step", T::count}},
       [](const NodeContext& c) -> Built {
         const std::int64_t d = c.integer("dim", 0), s = c.integer("start", 0), e = c.integer("end", 0),
                            st = c.integer("step", 1);
         return {nullptr, [=](const std::vector<Tensor>& in) { return slice(in[0], d, s, e, st); }};
       }},
      {"where", "condition != 0 ? a : b (inputs: condition, a, b)", 3, 3, {}, [](const NodeContext&) -> Built {
         return {nullptr, [](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); }};
       }},
      {"masked_fill", "x with \"value\" where the \"mask\" constant is nonzero", 1, 1,
       {{"mask", T::constant, true}, {"value", T::extended, true}},
       [](const NodeContext& c) -> Built {
         const Tensor mask = c.constant("mask");
         const double v = c.extended("value", 0);
         return {nullptr, [mask, v](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, v); }};
       }},
  };
  return table;
}

const Kind* find_kind(std::string_view kind) {
  for (const Kind& k : kinds())
    if (k.kind == kind) return &k;
  return nullptr;
}

std::vector<std::string_view> kind_names() {
  std::vector<std::string_view> names;
  for (const Kind& k : kinds()) names.push_back(k.kind);
  return names;
}

// ---- the graph ----------------------------------------------------------------------

// A plain op as a module, so that its calls carry the node's name (reports, bisect-nan's
// instance granularity, fp32_modules) like a layer's do.
class OpNode : public nn::Module {
 public:
  OpNode(std::string_view kind, Run run) : nn::Module(std::string(kind)), run_(std::move(run)) {}
  Tensor forward(const Tensor& x) override { return run_({x}); }

 private:
  Run run_;
};

constexpr int kInput = -1;  // a reference to the model's input

struct Operand {
  int node = kInput;               // >= 0: a node's output
  Tensor constant;                 // a tensor constant
  std::optional<double> scalar;    // a scalar constant
};

class GraphModel : public nn::Module {
 public:
  explicit GraphModel(std::string name) : nn::Module("Model:" + std::move(name)) {}

  void add(const std::string& name, std::shared_ptr<nn::Module> module, Run run, std::vector<Operand> operands) {
    register_module(name, module);
    nodes_.push_back({std::move(module), std::move(run), std::move(operands)});
  }
  void set_output(int node) { output_ = node; }
  Tensor constant(Tensor t) { return register_constant(std::move(t)); }

  // Node i's value for input `x`, given the values of the nodes before it.
  Tensor run_node(std::size_t i, const Tensor& x, const std::vector<Tensor>& values) {
    Node& n = nodes_[i];
    std::vector<Tensor> in;
    in.reserve(n.operands.size());
    for (const Operand& o : n.operands) {
      if (o.scalar) continue;  // folded into the op
      in.push_back(o.constant.defined() ? o.constant : o.node == kInput ? x : values[static_cast<std::size_t>(o.node)]);
    }
    return n.module->call([&] { return n.run(in); });
  }

  Tensor forward(const Tensor& x) override {
    std::vector<Tensor> values;
    values.reserve(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) values.push_back(run_node(i, x, values));
    return values[static_cast<std::size_t>(output_)];
  }

 private:
  struct Node {
    std::shared_ptr<nn::Module> module;
    Run run;
    std::vector<Operand> operands;
  };
  std::vector<Node> nodes_;
  int output_ = 0;
};

// ---- parsing ------------------------------------------------------------------------

bool valid_name(const std::string& n) {
  if (n.empty() || n.front() == '.' || n.back() == '.' || n.find("..") != std::string::npos) return false;
  if (!std::isalpha(static_cast<unsigned char>(n.front())) && n.front() != '_') return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
  });
}

struct GeneratorInfo {
  std::string_view name;
  std::vector<Field> fields;
};

const std::vector<GeneratorInfo>& generators() {
  using T = Type;
  static const std::vector<GeneratorInfo> table = {
      {"spiral", {{"n_per_class", T::count}, {"classes", T::count}, {"noise", T::number}}},
      {"blobs", {{"n_per_class", T::count}, {"classes", T::count}, {"dims", T::count}, {"spread", T::positive}}},
      {"images", {{"n", T::count}, {"classes", T::count}, {"channels", T::count}, {"size", T::count}}},
      {"sequences", {{"n", T::count}, {"length", T::count}, {"vocab", T::count}}},
  };
  return table;
}

DataSpec parse_data(const json& d, const std::string& source, const std::string& folder) {
  const std::string where = source + ": \"data\"";
  if (!d.is_object()) fail(where, "must be an object: {\"generator\": \"spiral\", ...} or {\"file\": \"samples.json\"}");
  DataSpec spec;
  if (d.contains("x") || d.contains("y")) {  // the samples inline, as a data file holds them
    check_fields(d, {{"x", Type::array, true}, {"y", Type::array, true}, {"dtype", Type::text}}, where);
    spec.samples = d;
    return spec;
  }
  if (d.contains("file")) {
    check_fields(d, {{"file", Type::text, true}}, where);
    const std::filesystem::path p(d["file"].get<std::string>());
    spec.file = (p.is_absolute() ? p : std::filesystem::path(folder) / p).string();
    return spec;
  }
  if (!d.contains("generator"))
    fail(where, "missing field \"generator\" (spiral, blobs, images, sequences), \"file\", or the samples "
                "themselves, \"x\" and \"y\"");
  if (!d["generator"].is_string()) fail(where, "field \"generator\" must be a string");
  spec.generator = d["generator"].get<std::string>();
  std::vector<std::string_view> names;
  for (const GeneratorInfo& g : generators()) names.push_back(g.name);
  const auto g = std::find_if(generators().begin(), generators().end(),
                              [&](const GeneratorInfo& x) { return x.name == spec.generator; });
  if (g == generators().end())
    fail(where, "field \"generator\": unknown generator " + in_quotes(spec.generator) + did_you_mean(spec.generator, names) +
                    "; generators: " + list(names));
  check_fields(d, g->fields, where + " (" + spec.generator + ")", {"generator"});
  spec.params = d;
  return spec;
}

ConstantSpec parse_constant(const std::string& name, const json& c, const std::string& source) {
  const std::string where = source + ": constant " + in_quotes(name);
  if (!valid_name(name)) fail(where, "a name is letters, digits, '_' and '.', starting with a letter");
  if (name == "input") fail(where, "\"input\" is the model's input; choose another name");
  if (!c.is_object()) fail(where, "must be an object: {\"value\": 0.125}, {\"shape\": [...], \"fill\": 1}, "
                                  "{\"shape\": [...], \"values\": [...]}, {\"causal\": T} or {\"arange\": n}");
  ConstantSpec out;
  out.name = name;
  if (c.contains("value")) {
    check_fields(c, {{"value", Type::number, true}}, where);
    out.scalar = c["value"].get<double>();
  } else if (c.contains("causal")) {
    check_fields(c, {{"causal", Type::count, true}}, where);
    const auto t = c["causal"].get<std::int64_t>();
    std::vector<float> m(static_cast<std::size_t>(t * t), 0.0f);
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = i + 1; j < t; ++j) m[static_cast<std::size_t>(i * t + j)] = 1.0f;
    out.tensor = Tensor::from(m, {t, t});
  } else if (c.contains("arange")) {
    check_fields(c, {{"arange", Type::count, true}}, where);
    out.tensor = Tensor::arange(c["arange"].get<std::int64_t>(), DType::i64);
  } else if (c.contains("shape")) {
    check_fields(c, {{"shape", Type::shape, true}, {"fill", Type::number}, {"values", Type::numbers}}, where);
    Shape shape = c["shape"].get<Shape>();
    if (std::find(shape.begin(), shape.end(), -1) != shape.end()) fail(where, "field \"shape\": a constant's sizes are all known; no -1");
    if (c.contains("fill") == c.contains("values")) fail(where, "give one of \"fill\" (a number) or \"values\" (numbers)");
    if (c.contains("fill")) {
      out.tensor = Tensor::full(shape, c["fill"].get<double>());
    } else {
      const auto values = c["values"].get<std::vector<double>>();
      if (static_cast<std::int64_t>(values.size()) != numel(shape))
        fail(where, "field \"values\": " + std::to_string(values.size()) + " numbers for shape " + to_string(shape) +
                        " (" + std::to_string(numel(shape)) + ")");
      out.tensor = Tensor::from(values, shape, DType::f32);
    }
  } else {
    fail(where, "give \"value\", \"shape\" (with \"fill\" or \"values\"), \"causal\" or \"arange\"");
  }
  return out;
}

NodeSpec parse_node(const json& n, std::size_t index, const std::string& source) {
  const std::string at = source + ": node " + std::to_string(index + 1);
  if (!n.is_object()) fail(at, "must be an object with \"name\" and \"kind\"");
  if (!n.contains("name") || !n["name"].is_string()) fail(at, "missing field \"name\" (a string)");
  NodeSpec spec;
  spec.name = n["name"].get<std::string>();
  const std::string where = source + ": node " + in_quotes(spec.name);
  if (!valid_name(spec.name))
    fail(where, "field \"name\": letters, digits, '_' and '.' (dots group nodes into blocks), starting with a letter");
  if (!n.contains("kind") || !n["kind"].is_string()) fail(where, "missing field \"kind\" (a string, such as \"linear\")");
  spec.kind = n["kind"].get<std::string>();
  const Kind* kind = find_kind(spec.kind);
  if (!kind)
    fail(where, "field \"kind\": unknown node kind " + in_quotes(spec.kind) + did_you_mean(spec.kind, kind_names()) +
                    "; `ampcheck ops --nodes` lists the kinds");
  const std::string here = where + " (" + spec.kind + ")";
  if (n.contains("input") && n.contains("inputs")) fail(here, "give \"input\" or \"inputs\", not both");
  if (n.contains("input")) {
    if (!n["input"].is_string()) fail(here, "field \"input\" must be a node or constant name");
    spec.inputs = {n["input"].get<std::string>()};
  } else if (n.contains("inputs")) {
    if (!valid(n["inputs"], Type::texts) || n["inputs"].empty())
      fail(here, "field \"inputs\" must be an array of node or constant names");
    spec.inputs = n["inputs"].get<std::vector<std::string>>();
  }
  check_fields(n, kind->fields, here, {"name", "kind", "input", "inputs"});
  spec.fields = json::object();
  for (const Field& f : kind->fields)
    if (n.contains(f.name)) spec.fields[std::string(f.name)] = n[std::string(f.name)];
  return spec;
}

// References: inputs name "input", a constant or an earlier node; constant-valued
// fields name a tensor constant. The arity fits the kind.
void check_references(const ModelFile& m) {
  std::set<std::string> constants, scalars, seen;
  for (const ConstantSpec& c : m.constants) (c.scalar ? scalars : constants).insert(c.name);
  std::set<std::string> all;
  for (const NodeSpec& n : m.nodes) all.insert(n.name);
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    const NodeSpec& n = m.nodes[i];
    const std::string where = m.source + ": node " + in_quotes(n.name) + " (" + n.kind + ")";
    if (n.name == "input") fail(where, "field \"name\": \"input\" is the model's input; choose another name");
    if (constants.count(n.name) || scalars.count(n.name)) fail(where, "field \"name\": a constant has this name");
    if (seen.count(n.name)) fail(where, "field \"name\": a second node with this name");
    const Kind& k = *find_kind(n.kind);
    const auto count = static_cast<int>(n.inputs.empty() ? 1 : n.inputs.size());
    if (count < k.min_inputs || count > k.max_inputs)
      fail(where, "field \"inputs\": " + n.kind + " takes " +
                      (k.min_inputs == k.max_inputs ? std::to_string(k.min_inputs)
                                                    : std::to_string(k.min_inputs) + " to " + std::to_string(k.max_inputs)) +
                      " input(s), got " + std::to_string(count));
    const bool arithmetic = n.kind == "add" || n.kind == "sub" || n.kind == "mul" || n.kind == "div";
    for (std::size_t r = 0; r < n.inputs.size(); ++r)
      if (scalars.count(n.inputs[r]) && !(arithmetic && r == 1))
        fail(where, "field \"inputs\": " + in_quotes(n.inputs[r]) +
                        " is a scalar constant; only add, sub, mul and div take one, as their second input");
    for (const std::string& ref : n.inputs) {
      if (ref == "input" || seen.count(ref) || constants.count(ref) || scalars.count(ref)) continue;
      std::vector<std::string_view> known = {"input"};
      for (const std::string& s : seen) known.push_back(s);
      for (const ConstantSpec& c : m.constants) known.push_back(c.name);
      if (all.count(ref))
        fail(where, "field \"inputs\": " + in_quotes(ref) + " is defined later; nodes run in file order, so move it up");
      fail(where, "field \"inputs\": " + in_quotes(ref) + " is neither an earlier node nor a constant" + did_you_mean(ref, known));
    }
    for (const auto& item : n.fields.items()) {
      const std::string& key = item.key();  // named: the lambda below captures it
      const json& value = item.value();
      const auto f = std::find_if(k.fields.begin(), k.fields.end(), [&](const Field& x) { return x.name == key; });
      if (f->type != Type::constant) continue;
      const auto ref = value.get<std::string>();
      if (scalars.count(ref)) fail(where, "field " + in_quotes(key) + ": " + in_quotes(ref) + " is a scalar; a tensor constant is needed");
      if (!constants.count(ref)) fail(where, "field " + in_quotes(key) + ": no constant named " + in_quotes(ref));
    }
    seen.insert(n.name);
  }
  if (!m.output.empty() && !all.count(m.output)) {
    std::vector<std::string_view> known(seen.begin(), seen.end());
    fail(m.source, "field \"output\": no node named " + in_quotes(m.output) + did_you_mean(m.output, known));
  }
}

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFileError(what + " " + in_quotes(path) + " cannot be read; check the path");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string shape_text(const Tensor& t) {
  if (!t.defined()) return "scalar";
  std::string s = "[N";
  for (std::int64_t d = 1; d < t.dim(); ++d) s += ", " + std::to_string(t.size(d));
  return s + "]";
}

}  // namespace

// ---- public -----------------------------------------------------------------------

std::vector<std::string_view> names_of(const ModelCatalog& catalog) {
  std::vector<std::string_view> n;
  for (const NamedModel& m : catalog) n.push_back(m.name);
  return n;
}

bool is_model_path(std::string_view model) {
  return model.find('/') != std::string_view::npos ||
         (model.size() > 5 && model.substr(model.size() - 5) == ".json") ||
         (model.size() > 5 && model.substr(model.size() - 5) == ".onnx");
}

bool is_array_data(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  std::error_code ec;
  return ext == ".npz" || ext == ".npy" || ext == ".pb" || std::filesystem::is_directory(p, ec);
}

namespace {

void check_loss_kind(const std::string& kind, const std::string& where) {
  if (kind != "cross_entropy" && kind != "mse")
    fail(where, "unknown loss " + in_quotes(kind) + did_you_mean(kind, {"cross_entropy", "mse"}) +
                    "; losses: cross_entropy, mse");
}

ModelFile onnx_model_file(const std::string& path) {
  ModelFile m;
  m.source = path;
  m.name = std::filesystem::path(path).stem().string();
  m.onnx = path;
  m.onnx_graph = std::make_shared<const onnx_file::Graph>(onnx_file::load(path));
  const onnx_file::Graph& g = *m.onnx_graph;
  const std::string framework = producer_framework(g);
  const std::string from = !g.producer.empty() ? g.producer + (g.producer_version.empty() ? "" : " " + g.producer_version)
                           : framework == "paddle" ? "PaddlePaddle (paddle2onnx)"
                                                   : "";
  m.description = m.name + " (ONNX" + (from.empty() ? "" : " from " + from) +
                  ", opset " + std::to_string(g.opset) + ", " + std::to_string(g.nodes.size()) + " nodes)";
  return m;
}

}  // namespace

void apply(ModelFile& file, const ModelOverrides& o) {
  if (!o.data.empty()) {
    file.data = DataSpec{};
    file.data.file = o.data;
  }
  if (!o.loss.empty()) {
    check_loss_kind(o.loss, "--loss");
    file.loss.kind = o.loss;
    if (o.loss == "mse") file.loss.label_smoothing = 0;
  }
  if (!o.output.empty()) {
    if (!file.onnx_graph) {
      bool known = false;
      for (const NodeSpec& n : file.nodes) known = known || n.name == o.output;
      if (!known) fail(file.source, "--output " + in_quotes(o.output) + ": no node of that name");
    }
    file.output = o.output;
  }
}

std::vector<std::string> module_names(const ModelFile& file) {
  std::vector<std::string> out;
  if (file.onnx_graph) {
    std::set<std::string> seen;
    for (const onnx_file::Node& n : file.onnx_graph->nodes) {
      std::string m = module_path_of(*file.onnx_graph, n);
      if (seen.insert(m).second) out.push_back(std::move(m));
    }
    return out;
  }
  for (const NodeSpec& n : file.nodes) out.push_back(n.name);
  return out;
}

ModelFile load_model(const std::string& model, const ModelCatalog& catalog) {
  if (model.size() > 5 && model.substr(model.size() - 5) == ".onnx") return onnx_model_file(model);
  if (is_model_path(model)) {
    const std::string text = read_text(model, "model file");
    return parse_model(text, model, std::filesystem::path(model).parent_path().string());
  }
  for (const NamedModel& b : catalog)
    if (b.name == model) return parse_model(std::string(b.text), "sample " + std::string(b.name));
  const std::vector<std::string_view> known = names_of(catalog);
  if (known.empty())
    throw ModelFileError("unknown model " + in_quotes(model) + ": a model file path (.json, .onnx) was expected (docs/model-format.md)");
  throw ModelFileError("unknown model " + in_quotes(model) + did_you_mean(model, known) + "; samples: " + list(known) +
                       ", or a model file path (docs/model-format.md)");
}

namespace {
constexpr std::size_t kMaxNesting = 32;
// How deeply arrays and objects nest in `doc` (a scalar is 0), walked without recursion,
// and no further than one level past kMaxNesting.
std::size_t nesting_depth(const json& doc) {
  std::size_t deepest = 0;
  std::vector<std::pair<const json*, std::size_t>> pending = {{&doc, 0}};
  while (!pending.empty()) {
    const auto [j, depth] = pending.back();
    pending.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    if (deepest > kMaxNesting) return deepest;
    for (const json& child : *j) pending.emplace_back(&child, depth + 1);
  }
  return deepest;
}
}  // namespace

ModelFile parse_model(const std::string& text, const std::string& source, const std::string& folder) {
  json doc;
  try {
    doc = parse_json_text(text, source);
  } catch (const JsonTextError& e) {
    throw ModelFileError(e.what());  // names the file, the line and column, and the fix
  }
  if (!doc.is_object()) fail(source, "a model file is a JSON object");
  // Parts of the document are copied (a node's fields, the inline samples), and a JSON copy
  // recurses once per level: a document nested deeper than any model file is refused first.
  if (const std::size_t depth = nesting_depth(doc); depth > kMaxNesting)
    fail(source, "nested more than " + std::to_string(depth - 1) + " levels deep (arrays and objects); a model file "
                 "needs a handful (inline samples of images: 7)");
  if (!doc.contains("ampcheck_model"))
    fail(source, "not an ampcheck model file: it needs \"ampcheck_model\": 1 (docs/model-format.md)");
  if (doc["ampcheck_model"] != 1)
    fail(source, "field \"ampcheck_model\": version " + doc["ampcheck_model"].dump() + " is not supported; this ampcheck reads 1");
  const std::vector<Field> top = {{"ampcheck_model", Type::integer, true},
                                  {"name", Type::text},
                                  {"description", Type::text},
                                  {"data", Type::text},
                                  {"constants", Type::text},
                                  {"nodes", Type::text},
                                  {"onnx", Type::text},
                                  {"output", Type::text},
                                  {"loss", Type::text},
                                  {"train", Type::text},
                                  {"amp", Type::text},
                                  {"allow_inf", Type::texts},
                                  {"expect", Type::text}};
  std::vector<std::string_view> top_names;
  for (const Field& f : top) top_names.push_back(f.name);
  for (const auto& [key, value] : doc.items())
    if (std::find(top_names.begin(), top_names.end(), key) == top_names.end())
      fail(source, "unknown field " + in_quotes(key) + did_you_mean(key, top_names) + "; fields: " + list(top_names));
  for (const Field& f : top)
    if (f.required && !doc.contains(f.name)) fail(source, "missing field " + in_quotes(f.name));

  for (const char* key : {"name", "description", "output"})
    if (doc.contains(key) && !doc[key].is_string())
      fail(source, "field " + in_quotes(key) + " must be a string, got " + doc[key].dump());
  ModelFile m;
  m.source = source;
  m.name = get<std::string>(doc, "name", std::filesystem::path(source).stem().string());
  m.description = get<std::string>(doc, "description", "");
  if (doc.contains("data")) m.data = parse_data(doc["data"], source, folder);
  else if (!doc.contains("onnx")) fail(source, "missing field \"data\"");
  if (doc.contains("constants")) {
    if (!doc["constants"].is_object()) fail(source, "field \"constants\" must be an object of named constants");
    for (const auto& [name, c] : doc["constants"].items()) m.constants.push_back(parse_constant(name, c, source));
  }
  if (doc.contains("onnx") == doc.contains("nodes"))
    fail(source, "a model file has either \"nodes\" (the graph, written out) or \"onnx\" (the path of an ONNX model)");
  if (doc.contains("onnx")) {
    if (!doc["onnx"].is_string()) fail(source, "field \"onnx\" must be the path of an .onnx file");
    if (doc.contains("constants")) fail(source, "field \"constants\" is for \"nodes\"; an ONNX model has its own");
    const std::filesystem::path p(doc["onnx"].get<std::string>());
    const std::string name = m.name, description = m.description;
    const DataSpec data = m.data;
    m = onnx_model_file((p.is_absolute() ? p : std::filesystem::path(folder) / p).string());
    m.source = source;
    m.name = doc.contains("name") ? name : m.name;
    if (doc.contains("description")) m.description = description;
    m.data = data;
    if (doc.contains("output")) {
      if (!doc["output"].is_string()) fail(source, "field \"output\" must be the name of a value of the ONNX graph");
      m.output = doc["output"].get<std::string>();
    }
  } else {
    const json& nodes = doc["nodes"];
    if (!nodes.is_array() || nodes.empty()) fail(source, "field \"nodes\" must be a non-empty array of nodes");
    for (std::size_t i = 0; i < nodes.size(); ++i) m.nodes.push_back(parse_node(nodes[i], i, source));
    if (doc.contains("output")) {
      if (!doc["output"].is_string()) fail(source, "field \"output\" must be a node name");
      m.output = doc["output"].get<std::string>();
    }
    check_references(m);
  }

  if (doc.contains("loss")) {
    const json& l = doc["loss"];
    const std::string where = source + ": \"loss\"";
    if (l.is_string()) {
      m.loss.kind = l.get<std::string>();
    } else if (l.is_object()) {
      check_fields(l, {{"kind", Type::text, true}, {"label_smoothing", Type::fraction}, {"weight", Type::positive}}, where);
      m.loss.kind = l["kind"].get<std::string>();
      m.loss.label_smoothing = get<double>(l, "label_smoothing", 0);
      m.loss.weight = get<double>(l, "weight", 1);
    } else {
      fail(where, "must be \"cross_entropy\", \"mse\" or {\"kind\": ..., \"label_smoothing\": ..., \"weight\": ...}");
    }
    check_loss_kind(m.loss.kind, where);
    if (m.loss.kind == "mse" && m.loss.label_smoothing != 0) fail(where, "label_smoothing is for cross_entropy");
  }
  if (doc.contains("train")) {
    const json& t = doc["train"];
    const std::string where = source + ": \"train\"";
    if (!t.is_object()) fail(where, "must be an object");
    check_fields(t, {{"steps", Type::count}, {"batch", Type::count}, {"lr", Type::positive}, {"optimizer", Type::text},
                     {"weight_decay", Type::number}, {"momentum", Type::fraction}},
                 where);
    m.train.steps = get<std::int64_t>(t, "steps", m.train.steps);
    m.train.batch = get<std::int64_t>(t, "batch", m.train.batch);
    m.train.lr = get<double>(t, "lr", m.train.lr);
    m.train.optimizer = get<std::string>(t, "optimizer", m.train.optimizer);
    m.train.weight_decay = get<double>(t, "weight_decay", 0);
    m.train.momentum = get<double>(t, "momentum", 0);
    const std::vector<std::string_view> optimizers = {"adam", "adamw", "sgd"};
    if (std::find(optimizers.begin(), optimizers.end(), m.train.optimizer) == optimizers.end())
      fail(where, "field \"optimizer\": unknown optimizer " + in_quotes(m.train.optimizer) +
                      did_you_mean(m.train.optimizer, optimizers) + "; optimizers: adam, adamw, sgd");
    if (m.train.weight_decay < 0) fail(where, "field \"weight_decay\" must be >= 0");
    if (t.contains("momentum") && m.train.optimizer != "sgd")
      fail(where, "field \"momentum\" is for \"optimizer\": \"sgd\" (Adam's betas are fixed at 0.9, 0.999)");
  }
  if (doc.contains("amp")) {
    if (!doc["amp"].is_object()) fail(source + ": \"amp\"", "must be an object in any config file's key names (docs/amp.md)");
    try {
      m.amp = amp::parse_config(doc["amp"].dump(), source + ": \"amp\"");
    } catch (const amp::ConfigError& e) {
      throw ModelFileError(e.what());
    }
  }
  if (doc.contains("allow_inf")) {
    const json& a = doc["allow_inf"];
    if (!valid(a, Type::texts) || a.empty())
      fail(source, "field \"allow_inf\" must be a non-empty array of op names or module paths whose Inf/-Inf "
                   "is intended (e.g. [\"masked_fill\"] or [\"attn.mask\"]), got " + a.dump());
    for (const json& name : a) m.allow_inf.push_back(name.get<std::string>());
  }
  if (doc.contains("expect")) {
    const json& e = doc["expect"];
    const std::string where = source + ": \"expect\"";
    if (!e.is_object()) fail(where, "must be an object");
    check_fields(e, {{"accuracy", Type::unit}, {"tolerance", Type::unit}, {"failure", Type::text},
                     {"culprit", Type::texts}, {"cure", Type::text}, {"bisect_args", Type::texts}},
                 where);
    if (e.contains("cure") && e["cure"] != "scaler" && e["cure"] != "black_list" && e["cure"] != "fp8_keep")
      fail(where, "field \"cure\" is \"black_list\" (the culprits in fp32), \"scaler\" (a loss scaler "
                  "setting, no black list) or \"fp8_keep\" (the culprits, linear layers, kept out of fp8), got " +
                      e["cure"].dump());
    if (e.contains("accuracy")) m.expect.accuracy = e["accuracy"].get<double>();
    if (e.contains("tolerance")) m.expect.tolerance = e["tolerance"].get<double>();
    m.expect.failure = get<std::string>(e, "failure", "");
    if (e.contains("culprit")) m.expect.culprit = e["culprit"].get<std::vector<std::string>>();
    if (e.contains("bisect_args")) m.expect.bisect_args = e["bisect_args"].get<std::vector<std::string>>();
    m.expect.cure = get<std::string>(e, "cure", m.expect.culprit.empty() ? "" : "black_list");
  }
  return m;
}

std::optional<std::int64_t> fixed_batch(const ModelFile& file) {
  if (!file.onnx_graph) return std::nullopt;
  std::optional<std::int64_t> batch;
  std::string first;
  for (const onnx_file::ValueInfo& in : file.onnx_graph->inputs) {
    if (!in.shape || in.shape->empty() || (*in.shape)[0] <= 0) continue;
    if (batch && *batch != (*in.shape)[0])
      fail(file.source, "the model's inputs fix different batch sizes: " + in_quotes(first) + " " +
                            std::to_string(*batch) + ", " + in_quotes(in.name) + " " + std::to_string((*in.shape)[0]) +
                            "; " + dynamic_batch_hint(file, in.name));
    batch = (*in.shape)[0];
    if (first.empty()) first = in.name;
  }
  return batch;
}

std::string dynamic_batch_hint(const ModelFile& file, const std::string& input) {
  std::string dims = "[None";
  std::string framework;
  if (file.onnx_graph) {
    framework = producer_framework(*file.onnx_graph);
    for (const onnx_file::ValueInfo& in : file.onnx_graph->inputs)
      if (in.name == input && in.shape)
        for (std::size_t d = 1; d < in.shape->size(); ++d)
          dims += ", " + ((*in.shape)[d] < 0 ? std::string("None") : std::to_string((*in.shape)[d]));
  }
  dims += "]";
  const std::string q = in_quotes(input);
  if (framework == "pytorch")
    return "to train at other batch sizes, export with a dynamic batch axis: torch.onnx.export(..., input_names=[" + q +
           "], dynamic_axes={" + q + ": {0: \"batch\"}})";
  if (framework == "paddle")
    return "to train at other batch sizes, export with a dynamic batch: paddle.onnx.export(layer, path, "
           "input_spec=[paddle.static.InputSpec(shape=" + dims + ", name=" + q + ")])";
  if (framework == "tensorflow")
    return "to train at other batch sizes, convert with a dynamic batch: tf2onnx.convert.from_keras(model, "
           "input_signature=[tf.TensorSpec(" + dims + ", name=" + q + ")])";
  return "to train at other batch sizes, export the model with a symbolic (dynamic) first dimension for " + q;
}

Dataset make_data(const ModelFile& file, std::uint64_t seed) {
  const DataSpec& d = file.data;
  const std::string where = file.source + ": \"data\"";
  if (d.file.empty() && d.generator.empty() && d.samples.is_null())
    fail(file.source, "no data: give the inputs and labels with --data data.npz (arrays \"input\" and \"labels\"), "
                      "or a model file's \"data\" (docs/onnx.md)");
  try {
    if (!d.file.empty() && is_array_data(d.file)) {
      std::vector<std::string> inputs = {"input"};
      if (file.onnx_graph && !file.onnx_graph->inputs.empty()) {
        inputs.clear();
        for (const auto& v : file.onnx_graph->inputs) inputs.push_back(v.name);
      }
      return dataset_of(read_arrays(d.file), d.file, inputs);
    }
    if (!d.file.empty()) return load_samples(d.file);
    if (!d.samples.is_null()) return samples_from_json(d.samples, "inline samples");  // make_data names the file
    const json& p = d.params;
    if (d.generator == "spiral")
      return spiral(get<std::int64_t>(p, "n_per_class", 100), get<std::int64_t>(p, "classes", 3), get<double>(p, "noise", 0.2), seed);
    if (d.generator == "blobs")
      return blobs(get<std::int64_t>(p, "n_per_class", 100), get<std::int64_t>(p, "classes", 3),
                   get<std::int64_t>(p, "dims", 2), get<double>(p, "spread", 1.0), seed);
    if (d.generator == "images")
      return images(get<std::int64_t>(p, "n", 256), get<std::int64_t>(p, "classes", 4), get<std::int64_t>(p, "channels", 3),
                    get<std::int64_t>(p, "size", 16), seed);
    return sequences(get<std::int64_t>(p, "n", 512), get<std::int64_t>(p, "length", 8), get<std::int64_t>(p, "vocab", 8), seed);
  } catch (const std::invalid_argument& e) {
    fail(where, e.what());
  }
}

namespace {

// The model's output on the probe batch must be the loss's [N, classes] scores.
void check_output(const ModelFile& file, const Tensor& y, const Dataset& probe, const Dataset& data,
                  const std::string& out_name) {
  const std::string what = file.onnx_graph ? "ONNX value " : "node ";
  const std::string fix = file.onnx_graph ? "; choose another output with --output or the model file's \"output\""
                                          : " (end with a linear node, or flatten)";
  if (y.dim() != 2 || y.size(0) != probe.size() || !is_floating(y.dtype()))
    fail(file.source, "field \"output\": " + what + in_quotes(out_name) + " gives " +
                          (file.onnx_graph ? to_string(y.shape()) + " for " + std::to_string(probe.size()) + " samples" : shape_text(y)) +
                          "; the loss needs floating [N, classes]" + fix);
  const std::vector<std::int64_t> labels = data.y.to_i64();
  if (labels.empty()) return;
  const auto [low, high] = std::minmax_element(labels.begin(), labels.end());
  // Labels read from a data file are that file's to fix; a generator's, the model file's.
  const std::string labels_from = file.data.file.empty() ? file.source : file.data.file;
  if (*low < 0)
    fail(labels_from, "label " + std::to_string(*low) + " (row " + std::to_string(low - labels.begin()) +
                          ") is negative; labels are class indices 0.." + std::to_string(y.size(1) - 1));
  // Compared as the largest index, not as a class count (INT64_MAX + 1 would wrap).
  if (*high >= y.size(1)) {
    if (file.data.file.empty())  // a generator's classes (a handful): the model is what to fix
      fail(file.source, "field \"output\": " + what + in_quotes(out_name) + " gives " + std::to_string(y.size(1)) +
                            " scores per sample, but the data has " + std::to_string(*high + 1) + " classes");
    fail(labels_from, "label " + std::to_string(*high) + " (row " + std::to_string(high - labels.begin()) + ") is not a class of " +
                          file.source + "'s " + what + in_quotes(out_name) + ", which gives " + std::to_string(y.size(1)) +
                          " scores per sample: labels are class indices 0.." + std::to_string(y.size(1) - 1) +
                          "; fix the labels" + fix);
  }
}

// Whether an error of the first forward is a mismatch in the batch dimension, which a size
// fixed at export would explain: a Reshape of the batch's `rows` to a target with another
// fixed leading size ("cannot reshape [2, 8] to [4, 2, 4]"), or two shapes of one rank that
// do not broadcast in their leading dim. Only the reason is read (after the last "): ", the
// end of the node's label or of its inputs' shapes).
bool batch_size_mismatch(const std::string& what, std::int64_t rows) {
  const std::size_t cut = what.rfind("): ");
  const std::string reason = cut == std::string::npos ? what : what.substr(cut + 3);
  std::vector<Shape> shapes;
  for (std::size_t at = reason.find('['); at != std::string::npos; at = reason.find('[', at + 1)) {
    const std::size_t end = reason.find(']', at);
    if (end == std::string::npos) break;
    Shape s;
    std::istringstream in(reason.substr(at + 1, end - at - 1));
    for (std::string part; std::getline(in, part, ',');) {
      try {
        s.push_back(std::stoll(part));
      } catch (const std::exception&) {
        s.clear();
        break;
      }
    }
    shapes.push_back(s);
  }
  auto batch_led = [&](const Shape& s) { return s.size() >= 2 && s[0] == rows; };
  auto other_led = [&](const Shape& s) { return !s.empty() && s[0] != rows && s[0] > 1; };
  if (reason.find("cannot reshape") != std::string::npos)
    return shapes.size() >= 2 && batch_led(shapes[0]) && other_led(shapes[1]);
  if (reason.find("broadcast") == std::string::npos) return false;
  for (const Shape& a : shapes)
    for (const Shape& b : shapes)
      if (a.size() == b.size() && batch_led(a) && other_led(b)) return true;
  return false;
}

std::shared_ptr<nn::Module> build_onnx_model(const ModelFile& file, const Dataset& data, Generator& gen) {
  const onnx_file::Graph& g = *file.onnx_graph;
  if (g.inputs.empty())
    fail(file.source, "the graph has no input (every value is an initializer or a constant): ampcheck feeds the data to "
                      "the graph's first input; export the model with its input (torch.onnx.export(model, (x,), ...))");
  auto model = build_onnx(file.onnx_graph, file.output, gen.seed());
  // A first forward on two rows, or on the batch the export fixed.
  const std::optional<std::int64_t> fixed = fixed_batch(file);
  if (fixed && data.size() < *fixed)
    fail(file.source, "the model's input " + in_quotes(g.inputs.at(0).name) + " has a fixed batch size of " +
                          std::to_string(*fixed) + ", but the data has " + std::to_string(data.size()) +
                          " rows: give at least " + std::to_string(*fixed) + " rows, or " +
                          dynamic_batch_hint(file, g.inputs.at(0).name));
  const Dataset probe = batch(data, 0, fixed ? *fixed : std::min<std::int64_t>(2, data.size()));
  const onnx_file::ValueInfo& in = g.inputs.at(0);
  const bool wants_int = in.elem_type.find("int") != std::string::npos;
  if (!in.elem_type.empty() && wants_int != (probe.x.dtype() == DType::i64))
    fail(file.source, "the model's input " + in_quotes(in.name) + " is " + in.elem_type + ", the data's inputs are " +
                          std::string(name(probe.x.dtype())) + "; save them as " + (wants_int ? "int64" : "float32"));
  if (in.shape) {
    const Shape& want = *in.shape;
    bool fits = want.size() == static_cast<std::size_t>(probe.x.dim());
    for (std::size_t d = 1; fits && d < want.size(); ++d) fits = want[d] < 0 || want[d] == probe.x.size(static_cast<std::int64_t>(d));
    if (!fits) {
      std::string dims = "[";
      for (std::size_t d = 0; d < want.size(); ++d) dims += (d ? ", " : "") + (want[d] < 0 ? std::string("?") : std::to_string(want[d]));
      fail(file.source, "the model's input " + in_quotes(in.name) + " is " + dims + "], the data's rows are " +
                            to_string(probe.x.shape()) + " (with " + std::to_string(probe.size()) + " rows)");
    }
  }
  Tensor y;
  {
    NoGradGuard no_grad;
    model->eval();  // no running-stat updates, no dropout, while probing
    const Tensor& x = probe.x;
    try {
      set_side_inputs(*model, probe.more);
      y = (*model)(x);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      fail(file.source, what + (batch_size_mismatch(what, x.size(0))
                                    ? " (on a first batch of " + std::to_string(x.size(0)) +
                                          " rows; a size fixed at export, without dynamic_axes, would do this)"
                                    : std::string()));
    }
  }
  const std::string out_name = file.output.empty() ? (g.outputs.empty() ? "" : g.outputs[0].name) : file.output;
  check_output(file, y, probe, data, out_name);
  model->train();
  return model;
}

}  // namespace

std::shared_ptr<nn::Module> build(const ModelFile& file, const Dataset& data, Generator& gen) {
  if (file.onnx_graph) return build_onnx_model(file, data, gen);
  auto model = std::make_shared<GraphModel>(file.name);
  std::map<std::string, int> index;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
  for (const ConstantSpec& c : file.constants) {
    if (c.scalar) scalars[c.name] = *c.scalar;
    else tensors[c.name] = model->constant(c.tensor.clone());  // the model's own: it moves with it
  }
  const Dataset probe = batch(data, 0, std::min<std::int64_t>(2, data.size()));
  NoGradGuard no_grad;
  std::vector<Tensor> values;
  for (std::size_t i = 0; i < file.nodes.size(); ++i) {
    const NodeSpec& n = file.nodes[i];
    const std::string where = file.source + ": node " + in_quotes(n.name) + " (" + n.kind + ")";
    std::vector<std::string> refs = n.inputs;
    if (refs.empty()) refs = {i == 0 ? "input" : file.nodes[i - 1].name};
    std::vector<Operand> operands;
    std::vector<Tensor> in;
    std::vector<std::optional<double>> in_scalars;
    for (const std::string& r : refs) {
      Operand o;
      if (r == "input") {
        in.push_back(probe.x);
      } else if (auto s = scalars.find(r); s != scalars.end()) {
        o.scalar = s->second;
        in.push_back(Tensor{});
      } else if (auto t = tensors.find(r); t != tensors.end()) {
        o.constant = t->second;
        in.push_back(t->second);
      } else {
        o.node = index.at(r);
        in.push_back(values[static_cast<std::size_t>(o.node)]);
      }
      in_scalars.push_back(o.scalar);
      operands.push_back(std::move(o));
    }
    if (n.kind == "embedding" && refs[0] == "input" && data.x.dtype() == DType::i64) {
      const std::vector<std::int64_t> idx = data.x.to_i64();
      const std::int64_t num = n.fields.value("num", std::int64_t{0});
      if (!idx.empty() && *std::max_element(idx.begin(), idx.end()) >= num)
        fail(where, "field \"num\": the data holds index " + std::to_string(*std::max_element(idx.begin(), idx.end())) +
                        ", but the table has " + std::to_string(num) + " rows; \"num\" must exceed every index");
    }
    const NodeContext ctx{n, in, in_scalars, tensors, gen, where};
    Built b;
    try {
      b = find_kind(n.kind)->build(ctx);
    } catch (const ModelFileError&) {
      throw;
    } catch (const std::exception& e) {
      fail(where, e.what());
    }
    if (!b.module) b.module = std::make_shared<OpNode>(n.kind, b.run);
    // The module is eval (no running-stat updates, no dropout) and unobserved while probing.
    b.module->eval();
    model->add(n.name, b.module, b.run, std::move(operands));
    try {
      values.push_back(model->run_node(i, probe.x, values));
    } catch (const std::exception& e) {
      std::string shapes;
      for (std::size_t k = 0; k < refs.size(); ++k) {
        const std::string shape = in_scalars[k]           ? "scalar"
                                  : tensors.count(refs[k]) ? to_string(in[k].shape())
                                                           : shape_text(in[k]);
        shapes += (shapes.empty() ? "" : ", ") + in_quotes(refs[k]) + " " + shape;
      }
      fail(where, "field \"inputs\": does not fit its inputs (" + shapes + "): " + e.what());
    }
    index[n.name] = static_cast<int>(i);
  }
  const int out = file.output.empty() ? static_cast<int>(file.nodes.size()) - 1 : index.at(file.output);
  check_output(file, values[static_cast<std::size_t>(out)], probe, data, file.nodes[static_cast<std::size_t>(out)].name);
  model->set_output(out);
  model->train();
  return model;
}

const std::vector<NodeKindInfo>& node_kinds() {
  static const std::vector<NodeKindInfo> infos = [] {
    std::vector<NodeKindInfo> out;
    for (const Kind& k : kinds()) {
      NodeKindInfo info{k.kind, k.summary, {}};
      for (const Field& f : k.fields) info.fields.push_back(std::string(f.name) + (f.required ? "*" : ""));
      out.push_back(std::move(info));
    }
    return out;
  }();
  return infos;
}

}  // namespace ampcheck::models
