// The GEMM family on the CPU (kernels/gemm_kernels.h): the operands converted to the
// compute type, the project's GEMM over each batch (kernels/cpu/tensor_io.h: gemm() with
// its threading policy), and C rounded once to its dtype.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_io.h"
#include "kernels/gemm_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 8 ? DType::f64 : DType::f32;
}

// An operand in the compute type: read in place when it already is, else converted
// (exactly: f16/bf16/f32 into float, anything into double) into `copy`.
template <typename T>
const T* operand(const View& v, std::vector<T>& copy) {
  if (v.dtype == dtype_of<T>()) return v.as<const T>();
  copy = values<T>(v);
  return copy.data();
}

template <typename T>
void gemm_in(const GemmDesc& d) {
  std::vector<T> a_copy, b_copy, c_copy;
  const T* a = operand(d.a, a_copy);
  const T* b = operand(d.b, b_copy);
  // C in the compute type: itself when it is, else a buffer that starts from C's values
  // (accumulate) or from zeros, and is rounded into C once at the end.
  const bool c_direct = d.c.dtype == dtype_of<T>();
  T* c = nullptr;
  if (c_direct) {
    c = d.c.as<T>();
  } else {
    if (d.accumulate)
      c_copy = values<T>(d.c);
    else
      c_copy.assign(static_cast<std::size_t>(d.c.numel()), T(0));
    c = c_copy.data();
  }
  const std::int64_t a_size = d.m * d.k, b_size = d.k * d.n, c_size = d.m * d.n;
  // Packed rows; a row of no elements still has a stride of 1 (the GEMM asks for one).
  const std::int64_t lda = std::max<std::int64_t>(1, d.trans_a ? d.m : d.k);
  const std::int64_t ldb = std::max<std::int64_t>(1, d.trans_b ? d.k : d.n), ldc = std::max<std::int64_t>(1, d.n);
  auto product = [&](std::int64_t i, bool accumulate) {
    gemm(d.trans_a, d.trans_b, d.m, d.n, d.k, a + d.a_batch.offset(i) * a_size, lda, b + d.b_batch.offset(i) * b_size,
         ldb, c + d.c_batch.offset(i) * c_size, ldc, accumulate);
  };
  if (!distinct_batches(d.c_batch) || d.batch == 0) {
    // Batches that share a C matrix continue its chains one after the other, so the sum
    // over them is one fma chain in batch order (and a matrix no batch names stays 0).
    if (c_direct && !d.accumulate) std::fill(c, c + d.c.numel(), T(0));
    for (std::int64_t i = 0; i < d.batch; ++i) product(i, /*accumulate=*/true);
  } else if (d.batch == 1) {
    product(0, d.accumulate);
  } else {
    // One batch per work item; each GEMM then runs on its worker's thread alone.
    parallel_for(d.batch, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) product(i, d.accumulate);
    });
  }
  if (d.bias.data != nullptr) {
    std::vector<T> bias_copy;
    const T* bias = operand(d.bias, bias_copy);
    const std::int64_t rows = d.c.numel() / std::max<std::int64_t>(d.n, 1);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < d.n; ++j) c[r * d.n + j] += bias[j];
  }
  if (!c_direct) store(d.c, 0, d.c.numel(), c);
}

void gemm_view(const GemmDesc& d) {
  with_compute_type(d.compute, [&](auto zero) { gemm_in<decltype(zero)>(d); });
}

void column_sum(const View& g, const View& out, DType compute, const char* /*op*/) {
  with_compute_type(compute, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> g_copy;
    const T* gv = operand(g, g_copy);
    const std::int64_t cols = out.numel(), rows = cols == 0 ? 0 : g.numel() / cols;
    std::vector<T> sum(static_cast<std::size_t>(cols), T(0));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j) sum[static_cast<std::size_t>(j)] += gv[r * cols + j];
    store(out, 0, cols, sum.data());
  });
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const GemmKernels& GemmKernels::cpu() {
  static const GemmKernels k{&cpu::gemm_view, &cpu::column_sum};
  return k;
}

}  // namespace ampcheck::kernels
