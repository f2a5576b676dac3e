// `--model` with the model files: a sample's defaults (its train and amp blocks) apply
// unless the command line says otherwise, a model file on disk runs like a sample, and
// a bad file is a usage error naming the node and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "reports/json.h"
#include "models/model_file.h"
#include "samples/builtin_models.h"
#include "tests/cli_harness.h"

namespace ampcheck::cli {
namespace {

using testing::has;
using testing::run_cli;

reports::Report report_of(const std::vector<std::string>& args) {
  const auto r = run_cli(args);
  EXPECT_LE(r.code, 1) << r.err;  // 1: the run's verdict is "failed"
  return reports::from_json(r.out, "stdout");
}

TEST(CliModel, TheModelFileSetsTheDefaultsAndTheCommandLineWins) {
  const models::ModelFile f = models::load_model("variance_overflow", samples::builtin_models());
  ASSERT_TRUE(f.amp.has_value());
  ASSERT_EQ(f.amp->amp.level, amp::Level::O1);  // the sample's "amp" block, which the test relies on
  const reports::Report own = report_of({"run", "--model", "variance_overflow", "--steps", "3", "--quiet", "--json"});
  EXPECT_EQ(own.run.level, "O1");
  EXPECT_EQ(own.run.batch, f.train.batch);
  EXPECT_EQ(own.run.lr, f.train.lr);
  const reports::Report over = report_of({"run", "--model", "variance_overflow", "--steps", "3", "--level", "O2",
                                          "--batch", "10", "--lr", "0.5", "--quiet", "--json"});
  EXPECT_EQ(over.run.level, "O2");
  EXPECT_EQ(over.run.batch, 10);
  EXPECT_EQ(over.run.lr, 0.5);
  // A model without an "amp" block runs at the command line's default, O2.
  EXPECT_EQ(report_of({"run", "--model", "mlp", "--steps", "2", "--quiet", "--json"}).run.level, "O2");
  // Without --steps, the file's step count.
  const auto full = run_cli({"run", "--model", "mlp", "--level", "O0", "--inspect", "off", "--quiet", "--json"});
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_EQ(reports::from_json(full.out, "stdout").run.steps, models::load_model("mlp", samples::builtin_models()).train.steps);
}

TEST(CliModel, AFileOnDiskRunsAndItsErrorsExit2) {
  const auto dir = std::filesystem::temp_directory_path() / "ampcheck_cli_model_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tiny.json") << R"({"ampcheck_model": 1, "name": "tiny", "description": "a tiny MLP",
      "data": {"generator": "blobs", "n_per_class": 20, "classes": 2},
      "nodes": [{"name": "fc", "kind": "linear", "out": 8}, {"name": "act", "kind": "tanh"},
                {"name": "head", "kind": "linear", "out": 2}],
      "train": {"steps": 4, "batch": 8, "lr": 0.01, "optimizer": "sgd", "momentum": 0.9}})";
  const auto ok = run_cli({"run", "--model", (dir / "tiny.json").string(), "--quiet", "--json"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  const reports::Report r = reports::from_json(ok.out, "stdout");
  EXPECT_EQ(r.run.model_description, "a tiny MLP");
  EXPECT_EQ(r.run.steps, 4);
  EXPECT_EQ(r.run.optimizer, "sgd");

  std::ofstream(dir / "bad.json") << R"({"ampcheck_model": 1, "data": {"generator": "blobs"},
      "nodes": [{"name": "fc", "kind": "linear", "out": 8}, {"name": "head", "kind": "linear", "out": 2, "input": "fc2"}]})";
  const auto bad = run_cli({"run", "--model", (dir / "bad.json").string(), "--quiet"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.err, "bad.json: node \"head\" (linear): field \"inputs\": \"fc2\" is neither an earlier node"))
      << bad.err;
  std::filesystem::remove_all(dir);
}

// A model file with a number beyond a double, or a syntax error: exit 2 naming the file,
// the line and column and the fix (nlohmann's own message named neither, and the
// overflow ended as an internal error).
TEST(CliModel, BadJsonExits2NamingTheFilePositionAndFix) {
  const auto dir = std::filesystem::temp_directory_path() / "ampcheck_cli_model_json_test";
  std::filesystem::create_directories(dir);
  const std::string overflow_text = "{\"ampcheck_model\": 1,\n \"data\": {\"generator\": \"spiral\", \"noise\": -1e400},\n"
                                    " \"nodes\": [{\"name\": \"fc\", \"kind\": \"linear\", \"out\": 3}]}";
  const std::string overflow = (dir / "overflow.json").string();
  std::ofstream(overflow) << overflow_text;
  auto r = run_cli({"run", "--model", overflow, "--quiet"});
  EXPECT_EQ(r.code, 2) << r.err;
  const std::size_t line2 = overflow_text.find('\n') + 1;
  const std::string column = std::to_string(overflow_text.find("-1e400") - line2 + 1);
  EXPECT_TRUE(has(r.err, overflow + ": line 2, column " + column + ": the number -1e400 is too large for a double"))
      << r.err;
  EXPECT_FALSE(has(r.err, "internal error")) << r.err;

  // Below the smallest double is no error: the number reads as 0, as JSON parsers read it.
  std::ofstream(dir / "tiny.json") << R"({"ampcheck_model": 1, "data": {"generator": "spiral", "noise": 1e-400},
      "nodes": [{"name": "fc", "kind": "linear", "out": 3}], "train": {"steps": 1, "batch": 8, "lr": 0.1}})";
  r = run_cli({"run", "--model", (dir / "tiny.json").string(), "--level", "O0", "--inspect", "off", "--quiet"});
  EXPECT_LE(r.code, 1) << r.err;

  std::ofstream(dir / "comma.json") << "{\"ampcheck_model\": 1,\n \"data\": {\"generator\": \"spiral\"},\n"
                                       " \"nodes\": [{\"name\": \"a\", \"kind\": \"relu\"},]\n}";
  r = run_cli({"run", "--model", (dir / "comma.json").string(), "--quiet"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "comma.json: line 3, column 42: not valid JSON: a comma before the closing ']'")) << r.err;
  EXPECT_TRUE(has(r.err, "remove it")) << r.err;
  std::filesystem::remove_all(dir);
}

// Binary units, one decimal, as the message gives them.
std::string pib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f PiB", bytes / std::ldexp(1.0, 50));
  return buf;
}

// A layer no machine can hold: the message says what the tensor needs and what the
// machine has, and nothing is allocated (the size is refused before malloc, so neither
// an overcommitting kernel nor a sanitizer's allocator ever sees it).
TEST(CliModel, ALayerTooBigForMemorySaysWhatItNeedsAndWhatTheMachineHas) {
  const auto dir = std::filesystem::temp_directory_path() / "ampcheck_cli_model_memory_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "huge.json").string();
  // The spiral has 2 features: fc1's weight is [3e15, 2] float32, 2.4e16 bytes.
  std::ofstream(path) << R"({"ampcheck_model": 1, "data": {"generator": "spiral"},
      "nodes": [{"name": "fc1", "kind": "linear", "out": 3000000000000000}, {"name": "head", "kind": "linear", "out": 3}]})";
  const auto r = run_cli({"run", "--model", path, "--steps", "1", "--quiet"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "huge.json: node \"fc1\" (linear): a float32 tensor of shape [3000000000000000, 2] needs " +
                             pib(3e15 * 2 * 4) + ", and this machine has "))
      << r.err;
  EXPECT_TRUE(has(r.err, " available (") && has(r.err, " in all)")) << r.err;
  EXPECT_TRUE(has(r.err, "use smaller sizes")) << r.err;
  EXPECT_FALSE(has(r.err, "bad_alloc")) << r.err;

  // A shape whose size overflows 64 bits is refused the same way.
  std::ofstream(path) << R"({"ampcheck_model": 1, "data": {"generator": "spiral"},
      "nodes": [{"name": "fc1", "kind": "linear", "out": 9000000000000000000}]})";
  const auto o = run_cli({"run", "--model", path, "--steps", "1", "--quiet"});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_TRUE(has(o.err, "node \"fc1\" (linear): a float32 tensor of shape [9000000000000000000, 2] needs more than"))
      << o.err;
  std::filesystem::remove_all(dir);
}


// Intended Inf (issue 15, item 4): a masked_fill of "-inf" whose result an exp turns into
// 0 is a failure until it is allowed, by op name or module path, on the command line, in
// the model file or in an ampcheck config; a name that is neither an op nor a module of
// the model is refused with the closest of either.
TEST(CliModel, AllowInfByOpByModuleInTheFileAndInAConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "ampcheck_cli_allow_inf";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  };
  const std::string nodes = R"("data": {"generator": "spiral"},
  "constants": {"last_two": {"shape": [6], "values": [0, 0, 0, 0, 1, 1]}},
  "nodes": [
    {"name": "fc", "kind": "linear", "out": 6},
    {"name": "mask", "kind": "masked_fill", "mask": "last_two", "value": "-inf"},
    {"name": "gate", "kind": "exp"},
    {"name": "head", "kind": "linear", "out": 3}
  ],
  "train": {"steps": 10})";
  const std::string plain = write("masked.json", "{\"ampcheck_model\": 1, " + nodes + "}");
  const std::string in_file = write("allowed.json", "{\"ampcheck_model\": 1, \"allow_inf\": [\"mask\"], " + nodes + "}");
  const std::string config = write("allow.json", R"({"framework": "ampcheck", "level": "O0", "allow_inf": ["masked_fill"]})");
  const std::vector<std::string> o0 = {"run", "--level", "O0", "--inspect", "stats", "--quiet", "--model"};
  auto run = [&](const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> args = o0;
    args.push_back(model);
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const auto failed = run(plain, {});
  EXPECT_EQ(failed.code, 1) << failed.out;
  EXPECT_TRUE(has(failed.out, "first produced by masked_fill in module 'mask'")) << failed.out;
  for (const auto& r : {run(plain, {"--allow-inf", "masked_fill"}), run(plain, {"--allow-inf", "mask"}),
                        run(in_file, {}), run(plain, {"--config", config})}) {
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(has(r.out, "verdict: healthy fp32 reference run")) << r.out;
  }
  const auto typo = run(plain, {"--allow-inf", "maskd_fill"});
  EXPECT_EQ(typo.code, 2);
  EXPECT_TRUE(has(typo.err, "--allow-inf: \"maskd_fill\" is neither an op nor a module of the model (did you mean "
                            "\"masked_fill\"?)")) << typo.err;
  const auto bad_value = run(write("bad_value.json", "{\"ampcheck_model\": 1, " + nodes.substr(0, nodes.find("\"-inf\"")) +
                                                     "\"-infinity\"" + nodes.substr(nodes.find("\"-inf\"") + 6) + "}"),
                             {});
  EXPECT_EQ(bad_value.code, 2);
  EXPECT_TRUE(has(bad_value.err, "a finite number, \"inf\" or \"-inf\"")) << bad_value.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ampcheck::cli
