// The reduction family on GPU 0 (kernels/reduce_kernels.h). Deterministic: no atomics,
// and each group is reduced by a tree fixed by the shapes, so a rerun repeats its bits.
//
// Two ways to reduce a group, chosen per call by the shapes:
//   - one thread per group, folding it in element order, exactly as the CPU does (for a
//     sum in f32/f64 the CPU's bits): when groups are small, or when the reduced dims
//     are not x's last one, so that neighbouring threads read neighbouring elements
//     (the bias gradient of a [batch, features] tensor reads coalesced) and there are
//     enough groups to fill the GPU;
//   - one block per group (grid-stride over groups), each thread folding a strided slice
//     in element order and cub::BlockReduce combining the slices: for large groups over
//     the contiguous dims (a row sum, a full reduction).
// max's combining step is max_merge (kernels/reduce_kernels.h), which gives the
// sequential fold's answer whatever the tree: the first NaN, else the first maximum.
#include <cub/cub.cuh>  // cub::BlockReduce

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.h"  // check, check_launch, stream, blocks_for
#include "kernels/element.h"       // load_element, store_element, kMaxDims
#include "kernels/kernel_note.h"
#include "kernels/reduce_kernels.h"

namespace ampcheck::kernels::cuda::reduce {
namespace {

using i64 = std::int64_t;

constexpr int kThreads = 256;
// A group of at most this many elements is folded by one thread.
constexpr i64 kSerialGroup = 32;
// Groups that fill the GPU with one thread each (a few waves of 256-thread blocks).
constexpr i64 kManyGroups = 16384;

// Row-major dims and x's strides along them: the flat offset of multi-index i.
struct DimWalk {
  int rank = 0;
  i64 dims[kMaxDims] = {};
  i64 strides[kMaxDims] = {};

  __device__ i64 offset(i64 i) const {
    i64 off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return off;
  }
};

// Where group j's elements are in x: x[kept.offset(j) + reduced.offset(r)], r in [0,
// count), in increasing flat index as r increases.
struct Plan {
  DimWalk kept;
  DimWalk reduced;
  i64 groups = 1;
  i64 count = 1;
  bool last_dim_reduced = false;
};

Plan plan_of(const View& x, const View& out, const char* op) {
  const auto rank = static_cast<int>(x.shape.size());
  const auto out_rank = static_cast<int>(out.shape.size());
  if (rank > kMaxDims || out_rank > rank)
    throw std::invalid_argument(std::string(op) + ": a reduction of a tensor of " + std::to_string(rank) +
                                " dims to " + std::to_string(out_rank) + " (the CUDA kernels take at most " +
                                std::to_string(kMaxDims) + ")");
  Plan p;
  i64 stride = 1;
  // Walk from the last dim so strides accumulate, then fill the walks outermost first.
  i64 kd[kMaxDims] = {}, ks[kMaxDims] = {}, rd[kMaxDims] = {}, rs[kMaxDims] = {};
  int nk = 0, nr = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const i64 size = x.shape[static_cast<std::size_t>(d)];
    const int od = d - (rank - out_rank);
    const i64 out_size = od < 0 ? 1 : out.shape[static_cast<std::size_t>(od)];
    if (size != 1) {  // a dim of size 1 walks nowhere
      if (out_size == size) {
        kd[nk] = size, ks[nk] = stride, ++nk;
      } else if (out_size == 1) {
        if (nk == 0 && nr == 0) p.last_dim_reduced = true;  // the innermost dim that moves
        rd[nr] = size, rs[nr] = stride, ++nr;
      } else {
        throw std::invalid_argument(std::string(op) + ": an output of size " + std::to_string(out_size) +
                                    " along dim " + std::to_string(d) + " of an input of size " +
                                    std::to_string(size));
      }
    }
    stride *= size;
  }
  p.kept.rank = nk;
  for (int i = 0; i < nk; ++i) p.kept.dims[i] = kd[nk - 1 - i], p.kept.strides[i] = ks[nk - 1 - i];
  p.reduced.rank = nr;
  for (int i = 0; i < nr; ++i) p.reduced.dims[i] = rd[nr - 1 - i], p.reduced.strides[i] = rs[nr - 1 - i];
  for (int i = 0; i < nk; ++i) p.groups *= p.kept.dims[i];
  for (int i = 0; i < nr; ++i) p.count *= p.reduced.dims[i];
  if (p.groups != out.numel())
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(out.numel()) + " outputs for " +
                                std::to_string(p.groups) + " groups");
  return p;
}

bool serial(const Plan& p) {
  return p.count <= kSerialGroup || (!p.last_dim_reduced && p.groups >= kManyGroups);
}

unsigned int block_grid(i64 groups) { return static_cast<unsigned int>(groups < 65535 ? groups : 65535); }

// ---- sum and mean ----
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_serial_kernel(Plan p, const void* x, DType x_dtype, void* out, DType out_dtype, bool mean) {
  for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < p.groups;
       j += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 base = p.kept.offset(j);
    T s = T(0);
    for (i64 r = 0; r < p.count; ++r) s += load_element<T>(x, x_dtype, base + p.reduced.offset(r));
    if (mean) s /= static_cast<T>(p.count);
    store_element(out, out_dtype, j, s);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sum_block_kernel(Plan p, const void* x, DType x_dtype, void* out, DType out_dtype, bool mean) {
  using BlockReduce = cub::BlockReduce<T, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  for (i64 j = blockIdx.x; j < p.groups; j += gridDim.x) {
    const i64 base = p.kept.offset(j);
    T s = T(0);
    for (i64 r = threadIdx.x; r < p.count; r += kThreads) s += load_element<T>(x, x_dtype, base + p.reduced.offset(r));
    T total = BlockReduce(temp).Sum(s);
    if (threadIdx.x == 0) {
      if (mean) total /= static_cast<T>(p.count);
      store_element(out, out_dtype, j, total);
    }
    __syncthreads();  // temp is reused by the next group
  }
}

void sum_or_mean(const View& x, const View& out, bool mean) {
  const char* op = mean ? "mean" : "sum";
  const Plan p = plan_of(x, out, op);
  if (p.groups == 0) return;
  const bool f64 = out.dtype == DType::f64;
  const bool one_thread = serial(p);
  if (one_thread) {
    if (f64)
      sum_serial_kernel<double>
          <<<blocks_for(p.groups, kThreads), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, mean);
    else
      sum_serial_kernel<float>
          <<<blocks_for(p.groups, kThreads), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, mean);
    check_launch("sum_serial_kernel", op);
  } else {
    if (f64)
      sum_block_kernel<double>
          <<<block_grid(p.groups), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, mean);
    else
      sum_block_kernel<float>
          <<<block_grid(p.groups), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, mean);
    check_launch("sum_block_kernel", op);
  }
  if (noting()) note_kernel(std::string(op) + ": " + (one_thread ? "CUDA kernel, one thread per output" : "CUB block reduce") +
              ", " + (f64 ? "f64" : "f32") + " compute");
}

void sum(const View& x, const View& out) { sum_or_mean(x, out, false); }
void mean(const View& x, const View& out) { sum_or_mean(x, out, true); }

// ---- max ----
struct MergeMax {
  template <typename T>
  __device__ ArgMax<T> operator()(const ArgMax<T>& p, const ArgMax<T>& q) const {
    return max_merge(p, q);
  }
};

template <typename T>
__device__ void write_max(const ArgMax<T>& best, i64 j, void* out, DType out_dtype, i64* argmax) {
  store_element(out, out_dtype, j, best.value);  // an element of x: exact in out's dtype
  argmax[j] = best.index;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_serial_kernel(Plan p, const void* x, DType x_dtype, void* out, DType out_dtype, i64* argmax) {
  for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < p.groups;
       j += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 base = p.kept.offset(j);
    ArgMax<T> best{T(0), -1};
    for (i64 r = 0; r < p.count; ++r) {
      const i64 i = base + p.reduced.offset(r);
      const T v = load_element<T>(x, x_dtype, i);
      if (best.index < 0 || max_takes(v, best.value)) best = {v, i};
    }
    write_max(best, j, out, out_dtype, argmax);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_block_kernel(Plan p, const void* x, DType x_dtype, void* out, DType out_dtype, i64* argmax) {
  using BlockReduce = cub::BlockReduce<ArgMax<T>, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  for (i64 j = blockIdx.x; j < p.groups; j += gridDim.x) {
    const i64 base = p.kept.offset(j);
    ArgMax<T> best{T(0), -1};
    for (i64 r = threadIdx.x; r < p.count; r += kThreads) {
      const i64 i = base + p.reduced.offset(r);
      const T v = load_element<T>(x, x_dtype, i);
      if (best.index < 0 || max_takes(v, best.value)) best = {v, i};
    }
    const ArgMax<T> total = BlockReduce(temp).Reduce(best, MergeMax{});
    if (threadIdx.x == 0) write_max(total, j, out, out_dtype, argmax);
    __syncthreads();  // temp is reused by the next group
  }
}

void max(const View& x, const View& out, const View& argmax) {
  const Plan p = plan_of(x, out, "max");
  if (p.groups == 0) return;
  if (p.count == 0) throw std::invalid_argument("max: reducing an empty dim has no maximum");
  const bool f64 = out.dtype == DType::f64;
  const bool one_thread = serial(p);
  auto* arg = argmax.as<i64>();
  if (one_thread) {
    if (f64)
      max_serial_kernel<double>
          <<<blocks_for(p.groups, kThreads), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, arg);
    else
      max_serial_kernel<float>
          <<<blocks_for(p.groups, kThreads), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, arg);
    check_launch("max_serial_kernel", "max");
  } else {
    if (f64)
      max_block_kernel<double>
          <<<block_grid(p.groups), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, arg);
    else
      max_block_kernel<float>
          <<<block_grid(p.groups), kThreads, 0, stream()>>>(p, x.data, x.dtype, out.data, out.dtype, arg);
    check_launch("max_block_kernel", "max");
  }
  if (noting()) note_kernel(std::string("max: ") + (one_thread ? "CUDA kernel, one thread per output" : "CUB block reduce") +
              ", " + (f64 ? "f64" : "f32") + " compute");
}

// ---- max backward: a scatter to distinct indices, so plain stores suffice ----
template <typename T>
__global__ void __launch_bounds__(kThreads) max_scatter_kernel(const void* grad, DType grad_dtype, const i64* argmax,
                                                                i64 n, void* gx, DType gx_dtype, i64 gx_numel) {
  for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 k = argmax[j];
    // T(0) + g, as the CPU accumulates into zeros: a -0 gradient lands as +0
    if (k >= 0 && k < gx_numel) store_element(gx, gx_dtype, k, T(0) + load_element<T>(grad, grad_dtype, j));
  }
}

void max_backward(const View& grad, const View& argmax, const View& grad_x) {
  const i64 total = grad_x.numel();
  if (total == 0) return;
  // All-zero bits are +0 in every float dtype.
  check(cudaMemsetAsync(grad_x.data, 0, grad_x.nbytes(), stream()), "cudaMemsetAsync", "max backward");
  const i64 n = argmax.numel();
  if (n == 0) return;
  const auto* arg = argmax.as<const i64>();
  if (grad_x.dtype == DType::f64)
    max_scatter_kernel<double><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(grad.data, grad.dtype, arg, n,
                                                                                    grad_x.data, grad_x.dtype, total);
  else
    max_scatter_kernel<float><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(grad.data, grad.dtype, arg, n,
                                                                                   grad_x.data, grad_x.dtype, total);
  check_launch("max_scatter_kernel", "max backward");
}

}  // namespace
}  // namespace ampcheck::kernels::cuda::reduce

namespace ampcheck::kernels {

const ReduceKernels& ReduceKernels::cuda() {
  static const ReduceKernels k{&cuda::reduce::sum, &cuda::reduce::mean, &cuda::reduce::max,
                               &cuda::reduce::max_backward};
  return k;
}

}  // namespace ampcheck::kernels
