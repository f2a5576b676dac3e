#include "engine/device.h"

#include "kernels/cuda/device_memory.h"

#include <string>
#include <vector>

#include "engine/dtype/convert.h"  // conversion_isa: AMPCHECK_CPU_ISA
#include "kernels/cuda/cuda.h"

namespace ampcheck {

std::string_view device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

std::optional<DeviceRequest> parse_device_request(std::string_view text) {
  if (text == "auto") return DeviceRequest::any;
  if (text == "cpu") return DeviceRequest::cpu;
  if (text == "cuda" || text == "gpu" || text == "cuda:0" || text == "gpu:0")
    return DeviceRequest::cuda;
  return std::nullopt;
}

namespace {
std::string joined(const std::vector<std::string>& problems) {
  std::string s;
  for (const std::string& p : problems) s += (s.empty() ? "" : "; ") + p;
  return s;
}
}  // namespace

Device resolve_device(DeviceRequest request, std::ostream& notices, bool libraries) {
  if (request == DeviceRequest::cpu) return Device::cpu;
  const kernels::cuda::Probe& gpu = kernels::cuda::probe();
  // The GPU libraries load here, where a GPU is about to be used, and not before.
  if (libraries && request == DeviceRequest::cuda && gpu.built_with_cuda) {
    if (const auto missing = kernels::cuda::missing_gpu_libraries(); !missing.empty())
      throw DeviceError("--device cuda needs the GPU libraries: " + joined(missing) + "; or use --device cpu");
  }
  if (gpu.device_count > 0) {
    const auto missing = libraries ? kernels::cuda::missing_gpu_libraries() : std::vector<std::string>{};
    if (missing.empty()) return Device::cuda;
    notices << "ampcheck: a GPU but not its libraries (" << joined(missing) << "); running on the CPU\n";
    return Device::cpu;
  }
  if (request == DeviceRequest::cuda)
    throw DeviceError("--device cuda: no usable GPU (" + gpu.why_none +
                      "); use --device cpu, or --device auto to fall back by itself");
  if (gpu.built_with_cuda)
    notices << "ampcheck: CUDA build but no usable GPU (" << gpu.why_none
            << "); running on the CPU\n";
  return Device::cpu;
}

std::optional<kernels::AllocatorStats> device_memory_stats() {
  kernels::AllocatorStats stats;
  if (!kernels::cuda::allocator_stats(stats)) return std::nullopt;
  return stats;
}

std::string cuda_build_description() { return kernels::cuda::build_description(); }

const CpuFeatures& cpu_features() { return kernels::cpu::cpu_features(); }
const CudaInfo& cuda_info() { return kernels::cuda::cuda_info(); }

kernels::cpu::GemmIsa cpu_gemm_isa() { return kernels::cpu::active_gemm_isa(); }

std::string cpu_gemm_description() {
  return "ampcheck GEMM, " + std::string(kernels::cpu::gemm_isa_name(cpu_gemm_isa())) +
         " path, one fma chain per element in ascending k (bits independent of ISA, threads and machine)";
}

}  // namespace ampcheck
