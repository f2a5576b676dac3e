// `--model` with the model files: a sample's defaults (its train and amp blocks) apply
// unless the command line says otherwise, a model file on disk runs like a sample, and
// a bad file is a usage error naming the node and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "reports/json.h"
#include "samples/model_file.h"
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
  const samples::ModelFile f = samples::load_model("variance_overflow");
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
  EXPECT_EQ(reports::from_json(full.out, "stdout").run.steps, samples::load_model("mlp").train.steps);
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

}  // namespace
}  // namespace ampcheck::cli
