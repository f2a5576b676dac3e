// Where the engine computes: the CPU, or GPU 0 through CUDA.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cuda/cuda.h"

namespace ampcheck {

enum class Device { cpu, cuda };
enum class DeviceRequest { any, cpu, cuda };  // "auto", "cpu", "cuda" on the command line

std::string_view device_name(Device d);
std::optional<DeviceRequest> parse_device_request(std::string_view text);

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `any` picks CUDA when a GPU is usable and otherwise the CPU, writing one line to
// `notices` when a CUDA-enabled build finds no GPU. `cuda` without a usable GPU throws
// DeviceError saying why and what to do.
Device resolve_device(DeviceRequest request, std::ostream& notices);

// What this build can run on: "CUDA 13.0, built for sm_75 sm_80 sm_90" or "no CUDA (...)".
std::string cuda_build_description();

// The machine as `ampcheck doctor` reports it; kernels/ detects, callers ask here.
using kernels::cpu::CpuFeatures;
using kernels::cuda::CudaInfo;
using kernels::cuda::GpuInfo;
const CpuFeatures& cpu_features();
const CudaInfo& cuda_info();  // versions and GPUs; built_with_cuda false without CUDA
// The BLAS behind the CPU GEMMs, in its own words: OpenBLAS's build configuration
// ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64") and the core
// kernel set it picked at run time.
std::string cpu_blas_description();

}  // namespace ampcheck
