#include "engine/ops/cpu_util.h"

#include <cmath>
#include <cstring>

#include "engine/device.h"  // cpu_gemm_isa
#include "engine/dtype/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/fp_bits.h"

namespace ampcheck::cpu {
namespace {

const char* at(const Tensor& t, std::int64_t start) {
  return static_cast<const char*>(t.raw()) + static_cast<std::size_t>(start) * element_size(t.dtype());
}
char* at(Tensor& t, std::int64_t start) {
  return static_cast<char*>(t.raw()) + static_cast<std::size_t>(start) * element_size(t.dtype());
}

template <typename T>
void load_any(const Tensor& t, std::int64_t start, std::int64_t n, T* out, DType as) {
  if (t.dtype() == DType::i64) {
    const auto* p = reinterpret_cast<const std::int64_t*>(at(t, start));
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
    return;
  }
  convert(at(t, start), t.dtype(), out, as, static_cast<std::size_t>(n));
}

template <typename T>
void store_any(Tensor& t, std::int64_t start, std::int64_t n, const T* in, DType as) {
  if (t.dtype() == DType::i64) {
    auto* p = reinterpret_cast<std::int64_t*>(at(t, start));
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<std::int64_t>(std::llround(in[i]));
    return;
  }
  convert(in, as, at(t, start), t.dtype(), static_cast<std::size_t>(n));
}

// Raw elements gathered into one contiguous block, then one conversion for all of them.
template <typename T>
void gather_any(const Tensor& t, const std::int64_t* offsets, std::int64_t n, T* out, DType as) {
  const std::size_t es = element_size(t.dtype());
  alignas(64) unsigned char raw[kChunk * sizeof(std::int64_t)];
  for (std::int64_t done = 0; done < n; done += kChunk) {
    const std::int64_t m = std::min(kChunk, n - done);
    const char* base = at(t, 0);
    for (std::int64_t i = 0; i < m; ++i)
      std::memcpy(raw + static_cast<std::size_t>(i) * es, base + static_cast<std::size_t>(offsets[done + i]) * es, es);
    if (t.dtype() == DType::i64) {
      for (std::int64_t i = 0; i < m; ++i) {
        std::int64_t v;
        std::memcpy(&v, raw + static_cast<std::size_t>(i) * es, sizeof v);
        out[done + i] = static_cast<T>(v);
      }
    } else {
      convert(raw, t.dtype(), out + done, as, static_cast<std::size_t>(m));
    }
  }
}

}  // namespace

void load(const Tensor& t, std::int64_t start, std::int64_t n, float* out) {
  load_any(t, start, n, out, DType::f32);
}
void load(const Tensor& t, std::int64_t start, std::int64_t n, double* out) {
  load_any(t, start, n, out, DType::f64);
}
void load_gather(const Tensor& t, const std::int64_t* offsets, std::int64_t n, float* out) {
  gather_any(t, offsets, n, out, DType::f32);
}
void load_gather(const Tensor& t, const std::int64_t* offsets, std::int64_t n, double* out) {
  gather_any(t, offsets, n, out, DType::f64);
}
void store(Tensor& t, std::int64_t start, std::int64_t n, const float* in) {
  store_any(t, start, n, in, DType::f32);
}
void store(Tensor& t, std::int64_t start, std::int64_t n, const double* in) {
  store_any(t, start, n, in, DType::f64);
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, const char* op) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for a tensor of rank " + std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": shapes " + to_string(a) + " and " +
                                  to_string(b) + " do not broadcast (dim " + std::to_string(i) +
                                  ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void broadcast_offsets(const Shape& in_shape, const Shape& out_shape, std::int64_t start,
                       std::int64_t n, std::int64_t* offsets) {
  const std::size_t rank = out_shape.size();
  const std::size_t lead = rank - in_shape.size();
  std::vector<std::int64_t> stride(rank, 0), index(rank, 0);
  std::int64_t s = 1;
  for (std::size_t i = rank; i-- > lead;) {
    const std::int64_t d = in_shape[i - lead];
    stride[i] = d == 1 ? 0 : s;
    s *= d;
  }
  std::int64_t rest = start, off = 0;
  for (std::size_t i = rank; i-- > 0;) {
    index[i] = out_shape[i] == 0 ? 0 : rest % out_shape[i];
    rest = out_shape[i] == 0 ? 0 : rest / out_shape[i];
    off += index[i] * stride[i];
  }
  for (std::int64_t k = 0; k < n; ++k) {
    offsets[k] = off;
    for (std::size_t i = rank; i-- > 0;) {  // odometer step
      off += stride[i];
      if (++index[i] < out_shape[i]) break;
      off -= stride[i] * index[i];
      index[i] = 0;
    }
  }
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  Tensor out = Tensor::empty(shape, grad.dtype());
  with_compute_type(grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> acc(static_cast<std::size_t>(out.numel()), T(0));
    T g[kChunk];
    std::int64_t offs[kChunk];
    // Sequential, in element order: the same sums whatever the thread count.
    for (std::int64_t b = 0; b < grad.numel(); b += kChunk) {
      const std::int64_t n = std::min(kChunk, grad.numel() - b);
      load(grad, b, n, g);
      broadcast_offsets(shape, grad.shape(), b, n, offs);
      for (std::int64_t i = 0; i < n; ++i) acc[static_cast<std::size_t>(offs[i])] += g[i];
    }
    store(out, 0, out.numel(), acc.data());
  });
  return out;
}

namespace {
template <typename T>
void gemm_any(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
              const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  kernels::cpu::GemmArgs<T> g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  g.accumulate = accumulate;
  const kernels::cpu::GemmPlan plan = kernels::cpu::gemm_plan(g, cpu_gemm_isa());
  // Below ~8M multiply-adds (~80 us on one core) handing tiles to the pool costs more
  // than it saves: its wake-up and, where the cores are SMT siblings, its spinning
  // (measured: a 128^3 GEMM took 11x longer on 2 threads of this project's 2-vCPU
  // machine). The tiles are the same either way, so the bits are too.
  constexpr double kParallelWork = 8.0 * (1 << 20);
  if (plan.tiles() <= 1 || static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kParallelWork) {
    kernels::cpu::gemm_tiles(plan, g, 0, plan.tiles());
    return;
  }
  parallel_for(plan.tiles(), 1, [&](std::int64_t lo, std::int64_t hi) { kernels::cpu::gemm_tiles(plan, g, lo, hi); });
}
}  // namespace

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
          const float* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  gemm_any(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const double* a, std::int64_t lda,
          const double* b, std::int64_t ldb, double* c, std::int64_t ldc, bool accumulate) {
  gemm_any(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

DType float_dtype(const Tensor& t, const char* op) {
  if (!is_floating(t.dtype()))
    throw std::invalid_argument(std::string(op) + ": expects a floating-point tensor, got i64 " +
                                to_string(t.shape()) + "; cast it first");
  return t.dtype();
}

Tensor add_same(const Tensor& a, const Tensor& b) {
  return map_binary(a, b, [](auto x, auto y) { return x + y; }, a.dtype(), "gradient accumulation");
}

}  // namespace ampcheck::cpu
