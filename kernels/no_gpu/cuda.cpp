// The GPU entry points of a build without CUDA (AMPCHECK_CUDA=OFF, or AUTO without a
// toolkit): each says so, in the manner of MLX's no_gpu backend.
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda.h"

namespace ampcheck::kernels::cuda {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw std::runtime_error(std::string(what) +
                           " has no GPU implementation in this build: reconfigure with "
                           "-DAMPCHECK_CUDA=ON on a machine with the CUDA toolkit");
}
}  // namespace

const Probe& probe() {
  static const Probe p{false, 0, "this build has no CUDA (AMPCHECK_CUDA=OFF)", "", 0};
  return p;
}
std::string build_description() { return "no CUDA (AMPCHECK_CUDA=OFF)"; }
std::vector<std::string> missing_gpu_libraries(bool) { return {}; }
const CudaInfo& cuda_info() {
  static const CudaInfo info = [] {
    CudaInfo i;
    i.why_none = probe().why_none;
    return i;
  }();
  return info;
}

void f64_to_f16(const double*, std::uint16_t*, std::size_t) { no_gpu("f64_to_f16"); }
void f64_to_bf16(const double*, std::uint16_t*, std::size_t) { no_gpu("f64_to_bf16"); }
void f32_to_f16(const float*, std::uint16_t*, std::size_t) { no_gpu("f32_to_f16"); }
void f32_to_bf16(const float*, std::uint16_t*, std::size_t) { no_gpu("f32_to_bf16"); }
void f16_to_f32(const std::uint16_t*, float*, std::size_t) { no_gpu("f16_to_f32"); }
void bf16_to_f32(const std::uint16_t*, float*, std::size_t) { no_gpu("bf16_to_f32"); }

}  // namespace ampcheck::kernels::cuda
