// Building blocks of the CPU op implementations (engine/ops/*.cpp): loading a tensor's
// values into the compute type, storing with one rounding, elementwise maps with
// broadcasting, and GEMM. Not part of the public API; nothing here records autograd.
//
// Compute type ("opmath"): double for f64 tensors, float for f32, f16 and bf16 (and i64
// inputs load as the compute type of the op's float dtype).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/parallel.h"
#include "engine/tensor.h"

namespace ampcheck::cpu {

// Calls f(T{}) with T = double for f64 and float otherwise.
template <typename F>
decltype(auto) with_compute_type(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

// n values of t starting at element `start` (contiguous), converted to T exactly.
void load(const Tensor& t, std::int64_t start, std::int64_t n, float* out);
void load(const Tensor& t, std::int64_t start, std::int64_t n, double* out);
// n values into t at element `start`, each rounded once (nearest even) to t's dtype.
void store(Tensor& t, std::int64_t start, std::int64_t n, const float* in);
void store(Tensor& t, std::int64_t start, std::int64_t n, const double* in);

// The values of t at element offsets[0..n), converted to T exactly.
void load_gather(const Tensor& t, const std::int64_t* offsets, std::int64_t n, float* out);
void load_gather(const Tensor& t, const std::int64_t* offsets, std::int64_t n, double* out);

// Whole tensors in the compute type (for kernels that want a plain buffer).
template <typename T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> v(static_cast<std::size_t>(t.numel()));
  load(t, 0, t.numel(), v.data());
  return v;
}
template <typename T>
Tensor from_values(const std::vector<T>& v, const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  store(out, 0, out.numel(), v.data());
  return out;
}

// Dims: "-1" -> last; throws std::invalid_argument naming the op when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, const char* op);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums a broadcast gradient back to `shape` (the shape of the input it belongs to).
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);
// Reads element offsets of `t` broadcast to `out_shape` for output elements
// [start, start + n).
void broadcast_offsets(const Shape& in_shape, const Shape& out_shape, std::int64_t start,
                       std::int64_t n, std::int64_t* offsets);

inline constexpr std::int64_t kChunk = 4096;  // elements per work item of the maps

// y = f(x) elementwise; f is called with the compute type and returns it.
template <typename F>
Tensor map_unary(const Tensor& x, F f, DType out_dtype) {
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  with_compute_type(out_dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(x.numel(), kChunk, [&](std::int64_t b, std::int64_t e) {
      T buf[kChunk];
      load(x, b, e - b, buf);
      for (std::int64_t i = 0; i < e - b; ++i) buf[i] = f(buf[i]);
      store(out, b, e - b, buf);
    });
  });
  return out;
}
template <typename F>
Tensor map_unary(const Tensor& x, F f) {
  return map_unary(x, f, x.dtype());
}

// Loads output elements [b, e) of `t` broadcast to out_shape into buf.
template <typename T>
void load_broadcast(const Tensor& t, const Shape& out_shape, std::int64_t b, std::int64_t e,
                    T* buf) {
  if (t.shape() == out_shape) {
    load(t, b, e - b, buf);
  } else if (t.numel() == 1) {
    T v;
    load(t, 0, 1, &v);
    std::fill(buf, buf + (e - b), v);
  } else {
    std::int64_t offsets[kChunk];
    broadcast_offsets(t.shape(), out_shape, b, e - b, offsets);
    load_gather(t, offsets, e - b, buf);
  }
}

// z = f(a, b) elementwise with numpy broadcasting, in the compute type of out_dtype.
template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, F f, DType out_dtype, const char* op) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, out_dtype);
  with_compute_type(out_dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      T x[kChunk], y[kChunk];
      load_broadcast(a, shape, lo, hi, x);
      load_broadcast(b, shape, lo, hi, y);
      for (std::int64_t i = 0; i < hi - lo; ++i) x[i] = f(x[i], y[i]);
      store(out, lo, hi - lo, x);
    });
  });
  return out;
}

// w = f(a, b, c) elementwise with broadcasting (where, and backward formulas).
template <typename F>
Tensor map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, F f, DType out_dtype,
                   const char* op) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), op), c.shape(), op);
  Tensor out = Tensor::empty(shape, out_dtype);
  with_compute_type(out_dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      T x[kChunk], y[kChunk], z[kChunk];
      load_broadcast(a, shape, lo, hi, x);
      load_broadcast(b, shape, lo, hi, y);
      load_broadcast(c, shape, lo, hi, z);
      for (std::int64_t i = 0; i < hi - lo; ++i) x[i] = f(x[i], y[i], z[i]);
      store(out, lo, hi - lo, x);
    });
  });
  return out;
}

// C[m,n] = op(A)[m,k] op(B)[k,n] (accumulate: C += ...), row-major, through the project's
// own GEMM (kernels/cpu/gemm.h): every element one fma chain over k in ascending order,
// so the bits do not depend on the thread count, the ISA path or the machine. Runs its
// tiles on the thread pool (serially when called from inside a parallel_for).
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
          std::int64_t ldc, bool accumulate = false);
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double* c,
          std::int64_t ldc, bool accumulate = false);

// The float dtype of an op's result, with a clear error for i64 inputs where a float
// is required.
DType float_dtype(const Tensor& t, const char* op);

// Gradient accumulation: a + b with a's dtype, shapes equal (no autograd).
Tensor add_same(const Tensor& a, const Tensor& b);

}  // namespace ampcheck::cpu
