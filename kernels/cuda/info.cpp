// The versions and GPUs `ampcheck doctor` reports (host code only: compiled by the C++
// compiler in a CUDA build; kernels/no_gpu/cuda.cpp has the build without CUDA).
#include <cublasLt.h>      // cublasLtGetProperty: the library's version without a handle (or GPU)
#include <cuda_runtime.h>  // cudaDriverGetVersion, cudaRuntimeGetVersion, device properties
#include <cudnn.h>         // cudnnGetVersion
#include <cupti.h>         // cuptiGetVersion

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/gpu_libraries.h"

namespace ampcheck::kernels::cuda {
namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cublas_version() {
  if (std::string problem = gpu_library_problem(GpuLibrary::cublasLt); !problem.empty()) return "not loaded: " + problem;
  int major = 0, minor = 0, patch = 0;
  if (cublasLtGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasLtGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasLtGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "unknown (cublasLtGetProperty failed)";
  return dotted(major, minor, patch);
}

std::string cudnn_version() {
  if (std::string problem = gpu_library_problem(GpuLibrary::cudnn); !problem.empty()) return "not loaded: " + problem;
  // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
  const auto v = static_cast<int>(cudnnGetVersion());
  if (v >= 90000) return dotted(v / 10000, v % 10000 / 100, v % 100);
  return dotted(v / 1000, v % 1000 / 100, v % 100);
}

}  // namespace

const CudaInfo& cuda_info() {
  static const CudaInfo info = [] {
    CudaInfo i;
    i.built_with_cuda = true;
    i.why_none = probe().why_none;
    // Both answer without a GPU; the driver's is 0 when none is installed.
    if (cudaDriverGetVersion(&i.driver_version) != cudaSuccess) i.driver_version = 0;
    if (cudaRuntimeGetVersion(&i.runtime_version) != cudaSuccess) i.runtime_version = 0;
    i.cublas_version = cublas_version();
    i.cudnn_version = cudnn_version();
    std::uint32_t cupti = 0;
    if (gpu_library_problem(GpuLibrary::cupti).empty() && cuptiGetVersion(&cupti) == CUPTI_SUCCESS)
      i.cupti_api_version = static_cast<int>(cupti);
    i.missing_libraries = missing_gpu_libraries(true);
    for (int d = 0; d < probe().device_count; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      i.gpus.push_back({prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount});
    }
    cudaGetLastError();  // leave no sticky error behind for the next caller
    return i;
  }();
  return info;
}

std::vector<std::string> missing_gpu_libraries(bool with_nccl) {
  std::vector<std::string> out;
  for (GpuLibrary lib : {GpuLibrary::cublasLt, GpuLibrary::cudnn, GpuLibrary::cupti, GpuLibrary::nccl}) {
    if (lib == GpuLibrary::nccl && !with_nccl) continue;
#if !defined(AMPCHECK_HAVE_NCCL)
    if (lib == GpuLibrary::nccl) continue;
#endif
    if (std::string problem = gpu_library_problem(lib); !problem.empty()) out.push_back(std::move(problem));
  }
  return out;
}

}  // namespace ampcheck::kernels::cuda
