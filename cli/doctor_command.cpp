#include "cli/doctor_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <cstdlib>  // std::getenv
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "engine/device.h"
#include "engine/dtype/convert.h"  // conversion_isa_name
#include "engine/parallel.h"       // num_threads

namespace ampcheck::cli {
namespace {

using nlohmann::ordered_json;

// Tensor cores by compute capability: fp16 from Volta (7.0), bf16 from Ampere (8.0),
// fp8 from Ada (8.9) and Hopper (9.0).
struct TensorCores {
  bool fp16, bf16, fp8;
};
TensorCores tensor_cores(const GpuInfo& g) {
  const int cc = g.cc_major * 10 + g.cc_minor;
  return {cc >= 70, cc >= 80, cc >= 89};
}

std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return v == 0 ? "none" : fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}
std::string yes_no(bool b) { return b ? "yes" : "no"; }

struct Feature {
  std::string_view name, key;  // as Intel names it; the JSON key
  bool present;
};
std::vector<Feature> feature_list(const CpuFeatures& f) {
  return {{"F16C", "f16c", f.f16c},
          {"FMA", "fma", f.fma},
          {"AVX2", "avx2", f.avx2},
          {"AVX-512F", "avx512f", f.avx512f},
          {"AVX-512BW", "avx512bw", f.avx512bw},
          {"AVX-512-FP16", "avx512_fp16", f.avx512_fp16},
          {"AVX-512-BF16", "avx512_bf16", f.avx512_bf16},
          {"AMX-TILE", "amx_tile", f.amx_tile},
          {"AMX-BF16", "amx_bf16", f.amx_bf16},
          {"AMX-FP16", "amx_fp16", f.amx_fp16}};
}

// PaddlePaddle warns when AMP is asked of a GPU below compute capability 7.0; ours says
// the same thing and what still holds.
std::vector<std::string> warnings(const CudaInfo& cuda) {
  std::vector<std::string> w;
  for (std::size_t i = 0; i < cuda.gpus.size(); ++i) {
    const GpuInfo& g = cuda.gpus[i];
    if (g.cc_major < 7)
      w.push_back(fmt::format(
          "GPU {} ({}) has compute capability {}.{}: AMP needs 7.0 or higher for fp16 tensor "
          "cores, so low precision there saves memory but not time; ampcheck's numerics "
          "diagnostics still hold",
          i, g.name, g.cc_major, g.cc_minor));
  }
  return w;
}

// What the loader said of one GPU library ("CUPTI", "NCCL"), empty when it loads.
std::string missing_text(const CudaInfo& cuda, std::string_view library) {
  for (const std::string& m : cuda.missing_libraries)
    if (m.starts_with(std::string(library) + " (")) return m;
  return {};
}

std::string no_device_text(const CudaInfo& cuda) {
  return "no CUDA device: " + cuda.why_none + "; the CPU backend gives every diagnostic";
}

std::string isa_note() {
  const char* forced = std::getenv("AMPCHECK_CPU_ISA");
  return forced != nullptr && *forced != '\0' ? " (set by AMPCHECK_CPU_ISA)"
                                              : " (the fastest this CPU runs)";
}

// Where the default thread count comes from: the CPUs this process may use.
std::string cpus_note() {
  if (std::getenv("AMPCHECK_NUM_THREADS") != nullptr) return " (AMPCHECK_NUM_THREADS)";
  const CpuBudget& b = cpu_budget();
  std::string note = fmt::format(" (the CPUs this process may use: {} online", b.online);
  if (b.affinity > 0) note += fmt::format(", {} in its affinity mask", b.affinity);
  note += b.quota > 0 ? fmt::format(", cgroup quota {}", b.quota) : std::string(", no cgroup quota");
  return note + ")";
}

std::string doctor_text() {
  const CpuFeatures& cpu = cpu_features();
  const CudaInfo& cuda = cuda_info();
  std::string s = fmt::format("ampcheck {} ({})\n\nCPU\n", AMPCHECK_VERSION, cuda_build_description());
  auto line = [&s](std::string_view key, const std::string& value) {
    s += fmt::format("  {:<17} {}\n", std::string(key) + ":", value);
  };
  line("model", cpu.brand.empty() ? "unknown" : cpu.brand);
  for (const Feature& f : feature_list(cpu)) line(f.name, yes_no(f.present));
  line("conversions", std::string(conversion_isa_name()) + isa_note() +
                          ": f32 <-> f16/bf16 buffers");
  line("threads", std::to_string(num_threads()) + cpus_note());
  line("GEMM", cpu_gemm_description() + isa_note());

  s += "\nCUDA\n";
  line("build", cuda_build_description());
  if (cuda.built_with_cuda) {
    line("driver", version_text(cuda.driver_version));
    line("runtime", version_text(cuda.runtime_version));
    line("cuBLAS", cuda.cublas_version);
    line("cuDNN", cuda.cudnn_version);
    line("CUPTI", cuda.cupti_api_version > 0 ? fmt::format("API version {}", cuda.cupti_api_version)
                                             : "not loaded: " + missing_text(cuda, "CUPTI"));
    line("NCCL", missing_text(cuda, "NCCL").empty() ? "loads" : "not loaded: " + missing_text(cuda, "NCCL"));
  }
  if (cuda.gpus.empty()) {
    line("GPUs", no_device_text(cuda));
  } else {
    for (std::size_t i = 0; i < cuda.gpus.size(); ++i) {
      const GpuInfo& g = cuda.gpus[i];
      const TensorCores tc = tensor_cores(g);
      line(fmt::format("GPU {}", i),
           fmt::format("{}, compute capability {}.{}, {:.1f} GiB, {} SMs; tensor cores: fp16 {}, "
                       "bf16 {}, fp8 {}",
                       g.name, g.cc_major, g.cc_minor,
                       static_cast<double>(g.total_memory) / (1024.0 * 1024.0 * 1024.0),
                       g.multiprocessors, yes_no(tc.fp16), yes_no(tc.bf16), yes_no(tc.fp8)));
    }
  }
  for (const std::string& w : warnings(cuda)) s += "\nwarning: " + w + "\n";
  return s;
}

std::string doctor_json() {
  const CpuFeatures& cpu = cpu_features();
  const CudaInfo& cuda = cuda_info();
  ordered_json features = ordered_json::object();
  for (const Feature& f : feature_list(cpu)) features[std::string(f.key)] = f.present;
  ordered_json gpus = ordered_json::array();
  for (const GpuInfo& g : cuda.gpus) {
    const TensorCores tc = tensor_cores(g);
    gpus.push_back({{"name", g.name},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                    {"memory_bytes", g.total_memory},
                    {"multiprocessors", g.multiprocessors},
                    {"tensor_cores", {{"fp16", tc.fp16}, {"bf16", tc.bf16}, {"fp8", tc.fp8}}}});
  }
  const CpuBudget& budget = cpu_budget();
  auto or_null = [](bool present, ordered_json v) -> ordered_json {
    return present ? std::move(v) : ordered_json(nullptr);
  };
  const bool built = cuda.built_with_cuda;
  const ordered_json doc = {
      {"ampcheck_doctor", 1},
      {"version", AMPCHECK_VERSION},
      {"cpu",
       {{"model", cpu.brand},
        {"features", features},
        {"conversion_path", conversion_isa_name()},
        {"threads", num_threads()},
        {"cpus",
         {{"online", budget.online},
          {"affinity", or_null(budget.affinity > 0, budget.affinity)},
          {"cgroup_quota", or_null(budget.quota > 0, budget.quota)},
          {"available", budget.available()}}},
        {"gemm_path", kernels::cpu::gemm_isa_name(cpu_gemm_isa())},
        {"gemm", cpu_gemm_description()}}},
      {"cuda",
       {{"build", cuda_build_description()},
        {"built_with_cuda", built},
        {"driver_version", or_null(built && cuda.driver_version != 0, version_text(cuda.driver_version))},
        {"runtime_version", or_null(built, version_text(cuda.runtime_version))},
        {"cublas_version", or_null(built, cuda.cublas_version)},
        {"cudnn_version", or_null(built, cuda.cudnn_version)},
        {"cupti_api_version", or_null(built && cuda.cupti_api_version > 0, cuda.cupti_api_version)},
        {"missing_libraries", cuda.missing_libraries},
        {"gpus", gpus},
        {"no_device", or_null(cuda.gpus.empty(), no_device_text(cuda))}}},
      {"warnings", warnings(cuda)}};
  return doc.dump(2) + "\n";
}

CLI::App* add_options(CLI::App& app, DoctorOptions& o) {
  CLI::App* doctor = app.add_subcommand(
      "doctor", "What this machine gives mixed precision: CPU features, BLAS, CUDA, GPUs");
  doctor->add_flag("--json", o.json, "print JSON instead of text");
  return doctor;
}

int run_doctor(const DoctorOptions& o, std::ostream& out, std::ostream&) {
  out << (o.json ? doctor_json() : doctor_text());
  return 0;
}

}  // namespace

Command add_doctor_command(CLI::App& app) {
  auto options = std::make_shared<DoctorOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_doctor(*options, out, err); }};
}

}  // namespace ampcheck::cli
