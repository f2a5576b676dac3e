// Where the GPU library loader looks (kernels/cuda/gpu_libraries.h), on made-up folder trees:
// the nvidia-* packages of a pip-installed ampcheck's environment (CUDA 13's nvidia/cu13/lib
// and CUDA 12's one folder per package), auditwheel's layout, the active environment, and the
// order of everything the loader hands dlopen. Needs no GPU and no GPU library: the files
// are never opened (tests/e2e/gpu_libraries.sh opens real ones from a made-up environment).
#include "kernels/cuda/gpu_libraries.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <filesystem>
#include <string>
#include <vector>

namespace ampcheck::kernels::cuda {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

class GpuLibrarySearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ampcheck-gpu-libraries-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A folder under the test's root, made with its parents; its path as a string.
  std::string mkdir(const std::string& relative) {
    fs::create_directories(root_ / relative);
    return (root_ / relative).string();
  }
  std::string path(const std::string& relative) const { return (root_ / relative).string(); }

  fs::path root_;
};

TEST_F(GpuLibrarySearchTest, Cuda13WheelsOfTheVenvTheBinaryIsInstalledIn) {
  // pip install ampcheck beside PyTorch's CUDA 13 wheel: venv/bin/ampcheck, and the
  // nvidia-* packages' libraries in nvidia/cu13/lib (cuBLAS, CUPTI, the runtime), their own
  // folders for cuDNN and NCCL.
  const std::string sp = "venv/lib/python3.12/site-packages";
  mkdir(sp + "/nvidia/cu13/lib");
  mkdir(sp + "/nvidia/cudnn/lib");
  mkdir(sp + "/nvidia/nccl/lib");
  mkdir(sp + "/nvidia/cu13/include");  // headers only: not a library folder of its own
  mkdir(sp + "/nvidia/nvtx");          // a package without lib/
  mkdir(sp + "/torch/lib");
  mkdir("venv/bin");
  GpuLibrarySearch s;
  s.executable = path("venv/bin/ampcheck");
  EXPECT_EQ(python_gpu_library_folders(s),
            (Strings{path(sp + "/nvidia/cu13/lib"), path(sp + "/nvidia/cudnn/lib"), path(sp + "/nvidia/nccl/lib")}));
}

TEST_F(GpuLibrarySearchTest, Cuda12WheelsOnePackageAFolder) {
  const std::string sp = "env/lib/python3.10/site-packages";
  for (const char* pkg : {"cublas", "cuda_cupti", "cuda_runtime", "cudnn", "nccl"}) mkdir(sp + "/nvidia/" + pkg + "/lib");
  GpuLibrarySearch s;
  s.executable = path("env/bin/ampcheck");
  EXPECT_EQ(python_gpu_library_folders(s),
            (Strings{path(sp + "/nvidia/cublas/lib"), path(sp + "/nvidia/cuda_cupti/lib"),
                     path(sp + "/nvidia/cuda_runtime/lib"), path(sp + "/nvidia/cudnn/lib"),
                     path(sp + "/nvidia/nccl/lib")}));
}

TEST_F(GpuLibrarySearchTest, AuditwheelsScriptsFolderInSitePackages) {
  // auditwheel moves an executable of the wheel's scripts into site-packages/ampcheck.scripts/
  // and leaves bin/ampcheck a Python shim that execs it: the binary's folder's parent is
  // site-packages itself.
  const std::string sp = "venv/lib/python3.11/site-packages";
  mkdir(sp + "/ampcheck.scripts");
  mkdir(sp + "/nvidia/cu13/lib");
  GpuLibrarySearch s;
  s.executable = path(sp + "/ampcheck.scripts/ampcheck");
  EXPECT_EQ(python_gpu_library_folders(s), Strings{path(sp + "/nvidia/cu13/lib")});
}

TEST_F(GpuLibrarySearchTest, ActiveEnvironmentsAfterTheBinarysOwnEachFolderOnce) {
  // The binary in ~/.local/bin (pip install --user), a venv and a conda environment active;
  // the venv is also reached through a symbolic link, and dist-packages is Debian's.
  mkdir("user/lib/python3.11/site-packages/nvidia/cudnn/lib");
  mkdir("venv/lib/python3.11/site-packages/nvidia/cu13/lib");
  mkdir("conda/lib/python3.13/dist-packages/nvidia/nccl/lib");
  fs::create_directory_symlink(root_ / "venv", root_ / "venv-link");
  GpuLibrarySearch s;
  s.executable = path("user/bin/ampcheck");
  s.virtual_env = path("venv-link");
  s.conda_prefix = path("conda");
  EXPECT_EQ(python_gpu_library_folders(s),
            (Strings{path("user/lib/python3.11/site-packages/nvidia/cudnn/lib"),
                     path("venv-link/lib/python3.11/site-packages/nvidia/cu13/lib"),
                     path("conda/lib/python3.13/dist-packages/nvidia/nccl/lib")}));
  s.executable = path("venv/bin/ampcheck");  // the active venv is the binary's own
  EXPECT_EQ(python_gpu_library_folders(s),
            (Strings{path("venv/lib/python3.11/site-packages/nvidia/cu13/lib"),
                     path("conda/lib/python3.13/dist-packages/nvidia/nccl/lib")}));
}

TEST_F(GpuLibrarySearchTest, NoPythonEnvironmentNoFolders) {
  // A binary built from source (build/cli/ampcheck) with no environment active, and one
  // beside a Python 2 tree that is not searched.
  mkdir("build/cli");
  mkdir("build/lib/python2.7/site-packages/nvidia/cublas/lib");
  GpuLibrarySearch s;
  s.executable = path("build/cli/ampcheck");
  EXPECT_TRUE(python_gpu_library_folders(s).empty());
  s.executable.clear();
  s.virtual_env = path("missing-venv");
  EXPECT_TRUE(python_gpu_library_folders(s).empty());
}

TEST_F(GpuLibrarySearchTest, OrderLdLibraryPathThenPythonThenLoaderThenBuild) {
  const std::string sp = "venv/lib/python3.12/site-packages";
  mkdir(sp + "/nvidia/cu13/lib");
  mkdir(sp + "/nvidia/cudnn/lib");
  mkdir("conda/lib/python3.12/site-packages/nvidia/cudnn/lib");
  GpuLibrarySearch s;
  s.executable = path("venv/bin/ampcheck");
  s.conda_prefix = path("conda");
  s.ld_library_path = "/opt/a::/opt/b";  // an empty entry is no folder
  s.build_folders = {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"};
  const std::string file = gpu_library_file(GpuLibrary::cudnn);
  EXPECT_EQ(gpu_library_candidates(GpuLibrary::cudnn, s),
            (Strings{"/opt/a/" + file, "/opt/b/" + file, path(sp + "/nvidia/cu13/lib/") + file,
                     path(sp + "/nvidia/cudnn/lib/") + file,
                     path("conda/lib/python3.12/site-packages/nvidia/cudnn/lib/") + file, file,
                     "/usr/local/cuda/lib64/" + file, "/usr/lib/x86_64-linux-gnu/" + file}));
}

TEST_F(GpuLibrarySearchTest, CuptiOfAPythonEnvironmentOnlyWhereAGpuIsUsable) {
  // PyPI's CUPTI 13.2 crashes in cuptiGetVersion without a driver: where no GPU is usable
  // CUPTI comes from anywhere but the Python environments; the other libraries do not care.
  const std::string sp = "venv/lib/python3.12/site-packages";
  mkdir(sp + "/nvidia/cu13/lib");
  GpuLibrarySearch s;
  s.executable = path("venv/bin/ampcheck");
  s.build_folders = {"/usr/local/cuda/lib64"};
  s.gpu_usable = false;
  const std::string cupti = gpu_library_file(GpuLibrary::cupti), cublas = gpu_library_file(GpuLibrary::cublasLt);
  EXPECT_EQ(gpu_library_candidates(GpuLibrary::cupti, s), (Strings{cupti, "/usr/local/cuda/lib64/" + cupti}));
  EXPECT_EQ(gpu_library_candidates(GpuLibrary::cublasLt, s),
            (Strings{path(sp + "/nvidia/cu13/lib/") + cublas, cublas, "/usr/local/cuda/lib64/" + cublas}));
  s.gpu_usable = true;
  EXPECT_EQ(gpu_library_candidates(GpuLibrary::cupti, s),
            (Strings{path(sp + "/nvidia/cu13/lib/") + cupti, cupti, "/usr/local/cuda/lib64/" + cupti}));
}

TEST_F(GpuLibrarySearchTest, AmpcheckGpuLibrariesReplacesEverySearch) {
  mkdir("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
  GpuLibrarySearch s;
  s.executable = path("venv/bin/ampcheck");
  s.ld_library_path = "/opt/a";
  s.build_folders = {"/usr/local/cuda/lib64"};
  s.only = "/toolkit/lib64:/more";
  const std::string file = gpu_library_file(GpuLibrary::cupti);
  EXPECT_EQ(gpu_library_candidates(GpuLibrary::cupti, s), (Strings{"/toolkit/lib64/" + file, "/more/" + file}));
  s.only = "";  // set and empty: nothing at all (tests hide every GPU library so)
  EXPECT_TRUE(gpu_library_candidates(GpuLibrary::cupti, s).empty());
}

TEST(GpuLibraryFiles, SonamesOfThisBuild) {
  // The versioned file names the nvidia-* wheels and the toolkit both ship.
  EXPECT_TRUE(gpu_library_file(GpuLibrary::cublasLt).starts_with("libcublasLt.so."));
  EXPECT_TRUE(gpu_library_file(GpuLibrary::cudnn).starts_with("libcudnn.so."));
  EXPECT_TRUE(gpu_library_file(GpuLibrary::cupti).starts_with("libcupti.so."));
  EXPECT_TRUE(gpu_library_file(GpuLibrary::nccl).starts_with("libnccl.so."));
}

}  // namespace
}  // namespace ampcheck::kernels::cuda
