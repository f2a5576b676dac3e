// The importer's inner parts, shared by the files that turn ONNX nodes into registry ops:
// onnx_model.cpp (the table of op types, the model), and a file per op family, each holding
// its builders: onnx_elementwise.cpp (arithmetic, math, comparisons, Cast, Where, the
// activations), onnx_reduce.cpp (Reduce*, CumSum), onnx_shape.cpp (reshapes, Transpose,
// Concat, Split, Slice, Gather, Expand, Tile, Pad, Resize), onnx_constant.cpp (Constant,
// Range, EyeLike, Trilu), onnx_norm.cpp (the normalisations, Softmax), onnx_matmul.cpp
// (MatMul, Gemm), onnx_conv_pool.cpp (convolution and pooling windows), onnx_index.cpp
// (arg-reductions, gathers, scatters, Einsum, the losses) and onnx_recurrent.cpp (LSTM, GRU,
// RNN). Not an API of models/.
//
// A value is a tensor of the model or a host array. Integer and bool values always live on
// the host (token ids, shapes, indices, masks): ampcheck's ops compute in floating point and
// integers have no gradient. An op whose result is integers or bools computed from float
// data (ArgMax, Equal, IsNaN, a Cast to int64, TopK's indices) reads that data to the host
// for each forward (Exec::values), as the framework's op reads it; no gradient flows there,
// as none flows in the framework. Float results stay registry ops, so autograd, the AMP
// policy and the inspector see them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/random.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"

namespace ampcheck::models::onnx_impl {

using onnx_file::Attribute;
using onnx_file::Graph;
using onnx_file::Node;
using onnx_file::OnnxError;

struct Value {
  Tensor t;
  std::shared_ptr<const Array> host;
  bool defined() const { return t.defined() || host != nullptr; }
};

std::string fmt_ints(const std::vector<std::int64_t>& v);
Shape strides_of(const Shape& s);
// Throws std::invalid_argument naming `what` when out of range.
std::int64_t norm_axis(std::int64_t axis, std::int64_t rank, const std::string& what);
Shape broadcast(const Shape& a, const Shape& b);
// The element count of a host array of `shape` about to be made, checked first: a
// negative size, an int64 overflow or more than the memory budget throws
// std::invalid_argument (the node's error, naming the size needed).
std::int64_t host_elements(const Shape& shape);
// For each element of `out` (row-major), the index of the element of `in` it reads when
// `in` broadcasts to `out`.
std::vector<std::int64_t> broadcast_index(const Shape& out, const Shape& in);
// Elements `idx` of `a`, as a new array of `shape`.
Array take(const Array& a, const Shape& shape, const std::vector<std::int64_t>& idx);

// A node's attributes, read the same way by the checks made before anything runs and by
// the builders; a wrongly typed attribute is an OnnxError naming the node.
struct NodeAttrs {
  const Node& node;

  [[noreturn]] void fail(const std::string& msg) const { throw OnnxError(node.label() + ": " + msg); }
  const Attribute* attr(const std::string& name) const;
  std::int64_t attr_i(const std::string& name, std::int64_t fallback) const;
  double attr_f(const std::string& name, double fallback) const;
  std::string attr_s(const std::string& name, const std::string& fallback) const;
  std::optional<std::vector<std::int64_t>> attr_ints(const std::string& name) const;
  std::optional<std::vector<double>> attr_floats(const std::string& name) const;
  std::optional<std::vector<std::string>> attr_strings(const std::string& name) const;
  // Whether output k is named (an omitted optional output is "").
  bool has_output(std::size_t k) const { return k < node.outputs.size() && !node.outputs[k].empty(); }
};

// What a node needs of the model it runs in.
class ExecContext {
 public:
  virtual ~ExecContext() = default;
  virtual Tensor host_tensor(const std::shared_ptr<const Array>& a, Device device) = 0;
  virtual bool consumed(const std::string& value) const = 0;
  virtual bool training() const = 0;
  virtual Generator& generator() = 0;
};

struct Exec : NodeAttrs {
  std::vector<Value> in;
  std::vector<Value> out;
  ExecContext& model;
  Device device;

  bool has(std::size_t i) const { return i < in.size() && in[i].defined(); }
  bool is_host(std::size_t i) const { return has(i) && in[i].host != nullptr; }
  // A host input: a constant, an initializer, or computed on the host (shapes, token ids).
  const Array& host(std::size_t i, std::string_view what) const;
  // Input i as a tensor (a host array becomes one on the model's device).
  Tensor tensor(std::size_t i) const;
  // Input i's values on the host, read from the tensor when it is one: for results that are
  // integers or bools (no gradient flows through what is computed from them).
  std::shared_ptr<const Array> values(std::size_t i, std::string_view what) const;
  Shape shape_of(std::size_t i) const;
  // A one-element float host input's value.
  std::optional<double> scalar(std::size_t i) const;
  // An int list given as an attribute (older opsets) or as a host input (newer ones).
  std::optional<std::vector<std::int64_t>> ints_from(const std::string& attr_name, std::size_t input,
                                                     std::int64_t since_opset) const;
  void set(std::size_t k, Tensor t);
  void set(std::size_t k, Array a);
  void set(std::size_t k, std::shared_ptr<const Array> a);
  // Fails when a node's optional output that the importer does not compute is read.
  void only_outputs(std::size_t n, const std::string& why) const;
  bool training() const { return model.training(); }
  Generator& generator() const { return model.generator(); }
};

using Run = void (*)(Exec&);
// The refusals a node's attributes alone decide (before anything runs): `ops --onnx` lists
// them and the model's construction stops on the first. Null: nothing to check.
using Check = std::optional<OnnxRefusal> (*)(const NodeAttrs&);

struct OpDef {
  OnnxOpInfo info;
  Run tensor;  // with tensors among the inputs; null: always on the host
  Run host;    // every input on the host; null: never on the host
  Check check = nullptr;
};

const OpDef* find_def(std::string_view op_type);

// The ONNX elem types of Cast's `to`.
struct CastTarget {
  bool integer;
  DType dtype;  // floats: f16, bf16, f32, f64; integers: i64
  std::string stored;
};
std::optional<CastTarget> cast_target(std::int64_t to);

// The builders below: op_* take tensors, and host arrays where the table gives them as the
// host form too; host_* take host arrays (and read float data there).

// ---- onnx_attention.cpp: F.scaled_dot_product_attention as PyTorch's exporters write it ----
// The nodes of one such group (indices into the graph's nodes), the last being `out`, the
// MatMul by V; `add` is absent (-1) without a mask, whose value is the Add's input
// mask_input; is_nan and safe_where (the safe softmax's IsNaN and Where) are absent where
// the Softmax feeds the MatMul directly; K's Transpose is the Mul's input k_side.
struct AttentionGroup {
  std::size_t mul_q = static_cast<std::size_t>(-1), transpose_k = static_cast<std::size_t>(-1),
              mul_k = static_cast<std::size_t>(-1), scores = static_cast<std::size_t>(-1),
              add = static_cast<std::size_t>(-1), softmax = static_cast<std::size_t>(-1),
              is_nan = static_cast<std::size_t>(-1), safe_where = static_cast<std::size_t>(-1),
              out = static_cast<std::size_t>(-1);
  std::size_t mask_input = 1, k_side = 0;
  std::vector<std::size_t> nodes() const;  // in the graph's order of the form
};
// Every group of the graph whose intermediate values only the group reads (none of them
// one of `graph_outputs`).
std::vector<AttentionGroup> find_attention(const Graph& g, const std::set<std::string>& graph_outputs);
// The group's output as one scaled_dot_product_attention over the values `value` gives
// (each of the group's inputs is computed by then), or nothing when the values do not
// have the form's meaning: the caller runs the group's nodes instead.
std::optional<Tensor> run_attention(const AttentionGroup& a, const Graph& g,
                                    const std::function<Value(const std::string&)>& value, Device device,
                                    ExecContext& model);

// ---- onnx_elementwise.cpp ----
void op_binary(Exec& e);       // Add, Sub, Mul, Div
void host_binary_op(Exec& e);  // Add, Sub, Mul, Div, Pow, Mod, Max, Min
void op_pow(Exec& e);
void op_mod(Exec& e);
void op_minmax(Exec& e);       // Max, Min
void op_variadic(Exec& e);     // Sum, Mean
void host_variadic(Exec& e);
void op_unary(Exec& e);
void host_unary_op(Exec& e);
void host_compare(Exec& e);    // comparisons and logic
void op_clip(Exec& e);
void host_clip(Exec& e);
void op_where(Exec& e);
void host_where(Exec& e);
void op_identity(Exec& e);
void op_dropout(Exec& e);
void op_cast(Exec& e);         // Cast, CastLike
void host_cast_op(Exec& e);
void op_gelu(Exec& e);
void op_hard_sigmoid(Exec& e);
void op_activation(Exec& e);   // LeakyRelu, PRelu, Elu, Celu, Selu, Softplus, Softsign
void op_threshold(Exec& e);    // ThresholdedRelu, Shrink
std::optional<OnnxRefusal> check_cast(const NodeAttrs& a);
std::optional<OnnxRefusal> check_gelu(const NodeAttrs& a);

// ---- onnx_reduce.cpp ----
void op_reduce(Exec& e);       // every Reduce*
void host_reduce(Exec& e);
void op_cumsum(Exec& e);
void host_cumsum(Exec& e);

// ---- onnx_shape.cpp ----
void op_reshape_like(Exec& e);  // Reshape, Unsqueeze, Squeeze, Flatten
void host_shape_op(Exec& e);
void op_shape(Exec& e);         // Shape, Size
void op_transpose(Exec& e);
void host_transpose(Exec& e);
void op_concat(Exec& e);
void host_concat(Exec& e);
void op_split(Exec& e);
void op_slice(Exec& e);
void host_slice(Exec& e);
void op_gather(Exec& e);
void host_gather(Exec& e);
void op_expand(Exec& e);
void host_expand(Exec& e);
void op_tile(Exec& e);
void op_pad(Exec& e);
void op_resize(Exec& e);        // Resize, Upsample
std::optional<OnnxRefusal> check_pad(const NodeAttrs& a);
std::optional<OnnxRefusal> check_resize(const NodeAttrs& a);
// Flatten's 2-D shape of `in` at the node's axis.
Shape flatten_shape(const Exec& e, const Shape& in);

// ---- onnx_constant.cpp ----
void op_constant(Exec& e);
void op_constant_of_shape(Exec& e);
void op_range(Exec& e);
void host_eye_like(Exec& e);
void host_trilu(Exec& e);
std::optional<OnnxRefusal> check_constant(const NodeAttrs& a);

// ---- onnx_norm.cpp ----
void op_batch_norm(Exec& e);
void op_layer_norm(Exec& e);
void op_instance_norm(Exec& e);
void op_mvn(Exec& e);           // MeanVarianceNormalization
void op_softmax(Exec& e);       // Softmax, LogSoftmax
std::optional<OnnxRefusal> check_batch_norm(const NodeAttrs& a);

// ---- onnx_matmul.cpp ----
void op_matmul(Exec& e);
void op_gemm(Exec& e);

// ---- onnx_conv_pool.cpp ----
void op_conv(Exec& e);
void op_conv_transpose(Exec& e);
void op_pool(Exec& e);
void host_max_pool(Exec& e);
void op_lrn(Exec& e);
void op_depth_space(Exec& e);
std::optional<OnnxRefusal> check_conv(const NodeAttrs& a);
std::optional<OnnxRefusal> check_pool(const NodeAttrs& a);

// ---- onnx_index.cpp ----
void op_arg_reduce(Exec& e);   // ArgMax, ArgMin (host, from the data)
void op_hardmax(Exec& e);
void op_topk(Exec& e);
void host_topk(Exec& e);
void op_gather_elements(Exec& e);
void op_scatter_elements(Exec& e);  // ScatterElements, Scatter
void op_gather_nd(Exec& e);
void op_scatter_nd(Exec& e);
void host_one_hot(Exec& e);
void host_non_zero(Exec& e);
void op_compress(Exec& e);
void op_reverse_sequence(Exec& e);
void op_unique(Exec& e);
void op_einsum(Exec& e);
void op_nll_loss(Exec& e);          // NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
std::optional<OnnxRefusal> check_scatter(const NodeAttrs& a);
std::optional<OnnxRefusal> check_einsum(const NodeAttrs& a);
std::optional<OnnxRefusal> check_loss(const NodeAttrs& a);
// Rows `index` of `table` ([V, D]) as an embedding lookup: the gather with a gradient
// (scatter-add into the table) that the index ops compose.
Tensor take_rows(const Exec& e, const Tensor& table, const std::vector<std::int64_t>& index, const Shape& index_shape);
// The slices `index` of x along `axis` (x[..., index, ...]), by take_rows.
Tensor take_along(const Exec& e, const Tensor& x, std::int64_t axis, const std::vector<std::int64_t>& index);

// ---- onnx_recurrent.cpp ----
void op_recurrent(Exec& e);  // LSTM, GRU, RNN
std::optional<OnnxRefusal> check_recurrent(const NodeAttrs& a);

}  // namespace ampcheck::models::onnx_impl
