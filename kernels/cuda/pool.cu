// max_pool2d, avg_pool2d and adaptive_avg_pool2d on GPU 0 (kernels/conv_pool_kernels.h):
// one thread per element, computing it with the shared per-element definitions of that
// header. Forward: one thread per output, its window in row-major order as the CPU does.
// Backward: one thread per INPUT element, gathering from the outputs whose windows hold
// it in ascending output order, rather than scattering from each output with atomics:
// nothing races, the sums are the CPU's operations in the CPU's order, and an f16/bf16
// gradient is accumulated in f32 and rounded once without a scratch buffer. So a rerun
// repeats its bits, and f32/f64 results are those of the CPU reference.
#include <cstdint>
#include <string>

#include "kernels/conv_pool_kernels.h"
#include "kernels/cuda/runtime.h"  // check_launch, stream, blocks_for
#include "kernels/element.h"       // load_element, store_element
#include "kernels/kernel_note.h"

namespace ampcheck::kernels::cuda::pool {
namespace {

using i64 = std::int64_t;

constexpr int kThreads = 256;

// Each output's maximum and its index; `y` may be null (the indices alone).
template <typename T>
__global__ void max_pool_forward_kernel(PoolGeometry g, const void* x, DType x_dtype, void* y, DType y_dtype,
                                        std::int64_t* indices, i64 total) {
  for (i64 o = first_index(); o < total; o += grid_stride()) {
    const WindowMax<T> best = max_pool_at<T>(g, x, x_dtype, o);
    indices[o] = best.index;
    if (y != nullptr) store_element(y, y_dtype, o, best.value);  // an input value: exact in y's dtype
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(PoolGeometry g, const void* gy, DType gy_dtype, const std::int64_t* indices,
                                         void* gx, DType gx_dtype, i64 total) {
  for (i64 i = first_index(); i < total; i += grid_stride())
    store_element(gx, gx_dtype, i, max_pool_grad_at<T>(g, gy, gy_dtype, indices, i));
}

template <typename T>
__global__ void avg_pool_forward_kernel(PoolGeometry g, const void* x, DType x_dtype, void* y, DType y_dtype,
                                        i64 total) {
  for (i64 o = first_index(); o < total; o += grid_stride())
    store_element(y, y_dtype, o, avg_pool_at<T>(g, x, x_dtype, o));
}

template <typename T>
__global__ void avg_pool_backward_kernel(PoolGeometry g, const void* gy, DType gy_dtype, void* gx, DType gx_dtype,
                                         i64 total) {
  for (i64 i = first_index(); i < total; i += grid_stride())
    store_element(gx, gx_dtype, i, avg_pool_grad_at<T>(g, gy, gy_dtype, i));
}

template <typename T>
__global__ void adaptive_forward_kernel(PoolGeometry g, const void* x, DType x_dtype, void* y, DType y_dtype,
                                        i64 total) {
  for (i64 o = first_index(); o < total; o += grid_stride())
    store_element(y, y_dtype, o, adaptive_avg_at<T>(g, x, x_dtype, o));
}

template <typename T>
__global__ void adaptive_backward_kernel(PoolGeometry g, const void* gy, DType gy_dtype, void* gx, DType gx_dtype,
                                         i64 total) {
  for (i64 i = first_index(); i < total; i += grid_stride())
    store_element(gx, gx_dtype, i, adaptive_avg_grad_at<T>(g, gy, gy_dtype, i));
}

void note(const char* what, DType dtype) {
  if (noting()) note_kernel(std::string(what) + ": CUDA kernel, " + (dtype == DType::f64 ? "f64" : "f32") + " compute");
}

}  // namespace

void max_pool2d_forward(const PoolGeometry& g, const View& x, const View& y, const View& indices) {
  const i64 total = y.numel();
  if (total == 0) return;
  with_compute_type(y.dtype, [&](auto zero) {
    max_pool_forward_kernel<decltype(zero)><<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(
        g, x.data, x.dtype, y.data, y.dtype, indices.as<std::int64_t>(), total);
  });
  check_launch("max_pool_forward_kernel", "max_pool2d");
  note("max_pool2d forward (window maximum and its index)", y.dtype);
}

void max_pool2d_indices(const PoolGeometry& g, const View& x, const View& indices) {
  const i64 total = indices.numel();
  if (total == 0) return;
  with_compute_type(x.dtype, [&](auto zero) {
    max_pool_forward_kernel<decltype(zero)><<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(
        g, x.data, x.dtype, nullptr, x.dtype, indices.as<std::int64_t>(), total);
  });
  check_launch("max_pool_forward_kernel (indices)", "max_pool2d");
  note("max_pool2d backward (window maxima found again)", x.dtype);
}

void max_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& indices, const View& grad_x) {
  const i64 total = grad_x.numel();
  if (total == 0) return;
  with_compute_type(grad_x.dtype, [&](auto zero) {
    max_pool_backward_kernel<decltype(zero)><<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(
        g, grad_y.data, grad_y.dtype, indices.as<const std::int64_t>(), grad_x.data, grad_x.dtype, total);
  });
  check_launch("max_pool_backward_kernel", "max_pool2d");
  note("max_pool2d backward (gather, no atomics)", grad_x.dtype);
}

void avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y) {
  const i64 total = y.numel();
  if (total == 0) return;
  with_compute_type(y.dtype, [&](auto zero) {
    avg_pool_forward_kernel<decltype(zero)>
        <<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(g, x.data, x.dtype, y.data, y.dtype, total);
  });
  check_launch("avg_pool_forward_kernel", "avg_pool2d");
  note("avg_pool2d forward", y.dtype);
}

void avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x) {
  const i64 total = grad_x.numel();
  if (total == 0) return;
  with_compute_type(grad_x.dtype, [&](auto zero) {
    avg_pool_backward_kernel<decltype(zero)><<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(
        g, grad_y.data, grad_y.dtype, grad_x.data, grad_x.dtype, total);
  });
  check_launch("avg_pool_backward_kernel", "avg_pool2d");
  note("avg_pool2d backward (gather, no atomics)", grad_x.dtype);
}

void adaptive_avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y) {
  const i64 total = y.numel();
  if (total == 0) return;
  with_compute_type(y.dtype, [&](auto zero) {
    adaptive_forward_kernel<decltype(zero)>
        <<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(g, x.data, x.dtype, y.data, y.dtype, total);
  });
  check_launch("adaptive_forward_kernel", "adaptive_avg_pool2d");
  note("adaptive_avg_pool2d forward", y.dtype);
}

void adaptive_avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x) {
  const i64 total = grad_x.numel();
  if (total == 0) return;
  with_compute_type(grad_x.dtype, [&](auto zero) {
    adaptive_backward_kernel<decltype(zero)><<<blocks_for(total, kThreads), kThreads, 0, stream()>>>(
        g, grad_y.data, grad_y.dtype, grad_x.data, grad_x.dtype, total);
  });
  check_launch("adaptive_backward_kernel", "adaptive_avg_pool2d");
  note("adaptive_avg_pool2d backward (gather, no atomics)", grad_x.dtype);
}

}  // namespace ampcheck::kernels::cuda::pool
