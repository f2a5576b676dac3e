// Where the engine computes: the CPU, or GPU 0 through CUDA.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/caching_allocator.h"
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
// DeviceError saying why and what to do. Where a GPU is to be used, the GPU libraries
// (cuBLASLt, cuDNN, CUPTI) are loaded here, their absence said as the GPU's is; `libraries`
// false is for work that needs the CUDA runtime only (`ampcheck fp`'s conversions).
Device resolve_device(DeviceRequest request, std::ostream& notices, bool libraries = true);

// GPU 0's caching allocator statistics, once a tensor has lived there (none otherwise).
std::optional<kernels::AllocatorStats> device_memory_stats();

// What this build can run on: "CUDA 13.0, built for sm_75 sm_80 sm_90" or "no CUDA (...)".
std::string cuda_build_description();

// The machine as `ampcheck doctor` reports it; kernels/ detects, callers ask here.
using kernels::cpu::CpuFeatures;
using kernels::cuda::CudaInfo;
using kernels::cuda::GpuInfo;
const CpuFeatures& cpu_features();
const CudaInfo& cuda_info();  // versions and GPUs; built_with_cuda false without CUDA
// The CPU GEMM's instruction-set path: AVX-512 where the CPU has it, else AVX2+FMA, else
// scalar; AMPCHECK_CPU_ISA lowers it as it lowers the conversions (scalar -> scalar,
// f16c -> avx2, avx512 and avx512_bf16 -> avx512). Every path gives the same bits.
kernels::cpu::GemmIsa cpu_gemm_isa();
// The CPU GEMM in words, for `ampcheck doctor`: "ampcheck GEMM, avx512 path, one fma
// chain per element in ascending k (bits independent of ISA, threads and machine)".
std::string cpu_gemm_description();

}  // namespace ampcheck
