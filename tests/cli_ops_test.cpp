// `ampcheck ops` in-process: every op's row against the op list's own AMP categories
// (read here through op_info, independently of the command), custom lists, levels,
// dtypes, the JSON and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/ops/registry.h"
#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using testing::has;
using Json = nlohmann::json;

// op name -> its JSON row; fails the test when the command fails.
std::map<std::string, Json> rows(std::vector<std::string> args) {
  args.insert(args.begin(), "ops");
  args.push_back("--json");
  const testing::CliResult r = testing::run_cli(args);
  EXPECT_EQ(r.code, 0) << r.err;
  std::map<std::string, Json> by_op;
  if (r.code != 0) return by_op;
  const Json doc = Json::parse(r.out);
  for (const Json& row : doc.at("ops")) by_op[row.at("op").get<std::string>()] = row;
  return by_op;
}

std::vector<Op> ops_in(AmpCategory c) {
  std::vector<Op> ops;
  for (int i = 0; i < kOpCount; ++i)
    if (op_info(static_cast<Op>(i)).amp == c) ops.push_back(static_cast<Op>(i));
  return ops;
}

TEST(CliOps, O1Float16FollowsTheOpListCategories) {
  const auto r = rows({"--level", "O1", "--dtype", "float16"});
  ASSERT_EQ(r.size(), static_cast<std::size_t>(kOpCount));
  // GEMM-like ops are the white list: fp32 inputs are cast down.
  for (const char* gemm : {"linear", "matmul", "conv2d", "bmm"})
    EXPECT_EQ(op_info(*op_from_name(gemm)).amp, AmpCategory::lower) << gemm;
  for (Op op : ops_in(AmpCategory::lower)) {
    const Json& row = r.at(std::string(op_name(op)));
    EXPECT_EQ(row["category"], "lower");
    EXPECT_EQ(row["reason"], "white") << op_name(op);
    EXPECT_EQ(row["cast_to"], "float16") << op_name(op);
    EXPECT_EQ(row["runs_in_fp32_inputs"], "float16") << op_name(op);
    EXPECT_EQ(row["runs_in_low_inputs"], "float16") << op_name(op);
  }
  // Numerically sensitive ops are the black list: even float16 inputs run in fp32.
  for (const char* sensitive : {"softmax", "log_softmax", "cross_entropy", "exp", "log"})
    EXPECT_EQ(op_info(*op_from_name(sensitive)).amp, AmpCategory::fp32) << sensitive;
  for (Op op : ops_in(AmpCategory::fp32)) {
    const Json& row = r.at(std::string(op_name(op)));
    EXPECT_EQ(row["reason"], "black") << op_name(op);
    EXPECT_EQ(row["runs_in_fp32_inputs"], "float32") << op_name(op);
    EXPECT_EQ(row["runs_in_low_inputs"], "float32") << op_name(op);
  }
  // Follow ops keep their input's dtype: relu after a float16 linear stays float16.
  EXPECT_EQ(r.at("relu")["reason"], "follow");
  EXPECT_EQ(r.at("relu")["runs_in_fp32_inputs"], "float32");
  EXPECT_EQ(r.at("relu")["runs_in_low_inputs"], "float16");
  // At O1 parameters stay fp32: an embedding table is fp32, whatever the activations.
  EXPECT_EQ(r.at("embedding")["runs_in_low_inputs"], "float32");
}

TEST(CliOps, CustomBlackListWinsOverTheWhiteList) {
  const auto r = rows({"--black", "linear", "--white", "softmax"});
  EXPECT_EQ(r.at("linear")["reason"], "custom_black");
  EXPECT_EQ(r.at("linear")["runs_in_fp32_inputs"], "float32");
  EXPECT_EQ(r.at("linear")["runs_in_low_inputs"], "float32");
  EXPECT_EQ(r.at("softmax")["reason"], "custom_white");
  EXPECT_EQ(r.at("softmax")["runs_in_fp32_inputs"], "float16");
  EXPECT_EQ(r.at("matmul")["reason"], "white");  // the rest unchanged
}

TEST(CliOps, FrameworkNamesAreAcceptedAndListed) {
  const auto r = rows({"--black", "matmul_v2,softmax_with_cross_entropy"});
  EXPECT_EQ(r.at("matmul")["reason"], "custom_black");
  EXPECT_EQ(r.at("cross_entropy")["reason"], "custom_black");
  const auto& aliases = r.at("matmul")["aliases"];
  EXPECT_NE(std::find(aliases.begin(), aliases.end(), "matmul_v2"), aliases.end()) << aliases;
  // Every alias listed resolves back to its op.
  for (const auto& [op, row] : r) {
    for (const Json& alias : row["aliases"]) {
      EXPECT_EQ(rows({"--black", alias.get<std::string>()}).at(op)["reason"], "custom_black") << alias;
    }
  }
}

TEST(CliOps, O0RunsEverythingInFp32) {
  const auto r = rows({"--level", "O0", "--white", "softmax"});
  ASSERT_EQ(r.size(), static_cast<std::size_t>(kOpCount));
  for (const auto& [op, row] : r) {
    EXPECT_EQ(row["reason"], "off") << op;
    EXPECT_TRUE(row["cast_to"].is_null()) << op;
    EXPECT_TRUE(row["runs_in_low_inputs"].is_null()) << op;  // O0 makes no input low
    if (op != "cast") {
      EXPECT_EQ(row["runs_in_fp32_inputs"], "float32") << op;
    }
  }
}

TEST(CliOps, Bfloat16AndO2Decorated) {
  const auto bf = rows({"--dtype", "bf16"});
  EXPECT_EQ(bf.at("linear")["runs_in_fp32_inputs"], "bfloat16");
  EXPECT_EQ(bf.at("softmax")["runs_in_low_inputs"], "float32");
  // O2: everything but the black list runs low; decorated parameters are low, except
  // the normalisation layers' (keep_norm_fp32), which batch_norm runs with low data.
  const auto o2 = rows({"--level", "O2", "--dtype", "bfloat16"});
  for (Op op : ops_in(AmpCategory::follow)) {
    if (op == Op::cast) continue;
    EXPECT_EQ(o2.at(std::string(op_name(op)))["reason"], "white") << op_name(op);
    EXPECT_EQ(o2.at(std::string(op_name(op)))["runs_in_fp32_inputs"], "bfloat16") << op_name(op);
  }
  EXPECT_EQ(o2.at("embedding")["runs_in_low_inputs"], "bfloat16");
  EXPECT_EQ(o2.at("batch_norm")["runs_in_low_inputs"], "bfloat16");
  EXPECT_EQ(o2.at("layer_norm")["reason"], "black");
}

TEST(CliOps, TextTableShowsEveryOp) {
  const testing::CliResult r = testing::run_cli({"ops", "--level", "O1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "AMP O1 float16")) << r.out;
  EXPECT_TRUE(has(r.out, "runs in, float16 inputs")) << r.out;
  for (int i = 0; i < kOpCount; ++i)
    EXPECT_TRUE(has(r.out, "\n" + std::string(op_name(static_cast<Op>(i))) + " ")) << op_name(static_cast<Op>(i));
  EXPECT_TRUE(has(r.out, "matmul_v2")) << r.out;
}

TEST(CliOps, ConfigFileSetsTheLevelAndFlagsApplyOnTop) {
  const std::string config = std::string(AMPCHECK_SOURCE_DIR) + "/samples/configs/apex_o2.json";
  const testing::CliResult r = testing::run_cli({"ops", "--config", config, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["level"], "O2");
  const testing::CliResult o1 = testing::run_cli({"ops", "--config", config, "--level", "O1", "--json"});
  ASSERT_EQ(o1.code, 0) << o1.err;
  EXPECT_EQ(Json::parse(o1.out)["level"], "O1");
}

TEST(CliOps, BadInputIsNamedWithExitCode2) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"ops", "--level", "O5"}, "\"O5\" is not an AMP level"},
      {{"ops", "--dtype", "flaot16"}, "did you mean \"float16\"?"},
      {{"ops", "--dtype", "float32"}, "float16 or bfloat16"},
      {{"ops", "--black", "sofmax"}, "did you mean \"softmax\"?"},
      {{"ops", "--white", "linear", "--black", "linear"}, "in both custom_white_list and custom_black_list"},
      {{"ops", "--config", "/nonexistent_dir_ampcheck/amp.json"}, "amp.json"},
  };
  for (const Case& c : cases) {
    const testing::CliResult r = testing::run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.says;
    EXPECT_TRUE(has(r.err, c.says)) << "expected \"" << c.says << "\" in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace ampcheck
