// Building blocks of the CPU kernels (kernels/cpu/*.cpp): loading a buffer's values into
// the compute type, storing with one rounding, numpy broadcasting, elementwise maps over
// the thread pool, and the GEMM with its threading policy. Over Views only.
//
// Compute type ("opmath"): double for f64, float for f32, f16 and bf16 (i64 values load
// as the compute type of the op's float dtype and store rounded to the nearest integer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/view.h"

namespace ampcheck::kernels::cpu {

inline constexpr std::int64_t kChunk = 4096;  // elements per work item of the maps

// n values of v starting at element `start`, converted to T exactly.
void load(const View& v, std::int64_t start, std::int64_t n, float* out);
void load(const View& v, std::int64_t start, std::int64_t n, double* out);
// n values into v at element `start`, each rounded once (nearest even) to v's dtype.
void store(const View& v, std::int64_t start, std::int64_t n, const float* in);
void store(const View& v, std::int64_t start, std::int64_t n, const double* in);
// The compute type's own dtype (f32 for float, f64 for double).
template <typename T>
constexpr DType compute_dtype() {
  return sizeof(T) == 4 ? DType::f32 : DType::f64;
}

// v's elements [start, start + n) as T: v's own storage where its dtype is T (no copy),
// else loaded into `buf` (n elements), which is returned.
template <typename T>
const T* source(const View& v, std::int64_t start, std::int64_t n, T* buf) {
  if (v.dtype == compute_dtype<T>() && n > 0) return static_cast<const T*>(v.data) + start;
  load(v, start, n, buf);
  return buf;
}
// The values of v at element offsets[0..n), converted to T exactly.
void load_gather(const View& v, const std::int64_t* offsets, std::int64_t n, float* out);
void load_gather(const View& v, const std::int64_t* offsets, std::int64_t n, double* out);

template <typename T>
std::vector<T> values(const View& v) {
  std::vector<T> out(static_cast<std::size_t>(v.numel()));
  load(v, 0, v.numel(), out.data());
  return out;
}

// Element offsets into a tensor of in_shape broadcast to out_shape, for output elements
// [start, start + n). in_shape must broadcast to out_shape (the engine checked).
void broadcast_offsets(const Dims& in_shape, const Dims& out_shape, std::int64_t start, std::int64_t n,
                       std::int64_t* offsets);

// How a tensor broadcast to out_shape is read, for the common shapes: `run` output
// elements at a time, each run either the input's own consecutive elements (its
// trailing dims are out's: a bias, a [T, D] position table) or one input element
// repeated (its trailing dims are 1: a per-row mean, a [N, 1, 1, T] mask's rows).
struct BroadcastRuns {
  std::int64_t run = 1;
  bool repeat = false;  // runs of one repeated element; else consecutive input elements
};
BroadcastRuns broadcast_runs(const Dims& in_shape, const Dims& out_shape);
// The input element output element `at` reads (in_shape broadcast to out_shape).
std::int64_t broadcast_offset(const Dims& in_shape, const Dims& out_shape, std::int64_t at);

// Loads output elements [b, e) of `v` broadcast to out_shape into buf.
template <typename T>
void load_broadcast(const View& v, const Dims& out_shape, std::int64_t b, std::int64_t e, T* buf) {
  if (v.shape == out_shape) {
    load(v, b, e - b, buf);
    return;
  }
  if (v.numel() == 1) {
    T x;
    load(v, 0, 1, &x);
    std::fill(buf, buf + (e - b), x);
    return;
  }
  const BroadcastRuns runs = broadcast_runs(v.shape, out_shape);
  if (runs.run >= 8) {  // whole runs by copy or fill: no per-element offsets
    for (std::int64_t p = b; p < e;) {
      const std::int64_t len = std::min(runs.run - p % runs.run, e - p);
      const std::int64_t at = broadcast_offset(v.shape, out_shape, p);
      if (runs.repeat) {
        T x;
        load(v, at, 1, &x);
        std::fill(buf + (p - b), buf + (p - b + len), x);
      } else {
        load(v, at, len, buf + (p - b));
      }
      p += len;
    }
    return;
  }
  std::int64_t offsets[kChunk];
  broadcast_offsets(v.shape, out_shape, b, e - b, offsets);
  load_gather(v, offsets, e - b, buf);
}

// Output elements [b, e) of `v` (out_shape) as T: v's own storage where it is of dtype T
// and not broadcast (no copy), else loaded into buf.
template <typename T>
const T* source_broadcast(const View& v, const Dims& out_shape, std::int64_t b, std::int64_t e, T* buf) {
  if (v.dtype == compute_dtype<T>() && v.shape == out_shape) return static_cast<const T*>(v.data) + b;
  load_broadcast(v, out_shape, b, e, buf);
  return buf;
}

// Where results for out's elements [b, e) are written: out's storage where its dtype is
// T (stored there directly), else buf (then stored with one rounding by finish_target).
template <typename T>
T* target(const View& out, std::int64_t b, T* buf) {
  return out.dtype == compute_dtype<T>() ? static_cast<T*>(out.data) + b : buf;
}
template <typename T>
void finish_target(const View& out, std::int64_t b, std::int64_t e, const T* written) {
  if (written != static_cast<const T*>(out.data) + b || out.dtype != compute_dtype<T>()) store(out, b, e - b, written);
}

// out = f(x) elementwise, in the compute type of out's dtype.
template <typename F>
void map_unary(const View& x, const View& out, F f) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t b, std::int64_t e) {
      T in_buf[kChunk], out_buf[kChunk];
      const T* in = source_broadcast(x, x.shape, b, e, in_buf);
      T* o = target(out, b, out_buf);
      vectorized([&] {
        for (std::int64_t i = 0; i < e - b; ++i) o[i] = f(in[i]);
      });
      finish_target(out, b, e, o);
    });
  });
}

// out = f(a, b) elementwise, a and b broadcast to out's shape.
template <typename F>
void map_binary(const View& a, const View& b, const View& out, F f) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      T x_buf[kChunk], y_buf[kChunk], out_buf[kChunk];
      const T* x = source_broadcast(a, out.shape, lo, hi, x_buf);
      const T* y = source_broadcast(b, out.shape, lo, hi, y_buf);
      T* o = target(out, lo, out_buf);
      vectorized([&] {
        for (std::int64_t i = 0; i < hi - lo; ++i) o[i] = f(x[i], y[i]);
      });
      finish_target(out, lo, hi, o);
    });
  });
}

// out = f(a, b, c) elementwise with broadcasting.
template <typename F>
void map_ternary(const View& a, const View& b, const View& c, const View& out, F f) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      T x_buf[kChunk], y_buf[kChunk], z_buf[kChunk], out_buf[kChunk];
      const T* x = source_broadcast(a, out.shape, lo, hi, x_buf);
      const T* y = source_broadcast(b, out.shape, lo, hi, y_buf);
      const T* z = source_broadcast(c, out.shape, lo, hi, z_buf);
      T* o = target(out, lo, out_buf);
      vectorized([&] {
        for (std::int64_t i = 0; i < hi - lo; ++i) o[i] = f(x[i], y[i], z[i]);
      });
      finish_target(out, lo, hi, o);
    });
  });
}

// C[m,n] = op(A)[m,k] op(B)[k,n] (accumulate: C += ...), row-major, through the project's
// own GEMM (kernels/cpu/gemm.h): every element one fma chain over k in ascending order,
// so the bits do not depend on the thread count, the ISA path or the machine. Runs its
// tiles on the thread pool (serially when called from inside a parallel_for, or when the
// GEMM is too small to be worth waking the pool).
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate = false);
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double* c, std::int64_t ldc,
          bool accumulate = false);

}  // namespace ampcheck::kernels::cpu
