// The training family on the CPU (kernels/training_kernels.h): chunks of kChunk elements
// over the thread pool, each loaded into the compute type, updated element by element
// with the shared formulas, and stored with one rounding.
#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/cpu/convert.h"  // convert: the master weights into the parameter
#include "kernels/cpu/tensor_io.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/training_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// Runs f(p, g, b0, b1) over every element; p and the buffers given are written back.
// Tensors of the compute type's own dtype are updated in place (no copy in and out of the
// chunk buffers: for an f32 model these are most of the update's memory traffic); others
// go through the buffers with one rounding on the way back.
template <typename F>
void for_each_element(const View& p, const View& g, const View* b0, const View* b1, F f) {
  with_compute_type(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(p.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      const std::int64_t n = hi - lo;
      T pb[kChunk], gb[kChunk], b0b[kChunk], b1b[kChunk];
      auto open = [&](const View* v, T* buf) -> T* {
        if (v == nullptr) return buf;  // unused: the lambda ignores it
        T* at = target(*v, lo, buf);
        if (at == buf) load(*v, lo, n, buf);
        return at;
      };
      T* pv = open(&p, pb);
      const T* gv = source(g, lo, n, gb);
      T* v0 = open(b0, b0b);
      T* v1 = open(b1, b1b);
      vectorized([&] {
        for (std::int64_t i = 0; i < n; ++i) f(pv[i], gv[i], v0[i], v1[i]);
      });
      finish_target(p, lo, hi, pv);
      if (b0) finish_target(*b0, lo, hi, v0);
      if (b1) finish_target(*b1, lo, hi, v1);
    });
  });
}

void sgd(const View& param, const View& grad, const View& momentum, const SgdStep& s) {
  if (momentum.data == nullptr) {
    for_each_element(param, grad, nullptr, nullptr, [&](auto& p, auto g, auto&, auto&) { sgd_element(p, g, s); });
    return;
  }
  for_each_element(param, grad, &momentum, nullptr,
                   [&](auto& p, auto g, auto& b, auto&) { sgd_momentum_element(p, g, b, s); });
}

void adam(const View& param, const View& grad, const View& exp_avg, const View& exp_avg_sq, const AdamStep& s) {
  for_each_element(param, grad, &exp_avg, &exp_avg_sq,
                   [&](auto& p, auto g, auto& m, auto& v) { adam_element(p, g, m, v, s); });
}

// The weights, rounded once into the parameter (master weights).
void write_copy(const UpdateTensor& t) {
  if (t.copy.data != nullptr) convert(t.weights.data, t.weights.dtype, t.copy.data, t.copy.dtype,
                                      static_cast<std::size_t>(t.weights.numel()));
}

void sgd_all(const std::vector<UpdateTensor>& tensors, const SgdStep& s) {
  for (const UpdateTensor& t : tensors) {
    sgd(t.weights, t.grad, t.state0, s);
    write_copy(t);
  }
}

void adam_all(const std::vector<UpdateTensor>& tensors, const AdamStep& s) {
  for (const UpdateTensor& t : tensors) {
    adam(t.weights, t.grad, t.state0, t.state1, s);
    write_copy(t);
  }
}

// One gradient after another, each over the thread pool: on the CPU "one launch" buys
// nothing, and the flags are the same either way.
bool unscale(const std::vector<View>& grads, const std::vector<View>& out, double inv_scale,
             std::uint8_t* per_tensor) {
  bool any = false;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const View& g = grads[t];
    const View& o = out[t];
    std::atomic<bool> found{false};
    with_compute_type(o.dtype, [&](auto zero) {
      using T = decltype(zero);
      // As PyTorch: the reciprocal in double, rounded once to the compute type.
      const T inv = static_cast<T>(inv_scale);
      parallel_for(g.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
        T in_buf[kChunk], out_buf[kChunk];
        const std::int64_t n = hi - lo;
        const T* in = source(g, lo, n, in_buf);
        T* out_at = target(o, lo, out_buf);
        bool bad = false;
        vectorized([&] {
          for (std::int64_t i = 0; i < n; ++i) out_at[i] = unscale_element(in[i], inv, bad);
        });
        finish_target(o, lo, hi, out_at);
        if (bad) found.store(true, std::memory_order_relaxed);
      });
    });
    const bool bad = found.load();
    if (per_tensor != nullptr) per_tensor[t] = bad ? 1 : 0;
    any = any || bad;
  }
  return any;
}

// In element order, one value at a time, continuing `total`: the sum a single loop over
// every gradient forms.
double sum_squares(const View& v, double total) {
  double buf[kChunk];
  const std::int64_t n = v.numel();
  for (std::int64_t lo = 0; lo < n; lo += kChunk) {
    const std::int64_t m = std::min(kChunk, n - lo);
    load(v, lo, m, buf);
    for (std::int64_t i = 0; i < m; ++i) total += buf[i] * buf[i];
  }
  return total;
}

void scale(const View& v, double factor) {
  map_unary(v, v, [factor](auto x) { return x * decltype(x)(factor); });
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const TrainingKernels& TrainingKernels::cpu() {
  static const TrainingKernels k{&cpu::sgd,     &cpu::adam,        &cpu::sgd_all, &cpu::adam_all,
                                 &cpu::unscale, &cpu::sum_squares, &cpu::scale};
  return k;
}

}  // namespace ampcheck::kernels
