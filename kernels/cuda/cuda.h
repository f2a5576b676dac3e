// The GPU side of the kernels, seen from the host. Built from kernels/cuda/*.cu when
// CUDA is on; a build without CUDA links kernels/no_gpu/, where every entry point says
// it has no GPU implementation, so callers never test for the build flavour themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::kernels::cuda {

struct Probe {
  bool built_with_cuda = false;
  int device_count = 0;
  std::string why_none;     // set when device_count == 0: the runtime's own words
  std::string device_name;  // of device 0
  int compute_capability = 0;  // 90 for sm_90
};
// Asks the CUDA runtime once; cheap to call again.
const Probe& probe();
// "CUDA 13.0, sm_75 sm_80 sm_90" or "no CUDA (AMPCHECK_CUDA=OFF)".
std::string build_description();

// Everything `ampcheck doctor` reports about CUDA: the versions of the driver, the
// runtime and the libraries this build links, and every GPU. Asks once; never throws.
struct GpuInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability 9.0: 9, 0
  std::size_t total_memory = 0;    // bytes
  int multiprocessors = 0;
};
struct CudaInfo {
  bool built_with_cuda = false;
  std::string why_none;       // no GPU listed: the runtime's own words (as Probe)
  int driver_version = 0;     // cudaDriverGetVersion: 13000 is 13.0; 0 when no driver
  int runtime_version = 0;    // cudaRuntimeGetVersion
  std::string cublas_version;  // cuBLASLt's, "13.0.2"; empty in a build without CUDA
  std::string cudnn_version;   // "9.19.0"
  int cupti_api_version = 0;   // cuptiGetVersion: CUPTI's API version, not the toolkit's
  std::vector<std::string> missing_libraries;  // as missing_gpu_libraries(true)
  std::vector<GpuInfo> gpus;
};
const CudaInfo& cuda_info();

// The GPU libraries a GPU run needs (cuBLASLt, cuDNN, CUPTI; NCCL too where with_nccl) that
// do not load, each as "cuDNN (libcudnn.so.9) was not found in ...: <the fix>". Asking
// loads them (kernels/cuda/gpu_libraries.h): call it only where a GPU is about to be used.
// Empty in a build without CUDA.
std::vector<std::string> missing_gpu_libraries(bool with_nccl = false);

// Conversions on GPU 0 of host buffers (copied in, converted, copied back), with the
// same scalar definitions as the CPU (kernels/fp_bits.h). Throw std::runtime_error
// naming the failed call.
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n);
void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n);
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);

}  // namespace ampcheck::kernels::cuda
