// The GPU libraries (cuBLASLt, cuDNN, CUPTI, NCCL), loaded where a GPU is first used, never
// at process start: reading a profile, `record` on a CPU, `fp`, `diff` or `report` load none
// of them, and a machine without them runs every command that needs no GPU. The binary
// links the CUDA runtime statically (it opens the driver on its first call); each library's
// C functions that the project calls are defined in kernels/cuda/gpu_library_calls.cpp as
// forwarders to the library's own, which load it on their first call (CMake links none of
// them). Where a library is looked for:
//   AMPCHECK_GPU_LIBRARIES=dir1:dir2  only these folders (a toolkit, the `nvidia-*` packages
//                                      of a Python environment);
//   otherwise, in order               LD_LIBRARY_PATH's folders; the `nvidia-*` packages of the
//                                      Python environment this binary is installed in and of
//                                      the active one (VIRTUAL_ENV, CONDA_PREFIX); the dynamic
//                                      loader's own search (ld.so.cache); the folders the build
//                                      found the toolkit's libraries in.
// So `pip install ampcheck` beside a CUDA PyTorch uses the cuBLAS, cuDNN, CUPTI and NCCL that
// PyTorch's wheel installed (site-packages/nvidia/<package>/lib: cu13/lib in CUDA 13's
// wheels, cublas/lib, cudnn/lib, cuda_cupti/lib ... in CUDA 12's), before a system copy, as
// PyTorch's own libraries do (their RUNPATH), while LD_LIBRARY_PATH still wins. Their CUPTI
// is opened only where the CUDA runtime sees a GPU (13.2's crashes without a driver).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

// What the search depends on, apart from the files themselves: a process's, or one a test
// makes up.
struct GpuLibrarySearch {
  std::optional<std::string> only;  // AMPCHECK_GPU_LIBRARIES, when set
  std::string ld_library_path;      // LD_LIBRARY_PATH
  std::string executable;           // this binary (/proc/self/exe)
  std::string virtual_env;          // VIRTUAL_ENV: an activated venv
  std::string conda_prefix;         // CONDA_PREFIX: an activated conda environment
  std::vector<std::string> build_folders;  // where the build found the toolkit's libraries
  bool gpu_usable = true;  // the CUDA runtime sees a GPU: a Python environment's CUPTI only then
};
// This process's.
GpuLibrarySearch gpu_library_search();

// The library folders of the nvidia-* packages (site-packages/nvidia/<package>/lib) of the
// Python environments the search names, existing ones only, each once, in order:
//   the environment the executable is installed in: <bin>/../lib/python3.*/site-packages
//     (pip's bin/ampcheck), or <folder>/.. when that holds nvidia/ (auditwheel's
//     site-packages/ampcheck.scripts/ampcheck);
//   VIRTUAL_ENV's, then CONDA_PREFIX's lib/python3.*/site-packages.
// dist-packages (Debian's system Python) is read as site-packages is.
std::vector<std::string> python_gpu_library_folders(const GpuLibrarySearch& search);

// What the loader hands dlopen for `lib`, in the order tried: paths, and the bare file name
// where the dynamic loader's own search comes (ld.so.cache and its default folders). CUPTI
// skips the Python environments where no GPU is usable.
std::vector<std::string> gpu_library_candidates(GpuLibrary lib, const GpuLibrarySearch& search);

}  // namespace ampcheck::kernels::cuda
