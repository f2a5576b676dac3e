// ONNX models from any exporter, or from an attacker: `ampcheck ops --onnx FILE`, and for a
// file it accepts, one forward (`infer`) and one training step (`run`) on inputs of the
// shapes the graph declares (symbolic sizes 2, at most 2^16 values per input).
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "fuzz/harness.h"
#include "models/arrays.h"
#include "models/model_file.h"
#include "models/onnx_file.h"

namespace {

using namespace ampcheck;

// One .npy per graph input (and labels), in a folder: the data `run` and `infer` read.
bool write_inputs(const std::string& model, const std::string& dir) {
  models::onnx_file::Graph g;
  try {
    g = models::onnx_file::load(model);
  } catch (const models::ModelFileError&) {
    return false;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::int64_t rows = 2;
  for (const auto& in : g.inputs) {
    Shape shape = in.shape.value_or(Shape{2});
    std::int64_t n = 1;
    for (std::int64_t& d : shape) {
      if (d < 0) d = 2;
      if (d > (1 << 16)) return false;
      n *= d;  // both at most 2^16: no overflow
      if (n > (1 << 16)) return false;
    }
    if (!shape.empty()) rows = shape[0];
    const bool integer = in.elem_type.find("int") != std::string::npos || in.elem_type == "bool";
    models::Array a = integer ? models::Array::ints(shape, std::vector<std::int64_t>(static_cast<std::size_t>(n), 1))
                              : models::Array::floats(shape, std::vector<double>(static_cast<std::size_t>(n), 0.5));
    std::ofstream(dir + "/" + in.name + ".npy", std::ios::binary) << models::npy_bytes(a);
  }
  std::ofstream(dir + "/labels.npy", std::ios::binary)
      << models::npy_bytes(models::Array::ints({rows}, std::vector<std::int64_t>(static_cast<std::size_t>(rows), 0)));
  return true;
}

}  // namespace

#if defined(AMPCHECK_LIBFUZZER)  // the replay driver (fuzz/replay_main.cpp) mutates nothing

// ---- a mutator that knows the format ------------------------------------------------------
// Byte flips rarely get a protobuf past its parser; these mutate what the readers and the
// ONNX library interpret: attribute values (strides 0, a kernel_shape too short), sizes
// (negative, zero, INT64_MIN, a claim of 2^40), op types, inputs, opsets, external data
// locations, and nesting. One mutation per call, on a parsed ModelProto; anything else
// (or a file that does not parse) goes to libFuzzer's own byte mutations.

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace {

constexpr std::int64_t kInteresting[] = {0,  -1, 1, 2, 3, 7, 8, 255, 65536, std::int64_t{1} << 40,
                                         std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::max(), -2, 20000};
constexpr const char* kOps[] = {"Conv",    "MaxPool", "AveragePool", "Reshape", "Range", "ConstantOfShape", "Div",
                                "Mod",     "Tile",    "Pad",         "Gather",  "Slice", "Expand",          "Resize",
                                "Concat",  "Split",   "LSTM",        "GRU",     "TopK",  "ArgMax",          "Einsum",
                                "MatMul",  "Gemm",    "Softmax",     "Where",   "Cast",  "Transpose",       "Squeeze",
                                "Unsqueeze", "ReduceSum", "LayerNormalization", "BatchNormalization", "If", "Loop"};

std::int64_t interesting(std::mt19937& rng) {
  return rng() % 4 == 0 ? static_cast<std::int64_t>(rng() % 64) - 8
                        : kInteresting[rng() % (sizeof kInteresting / sizeof kInteresting[0])];
}

void mutate_attribute(onnx::AttributeProto& a, std::mt19937& rng) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: a.set_i(interesting(rng)); break;
    case onnx::AttributeProto::FLOAT: a.set_f(rng() % 2 ? 0.0f : std::numeric_limits<float>::infinity()); break;
    case onnx::AttributeProto::INTS:
      if (a.ints_size() > 0 && rng() % 3 == 0) {
        a.mutable_ints()->RemoveLast();  // a list shorter than the rank it describes
      } else if (rng() % 3 == 0) {
        a.add_ints(interesting(rng));
      } else if (a.ints_size() > 0) {
        a.set_ints(static_cast<int>(rng() % static_cast<unsigned>(a.ints_size())), interesting(rng));
      }
      break;
    case onnx::AttributeProto::GRAPH:
      if (a.g().node_size() > 0) a.mutable_g()->mutable_node(0)->set_op_type(kOps[rng() % std::size(kOps)]);
      break;
    default: a.set_type(onnx::AttributeProto::INTS); a.add_ints(interesting(rng)); break;
  }
}

void mutate_tensor(onnx::TensorProto& t, std::mt19937& rng) {
  switch (rng() % 4) {
    case 0:
      if (t.dims_size() > 0) t.set_dims(static_cast<int>(rng() % static_cast<unsigned>(t.dims_size())), interesting(rng));
      else t.add_dims(interesting(rng));
      break;
    case 1:
      if (t.has_raw_data()) t.mutable_raw_data()->resize(t.raw_data().size() / 2);
      break;
    case 2: {  // its data in a file somewhere else on the machine
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      auto* e = t.add_external_data();
      e->set_key("location");
      static const char* const where[] = {"/etc/passwd", "../../../etc/hostname", "weights.bin", "/proc/self/mem"};
      e->set_value(where[rng() % 4]);
      break;
    }
    default: t.set_data_type(static_cast<int>(rng() % 17)); break;
  }
}

void mutate(onnx::ModelProto& m, std::mt19937& rng) {
  onnx::GraphProto& g = *m.mutable_graph();
  switch (rng() % 8) {
    case 0: case 1:
      if (g.node_size() > 0) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % static_cast<unsigned>(g.node_size())));
        if (n.attribute_size() > 0 && rng() % 4 != 0) {
          mutate_attribute(*n.mutable_attribute(static_cast<int>(rng() % static_cast<unsigned>(n.attribute_size()))), rng);
        } else {
          auto* a = n.add_attribute();
          static const char* const names[] = {"strides", "kernel_shape", "pads", "dilations", "axis", "axes", "group",
                                              "ceil_mode", "perm", "to", "keepdims", "k"};
          a->set_name(names[rng() % std::size(names)]);
          a->set_type(rng() % 2 ? onnx::AttributeProto::INT : onnx::AttributeProto::INTS);
          mutate_attribute(*a, rng);
        }
      }
      break;
    case 2:
      if (g.initializer_size() > 0)
        mutate_tensor(*g.mutable_initializer(static_cast<int>(rng() % static_cast<unsigned>(g.initializer_size()))), rng);
      break;
    case 3:
      if (g.input_size() > 0) {
        auto* shape = g.mutable_input(static_cast<int>(rng() % static_cast<unsigned>(g.input_size())))
                          ->mutable_type()->mutable_tensor_type()->mutable_shape();
        if (shape->dim_size() > 0) shape->mutable_dim(static_cast<int>(rng() % static_cast<unsigned>(shape->dim_size())))->set_dim_value(interesting(rng));
      }
      break;
    case 4:
      if (g.node_size() > 0)
        g.mutable_node(static_cast<int>(rng() % static_cast<unsigned>(g.node_size())))->set_op_type(kOps[rng() % std::size(kOps)]);
      break;
    case 5:
      if (g.node_size() > 0) {
        onnx::NodeProto& n = *g.mutable_node(static_cast<int>(rng() % static_cast<unsigned>(g.node_size())));
        const onnx::NodeProto& other = g.node(static_cast<int>(rng() % static_cast<unsigned>(g.node_size())));
        if (n.input_size() > 0 && other.output_size() > 0)
          n.set_input(static_cast<int>(rng() % static_cast<unsigned>(n.input_size())), other.output(0));
      }
      break;
    case 6:
      if (m.opset_import_size() > 0) m.mutable_opset_import(0)->set_version(1 + static_cast<std::int64_t>(rng() % 24));
      break;
    default: {  // a node that makes a constant of a claimed size
      onnx::NodeProto& n = *g.add_node();
      n.set_op_type(rng() % 2 ? "ConstantOfShape" : "Range");
      auto* t = g.add_initializer();
      t->set_name("fuzz_size_" + std::to_string(g.initializer_size()));
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_dims(n.op_type() == "Range" ? 0 : 2);
      if (n.op_type() == "Range") {
        t->add_int64_data(interesting(rng));
        n.add_input(t->name());
        n.add_input(t->name());
        n.add_input(t->name());
      } else {
        t->add_int64_data(interesting(rng));
        t->add_int64_data(interesting(rng));
        n.add_input(t->name());
      }
      n.add_output(t->name() + "_out");
      break;
    }
  }
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  std::mt19937 rng(seed);
  onnx::ModelProto m;
  if (rng() % 4 == 0 || !m.ParseFromArray(data, static_cast<int>(size))) return LLVMFuzzerMutate(data, size, max_size);
  mutate(m, rng);
  std::string bytes;
  if (!m.SerializeToString(&bytes) || bytes.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}
#endif  // AMPCHECK_LIBFUZZER

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string model = fuzz::input_file("model.onnx", data, size);
  if (fuzz::run_checked({"ops", "--onnx", model}, model) != 0) return 0;
  const std::string dir = model + ".data";
  if (!write_inputs(model, dir)) return 0;
  fuzz::run_checked({"infer", "--model", model, "--data", dir, "--out", dir + "/out.npy", "--device", "cpu", "-q"},
                    model);
  fuzz::run_checked({"run", "--model", model, "--data", dir, "--steps", "1", "--inspect", "off", "--device", "cpu",
                     "--level", "O2", "-q"},
                    model);
  return 0;
}
