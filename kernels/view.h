// What a kernel is given of a tensor: where its elements are (host memory for a CPU
// kernel, device memory for a CUDA kernel), their dtype and the shape, row-major and
// contiguous. The engine makes one per tensor (engine/ops/dispatch.h); kernels never see
// engine types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace ampcheck::kernels {

using Dims = std::vector<std::int64_t>;

struct View {
  void* data = nullptr;
  DType dtype = DType::f32;
  Dims shape;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// The compute type ("opmath") of a dtype: double for f64, float for every other float
// dtype (f16/bf16 compute in f32 and round the result once), as on the GPU.
template <typename F>
decltype(auto) with_compute_type(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace ampcheck::kernels
