// The model-file interpreter (models/model_file.h): the JSON samples build the same
// networks as their hand-written C++ twins (samples/models.h: same parameters drawn in
// the same order, bit-identical outputs); every class of error names the node and the
// field; data files and the blobs generator do what their documentation says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "models/data.h"
#include "models/model_file.h"
#include "models/runner.h"
#include "samples/builtin_models.h"
#include "samples/models.h"

namespace ampcheck::models {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Parses and builds `text`; the error message, or "" when it is a valid model.
std::string error_of(const std::string& text) {
  try {
    const ModelFile f = parse_model(text, "test.json");
    const Dataset data = make_data(f, 1);
    Generator gen(0);
    build(f, data, gen);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "";
}

// A small valid model with `nodes` (a JSON array body) on the spiral.
std::string with_nodes(const std::string& nodes, const std::string& extra = "") {
  return R"({"ampcheck_model": 1, "data": {"generator": "spiral", "n_per_class": 10}, )" + extra +
         R"("nodes": [)" + nodes + "]}";
}

// ---- the JSON samples are their C++ twins --------------------------------------

void expect_same_network(nn::Module& json_model, nn::Module& cpp_model, const Dataset& data) {
  const auto a = json_model.named_parameters(), b = cpp_model.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first << " vs " << b[i].first;
    EXPECT_EQ(a[i].second.to_f64(), b[i].second.to_f64()) << a[i].first << " vs " << b[i].first;
  }
  NoGradGuard no_grad;
  const std::vector<double> ya = json_model(data.x).to_f64(), yb = cpp_model(data.x).to_f64();
  ASSERT_EQ(ya.size(), yb.size());
  for (std::size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], yb[i]) << "output " << i;
}

TEST(ModelFileSamples, MlpIsTheCppMlp) {
  const ModelFile f = load_model("mlp", samples::builtin_models());
  const Dataset data = make_data(f, 8);
  Generator g1(7), g2(7);
  auto json_model = build(f, data, g1);
  samples::Mlp cpp(2, 64, 3, g2);
  expect_same_network(*json_model, cpp, data);
}

TEST(ModelFileSamples, CnnIsTheCppSmallCnn) {
  const ModelFile f = load_model("cnn", samples::builtin_models());
  const Dataset data = batch(make_data(f, 8), 0, 16);
  Generator g1(7), g2(7);
  auto json_model = build(f, data, g1);
  samples::SmallCnn cpp(3, 4, g2, 8, 1);
  expect_same_network(*json_model, cpp, data);  // in training mode: batch statistics
}

TEST(ModelFileSamples, TransformerIsTheCppTinyTransformer) {
  const ModelFile f = load_model("transformer", samples::builtin_models());
  const Dataset data = batch(make_data(f, 8), 0, 16);
  Generator g1(7), g2(7);
  auto json_model = build(f, data, g1);
  samples::TinyTransformer cpp(8, 8, 32, 2, 64, 2, g2);
  expect_same_network(*json_model, cpp, data);
}

TEST(ModelFileSamples, NodeNamesAreTheModulePaths) {
  const ModelFile f = load_model("cnn", samples::builtin_models());
  Generator gen(0);
  auto m = build(f, make_data(f, 1), gen);
  std::vector<std::string> names;
  for (const auto& [name, t] : m->named_parameters()) names.push_back(name);
  EXPECT_EQ(names.front(), "stem.conv.weight");
  EXPECT_EQ(names.back(), "head.bias");
}

TEST(ModelFileSamples, EverySampleLoadsAndBuilds) {
  for (std::string_view name : names_of(samples::builtin_models())) {
    const ModelFile f = load_model(std::string(name), samples::builtin_models());
    EXPECT_FALSE(f.description.empty()) << name;
    EXPECT_TRUE(f.expect.accuracy.has_value() != !(f.expect.culprit.empty() && f.expect.cure.empty()))
        << name << ": a stable sample documents its accuracy, an unstable one its culprit or its cure";
    if (f.expect.cure == "scaler") {
      EXPECT_TRUE(f.expect.culprit.empty()) << name << ": a scaler cure has no black list";
    }
    if (f.expect.cure == "fp8_keep") {  // the culprits are layers of the model, and it trains in fp8
      ASSERT_TRUE(f.amp && f.amp->fp8) << name << ": an fp8 cure needs the model to train in fp8 (\"amp\": \"fp8\")";
      for (const std::string& layer : f.expect.culprit)
        EXPECT_TRUE(std::any_of(f.nodes.begin(), f.nodes.end(), [&](const NodeSpec& n) { return n.name == layer && n.kind == "linear"; }))
            << name << ": culprit " << layer << " is not a linear node";
    }
    Generator gen(0);
    EXPECT_NO_THROW(build(f, make_data(f, 1), gen)) << name;
  }
}

// ---- errors name the node and the field ------------------------------------------

TEST(ModelFileErrors, UnknownNodeKind) {
  const std::string e = error_of(with_nodes(R"({"name": "fc", "kind": "lineer", "out": 3})"));
  EXPECT_TRUE(has(e, R"(node "fc")") && has(e, R"(field "kind")") && has(e, R"(unknown node kind "lineer")") &&
              has(e, R"(did you mean "linear"?)"))
      << e;
}

TEST(ModelFileErrors, MissingField) {
  const std::string e = error_of(with_nodes(R"({"name": "fc", "kind": "linear"})"));
  EXPECT_TRUE(has(e, R"(node "fc" (linear))") && has(e, R"(missing field "out")")) << e;
  const std::string no_kind = error_of(with_nodes(R"({"name": "fc", "out": 3})"));
  EXPECT_TRUE(has(no_kind, R"(node "fc")") && has(no_kind, R"(missing field "kind")")) << no_kind;
  const std::string no_name = error_of(with_nodes(R"({"kind": "relu"})"));
  EXPECT_TRUE(has(no_name, "node 1") && has(no_name, R"(missing field "name")")) << no_name;
  const std::string no_data = error_of(R"({"ampcheck_model": 1, "nodes": [{"name": "a", "kind": "relu"}]})");
  EXPECT_TRUE(has(no_data, R"(missing field "data")")) << no_data;
}

TEST(ModelFileErrors, UnknownFieldAndWrongType) {
  const std::string unknown = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "outs": 3})"));
  EXPECT_TRUE(has(unknown, R"(node "fc" (linear))") && has(unknown, R"(unknown field "outs")") &&
              has(unknown, R"(did you mean "out"?)"))
      << unknown;
  const std::string type = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": -3})"));
  EXPECT_TRUE(has(type, R"(field "out" must be a positive integer, got -3)")) << type;
  const std::string top = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})", R"("trian": {}, )"));
  EXPECT_TRUE(has(top, R"(unknown field "trian")") && has(top, R"(did you mean "train"?)")) << top;
}

TEST(ModelFileErrors, DanglingAndLaterReferences) {
  const std::string dangling = error_of(
      with_nodes(R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "sum", "kind": "add", "inputs": ["fc", "fc0"]})"));
  EXPECT_TRUE(has(dangling, R"(node "sum" (add))") && has(dangling, R"(field "inputs")") &&
              has(dangling, R"("fc0" is neither an earlier node nor a constant)"))
      << dangling;
  const std::string later = error_of(
      with_nodes(R"({"name": "a", "kind": "relu", "input": "b"}, {"name": "b", "kind": "linear", "out": 3})"));
  EXPECT_TRUE(has(later, R"(node "a" (relu))") && has(later, R"("b" is defined later)")) << later;
  const std::string mask = error_of(with_nodes(R"({"name": "m", "kind": "masked_fill", "mask": "nope", "value": 0})"));
  EXPECT_TRUE(has(mask, R"(node "m" (masked_fill))") && has(mask, R"(field "mask": no constant named "nope")")) << mask;
  const std::string output = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})", R"("output": "hed", )"));
  EXPECT_TRUE(has(output, R"(field "output": no node named "hed")")) << output;
  const std::string dup = error_of(
      with_nodes(R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "fc", "kind": "linear", "out": 3})"));
  EXPECT_TRUE(has(dup, R"(node "fc" (linear))") && has(dup, "a second node with this name")) << dup;
}

TEST(ModelFileErrors, ShapeMismatchBetweenNodes) {
  // fc1 gives [N, 8], fc2 [N, 4]: they cannot be added.
  const std::string e = error_of(with_nodes(R"({"name": "fc1", "kind": "linear", "out": 8},
      {"name": "fc2", "kind": "linear", "out": 4},
      {"name": "sum", "kind": "add", "inputs": ["fc1", "fc2"]},
      {"name": "head", "kind": "linear", "out": 3})"));
  EXPECT_TRUE(has(e, R"(node "sum" (add))") && has(e, R"(field "inputs")") && has(e, R"("fc1" [N, 8])") &&
              has(e, R"("fc2" [N, 4])"))
      << e;
  const std::string conv = error_of(with_nodes(R"({"name": "c", "kind": "conv2d", "out": 4, "kernel": 3})"));
  EXPECT_TRUE(has(conv, R"(node "c" (conv2d))") && has(conv, R"(field "inputs": expects [N, C, H, W], got a 2-d input)"))
      << conv;
  const std::string groups = R"({"ampcheck_model": 1, "data": {"generator": "images", "n": 4, "channels": 3},
      "nodes": [{"name": "dw", "kind": "conv2d", "out": 4, "kernel": 3, "groups": 2}]})";
  const std::string g = error_of(groups);
  EXPECT_TRUE(has(g, R"(node "dw" (conv2d))") && has(g, R"(field "groups": 2 must divide the input channels (3))")) << g;
  const std::string heads = R"({"ampcheck_model": 1, "data": {"generator": "sequences", "n": 4},
      "nodes": [{"name": "e", "kind": "embedding", "num": 8, "dim": 6}, {"name": "a", "kind": "attention", "heads": 4}]})";
  const std::string h = error_of(heads);
  EXPECT_TRUE(has(h, R"(node "a" (attention))") && has(h, R"(field "heads": 4 does not divide the model dim 6)")) << h;
}

TEST(ModelFileErrors, TheOutputMustGiveScoresPerClass) {
  const std::string few = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 2})"));
  EXPECT_TRUE(has(few, R"(field "output": node "fc" gives 2 scores per sample, but the data has 3 classes)")) << few;
  const std::string rank = R"({"ampcheck_model": 1, "data": {"generator": "images", "n": 4},
      "nodes": [{"name": "c", "kind": "conv2d", "out": 4, "kernel": 3}]})";
  const std::string r = error_of(rank);
  EXPECT_TRUE(has(r, R"(field "output": node "c" gives [N, 4, 14, 14])")) << r;
}

TEST(ModelFileErrors, ConstantsDataAndFile) {
  const std::string values = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})",
                                                 R"("constants": {"w": {"shape": [2, 2], "values": [1, 2, 3]}}, )"));
  EXPECT_TRUE(has(values, R"(constant "w")") && has(values, "3 numbers for shape [2, 2] (4)")) << values;
  const std::string gen = error_of(R"({"ampcheck_model": 1, "data": {"generator": "spirals"}, "nodes": [{"name": "a", "kind": "relu"}]})");
  EXPECT_TRUE(has(gen, R"("data")") && has(gen, R"(unknown generator "spirals")") && has(gen, R"(did you mean "spiral"?)"))
      << gen;
  const std::string param = error_of(R"({"ampcheck_model": 1, "data": {"generator": "spiral", "n": 5}, "nodes": [{"name": "a", "kind": "relu"}]})");
  EXPECT_TRUE(has(param, R"(unknown field "n")")) << param;
  EXPECT_TRUE(has(error_of("{\"ampcheck_model\": 1, "), "not valid JSON"));
  EXPECT_TRUE(has(error_of(R"({"nodes": []})"), R"(it needs "ampcheck_model": 1)"));
  EXPECT_TRUE(has(error_of(R"({"ampcheck_model": 2})"), "version 2 is not supported"));
  const std::string amp = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})", R"("amp": {"level": "O5"}, )"));
  EXPECT_TRUE(has(amp, R"(test.json: "amp")")) << amp;
  try {
    load_model("mpl", samples::builtin_models());
    ADD_FAILURE() << "an unknown sample loaded";
  } catch (const ModelFileError& e) {
    EXPECT_TRUE(has(e.what(), R"(unknown model "mpl")") && has(e.what(), R"(did you mean "mlp"?)")) << e.what();
  }
  try {
    load_model("/nonexistent/model.json");
    ADD_FAILURE() << "a missing file loaded";
  } catch (const ModelFileError& e) {
    EXPECT_TRUE(has(e.what(), "/nonexistent/model.json") && has(e.what(), "cannot be read")) << e.what();
  }
}

TEST(ModelFileErrors, ScalarsOnlyWhereAScalarOpTakesThem) {
  const std::string extra = R"("constants": {"eps": {"value": 0.5}}, )";
  for (const std::string nodes : {R"({"name": "r", "kind": "relu", "input": "eps"})",
                                  R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "m", "kind": "matmul", "inputs": ["fc", "eps"]})",
                                  R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "c", "kind": "concat", "dim": 1, "inputs": ["fc", "eps"]})",
                                  R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "s", "kind": "sub", "inputs": ["eps", "fc"]})"}) {
    const std::string e = error_of(with_nodes(nodes, extra));
    EXPECT_TRUE(has(e, R"(field "inputs": "eps" is a scalar constant; only add, sub, mul and div take one, as their second input)"))
        << nodes << "\n" << e;
  }
  EXPECT_EQ(error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3}, {"name": "s", "kind": "mul", "inputs": ["fc", "eps"]})", extra)), "");
}

TEST(ModelFileErrors, TrainAndEmbeddingRanges) {
  const std::string momentum = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})",
                                                   R"("train": {"optimizer": "adam", "momentum": 0.9}, )"));
  EXPECT_TRUE(has(momentum, R"(field "momentum" is for "optimizer": "sgd")")) << momentum;
  // The sequences generator draws tokens in [0, vocab): a table of vocab - 1 rows is too small
  // even when the two probe rows happen to fit.
  const std::string table = R"({"ampcheck_model": 1, "data": {"generator": "sequences", "n": 64, "vocab": 8},
      "nodes": [{"name": "tok", "kind": "embedding", "num": 7, "dim": 4}, {"name": "pool", "kind": "mean", "dims": [1]},
                {"name": "head", "kind": "linear", "out": 2}]})";
  const std::string e = error_of(table);
  EXPECT_TRUE(has(e, R"(node "tok" (embedding): field "num": the data holds index 7, but the table has 7 rows)")) << e;
  const std::string name = error_of(with_nodes(R"({"name": "fc", "kind": "linear", "out": 3})", R"("name": 5, )"));
  EXPECT_TRUE(has(name, R"(field "name" must be a string, got 5)")) << name;
}

// ---- data ----------------------------------------------------------------------

TEST(ModelFileData, ADataFileIsReadRelativeToTheModelFile) {
  const auto dir = std::filesystem::temp_directory_path() / "ampcheck_model_file_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "points.json") << R"({"x": [[0, 1], [1, 0], [0.5, 0.5], [-1, 2]], "y": [0, 1, 2, 0]})";
  std::ofstream(dir / "model.json") << R"({"ampcheck_model": 1, "data": {"file": "points.json"},
      "nodes": [{"name": "head", "kind": "linear", "out": 3}]})";
  const ModelFile f = load_model((dir / "model.json").string());
  const Dataset d = make_data(f, 0);
  EXPECT_EQ(d.x.shape(), (Shape{4, 2}));
  EXPECT_EQ(d.x.to_f64(), (std::vector<double>{0, 1, 1, 0, 0.5, 0.5, -1, 2}));
  EXPECT_EQ(d.y.to_i64(), (std::vector<std::int64_t>{0, 1, 2, 0}));
  Generator gen(0);
  EXPECT_NO_THROW(build(f, d, gen));

  std::ofstream(dir / "ragged.json") << R"({"x": [[0, 1], [1]], "y": [0, 1]})";
  EXPECT_THROW(load_samples((dir / "ragged.json").string()), std::invalid_argument);
  std::ofstream(dir / "labels.json") << R"({"x": [[0, 1], [1, 1]], "y": [0]})";
  try {
    load_samples((dir / "labels.json").string());
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "\"x\" has 2 samples and \"y\" 1 labels")) << e.what();
  }
  std::ofstream(dir / "tokens.json") << R"({"dtype": "int64", "x": [[1, 2, 3], [3, 2, 1]], "y": [1, 0]})";
  const Dataset t = load_samples((dir / "tokens.json").string());
  EXPECT_EQ(t.x.dtype(), DType::i64);
  EXPECT_EQ(t.x.to_i64(), (std::vector<std::int64_t>{1, 2, 3, 3, 2, 1}));
  std::filesystem::remove_all(dir);
}

TEST(ModelFileData, BlobsAreGaussiansAroundCentresInTheBox) {
  const Dataset d = blobs(2000, 3, 4, 0.5, 11);
  ASSERT_EQ(d.x.shape(), (Shape{6000, 4}));
  const std::vector<double> x = d.x.to_f64();
  const std::vector<std::int64_t> y = d.y.to_i64();
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t k = 0; k < 4; ++k) {
      double sum = 0, sq = 0;
      for (std::size_t i = static_cast<std::size_t>(c); i < y.size(); i += 3) {
        ASSERT_EQ(y[i], c);
        sum += x[i * 4 + static_cast<std::size_t>(k)];
      }
      const double mean = sum / 2000;
      for (std::size_t i = static_cast<std::size_t>(c); i < y.size(); i += 3) {
        const double dv = x[i * 4 + static_cast<std::size_t>(k)] - mean;
        sq += dv * dv;
      }
      EXPECT_GE(mean, -4.1);
      EXPECT_LE(mean, 4.1);
      EXPECT_NEAR(std::sqrt(sq / 1999), 0.5, 0.03);  // the spread, within sampling error
    }
  EXPECT_EQ(blobs(10, 3, 4, 0.5, 11).x.to_f64(), blobs(10, 3, 4, 0.5, 11).x.to_f64());
  EXPECT_NE(blobs(10, 3, 4, 0.5, 11).x.to_f64(), blobs(10, 3, 4, 0.5, 12).x.to_f64());
}

// ---- defaults the runner takes from the file --------------------------------------

TEST(ModelFileRunner, TrainDefaultsComeFromTheFile) {
  RunOptions o;
  o.model = "mlp";
  o.catalog = samples::builtin_models();
  o.amp.level = amp::Level::O0;
  Trainer t(o);
  const ModelFile f = load_model("mlp", samples::builtin_models());
  EXPECT_EQ(t.result().steps_asked, f.train.steps);
  EXPECT_EQ(t.result().batch, f.train.batch);
  EXPECT_EQ(t.result().lr, f.train.lr);
  o.steps = 3;
  o.batch = 7;
  Trainer u(o);
  EXPECT_EQ(u.result().steps_asked, 3);
  EXPECT_EQ(u.result().batch, 7);
}

}  // namespace
}  // namespace ampcheck::models
