// The one loader of the GPU libraries (kernels/cuda/gpu_libraries.h).
#include "kernels/cuda/gpu_libraries.h"

#include <cublas_api.h>        // CUBLAS_VER_MAJOR: cuBLASLt's soname
#include <cuda_runtime_api.h>  // CUDART_VERSION: CUPTI's soname follows the toolkit's major
#include <cudnn_version.h>     // CUDNN_MAJOR
#include <dlfcn.h>             // dlopen, dlsym

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#if defined(AMPCHECK_HAVE_NCCL)
#include <nccl.h>  // NCCL_MAJOR
#endif

namespace ampcheck::kernels::cuda {
namespace {

struct Entry {
  const char* name;
  std::string file;
  std::string fix;  // what to install
};

const Entry& entry(GpuLibrary lib) {
  static const std::array<Entry, 4> entries{{
      {"cuBLASLt", "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
       "install the CUDA toolkit's cuBLAS (libcublas), or `pip install nvidia-cublas`"},
      {"cuDNN", "libcudnn.so." + std::to_string(CUDNN_MAJOR),
       "install cuDNN " + std::to_string(CUDNN_MAJOR) + ", or `pip install nvidia-cudnn-cu" +
           std::to_string(CUDART_VERSION / 1000) + "`"},
      {"CUPTI", "libcupti.so." + std::to_string(CUDART_VERSION / 1000),
       "install the CUDA toolkit's CUPTI, or `pip install nvidia-cuda-cupti`"},
#if defined(AMPCHECK_HAVE_NCCL)
      {"NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR), "install NCCL (libnccl2), or `pip install nvidia-nccl`"},
#else
      {"NCCL", "libnccl.so.2", "install NCCL (libnccl2), or `pip install nvidia-nccl`"},
#endif
  }};
  return entries[static_cast<std::size_t>(lib)];
}

std::vector<std::string> split_folders(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const std::size_t colon = text.find(':');
    const std::string_view part = text.substr(0, colon);
    if (!part.empty()) out.emplace_back(part);
    if (colon == std::string_view::npos) break;
    text.remove_prefix(colon + 1);
  }
  return out;
}

// The build's toolkit folders (CMake: the folders it found cuBLASLt, cuDNN, CUPTI and NCCL in).
std::vector<std::string> build_folders() {
#if defined(AMPCHECK_GPU_LIBRARY_DIRS)
  return split_folders(AMPCHECK_GPU_LIBRARY_DIRS);
#else
  return {};
#endif
}

struct Loaded {
  std::once_flag once;
  std::atomic<void*> handle{nullptr};
  std::string problem;
};

Loaded& state(GpuLibrary lib) {
  static std::array<Loaded, 4> states;
  return states[static_cast<std::size_t>(lib)];
}

std::string joined(const std::vector<std::string>& folders) {
  std::string s;
  for (const std::string& f : folders) s += (s.empty() ? "" : ", ") + f;
  return s;
}

void load(GpuLibrary lib, Loaded& st) {
  const Entry& e = entry(lib);
  const char* only = std::getenv("AMPCHECK_GPU_LIBRARIES");
  std::string last_error;
  auto try_open = [&](const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      last_error = why != nullptr ? why : "";
    }
    return h;
  };
  void* handle = nullptr;
  std::string searched;
  if (only != nullptr) {
    const std::vector<std::string> folders = split_folders(only);
    for (const std::string& f : folders)
      if ((handle = try_open(f + "/" + e.file)) != nullptr) break;
    searched = "AMPCHECK_GPU_LIBRARIES (" + (folders.empty() ? std::string("empty") : joined(folders)) + ")";
  } else {
    handle = try_open(e.file);
    const std::vector<std::string> folders = build_folders();
    if (handle == nullptr)
      for (const std::string& f : folders)
        if ((handle = try_open(f + "/" + e.file)) != nullptr) break;
    searched = "the dynamic loader's path (LD_LIBRARY_PATH, ld.so.cache)" +
               (folders.empty() ? std::string() : " and " + joined(folders));
  }
  if (handle != nullptr) {
    st.handle.store(handle);
    return;
  }
  st.problem = std::string(e.name) + " (" + e.file + ") was not found in " + searched + ": " + e.fix +
               ", or name its folder in AMPCHECK_GPU_LIBRARIES" +
               (last_error.empty() ? std::string() : " [" + last_error + "]");
}

Loaded& loaded(GpuLibrary lib) {
  Loaded& st = state(lib);
  std::call_once(st.once, [&] { load(lib, st); });
  return st;
}

}  // namespace

const char* gpu_library_name(GpuLibrary lib) { return entry(lib).name; }
std::string gpu_library_file(GpuLibrary lib) { return entry(lib).file; }

void* gpu_library(GpuLibrary lib) {
  Loaded& st = loaded(lib);
  if (void* h = st.handle.load()) return h;
  throw GpuLibraryMissing(st.problem);
}

void* gpu_symbol(GpuLibrary lib, const char* function) {
  void* handle = gpu_library(lib);
  void* fn = dlsym(handle, function);
  if (fn == nullptr)
    throw GpuLibraryMissing(std::string(entry(lib).name) + " (" + entry(lib).file + ") has no " + function +
                            ": a version other than the one this build was compiled against; install that one "
                            "or rebuild ampcheck against yours");
  return fn;
}

std::string gpu_library_problem(GpuLibrary lib) {
  Loaded& st = loaded(lib);
  return st.handle.load() != nullptr ? std::string() : st.problem;
}

bool gpu_library_loaded(GpuLibrary lib) { return state(lib).handle.load() != nullptr; }

}  // namespace ampcheck::kernels::cuda
