// The reduction family on the CPU (kernels/reduce_kernels.h): every output accumulates
// its group in element order in the compute type, one pass over x in chunks, so the
// bits do not depend on the thread count (the fold is sequential).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/tensor_io.h"  // load, store, broadcast_offsets, kChunk
#include "kernels/reduce_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// out[j] = fold over the elements i of x in group j (out's shape broadcast to x's), in
// increasing i; f(acc, value, i).
template <typename T, typename Acc, typename Fold>
std::vector<Acc> fold(const View& x, const Dims& out_shape, std::int64_t outputs, Acc init, Fold f) {
  std::vector<Acc> acc(static_cast<std::size_t>(outputs), init);
  T v[kChunk];
  std::int64_t off[kChunk];
  for (std::int64_t b = 0; b < x.numel(); b += kChunk) {
    const std::int64_t n = std::min(kChunk, x.numel() - b);
    load(x, b, n, v);
    broadcast_offsets(out_shape, x.shape, b, n, off);
    for (std::int64_t i = 0; i < n; ++i) f(acc[static_cast<std::size_t>(off[i])], v[i], b + i);
  }
  return acc;
}

void sum(const View& x, const View& out) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    auto acc = fold<T>(x, out.shape, out.numel(), T(0), [](T& s, T v, std::int64_t) { s += v; });
    store(out, 0, out.numel(), acc.data());
  });
}

void mean(const View& x, const View& out) {
  const std::int64_t count = out.numel() == 0 ? 0 : x.numel() / out.numel();
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    auto acc = fold<T>(x, out.shape, out.numel(), T(0), [](T& s, T v, std::int64_t) { s += v; });
    for (T& s : acc) s /= static_cast<T>(count);
    store(out, 0, out.numel(), acc.data());
  });
}

void max(const View& x, const View& out, const View& argmax) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    const auto acc = fold<T>(x, out.shape, out.numel(), ArgMax<T>{-std::numeric_limits<T>::infinity(), -1},
                             [](ArgMax<T>& b, T v, std::int64_t i) {
                               if (b.index < 0 || max_takes(v, b.value)) b = {v, i};
                             });
    std::vector<T> best(acc.size());
    auto* arg = argmax.as<std::int64_t>();
    for (std::size_t j = 0; j < acc.size(); ++j) arg[j] = acc[j].index, best[j] = acc[j].value;
    store(out, 0, out.numel(), best.data());
  });
}

void max_backward(const View& grad, const View& argmax, const View& grad_x) {
  with_compute_type(grad_x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(grad);
    const auto* arg = argmax.as<const std::int64_t>();
    std::vector<T> gx(static_cast<std::size_t>(grad_x.numel()), T(0));
    for (std::size_t j = 0; j < g.size(); ++j) gx[static_cast<std::size_t>(arg[j])] += g[j];
    store(grad_x, 0, grad_x.numel(), gx.data());
  });
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const ReduceKernels& ReduceKernels::cpu() {
  static const ReduceKernels k{&cpu::sum, &cpu::mean, &cpu::max, &cpu::max_backward};
  return k;
}

}  // namespace ampcheck::kernels
