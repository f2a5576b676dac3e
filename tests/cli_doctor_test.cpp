// `ampcheck doctor` in-process: CPU features against the compiler's own CPUID reading
// (__builtin_cpu_supports, an independent detector), the JSON fields, and the GPU
// section against what the machine has (/dev/nvidia0 is the driver's device node).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

using testing::has;
using Json = nlohmann::json;

bool machine_has_gpu() { return std::filesystem::exists("/dev/nvidia0"); }

TEST(CliDoctor, TextNamesTheConversionPathAndTheBuild) {
  const testing::CliResult r = testing::run_cli({"doctor"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "conversions:")) << r.out;
  EXPECT_TRUE(has(r.out, "F16C:")) << r.out;
  EXPECT_TRUE(has(r.out, "AMX-FP16:")) << r.out;
  EXPECT_TRUE(has(r.out, "GEMM:")) << r.out;
  EXPECT_TRUE(has(r.out, "threads:")) << r.out;
  const testing::CliResult v = testing::run_cli({"--version"});
  // --version ends "...; CPU conversions: <path>)": doctor names the same path.
  const std::string path = v.out.substr(v.out.rfind(' ') + 1, v.out.rfind(')') - v.out.rfind(' ') - 1);
  const auto at = r.out.find("conversions:");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_TRUE(has(line, " " + path + " ")) << path << " in: " << line;
}

TEST(CliDoctor, CpuFeaturesAgreeWithTheCompilersDetection) {
  const testing::CliResult r = testing::run_cli({"doctor", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json features = Json::parse(r.out).at("cpu").at("features");
#if defined(__x86_64__)
  __builtin_cpu_init();
#if !defined(__clang__)  // clang 14's __builtin_cpu_supports knows neither f16c nor avx512fp16: GCC's build checks them
  EXPECT_EQ(features.at("f16c").get<bool>(), __builtin_cpu_supports("f16c") != 0);
  EXPECT_EQ(features.at("avx512_fp16").get<bool>(), __builtin_cpu_supports("avx512fp16") != 0);
#endif
  EXPECT_EQ(features.at("fma").get<bool>(), __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(features.at("avx2").get<bool>(), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(features.at("avx512f").get<bool>(), __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(features.at("avx512bw").get<bool>(), __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(features.at("avx512_bf16").get<bool>(), __builtin_cpu_supports("avx512bf16") != 0);
#endif
  for (const char* key : {"amx_tile", "amx_bf16", "amx_fp16"}) EXPECT_TRUE(features.at(key).is_boolean()) << key;
}

TEST(CliDoctor, JsonHasEveryField) {
  const testing::CliResult r = testing::run_cli({"doctor", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j.at("ampcheck_doctor"), 1);
  EXPECT_TRUE(j.at("version").is_string());
  const Json& cpu = j.at("cpu");
  EXPECT_TRUE(cpu.at("conversion_path").is_string());
  EXPECT_GE(cpu.at("threads").get<int>(), 1);
  // The GEMM path follows the CPU's features: AVX-512F (with AVX2 and FMA) gives the
  // avx512 path, AVX2 with FMA the avx2 path, anything else the scalar one.
  const Json& f = cpu.at("features");
  const bool avx2 = f.at("avx2").get<bool>() && f.at("fma").get<bool>();
  const std::string expected = avx2 && f.at("avx512f").get<bool>() && f.at("avx512bw").get<bool>() ? "avx512"
                               : avx2 && f.at("f16c").get<bool>()                               ? "avx2"
                                                                                                 : "scalar";
  if (std::getenv("AMPCHECK_CPU_ISA") == nullptr) {
    EXPECT_EQ(cpu.at("gemm_path").get<std::string>(), expected);
  }
  EXPECT_TRUE(has(cpu.at("gemm").get<std::string>(), cpu.at("gemm_path").get<std::string>() + " path"))
      << cpu.at("gemm");
  const Json& cuda = j.at("cuda");
  for (const char* key : {"build", "built_with_cuda", "driver_version", "runtime_version", "cublas_version",
                          "cudnn_version", "cupti_api_version", "gpus", "no_device"})
    EXPECT_TRUE(cuda.contains(key)) << key;
  if (cuda.at("built_with_cuda").get<bool>()) {
    EXPECT_TRUE(cuda.at("runtime_version").is_string());
    EXPECT_TRUE(cuda.at("cudnn_version").is_string());
    EXPECT_GT(cuda.at("cupti_api_version").get<int>(), 0);
  }
  for (const Json& g : cuda.at("gpus")) {
    const double cc = std::stod(g.at("compute_capability").get<std::string>());
    EXPECT_EQ(g.at("tensor_cores").at("fp16").get<bool>(), cc >= 7.0);
    EXPECT_EQ(g.at("tensor_cores").at("bf16").get<bool>(), cc >= 8.0);
    EXPECT_GT(g.at("memory_bytes").get<double>(), 0);
  }
  EXPECT_TRUE(j.at("warnings").is_array());
}

TEST(CliDoctor, SaysPlainlyWhetherThereIsAGpu) {
  const testing::CliResult t = testing::run_cli({"doctor"});
  const testing::CliResult j = testing::run_cli({"doctor", "--json"});
  ASSERT_EQ(t.code, 0) << t.err;
  ASSERT_EQ(j.code, 0) << j.err;
  const Json doc = Json::parse(j.out);
  const Json& cuda = doc.at("cuda");
  if (!machine_has_gpu()) {
    EXPECT_TRUE(has(t.out, "no CUDA device: ")) << t.out;
    EXPECT_TRUE(has(t.out, "the CPU backend gives every diagnostic")) << t.out;
    EXPECT_TRUE(cuda.at("gpus").empty());
    EXPECT_TRUE(has(cuda.at("no_device").get<std::string>(), "no CUDA device")) << cuda;
  } else if (cuda.at("built_with_cuda").get<bool>()) {
    EXPECT_FALSE(cuda.at("gpus").empty()) << cuda;
    EXPECT_TRUE(has(t.out, "compute capability")) << t.out;
  }
}

}  // namespace
}  // namespace ampcheck
