// The one loader of the GPU libraries (kernels/cuda/gpu_libraries.h).
#include "kernels/cuda/gpu_libraries.h"

#include <cublas_api.h>        // CUBLAS_VER_MAJOR: cuBLASLt's soname
#include <cuda_runtime_api.h>  // CUDART_VERSION: CUPTI's soname follows the toolkit's major
#include <cudnn_version.h>     // CUDNN_MAJOR
#include <dlfcn.h>             // dlopen, dlsym

#include <unistd.h>            // readlink: this binary's path

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <system_error>
#include <vector>

#if defined(AMPCHECK_HAVE_NCCL)
#include <nccl.h>  // NCCL_MAJOR
#endif

#include "kernels/cuda/cuda.h"  // probe(): whether the runtime sees a GPU, CUPTI's condition

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
      {"NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR),
       "install NCCL (libnccl2), or `pip install nvidia-nccl-cu" + std::to_string(CUDART_VERSION / 1000) + "`"},
#else
      {"NCCL", "libnccl.so.2",
       "install NCCL (libnccl2), or `pip install nvidia-nccl-cu" + std::to_string(CUDART_VERSION / 1000) + "`"},
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

namespace fs = std::filesystem;

bool is_folder(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The sub-folders of `dir` (none when it cannot be read), by name: a search never depends on
// the order a file system lists them in.
std::vector<fs::path> sub_folders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (is_folder(it->path())) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

// An environment's site-packages: <root>/lib/python3.*/{site,dist}-packages.
std::vector<fs::path> site_packages_of(const fs::path& root) {
  std::vector<fs::path> out;
  for (const fs::path& py : sub_folders(root / "lib")) {
    if (!py.filename().string().starts_with("python3")) continue;
    for (const char* name : {"site-packages", "dist-packages"})
      if (is_folder(py / name)) out.push_back(py / name);
  }
  return out;
}

// The CUPTI of PyTorch's CUDA 13.2 wheels (nvidia-cuda-cupti 13.2.86) recurses until its
// stack overflows in cuptiGetVersion where no driver is installed (`ampcheck doctor` crashed;
// the toolkit's 13.0 answers), and CUPTI has nothing to trace where no GPU is usable: a
// Python environment's CUPTI is opened only where the runtime sees a GPU.
bool skips_python(GpuLibrary lib, const GpuLibrarySearch& search) {
  return lib == GpuLibrary::cupti && !search.gpu_usable;
}

void load(GpuLibrary lib, Loaded& st) {
  const Entry& e = entry(lib);
  const GpuLibrarySearch search = gpu_library_search();
  std::string last_error;
  void* handle = nullptr;
  for (const std::string& path : gpu_library_candidates(lib, search)) {
    if ((handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    // A file that is there but does not load (another architecture, a missing dependency)
    // is the likelier reason to show than the last folder that lacked it.
    const char* why = dlerror();
    if (why != nullptr && (last_error.empty() || std::string_view(why).find("No such file") == std::string_view::npos))
      last_error = why;
  }
  if (handle != nullptr) {
    st.handle.store(handle);
    return;
  }
  std::string searched;
  if (search.only) {
    const std::vector<std::string> folders = split_folders(*search.only);
    searched = "AMPCHECK_GPU_LIBRARIES (" + (folders.empty() ? std::string("empty") : joined(folders)) + ")";
  } else {
    const std::vector<std::string> ld_path = split_folders(search.ld_library_path);
    const std::vector<std::string> python = python_gpu_library_folders(search);
    searched = (ld_path.empty() ? std::string() : "LD_LIBRARY_PATH (" + joined(ld_path) + "), ") +
               (python.empty() ? std::string("no nvidia-* package of a Python environment (none beside this binary, "
                                             "in VIRTUAL_ENV or in CONDA_PREFIX), ")
                : skips_python(lib, search)
                    ? "not the Python environment's nvidia-* packages (" + joined(python) +
                          ": their CUPTI only where a GPU is usable, and none is), "
                    : "the Python environment's nvidia-* packages (" + joined(python) + "), ") +
               "the dynamic loader's path (ld.so.cache)" +
               (search.build_folders.empty() ? std::string() : " and " + joined(search.build_folders));
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

GpuLibrarySearch gpu_library_search() {
  GpuLibrarySearch s;
  const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (const char* only = std::getenv("AMPCHECK_GPU_LIBRARIES")) s.only = only;
  s.ld_library_path = env("LD_LIBRARY_PATH");
  s.virtual_env = env("VIRTUAL_ENV");
  s.conda_prefix = env("CONDA_PREFIX");
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) s.executable.assign(self, static_cast<std::size_t>(n));
  s.build_folders = build_folders();
  s.gpu_usable = probe().device_count > 0;
  return s;
}

std::vector<std::string> python_gpu_library_folders(const GpuLibrarySearch& search) {
  std::vector<fs::path> site_packages;
  if (!search.executable.empty()) {
    const fs::path bin = fs::path(search.executable).parent_path();
    if (is_folder(bin.parent_path() / "nvidia")) site_packages.push_back(bin.parent_path());
    for (const fs::path& sp : site_packages_of(bin.parent_path())) site_packages.push_back(sp);
  }
  for (const std::string& root : {search.virtual_env, search.conda_prefix})
    if (!root.empty())
      for (const fs::path& sp : site_packages_of(root)) site_packages.push_back(sp);

  std::vector<std::string> out;
  std::vector<fs::path> seen;  // the same folder reached twice (a venv that is also VIRTUAL_ENV)
  for (const fs::path& sp : site_packages)
    for (const fs::path& package : sub_folders(sp / "nvidia")) {
      const fs::path folder = package / "lib";
      if (!is_folder(folder)) continue;
      std::error_code ec;
      fs::path canonical = fs::weakly_canonical(folder, ec);
      if (ec) canonical = folder;
      if (std::find(seen.begin(), seen.end(), canonical) != seen.end()) continue;
      seen.push_back(canonical);
      out.push_back(folder.lexically_normal().string());
    }
  return out;
}

std::vector<std::string> gpu_library_candidates(GpuLibrary lib, const GpuLibrarySearch& search) {
  const std::string& file = entry(lib).file;
  std::vector<std::string> out;
  if (search.only) {
    for (const std::string& f : split_folders(*search.only)) out.push_back(f + "/" + file);
    return out;
  }
  for (const std::string& f : split_folders(search.ld_library_path)) out.push_back(f + "/" + file);
  if (!skips_python(lib, search))
    for (const std::string& f : python_gpu_library_folders(search)) out.push_back(f + "/" + file);
  out.push_back(file);
  for (const std::string& f : search.build_folders) out.push_back(f + "/" + file);
  return out;
}

}  // namespace ampcheck::kernels::cuda
