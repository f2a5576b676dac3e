// ONNX conformance: every test of ONNX's own test data (Debian's libonnx-testdata: the
// node tests, the PyTorch-converted modules, the PyTorch operator tests) run forward
// through the importer, against the test's expected outputs, with the tolerances of ONNX's
// backend test runner (rtol 1e-3, atol 1e-7, NaN equal to NaN).
//
// Each test ends one of four ways:
//   pass         every output matches;
//   fail         an output differs, or the importer broke in a way it did not explain;
//   declined     the importer refused a variant it does not support and said so (a 3-D
//                convolution, integer arithmetic on data, a reversing slice, ...), or the
//                outputs are random (training-mode Dropout);
//   unsupported  the model uses an op type outside the importer's table.
// No test may fail; docs/onnx.md ("Conformance") quotes the counts, and the test checks
// that they are the ones measured here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "engine/dtype/convert.h"
#include "engine/ops/registry.h"
#include "models/arrays.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"

namespace ampcheck::models {
namespace {

namespace fs = std::filesystem;

const fs::path kTestData = AMPCHECK_ONNX_TESTDATA;

enum class Kind { pass, fail, declined, unsupported };

struct Outcome {
  std::string test, op;
  Kind kind = Kind::fail;
  std::string why;
};

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// The op type a test is about: its single node's, or "(composite)" for a test of several
// nodes (ONNX's function-expanded tests, a module of several layers).
std::string op_of(const onnx_file::Graph& g) {
  std::set<std::string> types;
  for (const auto& n : g.nodes) types.insert(n.op_type);
  if (types.size() == 1) return *types.begin();
  return "(composite)";
}

// Where ampcheck follows the exporting framework rather than ONNX's reference: the outputs
// it does not compare, and why. Every other output of these tests still must match.
struct Deviation {
  std::set<std::size_t> outputs;
  const char* why;
};
const std::map<std::string, Deviation>& deviations() {
  static const char* bf16 = "casts to bfloat16 round to nearest even, as PyTorch and CUDA do; ONNX 1.12's reference truncates";
  static const std::map<std::string, Deviation> d = {
      {"test_cast_FLOAT_to_BFLOAT16", {{0}, bf16}},
      {"test_castlike_FLOAT_to_BFLOAT16", {{0}, bf16}},
      {"test_castlike_FLOAT_to_BFLOAT16_expanded", {{0}, bf16}},
      {"test_batchnorm_epsilon_training_mode",
       {{2}, "running_var follows PyTorch (the unbiased batch variance); ONNX's reference uses the biased one"}},
      {"test_batchnorm_example_training_mode",
       {{2}, "running_var follows PyTorch (the unbiased batch variance); ONNX's reference uses the biased one"}},
  };
  return d;
}

// ONNX's test data stores bfloat16 tensors as their uint16 bits (numpy has no bfloat16).
Array as_declared(Array a, const std::string& elem_type) {
  if (elem_type == "bfloat16" && a.stored == "uint16") {
    std::vector<double> v;
    for (std::int64_t bits : a.i) v.push_back(round_to(decode(static_cast<std::uint64_t>(bits), DType::bf16), DType::bf16));
    return Array::floats(a.shape, v, DType::bf16);
  }
  return a;
}

Outcome run_case(const fs::path& dir) {
  Outcome o;
  o.test = dir.filename().string();
  std::shared_ptr<const onnx_file::Graph> g;
  try {
    g = std::make_shared<const onnx_file::Graph>(onnx_file::load((dir / "model.onnx").string()));
  } catch (const std::exception& e) {
    // ONNX's own test models must load, or the importer must say what it does not support.
    o.why = e.what();
    o.kind = o.why.find("not supported") != std::string::npos ? Kind::declined : Kind::fail;
    return o;
  }
  o.op = op_of(*g);
  std::set<std::string> missing;
  for (const auto& n : g->nodes)
    if (!n.domain.empty() || !find_onnx_op(n.op_type)) missing.insert(n.op_type);
  if (!missing.empty()) {
    o.kind = Kind::unsupported;
    for (const auto& m : missing) o.why += (o.why.empty() ? "" : ", ") + m;
    if (o.op == "(composite)" && missing.size() == 1) o.op = *missing.begin();
    return o;
  }
  if (o.test.find("training_dropout") != std::string::npos && o.test.find("zero_ratio") == std::string::npos) {
    o.kind = Kind::declined;
    o.why = "random outputs (training-mode Dropout): not comparable";
    return o;
  }
  const fs::path data = dir / "test_data_set_0";
  try {
    std::vector<Tensor> inputs;
    std::vector<bool> constant;
    for (std::size_t k = 0; k < g->inputs.size(); ++k) {
      inputs.push_back(as_declared(read_tensor_proto_file((data / ("input_" + std::to_string(k) + ".pb")).string()),
                                   g->inputs[k].elem_type)
                           .to_tensor());
      // An input that only feeds attribute-like slots (a shape, axes, a bound) is what a
      // model's constant would be.
      bool attribute = false, other = false;
      for (const auto& n : g->nodes)
        for (std::size_t i = 0; i < n.inputs.size(); ++i)
          if (n.inputs[i] == g->inputs[k].name) (is_attribute_input(n, i) ? attribute : other) = true;
      constant.push_back(attribute && !other);
    }
    std::vector<std::string> names;
    std::vector<Array> want;
    for (std::size_t k = 0; k < g->outputs.size(); ++k) {
      names.push_back(g->outputs[k].name);
      want.push_back(as_declared(read_tensor_proto_file((data / ("output_" + std::to_string(k) + ".pb")).string()),
                                 g->outputs[k].elem_type));
    }
    auto model = build_onnx(g, "", 0);
    model->eval();
    NoGradGuard no_grad;
    const std::vector<Tensor> got = run_onnx(*model, inputs, names, constant);
    const auto deviation = deviations().find(o.test);
    for (std::size_t k = 0; k < got.size(); ++k) {
      if (deviation != deviations().end() && deviation->second.outputs.count(k)) continue;
      const Array a = Array::of_tensor(got[k]);
      if (a.shape != want[k].shape) {
        o.why = "output " + names[k] + " is " + to_string(a.shape) + ", expected " + to_string(want[k].shape);
        return o;
      }
      for (std::int64_t i = 0; i < a.numel(); ++i)
        if (!close(a.at(i), want[k].at(i), 1e-3, 1e-7)) {
          std::ostringstream s;
          s << "output " << names[k] << "[" << i << "] is " << a.at(i) << ", expected " << want[k].at(i);
          o.why = s.str();
          return o;
        }
    }
    o.kind = Kind::pass;
    if (deviation != deviations().end()) {
      o.kind = Kind::declined;
      o.why = std::string("the other outputs match; by design: ") + deviation->second.why;
    }
  } catch (const std::invalid_argument& e) {
    // A refusal that names what it does not support is a decline; anything else a failure.
    const std::string what = e.what();
    o.why = what;
    o.kind = what.find("not supported") != std::string::npos ? Kind::declined : Kind::fail;
  } catch (const std::exception& e) {
    o.why = std::string("unexpected error: ") + e.what();
  }
  return o;
}

struct Row {
  int tests = 0, pass = 0, fail = 0, declined = 0, unsupported = 0;
};

std::vector<Outcome> run_suite(const std::string& suite) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kTestData / suite))
    if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::vector<Outcome> out;
  for (const fs::path& d : dirs) out.push_back(run_case(d));
  return out;
}

Row print_table(const std::string& suite, const std::vector<Outcome>& outcomes) {
  std::map<std::string, Row> rows;
  Row total;
  for (const Outcome& o : outcomes) {
    for (Row* r : {&rows[o.op.empty() ? "(load)" : o.op], &total}) {
      ++r->tests;
      r->pass += o.kind == Kind::pass;
      r->fail += o.kind == Kind::fail;
      r->declined += o.kind == Kind::declined;
      r->unsupported += o.kind == Kind::unsupported;
    }
  }
  std::cout << "\nONNX conformance, " << suite << ": " << total.tests << " tests, " << total.pass << " pass, " << total.fail
            << " fail, " << total.declined << " declined, " << total.unsupported << " unsupported\n";
  std::cout << "| op | tests | pass | fail | declined | unsupported |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& [op, r] : rows)
    if (r.unsupported < r.tests)  // the op types the importer supports
      std::cout << "| " << op << " | " << r.tests << " | " << r.pass << " | " << r.fail << " | " << r.declined << " | "
                << r.unsupported << " |\n";
  std::string unsupported;
  for (const auto& [op, r] : rows)
    if (r.unsupported == r.tests) unsupported += (unsupported.empty() ? "" : ", ") + op;
  std::cout << "unsupported op types: " << unsupported << "\n";
  for (const Outcome& o : outcomes)
    if (o.kind == Kind::declined) std::cout << "declined " << o.test << ": " << o.why << "\n";
  for (const Outcome& o : outcomes)
    if (o.kind == Kind::fail) std::cout << "FAIL " << o.test << ": " << o.why << "\n";
  return total;
}

// The counts docs/onnx.md quotes: "N of the M node tests pass" (line breaks anywhere).
void expect_doc_counts(const std::string& suite, const Row& total) {
  std::ifstream in(std::string(AMPCHECK_SOURCE_DIR) + "/docs/onnx.md");
  std::stringstream s;
  s << in.rdbuf();
  std::string text, word;
  for (std::istringstream words(s.str()); words >> word;) text += (text.empty() ? "" : " ") + word;
  const std::string tail = " " + suite + " tests pass";
  const std::size_t at = text.find(tail);
  const std::string claim = "docs/onnx.md should say \"" + std::to_string(total.pass) + " of the " +
                            std::to_string(total.tests) + " " + suite + " tests pass\"";
  ASSERT_NE(at, std::string::npos) << claim;
  std::vector<std::string> before;
  for (std::istringstream words(text.substr(at > 40 ? at - 40 : 0, at > 40 ? 40 : at)); words >> word;) before.push_back(word);
  ASSERT_GE(before.size(), 4u) << claim;
  const std::size_t n = before.size();
  ASSERT_TRUE(before[n - 3] == "of" && before[n - 2] == "the") << claim;
  EXPECT_EQ(before[n - 4], std::to_string(total.pass)) << "docs/onnx.md's count of passing " << suite << " tests is stale";
  EXPECT_EQ(before[n - 1], std::to_string(total.tests)) << "docs/onnx.md's count of " << suite << " tests is stale";
}

class OnnxConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTestData / "node"))
      GTEST_SKIP() << "ONNX's test data is not installed at " << kTestData << ": bash scripts/bootstrap.sh installs libonnx-testdata";
  }
};

TEST_F(OnnxConformance, NodeTestsOfSupportedOpsPass) {
  const auto outcomes = run_suite("node");
  const Row total = print_table("node", outcomes);
  EXPECT_EQ(total.fail, 0);
  EXPECT_GT(total.pass, 0);
  expect_doc_counts("node", total);
}

TEST_F(OnnxConformance, PytorchConvertedModulesWithSupportedOpsMatch) {
  const auto outcomes = run_suite("pytorch-converted");
  const Row total = print_table("pytorch-converted", outcomes);
  EXPECT_EQ(total.fail, 0);
  expect_doc_counts("pytorch-converted", total);
}

TEST_F(OnnxConformance, PytorchOperatorTestsWithSupportedOpsMatch) {
  const auto outcomes = run_suite("pytorch-operator");
  const Row total = print_table("pytorch-operator", outcomes);
  EXPECT_EQ(total.fail, 0);
  expect_doc_counts("pytorch-operator", total);
}

// The comparison itself: a wrong value and a wrong shape are failures, not passes.
TEST(OnnxConformanceCheck, CloseFollowsOnnxTolerances) {
  EXPECT_TRUE(close(1.0005, 1.0, 1e-3, 1e-7));
  EXPECT_FALSE(close(1.002, 1.0, 1e-3, 1e-7));
  EXPECT_TRUE(close(std::nan(""), std::nan(""), 1e-3, 1e-7));
  EXPECT_FALSE(close(0.0, std::nan(""), 1e-3, 1e-7));
  EXPECT_FALSE(close(1e9, INFINITY, 1e-3, 1e-7));
}

}  // namespace
}  // namespace ampcheck::models
