// The op types and attributes real exports use beyond the first importer (issue 28):
// recurrent layers, pooling with ceil_mode, dilation and asymmetric padding, the index ops
// (ArgMax on token ids, TopK, GatherElements, ScatterElements), Einsum, the losses. Checked
// against PyTorch's own outputs (tests/data/onnx/, written by make_models.py with PyTorch),
// their gradients against central finite differences of the imported forward in f64, and
// what the importer refuses: `ops --onnx` lists it as `run` refuses it. ONNX's own node
// tests of these ops run in onnx_conformance_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "engine/autograd.h"
#include "engine/hooks.h"
#include "models/arrays.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"
#include "models/runner.h"
#include "onnx_builder.h"

namespace ampcheck::models {
namespace {

using testing::has;
using testing::OnnxBuilder;
using testing::run_cli;
using testing::temp_path;

const std::string kModels = std::string(AMPCHECK_SOURCE_DIR) + "/tests/data/onnx/";

std::shared_ptr<const onnx_file::Graph> graph_of(const std::string& path) {
  return std::make_shared<const onnx_file::Graph>(onnx_file::load(path));
}

const Array& array_named(const std::vector<Array>& arrays, const std::string& name) {
  for (const Array& a : arrays)
    if (a.name == name) return a;
  throw std::runtime_error("no array " + name);
}

// Within f32 arithmetic of a different order than PyTorch's.
void expect_close(const Tensor& got, const Array& want, const std::string& what) {
  const Array g = Array::of_tensor(got);
  ASSERT_EQ(g.shape, want.shape) << what;
  for (std::int64_t i = 0; i < g.numel(); ++i)
    EXPECT_NEAR(g.at(i), want.at(i), 2e-5 + 1e-4 * std::fabs(want.at(i))) << what << " element " << i;
}

// ---- against PyTorch ----

TEST(OnnxPytorchOps, ForwardMatchesPytorchsOutputs) {
  // lstm: 2 layers, bidirectional, batch_first; gru: bidirectional, linear_before_reset;
  // rnn_relu: nonlinearity relu; pools: ceil_mode, count_include_pad, dilation, MaxPool1d,
  // Conv padding="same" (SAME_UPPER); last_token_head: ArgMax of Equal on token ids, Mod,
  // Range, a computed Gather, TopK; indexing: Einsum, GatherElements, ScatterElements add;
  // upsampler: ConvTranspose2d with output_padding, groups, dilation, and ConvTranspose1d.
  for (const char* name : {"lstm", "gru", "rnn_relu", "pools", "last_token_head", "indexing", "upsampler"}) {
    const auto g = graph_of(kModels + name + ".onnx");
    const auto arrays = read_npz(kModels + name + ".npz");
    auto model = build_onnx(g, "", 0);
    model->eval();
    NoGradGuard no_grad;
    std::vector<Tensor> inputs;
    for (const auto& in : g->inputs) inputs.push_back(array_named(arrays, in.name).to_tensor());
    expect_close(run_onnx(*model, inputs, {"output"}).at(0), array_named(arrays, "output"), name);
  }
}

// The ops a model's forward runs, by name, in order.
struct OpsSeen : Observer {
  std::vector<std::string> ops;
  OpsSeen() { add_observer(this); }
  ~OpsSeen() override { remove_observer(this); }
  OpsSeen(const OpsSeen&) = delete;
  OpsSeen& operator=(const OpsSeen&) = delete;
  void on_op_begin(const OpEvent& e) override {
    if (e.phase == Phase::forward && !e.inserted_cast) ops.emplace_back(op_name(e.op));
  }
  int count(const std::string& op) const { return static_cast<int>(std::count(ops.begin(), ops.end(), op)); }
};

TEST(OnnxPytorchOps, ScaledDotProductAttentionRunsAsOneOpAndAttentionByHandAsWritten) {
  // attention.onnx (make_models.py): F.scaled_dot_product_attention with is_causal and
  // with an additive mask, and attention written by hand, all over one projection. The two
  // SDPA calls run as scaled_dot_product_attention (the causal one recognised from its
  // constant -inf mask), the hand-written one as MatMul, Div, Softmax, MatMul; the output
  // is PyTorch's.
  const auto g = graph_of(kModels + "attention.onnx");
  const auto arrays = read_npz(kModels + "attention.npz");
  auto model = build_onnx(g, "", 0);
  model->eval();
  const Tensor x = array_named(arrays, "input").to_tensor();
  Tensor y;
  {
    OpsSeen seen;
    NoGradGuard no_grad;
    y = run_onnx(*model, {x}, {"output"}).at(0);
    EXPECT_EQ(seen.count("scaled_dot_product_attention"), 2);
    EXPECT_EQ(seen.count("softmax"), 1);  // the hand-written one
  }
  expect_close(y, array_named(arrays, "output"), "attention");

  // Trained: the gradient of the fused ops flows to the projection's weight, as the
  // unfused graph's would (against central differences of the imported forward in f64).
  auto f64 = build_onnx(g, "", 0);
  f64->cast_parameters(DType::f64);
  const Tensor x64 = x.to(DType::f64);
  Tensor w;
  for (auto& [name, p] : f64->named_parameters())
    if (name.find("qkv") != std::string::npos && p.dim() == 2) w = p;
  ASSERT_TRUE(w.defined());
  sum(run_onnx(*f64, {x64}, {"output"}).at(0)).backward();
  const std::vector<double> grad = w.grad().to_f64();
  std::vector<double> values = w.to_f64();
  NoGradGuard no_grad;
  for (std::size_t i : {std::size_t{0}, std::size_t{37}, std::size_t{300}, std::size_t{700}}) {
    const double h = 1e-6, keep = values[i];
    auto loss_at = [&](double value) {
      values[i] = value;
      w.copy_from(Tensor::from(values, w.shape(), DType::f64));
      return run_onnx(*f64, {x64}, {"output"}).at(0).to_f64();
    };
    const std::vector<double> up = loss_at(keep + h), down = loss_at(keep - h);
    loss_at(keep);
    double numeric = 0;
    for (std::size_t k = 0; k < up.size(); ++k) numeric += (up[k] - down[k]) / (2 * h);
    EXPECT_NEAR(grad[i], numeric, 1e-6 * (1 + std::fabs(numeric))) << "qkv.weight element " << i;
  }
}

TEST(OnnxPytorchOps, RecurrentLayersRunAsOneOpPerLayerAndDirection) {
  // PyTorch's nn.LSTM / nn.GRU / nn.RNN exports run as the framework runs them: one op per
  // layer and direction over the whole sequence (one cuDNN call on a GPU), not one cell per
  // step. lstm.onnx: 2 layers, bidirectional; gru.onnx: bidirectional; rnn_relu.onnx: one.
  // Their outputs are PyTorch's (ForwardMatchesPytorchsOutputs); the step-by-step path
  // keeps what the ops do not take (sequence lengths, peepholes: lstm_seq_lens.onnx).
  const std::vector<std::tuple<std::string, std::string, int>> expected = {
      {"lstm", "lstm", 4}, {"gru", "gru", 2}, {"rnn_relu", "rnn_relu", 1}, {"lstm_seq_lens", "lstm", 0}};
  for (const auto& [file, op, count] : expected) {
    const auto g = graph_of(kModels + file + ".onnx");
    const auto arrays = read_npz(kModels + file + ".npz");
    auto model = build_onnx(g, "", 0);
    model->eval();
    OpsSeen seen;
    NoGradGuard no_grad;
    std::vector<Tensor> inputs;
    for (const auto& in : g->inputs) inputs.push_back(array_named(arrays, in.name).to_tensor());
    run_onnx(*model, inputs, {g->outputs.at(0).name});
    EXPECT_EQ(seen.count(op), count) << file;
    const int cells = seen.count("sigmoid") + seen.count("tanh") + seen.count("relu");
    if (count > 0) {
      EXPECT_EQ(cells, 0) << file << ": no cell runs step by step";
    } else {
      EXPECT_GT(cells, 0) << file << " runs step by step";
    }
  }
}

TEST(OnnxPytorchOps, SequenceLengthsMatchPackedSequences) {
  // A bidirectional LSTM over sequences of 4, 2 and 1 steps: outputs past a sequence's end
  // are zeros, the reverse direction starts at each sequence's own last step, and the
  // final states are those of the last real step (PyTorch's pack_padded_sequence).
  const auto g = graph_of(kModels + "lstm_seq_lens.onnx");
  const auto arrays = read_npz(kModels + "lstm_seq_lens.npz");
  auto model = build_onnx(g, "Y", 0);
  model->eval();
  NoGradGuard no_grad;
  const auto got = run_onnx(*model, {array_named(arrays, "input").to_tensor()}, {"Y", "Y_h", "Y_c"});
  expect_close(got[0], array_named(arrays, "Y"), "Y");
  expect_close(got[1], array_named(arrays, "Y_h"), "Y_h");
  expect_close(got[2], array_named(arrays, "Y_c"), "Y_c");
}

TEST(OnnxPytorchOps, RecurrentAndPoolingExportsTrain) {
  for (const char* name : {"lstm", "rnn_relu", "pools"}) {  // batch-first inputs: a row is a sample
    const auto arrays = read_npz(kModels + std::string(name) + ".npz");  // kept: x refers into it
    const Array& x = array_named(arrays, "input");
    Generator gen(5);
    Shape shape = x.shape;
    shape[0] = 8;
    const Array data = Array::of_tensor(Tensor::uniform(shape, gen, -1, 1));
    const std::string dir = temp_path(std::string("train_") + name);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/input.npy", std::ios::binary) << npy_bytes(data);
    std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({8}, {0, 1, 1, 0, 1, 0, 0, 1}));
    const auto r = run_cli({"run", "--model", kModels + name + ".onnx", "--data", dir, "--steps", "4", "--batch", "4",
                            "--level", "O1", "-q"});
    EXPECT_TRUE(r.code == 0 || r.code == 1) << name << ": " << r.err;
    EXPECT_TRUE(has(r.out, "verdict: healthy")) << name << ": " << r.out;
    RunOptions o;
    o.model = kModels + name + ".onnx";
    o.overrides.data = dir;
    o.steps = 3;
    o.batch = 8;
    const RunResult result = run(o);
    ASSERT_EQ(result.steps.size(), 3u);
    EXPECT_NE(result.steps[0].loss, result.steps[2].loss) << name << ": the weights train";
  }
}

// ---- gradients ----

struct Input {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> ints;  // an integer input's values; empty: a float input, random
};

// d/dx of sum(y * w) through autograd against central differences, for every float input.
void expect_gradients(const std::string& what, OnnxBuilder& b, const std::vector<Input>& inputs, const std::string& output) {
  auto model = build_onnx(graph_of(b.save("grad_" + what + ".onnx")), output, 0);
  model->eval();
  Generator gen(11);
  std::vector<Tensor> base;
  for (const Input& in : inputs)
    base.push_back(in.ints.empty() ? Tensor::uniform(in.shape, gen, -1.5, 1.5, DType::f64) : Tensor::from(in.ints, in.shape));
  auto weighted = [&](const std::vector<Tensor>& xs) {
    const Tensor y = run_onnx(*model, xs, {output}).at(0);
    std::vector<double> w;
    for (std::int64_t i = 0; i < y.numel(); ++i) w.push_back(1 + 0.1 * static_cast<double>(i % 7));
    return sum(mul(y, Tensor::from(w, y.shape(), DType::f64)));
  };
  std::vector<Tensor> xs;
  for (std::size_t k = 0; k < inputs.size(); ++k)
    xs.push_back(inputs[k].ints.empty() ? base[k].clone().set_requires_grad(true) : base[k]);
  weighted(xs).backward();
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].ints.empty()) continue;
    ASSERT_TRUE(xs[k].grad().defined()) << what << ": no gradient for " << inputs[k].name;
    const std::vector<double> g = xs[k].grad().to_f64();
    const std::vector<double> v = base[k].to_f64();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double h = 1e-6;
      auto at = [&](double d) {
        std::vector<double> p = v;
        p[i] += d;
        std::vector<Tensor> moved = base;
        moved[k] = Tensor::from(p, base[k].shape(), DType::f64);
        return weighted(moved).to_f64()[0];
      };
      const double fd = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(g[i], fd, 1e-6 * (1 + std::fabs(fd))) << what << ": d/d " << inputs[k].name << "[" << i << "]";
    }
  }
}

constexpr int kF64 = onnx::TensorProto::DOUBLE;
constexpr int kI64 = onnx::TensorProto::INT64;

TEST(OnnxOpsGradients, RecurrentLayersMatchFiniteDifferences) {
  {  // bidirectional LSTM with sequence lengths, initial states and peepholes
    OnnxBuilder b;
    b.input("X", {3, 2, 2}, kF64).input("W", {2, 8, 2}, kF64).input("R", {2, 8, 2}, kF64).input("B", {2, 16}, kF64);
    b.input("lens", {2}, kI64).input("h0", {2, 2, 2}, kF64).input("c0", {2, 2, 2}, kF64).input("P", {2, 6}, kF64);
    b.output("Y", {3, 2, 2, 2}, kF64);
    auto& n = b.node("LSTM", "/lstm/LSTM", {"X", "W", "R", "B", "lens", "h0", "c0", "P"}, {"Y", "Y_h"});
    OnnxBuilder::attr(n, "hidden_size", std::int64_t{2});
    OnnxBuilder::attr(n, "direction", std::string("bidirectional"));
    expect_gradients("lstm", b,
                     {{"X", {3, 2, 2}, {}}, {"W", {2, 8, 2}, {}}, {"R", {2, 8, 2}, {}}, {"B", {2, 16}, {}},
                      {"lens", {2}, {3, 2}}, {"h0", {2, 2, 2}, {}}, {"c0", {2, 2, 2}, {}}, {"P", {2, 6}, {}}},
                     "Y");
  }
  for (std::int64_t before_reset : {0, 1}) {  // GRU, reverse, batch-first
    OnnxBuilder b;
    b.input("X", {2, 3, 2}, kF64).input("W", {1, 6, 2}, kF64).input("R", {1, 6, 2}, kF64).input("B", {1, 12}, kF64);
    b.output("Y_h", {2, 1, 2}, kF64);
    auto& n = b.node("GRU", "/gru/GRU", {"X", "W", "R", "B"}, {"", "Y_h"});
    OnnxBuilder::attr(n, "hidden_size", std::int64_t{2});
    OnnxBuilder::attr(n, "direction", std::string("reverse"));
    OnnxBuilder::attr(n, "layout", std::int64_t{1});
    OnnxBuilder::attr(n, "linear_before_reset", before_reset);
    expect_gradients("gru" + std::to_string(before_reset), b,
                     {{"X", {2, 3, 2}, {}}, {"W", {1, 6, 2}, {}}, {"R", {1, 6, 2}, {}}, {"B", {1, 12}, {}}}, "Y_h");
  }
  {  // RNN with a reverse sequence of lengths
    OnnxBuilder b;
    b.input("X", {3, 2, 2}, kF64).input("W", {1, 3, 2}, kF64).input("R", {1, 3, 3}, kF64).input("B", {1, 6}, kF64);
    b.input("lens", {2}, kI64).output("Y", {3, 1, 2, 3}, kF64);
    auto& n = b.node("RNN", "/rnn/RNN", {"X", "W", "R", "B", "lens"}, {"Y"});
    OnnxBuilder::attr(n, "hidden_size", std::int64_t{3});
    OnnxBuilder::attr(n, "direction", std::string("reverse"));
    expect_gradients("rnn", b,
                     {{"X", {3, 2, 2}, {}}, {"W", {1, 3, 2}, {}}, {"R", {1, 3, 3}, {}}, {"B", {1, 6}, {}}, {"lens", {2}, {2, 3}}},
                     "Y");
  }
}

TEST(OnnxOpsGradients, PoolingEinsumIndexOpsAndLossesMatchFiniteDifferences) {
  using Setup = std::function<void(onnx::NodeProto&)>;
  struct Case {
    std::string op;
    std::vector<Input> inputs;
    std::vector<std::int64_t> out;
    Setup setup;
  };
  const std::vector<Case> cases = {
      {"MaxPool", {{"x", {1, 2, 5, 5}, {}}}, {1, 2, 2, 3},
       [](onnx::NodeProto& n) {  // ceil_mode, dilation, asymmetric pads
         OnnxBuilder::attr(n, "kernel_shape", std::vector<std::int64_t>{2, 2});
         OnnxBuilder::attr(n, "strides", std::vector<std::int64_t>{2, 2});
         OnnxBuilder::attr(n, "dilations", std::vector<std::int64_t>{2, 1});
         OnnxBuilder::attr(n, "pads", std::vector<std::int64_t>{0, 1, 0, 0});
         OnnxBuilder::attr(n, "ceil_mode", std::int64_t{1});
       }},
      {"AveragePool", {{"x", {1, 2, 5, 4}, {}}}, {1, 2, 3, 3},
       [](onnx::NodeProto& n) {  // ceil_mode, SAME_LOWER-style asymmetric pads, count_include_pad 0
         OnnxBuilder::attr(n, "kernel_shape", std::vector<std::int64_t>{3, 2});
         OnnxBuilder::attr(n, "strides", std::vector<std::int64_t>{2, 2});
         OnnxBuilder::attr(n, "pads", std::vector<std::int64_t>{1, 1, 0, 0});
         OnnxBuilder::attr(n, "ceil_mode", std::int64_t{1});
       }},
      {"Conv", {{"x", {1, 2, 4, 5}, {}}, {"w", {3, 2, 2, 3}, {}}}, {1, 3, 2, 3},
       [](onnx::NodeProto& n) {
         OnnxBuilder::attr(n, "auto_pad", std::string("SAME_UPPER"));
         OnnxBuilder::attr(n, "strides", std::vector<std::int64_t>{2, 2});
       }},
      {"ConvTranspose", {{"x", {1, 4, 2, 3}, {}}, {"w", {4, 1, 2, 3}, {}}}, {1, 2, 4, 6},
       [](onnx::NodeProto& n) {  // groups, strides, output_padding, asymmetric pads
         OnnxBuilder::attr(n, "group", std::int64_t{2});
         OnnxBuilder::attr(n, "strides", std::vector<std::int64_t>{2, 2});
         OnnxBuilder::attr(n, "pads", std::vector<std::int64_t>{0, 1, 1, 0});
         OnnxBuilder::attr(n, "output_padding", std::vector<std::int64_t>{1, 0});
       }},
      {"LRN", {{"x", {1, 4, 2, 2}, {}}}, {1, 4, 2, 2},
       [](onnx::NodeProto& n) {
         OnnxBuilder::attr(n, "size", std::int64_t{2});
         OnnxBuilder::attr(n, "alpha", 0.3f);
       }},
      {"Einsum", {{"a", {2, 3, 2}, {}}, {"b", {2, 2, 3}, {}}}, {2, 3},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "equation", std::string("bij,bjk->bi")); }},
      {"GatherElements", {{"x", {3, 4}, {}}, {"i", {3, 2}, {0, 2, 1, 1, 2, 0}}}, {3, 2},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "axis", std::int64_t{0}); }},
      {"ScatterElements", {{"x", {3, 3}, {}}, {"i", {2, 3}, {1, 0, 2, 1, 2, 2}}, {"u", {2, 3}, {}}}, {3, 3},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "reduction", std::string("add")); }},
      {"ScatterND", {{"x", {3, 2}, {}}, {"i", {2, 1}, {2, 0}}, {"u", {2, 2}, {}}}, {3, 2}, {}},
      {"TopK", {{"x", {2, 5}, {}}, {"k", {1}, {3}}}, {2, 3}, {}},
      {"NegativeLogLikelihoodLoss", {{"x", {3, 4, 2}, {}}, {"t", {3, 2}, {0, 3, 1, -1, 2, 2}}, {"w", {4}, {}}}, {},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "ignore_index", std::int64_t{-1}); }},
      {"SoftmaxCrossEntropyLoss", {{"x", {3, 4}, {}}, {"t", {3}, {1, 0, 3}}}, {3},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "reduction", std::string("none")); }},
      {"ReduceProd", {{"x", {2, 3, 2}, {}}}, {1, 3, 1},
       [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "axes", std::vector<std::int64_t>{0, 2}); }},
      {"Mod", {{"a", {2, 3}, {}}, {"b", {1, 3}, {}}}, {2, 3}, [](onnx::NodeProto& n) { OnnxBuilder::attr(n, "fmod", std::int64_t{1}); }},
  };
  for (const Case& c : cases) {
    OnnxBuilder b;
    std::vector<std::string> names;
    for (const Input& in : c.inputs) {
      b.input(in.name, in.shape, in.ints.empty() ? kF64 : kI64);
      names.push_back(in.name);
    }
    b.output("y", c.out, kF64);
    auto* n = b.proto().mutable_graph()->add_node();
    n->set_op_type(c.op);
    n->set_name("/" + c.op);
    for (const auto& name : names) n->add_input(name);
    n->add_output("y");
    if (c.op == "TopK") n->add_output("indices");
    if (c.setup) c.setup(*n);
    expect_gradients(c.op, b, c.inputs, "y");
  }
}

// ---- integers computed from the data ----

TEST(OnnxOps, IntegersFromTheDataRunOnTheHostAndTheFloatsStayRegistryOps) {
  // mask = x > 0 (float data read to the host); y = where(mask, x, 0.1 x) summed over
  // rows, and the index of each row's maximum picks its score with GatherElements.
  OnnxBuilder b;
  b.input("x", {-1, 3}).output("y", {-1, 1});
  b.init("zero", {}, {0});
  b.init("slope", {}, {0.1f});
  b.node("Greater", "/Greater", {"x", "zero"}, {"mask"});
  b.node("Mul", "/Mul", {"x", "slope"}, {"small"});
  b.node("Where", "/Where", {"mask", "x", "small"}, {"leaky"});
  auto& am = b.node("ArgMax", "/ArgMax", {"leaky"}, {"best"});
  OnnxBuilder::attr(am, "axis", std::int64_t{1});
  auto& ge = b.node("GatherElements", "/GatherElements", {"leaky", "best"}, {"y"});
  OnnxBuilder::attr(ge, "axis", std::int64_t{1});
  auto model = build_onnx(graph_of(b.save("data_ints.onnx")), "", 0);
  const Tensor x = Tensor::from(std::vector<double>{-1, 2, 0.5, -3, -2, -4}, {2, 3}).set_requires_grad(true);
  const Tensor y = (*model)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_NEAR(y.to_f64()[0], 2, 1e-6);
  EXPECT_NEAR(y.to_f64()[1], -0.2, 1e-6);  // the max of 0.1 * [-3, -2, -4]
  sum(y).backward();
  const std::vector<double> g = x.grad().to_f64();
  const std::vector<double> want = {0, 1, 0, 0, 0.1, 0};
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

// ---- refusals: `ops --onnx` says what `run` refuses ----

TEST(OnnxOps, OpsListsEveryRefusedNodeWithItsAttributeAndTheFixAndRunRefusesIt) {
  OnnxBuilder b;
  b.input("input", {-1, 4, 2}).output("logits", {-1, 2});
  b.init("W", {1, 8, 2}, std::vector<float>(16, 0.1f));
  b.init("R", {1, 8, 2}, std::vector<float>(16, 0.1f));
  auto& t = b.node("Transpose", "/Transpose", {"input"}, {"tm"});
  OnnxBuilder::attr(t, "perm", std::vector<std::int64_t>{1, 0, 2});
  auto& l = b.node("LSTM", "/rnn/LSTM", {"tm", "W", "R"}, {"", "h"});
  OnnxBuilder::attr(l, "hidden_size", std::int64_t{2});
  OnnxBuilder::attr(l, "clip", 3.0f);
  b.init_i64("axes", {1}, {0});
  b.node("Squeeze", "/Squeeze", {"h", "axes"}, {"logits"});
  const std::string model = b.save("refused_clip.onnx");
  auto r = run_cli({"ops", "--onnx", model});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "refused: 1 node(s)")) << r.out;
  const std::string message =
      "node \"/rnn/LSTM\" (LSTM, opset 17): attribute \"clip\" is not supported: the cell clip 3; export the LSTM "
      "without clip (PyTorch's nn.LSTM has none)";
  EXPECT_TRUE(has(r.out, message)) << r.out;
  EXPECT_TRUE(has(r.err, "1 node(s) refused for an attribute")) << r.err;
  const auto j = nlohmann::json::parse(run_cli({"ops", "--onnx", model, "--json"}).out);
  bool listed = false;
  for (const auto& type : j["op_types"])
    if (type["op_type"] == "LSTM") {
      ASSERT_EQ(type["refused"].size(), 1u);
      EXPECT_EQ(type["refused"][0]["node"], "/rnn/LSTM");
      EXPECT_EQ(type["refused"][0]["attribute"], "clip");
      listed = true;
    }
  EXPECT_TRUE(listed);
  const std::string dir = temp_path("refused_data");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/input.npy", std::ios::binary) << npy_bytes(Array::floats({2, 4, 2}, std::vector<double>(16, 0.5)));
  std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({2}, {0, 1}));
  r = run_cli({"run", "--model", model, "--data", dir, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, message)) << r.err;

  // What was refused before (MaxPool's ceil_mode) is no refusal now.
  OnnxBuilder p;
  p.input("input", {-1, 1, 5, 5}).output("y", {-1, 1, 2, 2});
  auto& pool = p.node("MaxPool", "/pool/MaxPool", {"input"}, {"y"});
  OnnxBuilder::attr(pool, "kernel_shape", std::vector<std::int64_t>{3, 3});
  OnnxBuilder::attr(pool, "strides", std::vector<std::int64_t>{2, 2});
  OnnxBuilder::attr(pool, "ceil_mode", std::int64_t{1});
  r = run_cli({"ops", "--onnx", p.save("ceil_pool.onnx")});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_FALSE(has(r.out, "refused")) << r.out;
}

// The first forward's hint about sizes fixed at export comes only with a mismatch in the
// batch dimension.
TEST(OnnxOps, TheFixedSizeHintComesOnlyWithABatchMismatch) {
  const std::string dir = temp_path("hint_data");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/input.npy", std::ios::binary) << npy_bytes(Array::floats({4, 8}, std::vector<double>(32, 0.5)));
  std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({4}, {0, 1, 0, 1}));
  OnnxBuilder fixed;  // x.view(4, 2, 4) exported with the batch of 4 folded in
  fixed.input("input", {-1, 8}).output("y", {4, 2, 4});
  fixed.init_i64("shape", {3}, {4, 2, 4});
  fixed.node("Reshape", "/Reshape", {"input", "shape"}, {"y"});
  auto r = run_cli({"run", "--model", fixed.save("hint_fixed.onnx"), "--data", dir, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "cannot reshape [2, 8] to [4, 2, 4]")) << r.err;
  EXPECT_TRUE(has(r.err, "a size fixed at export")) << r.err;
  OnnxBuilder other;  // a feature-size mismatch: nothing to do with the batch
  other.input("input", {-1, 8}).output("y", {-1, 2});
  other.init("w", {3, 2}, {1, 0, 0, 1, 1, 1});
  other.node("MatMul", "/fc/MatMul", {"input", "w"}, {"y"});
  r = run_cli({"run", "--model", other.save("hint_other.onnx"), "--data", dir, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "/fc/MatMul")) << r.err;
  EXPECT_FALSE(has(r.err, "a size fixed at export")) << r.err;
}

}  // namespace
}  // namespace ampcheck::models
