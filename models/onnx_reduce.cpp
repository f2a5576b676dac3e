// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, and CumSum. On tensors each is
// composed of the registry's sum, mean and max (ReduceProd as products of halves, CumSum as
// shifted adds), so the gradient is autograd's; on host arrays (a mask's lengths, a
// constant's maximum) they are computed directly. ArgMax and ArgMin are in onnx_index.cpp.
#include <algorithm>
#include <cmath>

#include "engine/dtype/convert.h"
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {
namespace {

// The product over `axes`: the reduced dims moved last and merged, then halves multiplied
// until one column is left (mul's gradient is the product of the others, zeros included).
Tensor product(const Tensor& x, const std::vector<std::int64_t>& axes, bool keep) {
  std::vector<std::int64_t> perm;
  Shape kept, kept_dims = x.shape();
  std::int64_t n = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      perm.push_back(d);
      kept.push_back(x.size(d));
    } else {
      kept_dims[static_cast<std::size_t>(d)] = 1;
    }
  for (std::int64_t a : axes) {
    perm.push_back(a);
    n *= x.size(a);
  }
  Tensor t = reshape(permute(x, perm), {numel(kept), n});
  if (n == 0) return Tensor::ones(keep ? kept_dims : kept, x.dtype(), x.device());
  while (t.size(1) > 1) {
    const std::int64_t half = t.size(1) / 2;
    Tensor p = mul(slice(t, 1, 0, half), slice(t, 1, half, 2 * half));
    t = t.size(1) % 2 ? concat({p, slice(t, 1, 2 * half, t.size(1))}, 1) : p;
  }
  return reshape(t, keep ? kept_dims : kept);
}

// The axes a Reduce* node reduces (every axis when none are given); nullopt: none at all
// (noop_with_empty_axes).
std::optional<std::vector<std::int64_t>> reduce_axes(const Exec& e, std::int64_t rank) {
  const std::int64_t since = e.node.op_type == "ReduceSum" ? 13 : 18;
  auto axes = e.ints_from("axes", 1, since);
  if (!axes || axes->empty()) {
    if (e.attr_i("noop_with_empty_axes", 0) != 0) return std::nullopt;
    axes = std::vector<std::int64_t>();
    for (std::int64_t d = 0; d < rank; ++d) axes->push_back(d);
  }
  for (auto& a : *axes) a = norm_axis(a, rank, "axis");
  std::sort(axes->begin(), axes->end());
  axes->erase(std::unique(axes->begin(), axes->end()), axes->end());
  return axes;
}

}  // namespace

// Reductions of host arrays: an integer mask's sum (the lengths of token sequences), a
// constant's maximum. Integer inputs give integers (a mean truncated, as ONNX's integer
// division); the logarithmic ones take floats only.
void host_reduce(Exec& e) {
  const Array& x = e.host(0, "data");
  const std::string& op = e.node.op_type;
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  const auto axes = reduce_axes(e, rank);
  if (!axes) return e.set(0, x);
  const bool keep = e.attr_i("keepdims", 1) != 0;
  const bool logs = op == "ReduceL2" || op == "ReduceLogSum" || op == "ReduceLogSumExp";
  if (x.integer() && logs) e.fail(op + " of integers is not supported");
  Shape kept = x.shape, dropped;
  for (std::int64_t d = 0; d < rank; ++d) {
    const bool reduced = std::find(axes->begin(), axes->end(), d) != axes->end();
    if (reduced) kept[static_cast<std::size_t>(d)] = 1;
    else dropped.push_back(x.shape[static_cast<std::size_t>(d)]);
  }
  const auto to = broadcast_index(x.shape, kept);  // each element's output position
  const std::int64_t n = numel(kept), count = n ? x.numel() / n : 0;
  std::vector<double> acc(static_cast<std::size_t>(n), op == "ReduceProd" ? 1.0 : 0.0);
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::int64_t k = 0; k < x.numel(); ++k) {
    const double v = x.at(k);
    double& a = acc[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])];
    const bool first = !seen[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])];
    seen[static_cast<std::size_t>(to[static_cast<std::size_t>(k)])] = true;
    if (op == "ReduceMax") a = first || v > a || std::isnan(v) ? v : a;
    else if (op == "ReduceMin") a = first || v < a || std::isnan(v) ? v : a;
    else if (op == "ReduceProd") a *= v;
    else if (op == "ReduceSumSquare" || op == "ReduceL2") a += v * v;
    else if (op == "ReduceL1") a += std::fabs(v);
    else if (op == "ReduceLogSumExp") a += std::exp(v);
    else a += v;
  }
  for (double& a : acc) {
    if (op == "ReduceMean") a = x.integer() ? std::trunc(a / static_cast<double>(count)) : a / static_cast<double>(count);
    else if (op == "ReduceL2") a = std::sqrt(a);
    else if (op == "ReduceLogSum" || op == "ReduceLogSumExp") a = std::log(a);
  }
  const Shape shape = keep ? kept : dropped;
  if (x.integer()) {
    Array o = Array::ints(shape, std::vector<std::int64_t>(acc.begin(), acc.end()));
    o.stored = x.stored;
    return e.set(0, std::move(o));
  }
  for (double& a : acc) a = x.dtype == DType::f64 ? a : round_to(a, x.dtype);
  e.set(0, Array::floats(shape, acc, x.dtype));
}

void op_reduce(Exec& e) {
  const Tensor x = e.tensor(0);
  const auto axes = reduce_axes(e, x.dim());
  if (!axes) return e.set(0, x);
  const bool keep = e.attr_i("keepdims", 1) != 0;
  const std::string& op = e.node.op_type;
  Tensor y;
  if (op == "ReduceSum") y = sum(x, *axes, keep);
  else if (op == "ReduceMean") y = mean(x, *axes, keep);
  else if (op == "ReduceMax") y = max(x, *axes, keep);
  else if (op == "ReduceMin") y = neg(max(neg(x), *axes, keep));
  else if (op == "ReduceSumSquare") y = sum(square(x), *axes, keep);
  else if (op == "ReduceL1") y = sum(abs(x), *axes, keep);
  else if (op == "ReduceL2") y = sqrt(sum(square(x), *axes, keep));
  else if (op == "ReduceLogSum") y = log(sum(x, *axes, keep));
  else if (op == "ReduceProd") y = product(x, *axes, keep);
  else {  // ReduceLogSumExp, shifted by the maximum (whose gradient cancels)
    const Tensor m = max(x, *axes, true);
    y = add(log(sum(exp(sub(x, m)), *axes, true)), m);
    if (!keep) {
      Shape shape;
      for (std::int64_t d = 0; d < y.dim(); ++d)
        if (std::find(axes->begin(), axes->end(), d) == axes->end()) shape.push_back(y.size(d));
      y = reshape(y, shape);
    }
  }
  e.set(0, y);
}

// CumSum on the host (position ids).
void host_cumsum(Exec& e) {
  Array a = e.host(0, "x");
  const auto rank = static_cast<std::int64_t>(a.shape.size());
  const std::int64_t axis = norm_axis(e.host(1, "axis").int_at(0), rank, "axis");
  const bool exclusive = e.attr_i("exclusive", 0) != 0, reverse = e.attr_i("reverse", 0) != 0;
  const Shape st = strides_of(a.shape);
  const std::int64_t size = a.shape[static_cast<std::size_t>(axis)], stride = st[static_cast<std::size_t>(axis)];
  const Array src = a;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t pos = (i / stride) % size, base = i - pos * stride;
    double f = 0;
    std::int64_t n = 0;
    for (std::int64_t j = 0; j < size; ++j) {
      const bool in = reverse ? (exclusive ? j > pos : j >= pos) : (exclusive ? j < pos : j <= pos);
      if (!in) continue;
      if (a.integer()) n += src.i[static_cast<std::size_t>(base + j * stride)];
      else f += src.f[static_cast<std::size_t>(base + j * stride)];
    }
    if (a.integer()) a.i[static_cast<std::size_t>(i)] = n;
    else a.f[static_cast<std::size_t>(i)] = a.dtype == DType::f32 ? static_cast<double>(static_cast<float>(f)) : f;
  }
  e.set(0, std::move(a));
}

// CumSum of a tensor: log2(n) adds of the running sums shifted by 1, 2, 4, ... places
// (zeros shifted in), so its gradient is autograd's; exclusive shifts the input by one first.
void op_cumsum(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.host(1, "axis").int_at(0), x.dim(), "axis");
  const bool exclusive = e.attr_i("exclusive", 0) != 0, reverse = e.attr_i("reverse", 0) != 0;
  const std::int64_t n = x.size(axis);
  auto shift = [&](const Tensor& t, std::int64_t k) {
    Shape zs = t.shape();
    zs[static_cast<std::size_t>(axis)] = std::min(k, n);
    const Tensor z = Tensor::zeros(zs, t.dtype(), t.device());
    if (k >= n) return z;
    return reverse ? concat({slice(t, axis, k, n), z}, axis) : concat({z, slice(t, axis, 0, n - k)}, axis);
  };
  Tensor y = exclusive ? shift(x, 1) : x;
  for (std::int64_t k = 1; k < n; k *= 2) y = add(y, shift(y, k));
  e.set(0, y);
}

}  // namespace ampcheck::models::onnx_impl
