#include "kernels/cpu/tensor_io.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace ampcheck::kernels::cpu {
namespace {

char* at(const View& t, std::int64_t start) {
  return static_cast<char*>(t.data) + static_cast<std::size_t>(start) * element_size(t.dtype);
}

template <typename T>
void load_any(const View& t, std::int64_t start, std::int64_t n, T* out, DType as) {
  if (t.dtype == DType::i64) {
    const auto* p = reinterpret_cast<const std::int64_t*>(at(t, start));
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
    return;
  }
  convert(at(t, start), t.dtype, out, as, static_cast<std::size_t>(n));
}

template <typename T>
void store_any(const View& t, std::int64_t start, std::int64_t n, const T* in, DType as) {
  if (t.dtype == DType::i64) {
    auto* p = reinterpret_cast<std::int64_t*>(at(t, start));
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<std::int64_t>(std::llround(in[i]));
    return;
  }
  convert(in, as, at(t, start), t.dtype, static_cast<std::size_t>(n));
}

// Raw elements gathered into one contiguous block, then one conversion for all of them.
template <typename T>
void gather_any(const View& t, const std::int64_t* offsets, std::int64_t n, T* out, DType as) {
  const std::size_t es = element_size(t.dtype);
  alignas(64) unsigned char raw[kChunk * sizeof(std::int64_t)];
  for (std::int64_t done = 0; done < n; done += kChunk) {
    const std::int64_t m = std::min(kChunk, n - done);
    const char* base = at(t, 0);
    for (std::int64_t i = 0; i < m; ++i)
      std::memcpy(raw + static_cast<std::size_t>(i) * es, base + static_cast<std::size_t>(offsets[done + i]) * es, es);
    if (t.dtype == DType::i64) {
      for (std::int64_t i = 0; i < m; ++i) {
        std::int64_t v;
        std::memcpy(&v, raw + static_cast<std::size_t>(i) * es, sizeof v);
        out[done + i] = static_cast<T>(v);
      }
    } else {
      convert(raw, t.dtype, out + done, as, static_cast<std::size_t>(m));
    }
  }
}

}  // namespace

void load(const View& t, std::int64_t start, std::int64_t n, float* out) {
  load_any(t, start, n, out, DType::f32);
}
void load(const View& t, std::int64_t start, std::int64_t n, double* out) {
  load_any(t, start, n, out, DType::f64);
}
void load_gather(const View& t, const std::int64_t* offsets, std::int64_t n, float* out) {
  gather_any(t, offsets, n, out, DType::f32);
}
void load_gather(const View& t, const std::int64_t* offsets, std::int64_t n, double* out) {
  gather_any(t, offsets, n, out, DType::f64);
}
void store(const View& t, std::int64_t start, std::int64_t n, const float* in) {
  store_any(t, start, n, in, DType::f32);
}
void store(const View& t, std::int64_t start, std::int64_t n, const double* in) {
  store_any(t, start, n, in, DType::f64);
}

BroadcastRuns broadcast_runs(const Dims& in_shape, const Dims& out_shape) {
  const std::size_t lead = out_shape.size() - in_shape.size();
  // Trailing dims equal in both (consecutive input elements), else trailing 1s of the
  // input against larger dims of the output (one element repeated).
  std::int64_t same = 1, ones = 1;
  std::size_t i = out_shape.size();
  for (; i > lead && in_shape[i - 1 - lead] == out_shape[i - 1]; --i) same *= out_shape[i - 1];
  if (i < out_shape.size()) return {same, false};
  for (i = out_shape.size(); i > 0 && (i <= lead || in_shape[i - 1 - lead] == 1); --i) ones *= out_shape[i - 1];
  return {ones, true};
}

std::int64_t broadcast_offset(const Dims& in_shape, const Dims& out_shape, std::int64_t at) {
  const std::size_t lead = out_shape.size() - in_shape.size();
  std::int64_t off = 0, stride = 1;
  for (std::size_t i = out_shape.size(); i-- > 0 && at > 0;) {
    const std::int64_t d = out_shape[i];
    const std::int64_t index = at % d;
    at /= d;
    if (i >= lead) {
      const std::int64_t in_d = in_shape[i - lead];
      if (in_d != 1) off += index * stride;
      stride *= in_d;
    }
  }
  return off;
}

void broadcast_offsets(const Dims& in_shape, const Dims& out_shape, std::int64_t start,
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

namespace {
template <typename T>
void gemm_any(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
              const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate) {
  GemmArgs<T> g;
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
  const GemmPlan plan = gemm_plan(g, active_gemm_isa());
  // Below ~8M multiply-adds (~80 us on one core) handing tiles to the pool costs more
  // than it saves: its wake-up and, where the cores are SMT siblings, its spinning
  // (measured: a 128^3 GEMM took 11x longer on 2 threads of this project's 2-vCPU
  // machine). The tiles are the same either way, so the bits are too.
  constexpr double kParallelWork = 8.0 * (1 << 20);
  if (plan.tiles() <= 1 || static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kParallelWork) {
    gemm_tiles(plan, g, 0, plan.tiles());
    return;
  }
  parallel_for(plan.tiles(), 1, [&](std::int64_t lo, std::int64_t hi) { gemm_tiles(plan, g, lo, hi); });
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

}  // namespace ampcheck::kernels::cpu
