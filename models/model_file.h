// The model file: a JSON description of a model, its data, its loss and its default
// training and AMP settings, so that users can bring an architecture without writing C++
// (docs/model-format.md). The samples in samples/models/ are such files, built into the
// binary; `ampcheck run --model path/to/model.json` reads one from disk.
//
// load_model() checks everything it can without building: the structure, every field of
// every node (its type, its range, unknown names), the references between nodes and
// constants. build() then creates the layers in file order, inferring their input sizes
// by running each node on a two-row probe batch, so a shape that does not fit is caught
// there. Every error is a ModelFileError that names the file, the node and the field.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/amp/config.h"
#include "engine/nn/module.h"
#include "engine/random.h"
#include "models/data.h"

namespace ampcheck::models {

namespace onnx_file {
struct Graph;
}

class ModelFileError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Where the samples come from: a synthetic generator with its parameters, a file, or the
// samples written in the model file.
struct DataSpec {
  std::string generator;  // "spiral", "blobs", "images", "sequences"; empty for a file
  nlohmann::json params;  // the generator's parameters, as written (checked)
  std::string file;       // a data file, resolved against the model file's folder
  nlohmann::json samples; // or the samples themselves, {"x": [...], "y": [...]} as a data file holds them
};

// Default training settings; the command line overrides each one it is given.
struct TrainSpec {
  std::int64_t steps = 200;
  std::int64_t batch = 32;
  double lr = 1e-3;
  std::string optimizer = "adam";  // "adam", "adamw", "sgd"
  double weight_decay = 0;
  double momentum = 0;  // sgd
};

struct LossSpec {
  std::string kind = "cross_entropy";  // or "mse" (against the one-hot labels)
  double label_smoothing = 0;          // cross_entropy
  double weight = 1;                   // the loss is multiplied by this
};

// What the sample promises, for the tests and the README's table.
struct Expectation {
  std::optional<double> accuracy;   // reached in fp32 (O0) with the defaults
  std::optional<double> tolerance;  // O1/O2 (fp16, bf16) accuracy stays within this of it
  // An unstable sample: its documented fp16 failure and the cure bisect-nan should find.
  std::string failure;                  // what goes wrong, in words
  std::vector<std::string> culprit;     // the op types bisect-nan names (its black list)
  std::string cure;                     // "black_list" (the culprits), "scaler" (a loss scaler setting), ""
  std::vector<std::string> bisect_args; // extra bisect-nan options the failure needs
};

struct ConstantSpec {
  std::string name;
  std::optional<double> scalar;  // {"value": 0.125}
  Tensor tensor;                 // otherwise
};

struct NodeSpec {
  std::string name, kind;
  std::vector<std::string> inputs;  // node names, constant names or "input"
  nlohmann::json fields;            // the node's own fields, checked against its kind
};

struct ModelFile {
  std::string source;  // the path, or "sample mlp"
  // An ONNX model (`--model model.onnx`, or a model file's "onnx" field) instead of nodes:
  // its path and its graph, read and checked (models/onnx_file.h).
  std::string onnx;
  std::shared_ptr<const onnx_file::Graph> onnx_graph;
  std::string name, description;
  DataSpec data;
  std::vector<ConstantSpec> constants;
  std::vector<NodeSpec> nodes;
  std::string output;  // a node name (default: the last node)
  LossSpec loss;
  TrainSpec train;
  std::optional<amp::Config> amp;  // the file's "amp" block, in any framework's key names
  // Op names or module paths whose Inf/-Inf is intended (an attention mask's -inf): the
  // inspector does not count them as a failure (inspector/nan_source.h, allow lists).
  std::vector<std::string> allow_inf;
  Expectation expect;
};

// Model files known by name: the samples (samples/builtin_models.h) give theirs; a name
// that is not a path resolves only against the catalog a caller passes.
struct NamedModel {
  std::string_view name;  // "mlp"
  std::string_view text;  // the model file's JSON
};
using ModelCatalog = std::vector<NamedModel>;
std::vector<std::string_view> names_of(const ModelCatalog& catalog);
// Whether `model` names a file rather than a sample (it ends in .json or .onnx, or has a '/').
bool is_model_path(std::string_view model);
// Whether `path` is read as numpy/ONNX arrays (.npz, .npy, .pb, or a folder) rather than a
// JSON data file.
bool is_array_data(const std::string& path);

// What the command line says over the model file: the data (`--data`), the loss
// (`--loss`) and the output it is computed on (`--output`). Empty fields change nothing.
struct ModelOverrides {
  std::string data, loss, output;
};
void apply(ModelFile& file, const ModelOverrides& overrides);

// The module paths the model's ops run in: the nodes' names, or an ONNX model's modules
// (models/onnx_model.h), in graph order without repeats.
std::vector<std::string> module_names(const ModelFile& file);

// A model of `catalog` by name, a model file by path, or an ONNX file (*.onnx: its data and
// loss come from the command line, ModelOverrides). Throws ModelFileError.
ModelFile load_model(const std::string& model, const ModelCatalog& catalog = {});
// Parses model-file text; `folder` resolves a relative data file.
ModelFile parse_model(const std::string& json_text, const std::string& source, const std::string& folder = ".");

// The batch size an ONNX export fixed: its data inputs' first dimension, where the
// exporter wrote a number (torch.onnx.export without dynamic_axes, Paddle's
// InputSpec([4, ...])). Such a model runs exactly that many rows per forward (per rank):
// it trains and evaluates at that batch. nullopt for a dynamic batch or a model file.
// Throws ModelFileError when two inputs fix different sizes.
std::optional<std::int64_t> fixed_batch(const ModelFile& file);
// How to export `input` with a dynamic batch, in the words of the framework that made the
// file (its producer_name): "torch.onnx.export(..., dynamic_axes={...})" for PyTorch,
// "paddle.static.InputSpec(shape=[None, ...])" for PaddlePaddle, and so on.
std::string dynamic_batch_hint(const ModelFile& file, const std::string& input);

// The data set the file asks for, from `seed` (synthetic generators) or its file.
Dataset make_data(const ModelFile& file, std::uint64_t seed);

// Builds the model: parameters drawn from `gen` in node order, input sizes inferred on
// the first two rows of `data`. Throws ModelFileError naming the node and the field.
std::shared_ptr<nn::Module> build(const ModelFile& file, const Dataset& data, Generator& gen);

// The kinds of node a file may use, with their fields (for errors and `ampcheck ops`).
struct NodeKindInfo {
  std::string_view kind;
  std::string_view summary;
  std::vector<std::string> fields;  // "out*" marks a required field
};
const std::vector<NodeKindInfo>& node_kinds();

}  // namespace ampcheck::models
