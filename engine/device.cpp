#include "engine/device.h"

#include <cblas.h>  // openblas_get_config, openblas_get_corename (OpenBLAS extensions)

#include <string>

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

Device resolve_device(DeviceRequest request, std::ostream& notices) {
  if (request == DeviceRequest::cpu) return Device::cpu;
  const kernels::cuda::Probe& gpu = kernels::cuda::probe();
  if (gpu.device_count > 0) return Device::cuda;
  if (request == DeviceRequest::cuda)
    throw DeviceError("--device cuda: no usable GPU (" + gpu.why_none +
                      "); use --device cpu, or --device auto to fall back by itself");
  if (gpu.built_with_cuda)
    notices << "ampcheck: CUDA build but no usable GPU (" << gpu.why_none
            << "); running on the CPU\n";
  return Device::cpu;
}

std::string cuda_build_description() { return kernels::cuda::build_description(); }

const CpuFeatures& cpu_features() { return kernels::cpu::cpu_features(); }
const CudaInfo& cuda_info() { return kernels::cuda::cuda_info(); }

std::string cpu_blas_description() {
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  std::string s = config != nullptr ? config : "OpenBLAS (no configuration string)";
  if (core != nullptr && *core != '\0') s += ", core " + std::string(core);
  return s;
}

}  // namespace ampcheck
