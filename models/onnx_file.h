// An ONNX file read with the ONNX library (protobuf parsing, the checker, shape inference)
// and copied into plain structs, so that nothing past this file sees protobuf types: the
// graph's nodes with their attributes, its initializers as arrays, its inputs and outputs
// with their declared shapes, the opsets and the producer (PyTorch, paddle2onnx, ...).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/arrays.h"
#include "models/model_file.h"

namespace ampcheck::models::onnx_file {

// Every failure to read or check a file: the message names the file, the node (its name,
// op type and opset) and the reason.
class OnnxError : public ModelFileError {
 public:
  using ModelFileError::ModelFileError;
};

struct Attribute {
  enum class Kind { f, i, s, t, floats, ints, strings, other } kind = Kind::other;
  double f = 0;
  std::int64_t i = 0;
  std::string s;
  Array t;
  std::vector<double> floats;
  std::vector<std::int64_t> ints;
  std::vector<std::string> strings;
  std::string type_name;  // ONNX's name of the kind, for errors ("GRAPH", "SPARSE_TENSOR")
};

struct Node {
  std::string name;     // as in the file; may be empty
  std::string op_type;  // "Conv"
  std::string domain;   // "" for the default ONNX domain
  std::vector<std::string> inputs, outputs;  // value names; "" for an omitted optional input
  std::map<std::string, Attribute> attributes;
  std::int64_t opset = 0;  // the version of the node's domain the model imports
  std::string label() const;  // "node \"/layer1/Conv\" (Conv, opset 13)"
};

struct ValueInfo {
  std::string name;
  std::string elem_type;  // "float32", "int64", ... ("" unknown)
  // Declared sizes: -1 for a symbolic or unknown dimension ("batch"); nullopt: rank unknown.
  std::optional<Shape> shape;
};

struct Graph {
  std::string path;
  std::string producer, producer_version;  // "pytorch" "2.5.0", "PaddlePaddle", ...
  std::int64_t ir_version = 0;
  std::int64_t opset = 0;  // the default domain's
  std::string graph_name;
  std::vector<Node> nodes;  // topological order, as ONNX requires
  std::map<std::string, Array> initializers;
  std::vector<std::string> initializer_order;  // file order
  std::vector<ValueInfo> inputs;   // the data inputs: graph inputs without an initializer
  std::vector<ValueInfo> outputs;
  std::map<std::string, ValueInfo> value_info;  // shape inference's results
  // A note for the user when the ONNX library here cannot check the file (a newer opset than
  // it knows): ampcheck then relies on its own checks of the nodes it imports.
  std::string check_note;
};

// Reads, checks and infers shapes. Throws OnnxError.
Graph load(const std::string& path);

// The data type name of an ONNX TensorProto elem_type ("float32", "int64", "bool", ...).
std::string elem_type_name(int elem_type);

}  // namespace ampcheck::models::onnx_file

namespace ampcheck::models {
// One TensorProto file (ONNX's test data: input_0.pb, output_0.pb). Throws ArrayError.
Array read_tensor_proto_file(const std::string& path);
}  // namespace ampcheck::models
