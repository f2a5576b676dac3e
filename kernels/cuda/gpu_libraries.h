// The GPU libraries (cuBLASLt, cuDNN, CUPTI, NCCL), loaded where a GPU is first used, never
// at process start: reading a profile, `record` on a CPU, `fp`, `diff` or `report` load none
// of them, and a machine without them runs every command that needs no GPU. The binary
// links the CUDA runtime statically (it opens the driver on its first call); each library's
// C functions that the project calls are defined in kernels/cuda/gpu_library_calls.cpp as
// forwarders to the library's own, which load it on their first call (CMake links none of
// them). Where a library is looked for:
//   AMPCHECK_GPU_LIBRARIES=dir1:dir2  only these folders (a toolkit, the `nvidia-*` packages
//                                      of a Python environment);
//   otherwise                          the dynamic loader's own search (LD_LIBRARY_PATH,
//                                      ld.so.cache), then the folders the build found the
//                                      toolkit's libraries in.
#pragma once

#include <stdexcept>
#include <string>

namespace ampcheck::kernels::cuda {

enum class GpuLibrary { cublasLt, cudnn, cupti, nccl };

// A library the loader did not find, or found without a function this build calls.
struct GpuLibraryMissing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "cuBLASLt", "cuDNN", "CUPTI", "NCCL".
const char* gpu_library_name(GpuLibrary lib);
// The file the loader asks for, this build's major version: "libcudnn.so.9".
std::string gpu_library_file(GpuLibrary lib);

// The library's handle, loaded on the first call (thread-safe). Throws GpuLibraryMissing
// naming the library, the folders searched and the fix.
void* gpu_library(GpuLibrary lib);
// One of its functions. Throws as gpu_library(), or naming the function a library of
// another version lacks.
void* gpu_symbol(GpuLibrary lib, const char* function);

// Empty when the library loads; else what gpu_library() would throw. Never throws.
std::string gpu_library_problem(GpuLibrary lib);

// Whether the library is loaded in this process now (it is loaded by its first use only).
bool gpu_library_loaded(GpuLibrary lib);

}  // namespace ampcheck::kernels::cuda
