// The normalisation, softmax, loss, embedding and dropout family on GPU 0
// (kernels/norm_loss_kernels.h). f16/bf16 compute in f32 and round once (store_element),
// f64 in f64; the per-element formulas are the CPU's (norm_loss_kernels.h), so what
// differs from the CPU is the order of the sums and CUDA's exp/log.
//
// Deterministic: no atomics, and every sum has a tree fixed by the shapes, so a rerun on
// one GPU repeats its bits.
//   - A row (softmax line, layer_norm row, cross_entropy row) or a batch_norm channel is
//     one block (grid-stride over rows): each thread folds a strided slice and
//     cub::BlockReduce combines the slices, for the max, the sums and the two passes of
//     the statistics. Short or strided softmax lines are one thread each instead, folded
//     in the CPU's order.
//   - layer_norm's weight and bias gradients (column sums over rows) fold fixed chunks of
//     rows per column, then the chunks in order.
//   - The scalar losses reduce into per-block partials, which one block adds.
//   - embedding's backward sorts the positions by row (cub::DeviceRadixSort, stable), and
//     one block per row adds that row's gradient rows in position order: the CPU's order,
//     so f32/f64 gradients are the CPU's bits, without an atomic scatter.
#include <cub/cub.cuh>        // cub::BlockReduce, cub::DeviceRadixSort
#include <math_constants.h>  // CUDART_INF

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/runtime.h"   // check, check_launch, stream, allocator, blocks_for
#include "kernels/element.h"        // load_element, store_element
#include "kernels/elementwise.h"    // max_nan
#include "kernels/kernel_note.h"    // note_kernel
#include "kernels/norm_loss_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

namespace nl = kernels::norm_loss;
using i64 = std::int64_t;

constexpr int kThreads = 256;
// A softmax line of at most this many elements is folded by one thread.
constexpr i64 kSerialLine = 32;
// Lines enough to fill the GPU with one thread each.
constexpr i64 kManyLines = 16384;

// A tensor's elements as a kernel argument: device memory and dtype, read into the
// compute type exactly and written with one rounding. `p` is nullptr for an absent
// operand or an output nobody needs.
struct Buf {
  void* p;
  DType d;

  template <typename T>
  __device__ T at(i64 i) const {
    return load_element<T>(p, d, i);
  }
  template <typename T>
  __device__ T at_or(i64 i, T fill) const {
    return p != nullptr ? load_element<T>(p, d, i) : fill;
  }
  template <typename T>
  __device__ void set(i64 i, T v) const {
    store_element(p, d, i, v);
  }
};
Buf buf(const View& v) { return Buf{v.data, v.dtype}; }

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }
unsigned int block_grid(i64 items) { return static_cast<unsigned int>(items < 65535 ? items : 65535); }

void note(const std::string& what, DType compute) {
  if (noting()) note_kernel(what + ", " + (compute == DType::f64 ? "f64" : "f32") + " compute");
}

template <typename T>
__device__ T neg_inf() {
  return static_cast<T>(-CUDART_INF);
}

struct MaxNan {
  template <typename T>
  __device__ T operator()(const T& a, const T& b) const {
    return max_nan(a, b);
  }
};
struct Plus {
  template <typename T>
  __device__ T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

// The block's reduction of every thread's v, returned to every thread. All threads of
// the block must call it; it may be called again right away (the barriers protect the
// shared storage).
template <typename T, typename Op>
__device__ T block_all(T v, Op op) {
  __shared__ typename cub::BlockReduce<T, kThreads>::TempStorage temp;
  __shared__ T result;
  const T r = cub::BlockReduce<T, kThreads>(temp).Reduce(v, op);
  if (threadIdx.x == 0) result = r;
  __syncthreads();
  const T out = result;
  __syncthreads();
  return out;
}

__device__ i64 first_thread() { return blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; }
__device__ i64 thread_stride() { return static_cast<i64>(gridDim.x) * blockDim.x; }

// ---------------------------------------------------------------- softmax / log_softmax

__device__ i64 line_base(const SoftmaxLines& a, i64 line) { return line / a.inner * a.n * a.inner + line % a.inner; }

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_block_kernel(Buf x, SoftmaxLines a, bool log, Buf y) {
  const i64 lines = a.outer * a.inner;
  for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
    const i64 base = line_base(a, line);
    T mx = neg_inf<T>();
    for (i64 k = threadIdx.x; k < a.n; k += kThreads) mx = max_nan(mx, x.at<T>(base + k * a.inner));
    mx = block_all(mx, MaxNan{});
    T s = T(0);
    for (i64 k = threadIdx.x; k < a.n; k += kThreads) s += nl::exp_of(x.at<T>(base + k * a.inner) - mx);
    s = block_all(s, Plus{});
    const T ls = nl::log_of(s);
    for (i64 k = threadIdx.x; k < a.n; k += kThreads) {
      const i64 i = base + k * a.inner;
      y.set(i, log ? nl::log_softmax_value(x.at<T>(i), mx, ls) : nl::softmax_value(x.at<T>(i), mx, s));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_serial_kernel(Buf x, SoftmaxLines a, bool log, Buf y) {
  const i64 lines = a.outer * a.inner;
  for (i64 line = first_thread(); line < lines; line += thread_stride()) {
    const i64 base = line_base(a, line);
    T mx = neg_inf<T>();
    for (i64 k = 0; k < a.n; ++k) mx = max_nan(mx, x.at<T>(base + k * a.inner));
    T s = T(0);
    for (i64 k = 0; k < a.n; ++k) s += nl::exp_of(x.at<T>(base + k * a.inner) - mx);
    const T ls = nl::log_of(s);
    for (i64 k = 0; k < a.n; ++k) {
      const i64 i = base + k * a.inner;
      y.set(i, log ? nl::log_softmax_value(x.at<T>(i), mx, ls) : nl::softmax_value(x.at<T>(i), mx, s));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_backward_block_kernel(Buf g, Buf y, SoftmaxLines a, bool log,
                                                                          Buf dx) {
  const i64 lines = a.outer * a.inner;
  for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {
    const i64 base = line_base(a, line);
    T s = T(0);
    for (i64 k = threadIdx.x; k < a.n; k += kThreads) {
      const i64 i = base + k * a.inner;
      s += nl::softmax_backward_term(g.at<T>(i), y.at<T>(i), log);
    }
    s = block_all(s, Plus{});
    for (i64 k = threadIdx.x; k < a.n; k += kThreads) {
      const i64 i = base + k * a.inner;
      dx.set(i, nl::softmax_backward_value(g.at<T>(i), y.at<T>(i), s, log));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_backward_serial_kernel(Buf g, Buf y, SoftmaxLines a, bool log,
                                                                           Buf dx) {
  const i64 lines = a.outer * a.inner;
  for (i64 line = first_thread(); line < lines; line += thread_stride()) {
    const i64 base = line_base(a, line);
    T s = T(0);
    for (i64 k = 0; k < a.n; ++k) {
      const i64 i = base + k * a.inner;
      s += nl::softmax_backward_term(g.at<T>(i), y.at<T>(i), log);
    }
    for (i64 k = 0; k < a.n; ++k) {
      const i64 i = base + k * a.inner;
      dx.set(i, nl::softmax_backward_value(g.at<T>(i), y.at<T>(i), s, log));
    }
  }
}

// One thread per line when lines are short, or strided (neighbouring threads then read
// neighbouring elements) and many enough to fill the GPU.
bool serial_lines(const SoftmaxLines& a) {
  return a.n <= kSerialLine || (a.inner > 1 && a.outer * a.inner >= kManyLines);
}

void softmax(const View& x, const SoftmaxLines& a, bool log, const View& y) {
  if (y.numel() == 0) return;
  const char* op = log ? "log_softmax" : "softmax";
  const i64 lines = a.outer * a.inner;
  const bool serial = serial_lines(a);
  with_compute_type(y.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (serial)
      softmax_serial_kernel<T><<<blocks_for(lines, kThreads), kThreads, 0, stream()>>>(buf(x), a, log, buf(y));
    else
      softmax_block_kernel<T><<<block_grid(lines), kThreads, 0, stream()>>>(buf(x), a, log, buf(y));
  });
  check_launch(serial ? "softmax_serial_kernel" : "softmax_block_kernel", op);
  note(std::string(op) + (serial ? ": CUDA kernel, one thread per line" : ": CUB block reduce per line"), y.dtype);
}

void softmax_backward(const View& grad, const View& y, const SoftmaxLines& a, bool log, const View& dx) {
  if (dx.numel() == 0) return;
  const char* op = log ? "log_softmax backward" : "softmax backward";
  const i64 lines = a.outer * a.inner;
  const bool serial = serial_lines(a);
  with_compute_type(dx.dtype, [&](auto zero) {
    using T = decltype(zero);
    if (serial)
      softmax_backward_serial_kernel<T>
          <<<blocks_for(lines, kThreads), kThreads, 0, stream()>>>(buf(grad), buf(y), a, log, buf(dx));
    else
      softmax_backward_block_kernel<T>
          <<<block_grid(lines), kThreads, 0, stream()>>>(buf(grad), buf(y), a, log, buf(dx));
  });
  check_launch(serial ? "softmax_backward_serial_kernel" : "softmax_backward_block_kernel", op);
  note(std::string(op) + (serial ? ": CUDA kernel, one thread per line" : ": CUB block reduce per line"), dx.dtype);
}

// ---------------------------------------------------------------- layer_norm

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(Buf x, Buf w, Buf b, LayerNormArgs a, Buf y, Buf mean, Buf invstd) {
  const T count = static_cast<T>(a.len), eps = static_cast<T>(a.eps);
  for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const i64 o = r * a.len;
    T s = T(0);
    for (i64 j = threadIdx.x; j < a.len; j += kThreads) s += x.at<T>(o + j);
    const T mu = block_all(s, Plus{}) / count;
    T sq = T(0);  // second pass over deviations: no cancellation
    for (i64 j = threadIdx.x; j < a.len; j += kThreads) {
      const T d = x.at<T>(o + j) - mu;
      sq += d * d;
    }
    const T is = nl::inverse_std(block_all(sq, Plus{}) / count, eps);
    if (threadIdx.x == 0) {
      mean.set(r, mu);
      invstd.set(r, is);
    }
    for (i64 j = threadIdx.x; j < a.len; j += kThreads)
      y.set(o + j, nl::layer_norm_value(x.at<T>(o + j), mu, is, w.at_or<T>(j, T(1)), b.at_or<T>(j, T(0))));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_dx_kernel(Buf g, Buf x, Buf w, Buf mean, Buf invstd, LayerNormArgs a, Buf dx) {
  const T count = static_cast<T>(a.len);
  for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const i64 o = r * a.len;
    const T mu = mean.at<T>(r), is = invstd.at<T>(r);
    T sh = T(0), shx = T(0);
    for (i64 j = threadIdx.x; j < a.len; j += kThreads) {
      const T h = g.at<T>(o + j) * w.at_or<T>(j, T(1));
      sh += h;
      shx += h * ((x.at<T>(o + j) - mu) * is);
    }
    const T mh = block_all(sh, Plus{}) / count;
    const T mhx = block_all(shx, Plus{}) / count;
    for (i64 j = threadIdx.x; j < a.len; j += kThreads)
      dx.set(o + j, nl::layer_norm_dx(g.at<T>(o + j), x.at<T>(o + j), w.at_or<T>(j, T(1)), mu, is, mh, mhx));
  }
}

// Column sums of g xhat and g over the rows of chunk blockIdx.y (rows_per_chunk rows),
// one thread per column: partial[chunk * len + j].
template <typename T>
__global__ void __launch_bounds__(kThreads) layer_norm_column_partials_kernel(Buf g, Buf x, Buf mean, Buf invstd,
                                                                              LayerNormArgs a, i64 rows_per_chunk,
                                                                              T* partial_w, T* partial_b) {
  const i64 chunk = blockIdx.y;
  const i64 r0 = chunk * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < a.rows ? r0 + rows_per_chunk : a.rows;
  for (i64 j = first_thread(); j < a.len; j += thread_stride()) {
    T sw = T(0), sb = T(0);
    for (i64 r = r0; r < r1; ++r) {
      const i64 k = r * a.len + j;
      const T gv = g.at<T>(k);
      sw += gv * ((x.at<T>(k) - mean.at<T>(r)) * invstd.at<T>(r));
      sb += gv;
    }
    partial_w[chunk * a.len + j] = sw;
    partial_b[chunk * a.len + j] = sb;
  }
}

// The chunks' partials of each column added in chunk order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_column_sums_kernel(const T* partial_w, const T* partial_b, i64 chunks, i64 len, Buf dw, Buf db) {
  for (i64 j = first_thread(); j < len; j += thread_stride()) {
    T sw = T(0), sb = T(0);
    for (i64 c = 0; c < chunks; ++c) {
      sw += partial_w[c * len + j];
      sb += partial_b[c * len + j];
    }
    if (dw.p != nullptr) dw.set(j, sw);
    if (db.p != nullptr) db.set(j, sb);
  }
}

void layer_norm(const View& x, const View& weight, const View& bias, const LayerNormArgs& a, const View& y,
                const View& mean, const View& invstd) {
  if (a.rows == 0) return;
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    layer_norm_kernel<T><<<block_grid(a.rows), kThreads, 0, stream()>>>(buf(x), buf(weight), buf(bias), a, buf(y),
                                                                         buf(mean), buf(invstd));
  });
  check_launch("layer_norm_kernel", "layer_norm");
  note("layer_norm: CUB block reduce per row", a.compute);
}

void layer_norm_backward(const View& grad, const View& x, const View& weight, const View& mean, const View& invstd,
                         const LayerNormArgs& a, const View& dx, const View& dweight, const View& dbias) {
  const char* op = "layer_norm backward";
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    if (dx.data != nullptr && a.rows > 0) {
      layer_norm_dx_kernel<T><<<block_grid(a.rows), kThreads, 0, stream()>>>(
          buf(grad), buf(x), buf(weight), buf(mean), buf(invstd), a, buf(dx));
      check_launch("layer_norm_dx_kernel", op);
    }
    if ((dweight.data == nullptr && dbias.data == nullptr) || a.len == 0) return;
    // Chunks of 64 rows (more when the chunks would exceed a grid's y dimension).
    i64 rows_per_chunk = 64;
    if (ceil_div(a.rows, rows_per_chunk) > 65535) rows_per_chunk = ceil_div(a.rows, 65535);
    const i64 chunks = ceil_div(a.rows, rows_per_chunk);
    const auto count = static_cast<std::size_t>(chunks * a.len);
    Scratch partial_w(count * sizeof(T)), partial_b(count * sizeof(T));
    const unsigned int column_blocks = block_grid(ceil_div(a.len, kThreads));
    if (chunks > 0) {
      layer_norm_column_partials_kernel<T>
          <<<dim3(column_blocks, static_cast<unsigned int>(chunks)), kThreads, 0, stream()>>>(
              buf(grad), buf(x), buf(mean), buf(invstd), a, rows_per_chunk, partial_w.as<T>(), partial_b.as<T>());
      check_launch("layer_norm_column_partials_kernel", op);
    }
    layer_norm_column_sums_kernel<T><<<column_blocks, kThreads, 0, stream()>>>(
        partial_w.as<T>(), partial_b.as<T>(), chunks, a.len, buf(dweight), buf(dbias));
    check_launch("layer_norm_column_sums_kernel", op);
  });
  note("layer_norm backward: CUB block reduce per row, column sums in fixed row chunks", a.compute);
}

// ---------------------------------------------------------------- batch_norm

// Element k of channel c's n * s values (in (n, s) order).
__device__ i64 channel_element(const BatchNormArgs& a, i64 k, i64 c) { return (k / a.s * a.c + c) * a.s + k % a.s; }

template <typename T>
__global__ void __launch_bounds__(kThreads) batch_norm_kernel(Buf x, Buf w, Buf b, Buf running_mean, Buf running_var,
                                                              BatchNormArgs a, Buf y, Buf mean, Buf invstd) {
  const i64 count = a.n * a.s;
  const T m = static_cast<T>(count), eps = static_cast<T>(a.eps), momentum = static_cast<T>(a.momentum);
  for (i64 c = blockIdx.x; c < a.c; c += gridDim.x) {
    T mu = T(0), var = T(0);
    if (a.training) {
      // Two passes (mean, then squared deviations) avoid E[x^2] - E[x]^2 cancellation.
      T s = T(0);
      for (i64 k = threadIdx.x; k < count; k += kThreads) s += x.at<T>(channel_element(a, k, c));
      mu = block_all(s, Plus{}) / m;
      T sq = T(0);
      for (i64 k = threadIdx.x; k < count; k += kThreads) {
        const T d = x.at<T>(channel_element(a, k, c)) - mu;
        sq += d * d;
      }
      sq = block_all(sq, Plus{});
      var = sq / m;  // biased: what the batch is normalised with
      if (running_mean.p != nullptr && threadIdx.x == 0) {
        // PyTorch: the running variance takes the unbiased estimate.
        running_mean.set(c, nl::running_update(running_mean.at<T>(c), mu, momentum));
        running_var.set(c, nl::running_update(running_var.at<T>(c), sq / (m - T(1)), momentum));
      }
    } else {
      mu = running_mean.at<T>(c);
      var = running_var.at<T>(c);
    }
    const T is = nl::inverse_std(var, eps);
    if (threadIdx.x == 0) {
      mean.set(c, mu);
      invstd.set(c, is);
    }
    const T scale = is * w.at_or<T>(c, T(1)), shift = b.at_or<T>(c, T(0));
    for (i64 k = threadIdx.x; k < count; k += kThreads) {
      const i64 i = channel_element(a, k, c);
      y.set(i, nl::batch_norm_value(x.at<T>(i), mu, scale, shift));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) batch_norm_backward_kernel(Buf g, Buf x, Buf w, Buf mean, Buf invstd,
                                                                       BatchNormArgs a, bool need_sums, Buf dx,
                                                                       Buf dw, Buf db) {
  const i64 count = a.n * a.s;
  const T m = static_cast<T>(count);
  for (i64 c = blockIdx.x; c < a.c; c += gridDim.x) {
    const T mu = mean.at<T>(c), is = invstd.at<T>(c);
    T sg = T(0), sgx = T(0);
    if (need_sums) {
      for (i64 k = threadIdx.x; k < count; k += kThreads) {
        const i64 i = channel_element(a, k, c);
        const T gv = g.at<T>(i);
        sg += gv;
        sgx += gv * ((x.at<T>(i) - mu) * is);
      }
      sg = block_all(sg, Plus{});
      sgx = block_all(sgx, Plus{});
    }
    if (threadIdx.x == 0) {
      if (dw.p != nullptr) dw.set(c, sgx);
      if (db.p != nullptr) db.set(c, sg);
    }
    if (dx.p == nullptr) continue;
    const T scale = w.at_or<T>(c, T(1)) * is;
    const T mg = sg / m, mgx = sgx / m;
    for (i64 k = threadIdx.x; k < count; k += kThreads) {
      const i64 i = channel_element(a, k, c);
      dx.set(i, nl::batch_norm_dx(g.at<T>(i), x.at<T>(i), mu, is, scale, mg, mgx, a.training));
    }
  }
}

void batch_norm(const View& x, const View& weight, const View& bias, const View& running_mean,
                const View& running_var, const BatchNormArgs& a, const View& y, const View& mean,
                const View& invstd) {
  if (a.c == 0) return;
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    batch_norm_kernel<T><<<block_grid(a.c), kThreads, 0, stream()>>>(buf(x), buf(weight), buf(bias),
                                                                      buf(running_mean), buf(running_var), a, buf(y),
                                                                      buf(mean), buf(invstd));
  });
  check_launch("batch_norm_kernel", "batch_norm");
  note("batch_norm: CUB block reduce per channel", a.compute);
}

void batch_norm_backward(const View& grad, const View& x, const View& weight, const View& mean, const View& invstd,
                         const BatchNormArgs& a, const View& dx, const View& dweight, const View& dbias) {
  if (a.c == 0) return;
  const bool need_sums = dweight.data != nullptr || dbias.data != nullptr || (dx.data != nullptr && a.training);
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    batch_norm_backward_kernel<T><<<block_grid(a.c), kThreads, 0, stream()>>>(
        buf(grad), buf(x), buf(weight), buf(mean), buf(invstd), a, need_sums, buf(dx), buf(dweight), buf(dbias));
  });
  check_launch("batch_norm_backward_kernel", "batch_norm backward");
  note("batch_norm backward: CUB block reduce per channel", a.compute);
}

// ---------------------------------------------------------------- the scalar losses

// out[0] = (sum of partial[0..count)) / divisor, by one block.
template <typename T>
__global__ void __launch_bounds__(kThreads) mean_of_partials_kernel(const T* partial, i64 count, T divisor, Buf out) {
  T s = T(0);
  for (i64 i = threadIdx.x; i < count; i += kThreads) s += partial[i];
  s = block_all(s, Plus{});
  if (threadIdx.x == 0) out.set(0, s / divisor);
}

// ---- cross_entropy

// Per row: lse and the row's loss (into row_loss, the compute type).
template <typename T>
__global__ void __launch_bounds__(kThreads) cross_entropy_rows_kernel(Buf logits, const i64* labels, i64 n, i64 c,
                                                                      bool smoothing, T hit, T per_class, Buf lse,
                                                                      T* row_loss) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    const i64 o = r * c;
    T mx = neg_inf<T>();
    for (i64 k = threadIdx.x; k < c; k += kThreads) mx = max_nan(mx, logits.at<T>(o + k));
    mx = block_all(mx, MaxNan{});
    T s = T(0), sum_shifted = T(0);
    for (i64 k = threadIdx.x; k < c; k += kThreads) {
      const T d = logits.at<T>(o + k) - mx;
      s += nl::exp_of(d);
      sum_shifted += d;
    }
    s = block_all(s, Plus{});
    sum_shifted = block_all(sum_shifted, Plus{});
    if (threadIdx.x == 0) {
      const T log_s = nl::log_of(s);
      lse.set(r, mx + log_s);
      row_loss[r] = nl::cross_entropy_row(logits.at<T>(o + labels[r]), mx, log_s, sum_shifted, static_cast<T>(c),
                                          smoothing, hit, per_class);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(Buf grad, Buf logits, const i64* labels, Buf lse, i64 n, i64 c, T hit, T per_class,
                                  Buf dx) {
  const T gn = grad.at<T>(0) / static_cast<T>(n);
  for (i64 i = first_thread(); i < n * c; i += thread_stride()) {
    const i64 r = i / c, k = i % c;
    dx.set(i, nl::cross_entropy_dx(gn, logits.at<T>(i), lse.at<T>(r), k == labels[r], hit, per_class));
  }
}

void cross_entropy(const View& logits, const View& labels, double smoothing, const View& lse, const View& loss) {
  const i64 n = logits.shape[0], c = logits.shape[1];
  const auto* y = static_cast<const i64*>(labels.data);
  with_compute_type(logits.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T smooth = static_cast<T>(smoothing), hit = T(1) - smooth;
    const T per_class = smooth / static_cast<T>(c);
    Scratch row_loss(static_cast<std::size_t>(n) * sizeof(T));
    cross_entropy_rows_kernel<T><<<block_grid(n), kThreads, 0, stream()>>>(
        buf(logits), y, n, c, smooth != T(0), hit, per_class, buf(lse), row_loss.as<T>());
    check_launch("cross_entropy_rows_kernel", "cross_entropy");
    mean_of_partials_kernel<T><<<1, kThreads, 0, stream()>>>(row_loss.as<T>(), n, static_cast<T>(n), buf(loss));
    check_launch("mean_of_partials_kernel", "cross_entropy");
  });
  note("cross_entropy: CUB block reduce per row, then one block over the rows", logits.dtype);
}

void cross_entropy_backward(const View& grad, const View& logits, const View& labels, const View& lse,
                            double smoothing, const View& dlogits) {
  const i64 n = logits.shape[0], c = logits.shape[1];
  with_compute_type(logits.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T smooth = static_cast<T>(smoothing), hit = T(1) - smooth;
    const T per_class = smooth / static_cast<T>(c);
    cross_entropy_backward_kernel<T><<<blocks_for(n * c, kThreads), kThreads, 0, stream()>>>(
        buf(grad), buf(logits), static_cast<const i64*>(labels.data), buf(lse), n, c, hit, per_class,
        buf(dlogits));
  });
  check_launch("cross_entropy_backward_kernel", "cross_entropy backward");
  note("cross_entropy backward: CUDA kernel", logits.dtype);
}

// ---- mse_loss

// Block b's sum of (a - b)^2 over its grid-stride slice into partial[b].
template <typename T>
__global__ void __launch_bounds__(kThreads) mse_partials_kernel(Buf a, Buf b, i64 n, T* partial) {
  T s = T(0);
  for (i64 i = first_thread(); i < n; i += thread_stride()) {
    const T d = a.at<T>(i) - b.at<T>(i);
    s += d * d;
  }
  s = block_all(s, Plus{});
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) mse_backward_kernel(Buf grad, Buf a, Buf b, i64 n, Buf da, Buf db) {
  const T k = T(2) * grad.at<T>(0) / static_cast<T>(n);
  for (i64 i = first_thread(); i < n; i += thread_stride()) {
    const T d = k * (a.at<T>(i) - b.at<T>(i));
    if (da.p != nullptr) da.set(i, d);
    if (db.p != nullptr) db.set(i, -d);
  }
}

void mse_loss(const View& input, const View& target, const View& loss) {
  const i64 n = input.numel();
  // The grid depends on n only (not on the GPU), so the partials' tree is fixed by n.
  const i64 blocks = ceil_div(n, kThreads * 4) < 1024 ? ceil_div(n, kThreads * 4) : 1024;
  with_compute_type(loss.dtype, [&](auto zero) {
    using T = decltype(zero);
    Scratch partial(static_cast<std::size_t>(blocks) * sizeof(T));
    mse_partials_kernel<T><<<static_cast<unsigned int>(blocks), kThreads, 0, stream()>>>(buf(input), buf(target), n,
                                                                                          partial.as<T>());
    check_launch("mse_partials_kernel", "mse_loss");
    mean_of_partials_kernel<T><<<1, kThreads, 0, stream()>>>(partial.as<T>(), blocks, static_cast<T>(n), buf(loss));
    check_launch("mean_of_partials_kernel", "mse_loss");
  });
  note("mse_loss: CUB block reduce into block partials, then one block", loss.dtype);
}

void mse_loss_backward(const View& grad, const View& input, const View& target, DType compute, const View& dinput,
                       const View& dtarget) {
  const i64 n = input.numel();
  if (n == 0 || (dinput.data == nullptr && dtarget.data == nullptr)) return;
  with_compute_type(compute, [&](auto zero) {
    using T = decltype(zero);
    mse_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(buf(grad), buf(input), buf(target), n,
                                                                                buf(dinput), buf(dtarget));
  });
  check_launch("mse_backward_kernel", "mse_loss backward");
  note("mse_loss backward: CUDA kernel", compute);
}

// ---------------------------------------------------------------- embedding

// Rows are copied as bit patterns: a lookup never rounds.
template <typename U>
__global__ void __launch_bounds__(kThreads) embedding_kernel(const i64* indices, const U* weight, i64 count, i64 d,
                                                             U* out) {
  for (i64 e = first_thread(); e < count * d; e += thread_stride()) out[e] = weight[indices[e / d] * d + e % d];
}

__global__ void __launch_bounds__(kThreads) iota_kernel(i64* p, i64 n) {
  for (i64 i = first_thread(); i < n; i += thread_stride()) p[i] = i;
}

// rows[0..n) sorted (stable), positions[k] the position that rows[k] came from. The block
// at the first position of each row writes that row of dweight: per column, the grad
// rows added in position order.
template <typename T>
__global__ void __launch_bounds__(kThreads) embedding_backward_kernel(const std::uint64_t* rows, const i64* positions,
                                                                      i64 n, i64 d, Buf g, Buf dweight) {
  for (i64 i = blockIdx.x; i < n; i += gridDim.x) {
    if (i > 0 && rows[i] == rows[i - 1]) continue;  // not the first position of its row
    const std::uint64_t row = rows[i];
    for (i64 j = threadIdx.x; j < d; j += kThreads) {
      T acc = T(0);
      for (i64 k = i; k < n && rows[k] == row; ++k) acc += g.at<T>(positions[k] * d + j);
      dweight.set(static_cast<i64>(row) * d + j, acc);
    }
  }
}

void embedding(const View& indices, const View& weight, const View& out) {
  const i64 count = indices.numel(), d = weight.shape[1];
  if (count * d == 0) return;
  const auto* idx = static_cast<const i64*>(indices.data);
  const unsigned int blocks = blocks_for(count * d, kThreads);
  switch (element_size(weight.dtype)) {
    case 8:
      embedding_kernel<<<blocks, kThreads, 0, stream()>>>(idx, static_cast<const std::uint64_t*>(weight.data), count,
                                                          d, static_cast<std::uint64_t*>(out.data));
      break;
    case 4:
      embedding_kernel<<<blocks, kThreads, 0, stream()>>>(idx, static_cast<const std::uint32_t*>(weight.data), count,
                                                          d, static_cast<std::uint32_t*>(out.data));
      break;
    default:
      embedding_kernel<<<blocks, kThreads, 0, stream()>>>(idx, static_cast<const std::uint16_t*>(weight.data), count,
                                                          d, static_cast<std::uint16_t*>(out.data));
      break;
  }
  check_launch("embedding_kernel", "embedding");
  note_kernel("embedding: CUDA kernel, rows copied");
}

void embedding_backward(const View& indices, const View& grad, const View& dweight) {
  const char* op = "embedding backward";
  const i64 n = indices.numel(), v = dweight.shape[0], d = dweight.shape[1];
  // Rows no index names stay 0 (all-zero bits are +0 in every float dtype).
  if (dweight.nbytes() > 0)
    check(cudaMemsetAsync(dweight.data, 0, dweight.nbytes(), stream()), "cudaMemsetAsync", op);
  if (n == 0 || d == 0) return;
  // Indices are in [0, v) (the engine checked): sorting their low bits sorts them.
  int end_bit = 1;
  while (end_bit < 64 && (static_cast<std::uint64_t>(v - 1) >> end_bit) != 0) ++end_bit;
  const auto bytes = static_cast<std::size_t>(n) * sizeof(i64);
  Scratch rows(bytes), positions_in(bytes), positions(bytes);
  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(positions_in.as<i64>(), n);
  check_launch("iota_kernel", op);
  const auto* keys = static_cast<const std::uint64_t*>(indices.data);  // non-negative i64: the same order
  std::size_t temp_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, rows.as<std::uint64_t>(), positions_in.as<i64>(),
                                        positions.as<i64>(), n, 0, end_bit, stream()),
        "cub::DeviceRadixSort::SortPairs(size)", op);
  Scratch temp(temp_bytes > 0 ? temp_bytes : 1);  // a null temp would make the call a size query
  check(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys, rows.as<std::uint64_t>(),
                                        positions_in.as<i64>(), positions.as<i64>(), n, 0, end_bit, stream()),
        "cub::DeviceRadixSort::SortPairs", op);
  with_compute_type(dweight.dtype, [&](auto zero) {
    using T = decltype(zero);
    embedding_backward_kernel<T><<<block_grid(n), kThreads, 0, stream()>>>(
        rows.as<std::uint64_t>(), positions.as<i64>(), n, d, buf(grad), buf(dweight));
  });
  check_launch("embedding_backward_kernel", op);
  note("embedding backward: cub::DeviceRadixSort of the indices, one block per row adding in position order",
       dweight.dtype);
}

// ---------------------------------------------------------------- dropout

template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_kernel(Buf x, double p, std::uint64_t seed, std::uint64_t offset,
                                                           T scale, i64 n, Buf y, Buf mask) {
  for (i64 i = first_thread(); i < n; i += thread_stride()) {
    const T m = nl::dropout_keeps(seed, offset + static_cast<std::uint64_t>(i), p) ? T(1) : T(0);
    mask.set(i, m);  // 0/1: exact in any dtype
    y.set(i, x.at<T>(i) * (m * scale));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_backward_kernel(Buf g, Buf mask, T scale, i64 n, Buf dx) {
  for (i64 i = first_thread(); i < n; i += thread_stride()) dx.set(i, g.at<T>(i) * (mask.at<T>(i) * scale));
}

void dropout(const View& x, double p, std::uint64_t seed, std::uint64_t offset, const View& y, const View& mask) {
  const i64 n = x.numel();
  if (n == 0) return;
  with_compute_type(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    dropout_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
        buf(x), p, seed, offset, static_cast<T>(1.0 / (1.0 - p)), n, buf(y), buf(mask));
  });
  check_launch("dropout_kernel", "dropout");
  note("dropout: CUDA kernel, Philox4x32-10 mask (the CPU's bits)", x.dtype);
}

void dropout_backward(const View& grad, const View& mask, double p, const View& dx) {
  const i64 n = dx.numel();
  if (n == 0) return;
  with_compute_type(dx.dtype, [&](auto zero) {
    using T = decltype(zero);
    dropout_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
        buf(grad), buf(mask), static_cast<T>(1.0 / (1.0 - p)), n, buf(dx));
  });
  check_launch("dropout_backward_kernel", "dropout backward");
  note("dropout backward: CUDA kernel", dx.dtype);
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const NormLossKernels& NormLossKernels::cuda() {
  static const NormLossKernels k{&cuda::softmax,
                                 &cuda::softmax_backward,
                                 &cuda::layer_norm,
                                 &cuda::layer_norm_backward,
                                 &cuda::batch_norm,
                                 &cuda::batch_norm_backward,
                                 &cuda::cross_entropy,
                                 &cuda::cross_entropy_backward,
                                 &cuda::mse_loss,
                                 &cuda::mse_loss_backward,
                                 &cuda::embedding,
                                 &cuda::embedding_backward,
                                 &cuda::dropout,
                                 &cuda::dropout_backward};
  return k;
}

}  // namespace ampcheck::kernels
