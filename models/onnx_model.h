// An ONNX graph as an ampcheck model: its initializers become the model's named
// parameters (the exporter's names, so reports, fp32_modules and bisect-nan speak the
// user's layer names), its nodes run as registry ops, in file order, each inside the
// module its names give ("/layer1/layer1.0/conv1/Conv" and "layer1.0.conv1.weight": module
// "layer1.0.conv1"), so autograd, the AMP policy and the inspector see them as they see any
// model's. Shape computations (Shape, Gather on shapes, Concat of sizes, Range, ...) run on
// the host, on each forward's real sizes; they are not ops of the model.
//
// One table lists the ONNX op types the importer supports and the registry ops each runs
// (onnx_ops(), `ampcheck ops --onnx`); a node of any other type is an OnnxError naming the
// node, its op type and opset. docs/onnx.md says what each op type covers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/nn/module.h"
#include "engine/random.h"
#include "models/data.h"
#include "models/onnx_file.h"

namespace ampcheck::models {

struct OnnxOpInfo {
  std::string_view op_type;        // "Gemm"
  std::vector<std::string_view> runs;  // the registry ops it runs ("linear", "matmul"); empty: host only
  std::string_view covers;         // what of the op's definition is supported, in words
};
// Every ONNX op type the importer supports (default domain), sorted by name.
const std::vector<OnnxOpInfo>& onnx_ops();
const OnnxOpInfo* find_onnx_op(std::string_view op_type);

// A node of a supported type that the importer refuses for an attribute (MaxPool's
// storage_order, an LSTM's clip, an Einsum equation): decided from the node alone, before
// anything runs, by the one check per op type that building the model also makes, so
// `ampcheck ops --onnx` shows what `run` will refuse.
struct OnnxRefusal {
  std::string attribute;  // "ceil_mode", "activations", "equation"
  std::string reason;     // what is not supported, with the attribute's value
  std::string fix;        // what to do instead ("export with ...")
};
std::optional<OnnxRefusal> onnx_refusal(const onnx_file::Node& n);
// "node \"/pool/MaxPool\" (MaxPool, opset 17): attribute storage_order: <reason>; <fix>"
std::string refusal_message(const onnx_file::Node& n, const OnnxRefusal& r);

// Which initializers train: floating ones, except BatchNormalization's running statistics
// (buffers) and one-element constants that no layer reads as a weight (eps, a scale).
enum class InitializerRole { parameter, buffer, constant };
InitializerRole initializer_role(const onnx_file::Graph& g, const std::string& name);

// The module a node runs in: the module of the parameter it reads ("layer1.0.conv1"),
// else the scopes of a PyTorch-style node name ("/encoder/layers.0/attn/MatMul": module
// "encoder.layers.0.attn"), else the node's own name.
std::string module_path_of(const onnx_file::Graph& g, const onnx_file::Node& n);

// Whether `path` is a module of the exporting framework's model (a scope of its node names
// or the owner of its parameters), not a name ampcheck gave a top-level node of its own.
bool is_framework_module(const onnx_file::Graph& g, const std::string& path);
// The nodes that run in module `path` and may run the registry op `op` (per onnx_ops()).
std::vector<const onnx_file::Node*> nodes_running(const onnx_file::Graph& g, const std::string& path, std::string_view op);
// "pytorch", "paddle", "tensorflow" or "": the framework that exported the file, from its
// producer name, else from what paddle2onnx 2.x (which leaves the name empty) writes.
std::string producer_framework(const onnx_file::Graph& g);

// Checks that every node is supported (OnnxError naming the first that is not, and every
// unsupported op type with its count) and that no node is refused for an attribute
// (onnx_refusal: the first, and how many), then builds the model. `output` is the value the
// model returns ("": the graph's first output); `input` the data input the model's forward
// takes (the graph must have exactly one, or the others must be optional). `seed` drives
// Dropout. The model is built on the CPU in training mode; the caller runs a probe.
std::shared_ptr<nn::Module> build_onnx(std::shared_ptr<const onnx_file::Graph> graph, const std::string& output,
                                       std::uint64_t seed);

// A model of build_onnx() whose graph takes several inputs: the ones after the first, for
// the forward passes that follow (Module::forward takes one tensor). Empty for one input.
void set_side_inputs(nn::Module& model, std::vector<Tensor> more);

// Runs a model of build_onnx() on every data input of its graph, in graph order, and returns
// the values named (graph outputs, or any value a node computes), as tensors.
// `constant[k]` marks input k as a known constant (computed on the host, like an
// initializer), as ONNX's node tests feed attribute-like inputs (is_attribute_input).
std::vector<Tensor> run_onnx(nn::Module& model, const std::vector<Tensor>& inputs, const std::vector<std::string>& outputs,
                             const std::vector<bool>& constant = {});

// Whether input k of `n` is attribute-like (a shape, axes, a bound, a ratio), which a
// model's constants give.
bool is_attribute_input(const onnx_file::Node& n, std::size_t k);

// The graph's nodes grouped by op type, with their counts, for `ampcheck ops --onnx`.
struct OnnxOpUse {
  std::string op_type;
  std::int64_t count = 0;
  const OnnxOpInfo* info = nullptr;  // null: not supported
  std::vector<std::string> modules;  // the first few modules it runs in
  // The nodes of this type the importer refuses for an attribute (onnx_refusal).
  std::vector<std::pair<const onnx_file::Node*, OnnxRefusal>> refused;
};
std::vector<OnnxOpUse> onnx_op_uses(const onnx_file::Graph& g);

}  // namespace ampcheck::models
