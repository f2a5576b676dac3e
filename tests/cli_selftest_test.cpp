// `ampcheck selftest` in-process: the CPU against itself passes and prints the table, the
// JSON holds every result, bad usage exits 2 naming the thing (the closest op name; the
// runtime's reason when --device cuda has no GPU).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/cuda/cuda.h"  // probe: is a GPU usable, and why not (what --device cuda says)
#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using testing::has;
using Json = nlohmann::json;

bool gpu_usable() { return kernels::cuda::probe().device_count > 0; }

TEST(CliSelftest, CpuAgainstItselfPassesAndPrintsTheTable) {
  const testing::CliResult r =
      testing::run_cli({"selftest", "--device", "cpu", "--op", "matmul,relu", "--dtype", "f32", "--dtype", "bf16"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* column : {"op", "dtype", "dir", "shapes", "NMSE", "threshold", "result"})
    EXPECT_TRUE(has(r.out, column)) << column << " in:\n" << r.out;
  EXPECT_TRUE(has(r.out, "matmul")) << r.out;
  EXPECT_TRUE(has(r.out, "relu")) << r.out;
  EXPECT_TRUE(has(r.out, "bf16")) << r.out;
  EXPECT_TRUE(has(r.out, "fwd")) << r.out;
  EXPECT_TRUE(has(r.out, "bwd")) << r.out;
  EXPECT_TRUE(has(r.out, "[7, 13], [13, 5]")) << r.out;
  EXPECT_TRUE(has(r.out, "PASS")) << r.out;
  EXPECT_FALSE(has(r.out, "FAIL")) << r.out;
  EXPECT_FALSE(has(r.out, " f16 ")) << "only the dtypes asked for:\n" << r.out;
  EXPECT_FALSE(has(r.out, "gelu")) << "only the ops asked for:\n" << r.out;
  EXPECT_TRUE(has(r.out, " 0 failed")) << r.out;
}

TEST(CliSelftest, TheOptimizerStepsRunBesideTheOps) {
  // Without --op the optimizers' step over every parameter (not an op) is checked too: on
  // the CPU against itself, the harness (the same seed, the same bits twice over).
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ampcheck-cli-selftest-steps";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "selftest.json";
  const testing::CliResult r = testing::run_cli({"selftest", "--device", "cpu", "--dtype", "f64", "--json", file.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step: SGD (Nesterov, weight decay) step over every parameter"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step: AdamW step over every parameter (fp32 masters of 4 f16 parameters, 3 steps): equal to "
                       "the CPU bit for bit"),
            std::string::npos)
      << r.out;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("selftest: ", 0), 0u) << "the summary comes last: " << last;
  std::ifstream in(file);
  const Json j = Json::parse(in);
  ASSERT_EQ(j.at("steps").size(), 2u);
  for (const Json& row : j.at("steps")) EXPECT_EQ(row.at("status"), "pass") << row;
  EXPECT_NE(j.dump().find("scaled_dot_product_attention"), std::string::npos) << "the new ops are cases";
  std::filesystem::remove_all(dir);
}

TEST(CliSelftest, JsonHoldsEveryResult) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ampcheck-cli-selftest";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "selftest.json";
  std::filesystem::remove(file);
  const testing::CliResult r =
      testing::run_cli({"selftest", "--device", "cpu", "--op", "softmax", "--dtype", "f16", "--json", file.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(file);
  const Json j = Json::parse(in);
  EXPECT_EQ(j.at("ampcheck_selftest"), 1);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_TRUE(j.at("gpu").is_null());
  const Json& results = j.at("results");
  ASSERT_FALSE(results.empty());
  EXPECT_EQ(j.at("summary").at("cases").get<std::size_t>(), results.size());
  EXPECT_EQ(j.at("summary").at("passed").get<std::size_t>(), results.size());
  for (const Json& row : results) {
    EXPECT_EQ(row.at("op"), "softmax");
    EXPECT_EQ(row.at("dtype"), "f16");
    EXPECT_TRUE(row.at("direction") == "forward" || row.at("direction") == "backward") << row;
    EXPECT_EQ(row.at("status"), "pass") << row;
    EXPECT_EQ(row.at("nmse"), 0.0) << row;
    EXPECT_TRUE(row.at("threshold").is_number()) << row;
    EXPECT_TRUE(row.at("shapes").is_string()) << row;
  }
  // Written atomically: no temporary file is left beside it.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
  std::filesystem::remove_all(dir);
}

TEST(CliSelftest, UnknownOpExits2NamingTheClosest) {
  const testing::CliResult r = testing::run_cli({"selftest", "--device", "cpu", "--op", "sofmax"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "\"sofmax\"")) << r.err;
  EXPECT_TRUE(has(r.err, "did you mean \"softmax\"")) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing runs before the usage is checked:\n" << r.out;
}

TEST(CliSelftest, BadDtypeOrDeviceExits2) {
  const testing::CliResult typo = testing::run_cli({"selftest", "--device", "cpu", "--dtype", "f61"});
  EXPECT_EQ(typo.code, 2);
  EXPECT_TRUE(has(typo.err, "--dtype")) << typo.err;
  const testing::CliResult integer = testing::run_cli({"selftest", "--device", "cpu", "--dtype", "i64"});
  EXPECT_EQ(integer.code, 2);
  EXPECT_TRUE(has(integer.err, "is not a floating-point dtype; use f16, bf16, f32 or f64")) << integer.err;
  const testing::CliResult device = testing::run_cli({"selftest", "--device", "tpu"});
  EXPECT_EQ(device.code, 2);
  EXPECT_TRUE(has(device.err, "\"tpu\" is not a device")) << device.err;
}

TEST(CliSelftest, UnwritableJsonExits2BeforeRunning) {
  const testing::CliResult r =
      testing::run_cli({"selftest", "--device", "cpu", "--op", "relu", "--json", "/nonexistent-dir/selftest.json"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "/nonexistent-dir")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliSelftest, CudaWithoutGpuExits2NamingTheReason) {
  if (gpu_usable()) GTEST_SKIP() << "a GPU is usable here: --device cuda runs (ParityCuda.* check it)";
  const testing::CliResult r = testing::run_cli({"selftest", "--device", "cuda", "--op", "relu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--device cuda")) << r.err;
  EXPECT_TRUE(has(r.err, kernels::cuda::probe().why_none)) << "the runtime's own words: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliSelftest, AutoWithoutGpuChecksTheCpuAgainstItself) {
  if (gpu_usable()) GTEST_SKIP() << "a GPU is usable here: auto picks it";
  const testing::CliResult r = testing::run_cli({"selftest", "--op", "neg", "--dtype", "f32"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "ampcheck selftest: cpu against the CPU reference")) << r.out;
}

}  // namespace
}  // namespace ampcheck
