// The ONNX importer and the data readers it comes with: numpy files written by numpy
// itself (tests/data/arrays/, made with numpy 2.4: np.save, np.savez, np.savez_compressed),
// models written with the ONNX library's protobuf types as exporters write them, against
// references computed here in double or with the engine's own ops wired by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_harness.h"
#include "engine/amp/decorate.h"
#include "engine/autograd.h"
#include "onnx_builder.h"
#include "models/arrays.h"
#include "models/model_file.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"
#include "models/runner.h"

namespace ampcheck::models {
namespace {

using testing::has;
using testing::OnnxBuilder;
using testing::run_cli;
using testing::temp_path;

const std::string kArrays = std::string(AMPCHECK_SOURCE_DIR) + "/tests/data/arrays/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- numpy files ----

TEST(Arrays, ReadsWhatNumpyWroteInEveryType) {
  const Array x = read_npy(kArrays + "x_f32.npy");
  EXPECT_EQ(x.shape, (Shape{2, 3}));
  EXPECT_EQ(x.dtype, DType::f32);
  EXPECT_EQ(x.f, (std::vector<double>{0, 0.25, 0.5, 0.75, 1, 1.25}));
  const Array be = read_npy(kArrays + "be_i32.npy");  // big-endian int32
  EXPECT_EQ(be.i, (std::vector<std::int64_t>{-1, 2, 70000}));
  EXPECT_EQ(be.stored, "int32");
  const Array b = read_npy(kArrays + "b.npy");
  EXPECT_EQ(b.i, (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(b.stored, "bool");
  const Array h = read_npy(kArrays + "h.npy");
  EXPECT_EQ(h.dtype, DType::f16);
  EXPECT_EQ(h.f, (std::vector<double>{1.5, 65504, -std::ldexp(1.0, -10)}));
  EXPECT_EQ(read_npy(kArrays + "u8.npy").i, (std::vector<std::int64_t>{0, 255}));
  const Array s = read_npy(kArrays + "f64_scalar.npy");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.f, (std::vector<double>{0.1}));
}

TEST(Arrays, NpzPlainAndCompressedGiveTheTrainingSet) {
  for (const char* file : {"train.npz", "train_compressed.npz"}) {
    const auto arrays = read_arrays(kArrays + file);
    ASSERT_EQ(arrays.size(), 2u) << file;
    const Dataset d = dataset_of(arrays, file, "x");
    EXPECT_EQ(d.x.shape(), (Shape{4, 2})) << file;
    EXPECT_EQ(d.x.to_f64(), (std::vector<double>{0.5, -1, 2, 0.25, -0.75, 1.5, 0, 3})) << file;
    EXPECT_EQ(d.y.to_i64(), (std::vector<std::int64_t>{1, 0, 1, 0})) << file;  // int32 widened
  }
}

TEST(Arrays, BadFilesAreErrorsThatSayWhatToDo) {
  EXPECT_TRUE(has(error_of([] { read_npy(kArrays + "fortran.npy"); }), "Fortran order"));
  EXPECT_TRUE(has(error_of([] { read_npy(kArrays + "not_numpy.npy"); }), "not a numpy .npy file"));
  EXPECT_TRUE(has(error_of([] { read_npz(kArrays + "x_f32.npy"); }), "not a readable .npz"));
  EXPECT_TRUE(has(error_of([] { read_arrays(kArrays + "missing.npz"); }), "cannot be read"));
  EXPECT_TRUE(has(error_of([] { read_arrays(kArrays + "x.csv"); }), "use an .npz"));
  const auto no_labels = read_arrays(kArrays + "no_labels.npz");
  EXPECT_TRUE(has(error_of([&] { dataset_of(no_labels, "d", "x"); }), "no labels"));
  EXPECT_NO_THROW(dataset_of(no_labels, "d", "x", /*need_labels=*/false));
  Array x = Array::floats({3, 1}, {1, 2, 3});
  x.name = "input";
  Array y = Array::ints({2}, {0, 1});
  y.name = "labels";
  EXPECT_TRUE(has(error_of([&] { dataset_of({x, y}, "d", "x"); }), "must be [N] with N = 3"));
  y = Array::ints({3}, {0, -1, 1});
  y.name = "labels";
  EXPECT_TRUE(has(error_of([&] { dataset_of({x, y}, "d", "x"); }), "negative"));
  // A truncated file: the shape asks for more bytes than there are.
  std::ifstream in(kArrays + "x_f32.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(error_of([&] { parse_npy(bytes.substr(0, bytes.size() - 4), "cut.npy"); }), "truncated"));
}

TEST(Arrays, WrittenNpyIsNumpysLayoutAndReadsBack) {
  const Array a = Array::floats({2, 2}, {0.1f, -2, 3e-8f, 65504});
  const std::string bytes = npy_bytes(a);
  ASSERT_EQ(bytes.compare(0, 6, "\x93NUMPY"), 0);
  const std::size_t header = static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  EXPECT_EQ((10 + header) % 64, 0u) << "numpy aligns the data on 64 bytes";
  EXPECT_EQ(bytes.size(), 10 + header + 4 * 4);
  EXPECT_EQ(parse_npy(bytes, "a").f, a.f);
  const Array i = Array::ints({3}, {-5, 0, std::int64_t{1} << 40});
  EXPECT_EQ(parse_npy(npy_bytes(i), "i").i, i.i);
}

// ---- the importer ----

// input [batch, 3] -> fc1 (Gemm, transB) -> act (Relu) -> fc2 (Gemm) -> logits [batch, 2],
// with PyTorch's node names.
OnnxBuilder mlp(std::int64_t opset = 17) {
  OnnxBuilder b(opset);
  b.input("input", {-1, 3}).output("logits", {-1, 2});
  b.init("fc1.weight", {4, 3}, {0.5f, -0.25f, 1, 0.75f, 0.1f, -1, -0.5f, 0.3f, 0.2f, 1, 1, 1});
  b.init("fc1.bias", {4}, {0.1f, -0.2f, 0.3f, 0});
  b.init("fc2.weight", {2, 4}, {1, -1, 0.5f, 0.25f, -0.5f, 0.5f, 1, -1});
  b.init("fc2.bias", {2}, {0.05f, -0.05f});
  OnnxBuilder::attr(b.node("Gemm", "/fc1/Gemm", {"input", "fc1.weight", "fc1.bias"}, {"/fc1/Gemm_output_0"}), "transB",
                    std::int64_t{1});
  b.node("Relu", "/act/Relu", {"/fc1/Gemm_output_0"}, {"/act/Relu_output_0"});
  OnnxBuilder::attr(b.node("Gemm", "/fc2/Gemm", {"/act/Relu_output_0", "fc2.weight", "fc2.bias"}, {"logits"}), "transB",
                    std::int64_t{1});
  return b;
}

std::shared_ptr<const onnx_file::Graph> graph_of(const std::string& path) {
  return std::make_shared<const onnx_file::Graph>(onnx_file::load(path));
}

std::vector<double> mlp_reference(const std::vector<double>& x, std::int64_t n) {
  const double w1[4][3] = {{0.5, -0.25, 1}, {0.75, 0.1, -1}, {-0.5, 0.3, 0.2}, {1, 1, 1}};
  const double b1[4] = {0.1, -0.2, 0.3, 0};
  const double w2[2][4] = {{1, -1, 0.5, 0.25}, {-0.5, 0.5, 1, -1}};
  const double b2[2] = {0.05, -0.05};
  std::vector<double> out;
  for (std::int64_t r = 0; r < n; ++r) {
    double h[4];
    for (int j = 0; j < 4; ++j) {
      double s = b1[j];
      for (int k = 0; k < 3; ++k) s += static_cast<double>(static_cast<float>(w1[j][k])) * x[static_cast<std::size_t>(r * 3 + k)];
      h[j] = std::max(0.0, s - b1[j] + static_cast<double>(static_cast<float>(b1[j])));
    }
    for (int c = 0; c < 2; ++c) {
      double s = static_cast<double>(static_cast<float>(b2[c]));
      for (int j = 0; j < 4; ++j) s += static_cast<double>(static_cast<float>(w2[c][j])) * h[j];
      out.push_back(s);
    }
  }
  return out;
}

TEST(OnnxImport, KeepsTheLayerNamesAndComputesTheModel) {
  const std::string path = mlp().save("mlp.onnx");
  auto model = build_onnx(graph_of(path), "", 0);
  std::set<std::string> names;
  for (const auto& [n, t] : model->named_parameters()) names.insert(n);
  EXPECT_EQ(names, (std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  std::vector<double> xs = {0.5, -1, 2, 0.25, 1.5, -0.75, 3, 0, -2, 1, 1, 1};
  const Tensor x = Tensor::from(xs, {4, 3});
  const std::vector<double> got = (*model)(x).to_f64();
  const std::vector<double> want = mlp_reference(xs, 4);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

TEST(OnnxImport, GradientsAreThoseOfTheSameModelWrittenWithEngineOps) {
  const std::string path = mlp().save("mlp_grad.onnx");
  auto model = build_onnx(graph_of(path), "", 0);
  const Tensor x = Tensor::from(std::vector<double>{0.5, -1, 2, 0.25, 1.5, -0.75}, {2, 3});
  const Tensor y = Tensor::from(std::vector<std::int64_t>{1, 0}, {2});
  cross_entropy((*model)(x), y).backward();
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  std::map<std::string, Tensor> q;
  for (const auto& [n, t] : p) q[n] = t.detach().clone().set_requires_grad(true);
  cross_entropy(linear(relu(linear(x, q["fc1.weight"], q["fc1.bias"])), q["fc2.weight"], q["fc2.bias"]), y).backward();
  for (const auto& [n, t] : p) EXPECT_EQ(t.grad().to_f64(), q[n].grad().to_f64()) << n;
}

TEST(OnnxImport, ModulesComeFromScopesAndParameterNames) {
  OnnxBuilder b;
  b.input("input", {-1, 2, 4, 4}).output("y", {-1, 2, 4, 4});
  b.init("onnx::Conv_7", {2, 2, 1, 1}, {1, 0, 0, 1});
  b.init("blocks.0.norm.weight", {2}, {1, 1});
  b.init("blocks.0.norm.bias", {2}, {0, 0});
  b.init("scale", {}, {3});
  b.node("Conv", "/blocks/blocks.0/conv/Conv", {"input", "onnx::Conv_7"}, {"c"});
  b.node("Mul", "/Mul", {"c", "scale"}, {"y"});
  b.node("Identity", "/blocks/blocks.0/norm/Identity", {"blocks.0.norm.weight"}, {"unused"});
  const auto g = graph_of(b.save("scopes.onnx"));
  EXPECT_EQ(module_path_of(*g, g->nodes[0]), "blocks.0.conv");
  EXPECT_EQ(module_path_of(*g, g->nodes[1]), "Mul");
  EXPECT_TRUE(is_framework_module(*g, "blocks.0.conv"));
  EXPECT_FALSE(is_framework_module(*g, "Mul"));
  EXPECT_EQ(initializer_role(*g, "scale"), InitializerRole::constant);  // a one-element operand
  EXPECT_EQ(initializer_role(*g, "onnx::Conv_7"), InitializerRole::parameter);
  auto model = build_onnx(g, "y", 0);
  std::set<std::string> names;
  for (const auto& [n, t] : model->named_parameters()) names.insert(n);
  EXPECT_TRUE(names.count("blocks.0.conv.Conv_7")) << "a folded weight belongs to the layer that reads it";
  EXPECT_TRUE(names.count("blocks.0.norm.weight"));
}

TEST(OnnxImport, AnUnsupportedNodeIsAnErrorNamingItsTypeAndOpset) {
  OnnxBuilder b;
  b.input("input", {-1, 3}).output("y", {-1, 3});
  b.node("Relu", "/a/Relu", {"input"}, {"r"});
  b.node("Acos", "/b/Acos", {"r"}, {"y"});
  const auto g = graph_of(b.save("unsupported.onnx"));
  const std::string e = error_of([&] { build_onnx(g, "", 0); });
  EXPECT_TRUE(has(e, "node \"/b/Acos\" (Acos, opset 17) is not supported")) << e;
  EXPECT_TRUE(has(e, "Acos x1")) << e;
}

TEST(OnnxImport, MalformedFilesAreErrors) {
  const std::string garbage = temp_path("garbage.onnx");
  std::ofstream(garbage, std::ios::binary) << "\x08\x07\x12\xff\xff\xff garbage";
  EXPECT_TRUE(has(error_of([&] { onnx_file::load(garbage); }), "not an ONNX model"));
  EXPECT_TRUE(has(error_of([&] { onnx_file::load(temp_path("absent.onnx")); }), "cannot be read"));
  OnnxBuilder b = mlp();
  b.proto().mutable_graph()->mutable_initializer(0)->add_float_data(9);  // one value too many
  EXPECT_TRUE(has(error_of([&] { onnx_file::load(b.save("corrupt.onnx")); }), "fc1.weight"));
  OnnxBuilder c = mlp();
  c.proto().mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  const std::string e = error_of([&] { onnx_file::load(c.save("dangling.onnx")); });
  EXPECT_TRUE(has(e, "nowhere")) << e;
}

TEST(OnnxImport, ShapeArithmeticRunsOnTheRealBatchSize) {
  // Reshape to [batch, 2, 2] with the batch read from Shape, as a dynamic export writes it.
  OnnxBuilder b;
  b.input("input", {-1, 4}).output("y", {-1, 2, 2});
  b.init_i64("zero", {1}, {0});
  b.init_i64("rest", {2}, {2, 2});
  b.node("Shape", "/Shape", {"input"}, {"s"});
  auto& gather = b.node("Gather", "/Gather", {"s", "zero"}, {"n"});
  OnnxBuilder::attr(gather, "axis", std::int64_t{0});
  auto& cat = b.node("Concat", "/Concat", {"n", "rest"}, {"shape"});
  OnnxBuilder::attr(cat, "axis", std::int64_t{0});
  b.node("Reshape", "/Reshape", {"input", "shape"}, {"y"});
  auto model = build_onnx(graph_of(b.save("reshape.onnx")), "", 0);
  for (std::int64_t n : {1, 5}) EXPECT_EQ((*model)(Tensor::zeros({n, 4})).shape(), (Shape{n, 2, 2}));
}

TEST(OnnxImport, TrainingBatchNormUpdatesRunningStatisticsAsPyTorch) {
  OnnxBuilder b;
  b.input("input", {-1, 2}).output("y", {-1, 2});
  b.init("bn.weight", {2}, {1, 2});
  b.init("bn.bias", {2}, {0, 1});
  b.init("bn.running_mean", {2}, {0.5f, -1});
  b.init("bn.running_var", {2}, {2, 1});
  auto& n = b.node("BatchNormalization", "/bn/BatchNormalization",
                   {"input", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"y"});
  OnnxBuilder::attr(n, "momentum", 0.9f);  // ONNX's: PyTorch's momentum 0.1
  OnnxBuilder::attr(n, "epsilon", 1e-5f);
  auto model = build_onnx(graph_of(b.save("bn.onnx")), "", 0);
  std::map<std::string, Tensor> buffers;
  for (const auto& [name, t] : model->named_buffers()) buffers[name] = t;
  ASSERT_TRUE(buffers.count("bn.running_mean"));
  const std::vector<double> xs = {1, 2, 3, -2, 5, 0};  // column means 3, 0; unbiased vars 4, 4
  model->train();
  const std::vector<double> y = (*model)(Tensor::from(xs, {3, 2})).to_f64();
  // Normalised with the biased batch variance (8/3), as PyTorch's training forward.
  const double sd = std::sqrt(8.0 / 3 + 1e-5);
  EXPECT_NEAR(y[0], (1 - 3) / sd * 1 + 0, 1e-5);
  EXPECT_NEAR(y[1], (2 - 0) / sd * 2 + 1, 1e-5);
  const std::vector<double> mean = buffers["bn.running_mean"].to_f64(), var = buffers["bn.running_var"].to_f64();
  EXPECT_NEAR(mean[0], 0.9 * 0.5 + 0.1 * 3, 1e-6);
  EXPECT_NEAR(mean[1], 0.9 * -1 + 0.1 * 0, 1e-6);
  EXPECT_NEAR(var[0], 0.9 * 2 + 0.1 * 4, 1e-6);  // the unbiased batch variance, as PyTorch
  EXPECT_NEAR(var[1], 0.9 * 1 + 0.1 * 4, 1e-6);
  {
    // At O2 the norm layer keeps fp32 parameters, as decorate keeps PyTorch's and Paddle's.
    auto o2 = build_onnx(graph_of(b.save("bn_o2.onnx")), "", 0);
    amp::AmpOptions options;
    options.level = amp::Level::O2;
    amp::decorate(*o2, nullptr, options);
    for (const auto& [name, t] : o2->named_parameters()) EXPECT_EQ(t.dtype(), DType::f32) << name;
  }
  model->eval();  // the running statistics now
  const std::vector<double> e = (*model)(Tensor::from(std::vector<double>{1, 2}, {1, 2})).to_f64();
  EXPECT_NEAR(e[0], (1 - mean[0]) / std::sqrt(var[0] + 1e-5), 1e-5);
  EXPECT_NEAR(e[1], (2 - mean[1]) / std::sqrt(var[1] + 1e-5) * 2 + 1, 1e-5);
}

TEST(OnnxImport, DropoutDropsInTrainingOnlyAndScalesTheRest) {
  OnnxBuilder b(13);
  b.input("input", {-1, 1000}).output("y", {-1, 1000});
  b.init("ratio", {}, {0.25f});
  b.node("Dropout", "/drop/Dropout", {"input", "ratio"}, {"y"});
  auto model = build_onnx(graph_of(b.save("dropout.onnx")), "", 7);
  const Tensor x = Tensor::ones({2, 1000});
  model->train();
  const std::vector<double> y = (*model)(x).to_f64();
  std::int64_t zeros = 0;
  for (double v : y) {
    EXPECT_TRUE(v == 0 || std::fabs(v - 1 / 0.75) < 1e-6) << v;
    zeros += v == 0;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 2000, 0.25, 0.04);
  model->eval();
  EXPECT_EQ((*model)(x).to_f64(), x.to_f64());
}

TEST(OnnxImport, ANewerOpsetThanTheLibraryKnowsRunsWithANote) {
  // Opset 18 moves ReduceMean's axes to an input; the ONNX library here knows 17.
  OnnxBuilder b(18);
  b.input("input", {-1, 3}).output("y", {-1, 1});
  b.init_i64("axes", {1}, {1});
  b.node("ReduceMean", "/ReduceMean", {"input", "axes"}, {"y"});
  const auto g = graph_of(b.save("opset18.onnx"));
  EXPECT_TRUE(has(g->check_note, "opset 18")) << g->check_note;
  auto model = build_onnx(g, "", 0);
  EXPECT_EQ((*model)(Tensor::from(std::vector<double>{1, 2, 6}, {1, 3})).to_f64(), (std::vector<double>{3}));
}

// ---- the commands ----

std::string mlp_data_dir() {
  // input [6, 3] and labels for the mlp; what a user saves with np.save per array.
  const std::string dir = temp_path("mlp_data");
  std::filesystem::create_directories(dir);
  const std::vector<double> x = {0.5, -1, 2, 0.25, 1.5, -0.75, 3, 0, -2, 1, 1, 1, -1, 2, 0.5, 0, 0, 1};
  Array in = Array::floats({6, 3}, x);
  std::ofstream(dir + "/input.npy", std::ios::binary) << npy_bytes(in);
  std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({6}, {0, 1, 0, 1, 0, 1}));
  return dir;
}

TEST(OnnxCli, RunTrainsTheModelUnderAmpWithItsLayerNames) {
  const std::string model = mlp().save("cli_mlp.onnx");
  const auto r = run_cli({"run", "--model", model, "--data", mlp_data_dir(), "--loss", "cross_entropy", "--level", "O2",
                          "--steps", "3", "--batch", "3", "--json", "-q"});
  ASSERT_TRUE(r.code == 0 || r.code == 1) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  std::set<std::string> fp16_modules;
  for (const auto& op : report["ops"])
    if (op["type"] == "linear" && op["phase"] == "forward" && op["out"] == "float16") fp16_modules.insert(op["module"]);
  EXPECT_EQ(fp16_modules, (std::set<std::string>{"fc1", "fc2"})) << r.out.substr(0, 2000);
}

TEST(OnnxCli, BadModelsAndDataExitTwoNamingTheProblem) {
  OnnxBuilder b;
  b.input("input", {-1, 3}).output("y", {-1, 3});
  b.node("Acos", "/head/Acos", {"input"}, {"y"});
  const std::string unsupported = b.save("cli_unsupported.onnx");
  auto r = run_cli({"run", "--model", unsupported, "--data", mlp_data_dir(), "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "\"/head/Acos\" (Acos, opset 17) is not supported")) << r.err;
  // A node declaring an output its op does not give, read by the graph: the file's defect,
  // named with the file by run and by infer. The ONNX checker refuses it at the opsets the
  // library knows; at a newer one (opset 18 here, the library knows 17) it is not checked.
  OnnxBuilder two(18);
  two.input("input", {-1, 3}).output("y", {-1, 3});
  two.node("Relu", "/act/Relu", {"input"}, {"r", "r_extra"});
  two.node("Add", "/Add", {"r", "r_extra"}, {"y"});
  const std::string extra = two.save("cli_extra_output.onnx");
  for (const std::string cmd : {"run", "infer"}) {
    r = cmd == "run" ? run_cli({"run", "--model", extra, "--data", mlp_data_dir(), "-q"})
                     : run_cli({"infer", "--model", extra, "--data", mlp_data_dir(), "--out", temp_path("extra.npy"), "-q"});
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_TRUE(has(r.err, extra + ": node \"/act/Relu\"")) << cmd << ": " << r.err;
    EXPECT_TRUE(has(r.err, "reads its output 1 (\"r_extra\"), but Relu gives 1 output")) << cmd << ": " << r.err;
  }
  const std::string garbage = temp_path("cli_garbage.onnx");
  std::ofstream(garbage, std::ios::binary) << "not protobuf at all \xff\xfe";
  r = run_cli({"run", "--model", garbage, "--data", mlp_data_dir(), "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "not an ONNX model")) << r.err;
  const std::string model = mlp().save("cli_mlp2.onnx");
  r = run_cli({"run", "--model", model, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--data")) << r.err;
  r = run_cli({"run", "--model", model, "--data", kArrays + "train.npz", "-q"});  // 2 features, the model takes 3
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "the model's input \"input\" is [?, 3]")) << r.err;
  r = run_cli({"run", "--model", model, "--data", kArrays + "no_labels.npz", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "no labels")) << r.err;
  r = run_cli({"run", "--model", model, "--data", mlp_data_dir(), "--loss", "hinge", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "unknown loss \"hinge\"")) << r.err;

  // A token id beyond the embedding's table in a later batch: found mid-training, still
  // the user's data to fix (exit 2), not an internal error.
  OnnxBuilder e;
  e.input("input", {-1, 2}, onnx::TensorProto::INT64).output("logits", {-1, 2});
  e.init("emb.weight", {3, 2}, {1, 0, 0, 1, 1, 1});
  e.node("Gather", "/emb/Gather", {"emb.weight", "input"}, {"v"});
  auto& reduce = e.node("ReduceMean", "/ReduceMean", {"v"}, {"logits"});
  OnnxBuilder::attr(reduce, "keepdims", std::int64_t{0});
  OnnxBuilder::attr(reduce, "axes", std::vector<std::int64_t>{1});
  const std::string dir = temp_path("bad_tokens");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/input.npy", std::ios::binary) << npy_bytes(Array::ints({6, 2}, {0, 1, 2, 0, 1, 1, 2, 2, 0, 0, 7, 1}));
  std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({6}, {0, 1, 0, 1, 0, 1}));
  r = run_cli({"run", "--model", e.save("tokens.onnx"), "--data", dir, "--batch", "2", "--steps", "3", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "index 7 is out of range for the 3 rows of \"emb.weight\"")) << r.err;
}

TEST(OnnxCli, OpsListsTheModelsOpTypesWithTheirAmpDecisions) {
  const std::string model = mlp().save("cli_ops.onnx");
  auto r = run_cli({"ops", "--onnx", model, "--level", "O1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "3 nodes, 2 op types, 26 parameters")) << r.out;
  const auto j = nlohmann::json::parse(run_cli({"ops", "--onnx", model, "--level", "O1", "--json"}).out);
  for (const auto& t : j["op_types"]) {
    if (t["op_type"] == "Gemm") {
      EXPECT_EQ(t["runs"][0]["op"], "linear");
      EXPECT_EQ(t["runs"][0]["runs_in_fp32_inputs"], "float16");  // white list at O1
    }
    if (t["op_type"] == "Relu") {
      EXPECT_EQ(t["runs"][0]["runs_in_fp32_inputs"], "float32");  // follows its input
    }
  }
  OnnxBuilder b;
  b.input("input", {-1, 3}).output("y", {-1, 3});
  b.node("Acos", "/head/Acos", {"input"}, {"y"});
  r = run_cli({"ops", "--onnx", b.save("cli_ops_unsupported.onnx")});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "NOT SUPPORTED")) << r.out;
}

TEST(OnnxCli, InferWritesTheModelsOutputs) {
  const std::string model = mlp().save("cli_infer.onnx");
  const std::string out = temp_path("infer_out.npy");
  const auto r = run_cli({"infer", "--model", model, "--data", mlp_data_dir(), "--out", out, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Array y = read_npy(out);
  EXPECT_EQ(y.shape, (Shape{6, 2}));
  const std::vector<double> want =
      mlp_reference({0.5, -1, 2, 0.25, 1.5, -0.75, 3, 0, -2, 1, 1, 1, -1, 2, 0.5, 0, 0, 1}, 6);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.f[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
  // Under O2 the model runs in fp16: close to the fp32 values, not equal to them.
  const std::string out16 = temp_path("infer_out16.npy");
  ASSERT_EQ(run_cli({"infer", "--model", model, "--data", mlp_data_dir(), "--out", out16, "--level", "O2", "-q"}).code, 0);
  const Array y16 = read_npy(out16);
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(y16.f[i] - want[i]) / (1 + std::fabs(want[i])));
  EXPECT_GT(worst, 0);
  EXPECT_LT(worst, 1e-2);
  EXPECT_EQ(run_cli({"infer", "--model", model, "--data", mlp_data_dir(), "-q"}).code, 2);  // --out is required
}

TEST(OnnxCli, BisectFindsAPlantedOverflowAndNamesItInTheFrameworksWords) {
  // fc1, then x * 300 and its square (PyTorch's torch.square exports Mul(x, x)), a LayerNorm
  // that brings the values back, ReLU and a head: the square overflows fp16 at O2.
  OnnxBuilder b;
  b.input("input", {-1, 3}).output("logits", {-1, 2});
  b.init("fc1.weight", {4, 3}, {1, 0.5f, -1, 0.8f, 1, 0.3f, -0.6f, 0.9f, 1, 1, -1, 0.5f});
  b.init("fc1.bias", {4}, {0, 0, 0, 0});
  b.init("norm.weight", {4}, {1, 1, 1, 1});
  b.init("norm.bias", {4}, {0, 0, 0, 0});
  b.init("head.weight", {2, 4}, {1, -1, 0.5f, 0.25f, -0.5f, 0.5f, 1, -1});
  b.init("head.bias", {2}, {0, 0});
  b.init("gain", {}, {300});
  OnnxBuilder::attr(b.node("Gemm", "/fc1/Gemm", {"input", "fc1.weight", "fc1.bias"}, {"h"}), "transB", std::int64_t{1});
  b.node("Mul", "/Mul", {"h", "gain"}, {"g"});
  b.node("Mul", "/Mul_1", {"g", "g"}, {"e"});
  b.node("LayerNormalization", "/norm/LayerNormalization", {"e", "norm.weight", "norm.bias"}, {"n"});
  b.node("Relu", "/act/Relu", {"n"}, {"r"});
  OnnxBuilder::attr(b.node("Gemm", "/head/Gemm", {"r", "head.weight", "head.bias"}, {"logits"}), "transB", std::int64_t{1});
  const std::string model = b.save("cli_overflow.onnx");
  const auto r = run_cli({"bisect-nan", "--model", model, "--data", mlp_data_dir(), "--loss", "cross_entropy", "--level",
                          "O2", "--steps", "20", "--batch", "3", "--max-skipped", "0.2", "-q"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "fix found")) << r.out;
  EXPECT_TRUE(has(r.out, "custom_black_list={\"elementwise_mul\"}")) << r.out;  // Paddle's name for it
  EXPECT_TRUE(has(r.out, "as PyTorch names them: mul")) << r.out;
  EXPECT_TRUE(has(r.out, "ONNX node \"/Mul_1\" (Mul)")) << r.out;
}


TEST(OnnxCli, InferFeedsEveryInputOfAGraphByName) {
  OnnxBuilder b;
  b.input("tokens", {-1, 2}).input("mask", {-1, 2}).output("y", {-1, 2});
  b.node("Mul", "/Mul", {"tokens", "mask"}, {"y"});
  const std::string model = b.save("two_inputs.onnx");
  const std::string dir = temp_path("two_inputs_data");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokens.npy", std::ios::binary) << npy_bytes(Array::floats({2, 2}, {1, 2, 3, 4}));
  std::ofstream(dir + "/mask.npy", std::ios::binary) << npy_bytes(Array::floats({2, 2}, {1, 0, 0, 1}));
  const std::string out = temp_path("two_inputs_out.npy");
  const auto r = run_cli({"infer", "--model", model, "--data", dir, "--out", out, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_npy(out).f, (std::vector<double>{1, 0, 0, 4}));
  std::filesystem::remove(dir + "/mask.npy");
  const auto missing = run_cli({"infer", "--model", model, "--data", dir, "--out", out, "-q"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "no array named \"mask\"")) << missing.err;
}

TEST(OnnxDocs, ListEverySupportedOpTypeAndRunTheModelFileExample) {
  std::ifstream in(std::string(AMPCHECK_SOURCE_DIR) + "/docs/onnx.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  for (const OnnxOpInfo& op : onnx_ops())
    EXPECT_TRUE(has(doc, "| `" + std::string(op.op_type) + "` |")) << op.op_type << " is missing from docs/onnx.md";
  // The count the doc claims, wherever its lines break.
  std::string words, word;
  for (std::istringstream in_words(doc); in_words >> word;) words += (words.empty() ? "" : " ") + word;
  EXPECT_TRUE(has(words, std::to_string(onnx_ops().size()) + " ONNX op types are supported"))
      << "docs/onnx.md's count of supported ONNX op types is stale: " << onnx_ops().size();
  // The model file around an ONNX file, as the doc writes it, next to the files it names.
  const std::size_t start = doc.find("```json\n{\n  \"ampcheck_model\": 1,\n  \"onnx\"");
  ASSERT_NE(start, std::string::npos);
  const std::size_t end = doc.find("```", start + 7);
  const std::string text = doc.substr(start + 8, end - start - 8);
  const std::string dir = temp_path("doc_example");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kArrays + "train.npz", dir + "/train.npz", std::filesystem::copy_options::overwrite_existing);
  OnnxBuilder b;  // a stand-in for resnet18.onnx with the data's 2 features and an output "logits"
  b.input("input", {-1, 2}).output("logits", {-1, 2});
  b.init("fc.weight", {2, 2}, {1, 0, 0, 1});
  b.init("fc.bias", {2}, {0, 0});
  OnnxBuilder::attr(b.node("Gemm", "/fc/Gemm", {"input", "fc.weight", "fc.bias"}, {"g"}), "transB", std::int64_t{1});
  b.node("Relu", "/attn/Relu", {"g"}, {"logits"});
  std::filesystem::copy_file(b.save("doc_model.onnx"), dir + "/resnet18.onnx", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/model.json") << text;
  const auto r = run_cli({"run", "--model", dir + "/model.json", "--steps", "2", "--batch", "2", "-q"});
  EXPECT_TRUE(r.code == 0 || r.code == 1) << r.err;
  EXPECT_TRUE(has(r.out, "resnet18, our fine-tuning data")) << r.out;
  EXPECT_TRUE(has(r.out, "O1 float16")) << r.out;
}


// Models torch.onnx.export wrote (samples/onnx/, from bench/onnx/export.py: a BERT-style and
// a GPT-2-style block with PyTorch's own names, folded constants, Erf-GELU, tanh-GELU, a
// causal Where mask and a Split; an MLP): ampcheck's forward against PyTorch's own f32
// outputs, within the benchmark's 1e-4 relative.
TEST(OnnxPytorchExports, ForwardMatchesPytorchsOutputs) {
  const std::string dir = std::string(AMPCHECK_SOURCE_DIR) + "/samples/onnx/";
  for (const char* name : {"bert_block", "gpt2_block", "overflow_mlp"}) {
    const auto g = graph_of(dir + name + ".onnx");
    EXPECT_EQ(producer_framework(*g), "pytorch");
    auto model = build_onnx(g, "", 0);
    model->eval();
    NoGradGuard no_grad;
    const Tensor x = dataset_of(read_arrays(dir + name + ".eval.npz"), name, "input", false).x;
    const std::vector<double> got = (*model)(x).to_f64();
    const Array want = read_npy(dir + name + ".ref.npy");
    ASSERT_EQ(got.size(), want.f.size()) << name;
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want.f[i]));
      scale = std::max(scale, std::fabs(want.f[i]));
    }
    EXPECT_LT(worst / scale, 1e-4) << name;
  }
}

TEST(OnnxPytorchExports, NamesAreTheModulesOfThePytorchModel) {
  const auto g = graph_of(std::string(AMPCHECK_SOURCE_DIR) + "/samples/onnx/bert_block.onnx");
  std::set<std::string> modules;
  for (const auto& n : g->nodes) modules.insert(module_path_of(*g, n));
  for (const char* m : {"attn.q", "attn.k", "attn.v", "attn.out", "ffn.0", "ffn.2", "tok_emb", "emb_norm"})
    EXPECT_TRUE(modules.count(m)) << m;
}


// The op types the importer composes of registry ops: their gradient, through autograd,
// against central finite differences of the imported forward, in f64.
TEST(OnnxComposites, GradientsMatchFiniteDifferences) {
  struct Case {
    const char* op;
    std::vector<std::int64_t> shape;
    std::function<void(OnnxBuilder&, onnx::NodeProto&)> extra;
  };
  auto attr_f = [](const char* name, float v) {
    return [=](OnnxBuilder&, onnx::NodeProto& n) { OnnxBuilder::attr(n, name, v); };
  };
  const std::vector<Case> cases = {
      {"LeakyRelu", {2, 5}, attr_f("alpha", 0.1f)},
      {"Elu", {2, 5}, attr_f("alpha", 0.7f)},
      {"Selu", {2, 5}, {}},
      {"Celu", {2, 5}, attr_f("alpha", 2.0f)},
      {"Softplus", {2, 5}, {}},
      {"Softsign", {2, 5}, {}},
      {"InstanceNormalization", {2, 3, 2, 2},
       [](OnnxBuilder& b, onnx::NodeProto& n) {
         b.init("in.scale", {3}, {1.5f, -0.5f, 2});
         b.init("in.bias", {3}, {0.1f, 0.2f, -0.3f});
         n.add_input("in.scale");
         n.add_input("in.bias");
       }},
      {"Pad", {1, 2, 3, 3},
       [](OnnxBuilder& b, onnx::NodeProto& n) {
         b.init_i64("pads", {8}, {0, 0, 1, 2, 0, 0, 2, 1});
         n.add_input("pads");
         auto* a = n.add_attribute();
         a->set_name("mode");
         a->set_type(onnx::AttributeProto::STRING);
         a->set_s("reflect");
       }},
      {"Resize", {1, 2, 2, 3},
       [](OnnxBuilder& b, onnx::NodeProto& n) {
         b.init("scales", {4}, {1, 1, 2, 3});
         n.add_input("");
         n.add_input("scales");
         auto* a = n.add_attribute();
         a->set_name("mode");
         a->set_type(onnx::AttributeProto::STRING);
         a->set_s("nearest");
       }},
      {"ReduceLogSumExp", {2, 5}, [](OnnxBuilder&, onnx::NodeProto& n) { OnnxBuilder::attr(n, "axes", std::vector<std::int64_t>{1}); }},
      {"ReduceL2", {2, 5}, [](OnnxBuilder&, onnx::NodeProto& n) { OnnxBuilder::attr(n, "axes", std::vector<std::int64_t>{1}); }},
  };
  for (const Case& c : cases) {
    OnnxBuilder b;
    std::vector<std::int64_t> dims = c.shape;
    b.input("x", dims, onnx::TensorProto::DOUBLE);
    auto& n = b.node(c.op, std::string("/") + c.op, {"x"}, {"y"});
    if (c.extra) c.extra(b, n);
    const std::string op = c.op;
    std::vector<std::int64_t> out = dims;
    if (op == "Pad") out = {1, 2, 6, 6};
    if (op == "Resize") out = {1, 2, 4, 9};
    if (op.rfind("Reduce", 0) == 0) out = {2, 1};
    b.output("y", out, onnx::TensorProto::DOUBLE);
    auto model = build_onnx(graph_of(b.save(std::string("grad_") + c.op + ".onnx")), "", 0);
    Generator gen(3);
    const Tensor x0 = Tensor::uniform(dims, gen, -2, 2, DType::f64);
    auto f = [&](const Tensor& x) {
      const Tensor y = (*model)(x);
      const std::vector<double> v = y.to_f64();
      double s = 0;
      for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * (1 + 0.1 * static_cast<double>(i % 7));
      return s;
    };
    Tensor x = x0.clone().set_requires_grad(true);
    const Tensor y = (*model)(x);
    std::vector<double> w;
    for (std::int64_t i = 0; i < y.numel(); ++i) w.push_back(1 + 0.1 * static_cast<double>(i % 7));
    sum(mul(y, Tensor::from(w, y.shape(), DType::f64))).backward();
    const std::vector<double> g = x.grad().to_f64();
    std::vector<double> base = x0.to_f64();
    for (std::size_t i = 0; i < base.size(); ++i) {
      const double h = 1e-6;
      std::vector<double> up = base, down = base;
      up[i] += h;
      down[i] -= h;
      const double fd = (f(Tensor::from(up, dims, DType::f64)) - f(Tensor::from(down, dims, DType::f64))) / (2 * h);
      EXPECT_NEAR(g[i], fd, 1e-6 * (1 + std::fabs(fd))) << c.op << " element " << i;
    }
  }
}


// A transformer-style export with token ids and an attention mask: each input from the
// data's array of its name, batched together.
TEST(OnnxCli, RunTrainsAGraphOfSeveralInputs) {
  OnnxBuilder b;
  b.input("input_ids", {-1, 3}, onnx::TensorProto::INT64).input("attention_mask", {-1, 3}).output("logits", {-1, 2});
  b.init("emb.weight", {4, 2}, {1, 0, 0, 1, 1, 1, -1, 0.5f});
  b.init("head.weight", {2, 2}, {1, -1, 0.5f, 0.25f});
  b.init("head.bias", {2}, {0, 0});
  b.init_i64("axes", {1}, {2});
  b.node("Gather", "/emb/Gather", {"emb.weight", "input_ids"}, {"e"});
  b.node("Unsqueeze", "/Unsqueeze", {"attention_mask", "axes"}, {"m"});
  b.node("Mul", "/Mul", {"e", "m"}, {"masked"});
  auto& mean_node = b.node("ReduceMean", "/ReduceMean", {"masked"}, {"pooled"});
  OnnxBuilder::attr(mean_node, "axes", std::vector<std::int64_t>{1});
  OnnxBuilder::attr(mean_node, "keepdims", std::int64_t{0});
  OnnxBuilder::attr(b.node("Gemm", "/head/Gemm", {"pooled", "head.weight", "head.bias"}, {"logits"}), "transB", std::int64_t{1});
  const std::string model = b.save("two_input_training.onnx");
  const std::string dir = temp_path("two_input_training");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/input_ids.npy", std::ios::binary) << npy_bytes(Array::ints({4, 3}, {0, 1, 2, 3, 3, 0, 1, 1, 2, 2, 0, 3}));
  std::ofstream(dir + "/attention_mask.npy", std::ios::binary)
      << npy_bytes(Array::floats({4, 3}, {1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1}));
  std::ofstream(dir + "/labels.npy", std::ios::binary) << npy_bytes(Array::ints({4}, {0, 1, 0, 1}));
  auto r = run_cli({"run", "--model", model, "--data", dir, "--steps", "4", "--batch", "2", "--level", "O1", "-q"});
  EXPECT_TRUE(r.code == 0 || r.code == 1) << r.err;
  EXPECT_TRUE(has(r.out, "embedding ")) << r.out;
  EXPECT_TRUE(has(r.out, "verdict: healthy")) << r.out;
  // The mask counts: zeroing it changes what the model computes.
  RunOptions o;
  o.model = model;
  o.overrides.data = dir;
  o.steps = 1;
  const double with_mask = run(o).steps.front().loss;
  std::ofstream(dir + "/attention_mask.npy", std::ios::binary) << npy_bytes(Array::floats({4, 3}, std::vector<double>(12, 0.0)));
  EXPECT_NE(run(o).steps.front().loss, with_mask);
  std::filesystem::remove(dir + "/attention_mask.npy");
  r = run_cli({"run", "--model", model, "--data", dir, "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "no array named \"attention_mask\"")) << r.err;
}

}  // namespace
}  // namespace ampcheck::models
