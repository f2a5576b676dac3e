// Reductions over axes: sum, mean, max. Each output accumulates its inputs in element
// order in the compute type, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/ops/cpu_util.h"
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"

namespace ampcheck {
namespace impl {
namespace {

struct Plan {
  Shape keep_shape;  // the input's shape with reduced dims set to 1
  Shape out_shape;   // keep_shape without those dims unless keepdim
  std::int64_t count = 1;  // elements reduced into each output
};

Plan plan(const Tensor& x, const ReduceParams& p, const char* op) {
  Plan pl;
  pl.keep_shape = x.shape();
  std::vector<bool> reduce(x.shape().size(), p.dims.empty());
  for (std::int64_t d : p.dims) {
    const auto k = static_cast<std::size_t>(cpu::normalize_dim(d, x.dim(), op));
    if (x.dim() == 0) continue;
    if (reduce[k]) throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(d) + " given twice");
    reduce[k] = true;
  }
  for (std::size_t i = 0; i < reduce.size(); ++i) {
    if (!reduce[i]) {
      pl.out_shape.push_back(x.shape()[i]);
      continue;
    }
    pl.count *= x.shape()[i];
    pl.keep_shape[i] = 1;
    if (p.keepdim) pl.out_shape.push_back(1);
  }
  return pl;
}

// out[j] = fold over the inputs i that reduce into j, in increasing i; f(acc, value, i).
template <typename T, typename Acc, typename Fold>
std::vector<Acc> fold(const Tensor& x, const Plan& pl, Acc init, Fold f) {
  std::vector<Acc> acc(static_cast<std::size_t>(numel(pl.keep_shape)), init);
  T v[cpu::kChunk];
  std::int64_t off[cpu::kChunk];
  for (std::int64_t b = 0; b < x.numel(); b += cpu::kChunk) {
    const std::int64_t n = std::min(cpu::kChunk, x.numel() - b);
    cpu::load(x, b, n, v);
    cpu::broadcast_offsets(pl.keep_shape, x.shape(), b, n, off);
    for (std::int64_t i = 0; i < n; ++i) f(acc[static_cast<std::size_t>(off[i])], v[i], b + i);
  }
  return acc;
}

// grad (of the reduced shape) spread back over the input's shape, times `scale`.
Tensor spread(const BackwardArgs& a, const Plan& pl, double scale) {
  const Tensor g = a.grad.view(pl.keep_shape);
  return cpu::map_binary(g, a.in[0], [scale](auto gv, auto) { return gv * decltype(gv)(scale); },
                         a.in[0].dtype(), "reduce backward");
}

}  // namespace

// sum: d x = g broadcast back
Tensor sum_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "sum");
  return cpu::with_compute_type(cpu::float_dtype(x, "sum"), [&](auto zero) {
    using T = decltype(zero);
    auto acc = fold<T>(x, pl, T(0), [](T& s, T v, std::int64_t) { s += v; });
    return cpu::from_values(acc, pl.out_shape, x.dtype());
  });
}
std::vector<Tensor> sum_backward(const BackwardArgs& a) {
  return {spread(a, plan(a.in[0], std::get<ReduceParams>(a.params), "sum"), 1.0)};
}

// mean: d x = g / count
Tensor mean_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "mean");
  return cpu::with_compute_type(cpu::float_dtype(x, "mean"), [&](auto zero) {
    using T = decltype(zero);
    auto acc = fold<T>(x, pl, T(0), [](T& s, T v, std::int64_t) { s += v; });
    for (T& s : acc) s /= static_cast<T>(pl.count);
    return cpu::from_values(acc, pl.out_shape, x.dtype());
  });
}
std::vector<Tensor> mean_backward(const BackwardArgs& a) {
  const Plan pl = plan(a.in[0], std::get<ReduceParams>(a.params), "mean");
  return {spread(a, pl, 1.0 / static_cast<double>(pl.count))};
}

// max: the largest value (NaN wins, as in PyTorch); the first index on ties is saved and
// takes the whole gradient.
Tensor max_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "max");
  if (pl.count == 0) throw std::invalid_argument("max: reducing an empty dim has no maximum");
  return cpu::with_compute_type(cpu::float_dtype(x, "max"), [&](auto zero) {
    using T = decltype(zero);
    struct Best {
      T value;
      std::int64_t index;
    };
    const auto acc = fold<T>(x, pl, Best{-std::numeric_limits<T>::infinity(), -1}, [](Best& b, T v, std::int64_t i) {
      if (b.index < 0 || (!std::isnan(b.value) && (v > b.value || std::isnan(v)))) b = {v, i};
    });
    std::vector<std::int64_t> arg(acc.size());
    std::vector<T> best(acc.size());
    for (std::size_t j = 0; j < acc.size(); ++j) arg[j] = acc[j].index, best[j] = acc[j].value;
    a.saved.tensors.push_back(Tensor::from(arg, pl.keep_shape));
    return cpu::from_values(best, pl.out_shape, x.dtype());
  });
}
std::vector<Tensor> max_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const std::vector<std::int64_t> arg = a.saved.tensors.at(0).to_i64();
  return {cpu::with_compute_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = cpu::values<T>(a.grad);
    std::vector<T> gx(static_cast<std::size_t>(x.numel()), T(0));
    for (std::size_t j = 0; j < arg.size(); ++j) gx[static_cast<std::size_t>(arg[j])] += g[j];
    return cpu::from_values(gx, x.shape(), x.dtype());
  })};
}

}  // namespace impl

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::sum, {x}, ReduceParams{std::move(dims), keepdim});
}
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::mean, {x}, ReduceParams{std::move(dims), keepdim});
}
Tensor max(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::max, {x}, ReduceParams{std::move(dims), keepdim});
}

}  // namespace ampcheck
