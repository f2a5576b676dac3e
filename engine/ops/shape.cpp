// Shape ops: reshape (a view), permute, concat, slice. They move values without
// arithmetic, so every dtype passes through bit for bit.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/ops/op_util.h"  // normalize_dim
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/shape_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

using kernels::CopyAlong;
using kernels::ShapeKernels;

// out dim i is x dim perm[i]: the copy is the shape family's.
Tensor permute_impl(const Tensor& x, const std::vector<std::int64_t>& perm) {
  const Shape& s = x.shape();
  Shape out_shape(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) out_shape[i] = s[static_cast<std::size_t>(perm[i])];
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  dispatch<ShapeKernels>("permute", {&x}).permute(view_of(x), perm, view_of(out));
  return out;
}

std::vector<std::int64_t> checked_perm(const std::vector<std::int64_t>& perm, std::int64_t rank) {
  if (static_cast<std::int64_t>(perm.size()) != rank)
    throw std::invalid_argument("permute: " + std::to_string(perm.size()) + " dims given for a tensor of rank " +
                                std::to_string(rank));
  std::vector<std::int64_t> p(perm.size());
  std::vector<bool> used(perm.size(), false);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    p[i] = ops::normalize_dim(perm[i], rank, "permute");
    if (used[static_cast<std::size_t>(p[i])])
      throw std::invalid_argument("permute: dim " + std::to_string(perm[i]) + " appears twice");
    used[static_cast<std::size_t>(p[i])] = true;
  }
  return p;
}

// Shape of concat's output; every input agrees with the first except along dim.
Shape concat_shape(const std::vector<Tensor>& xs, std::int64_t dim) {
  Shape out = xs[0].shape();
  out[static_cast<std::size_t>(dim)] = 0;
  for (const Tensor& t : xs) {
    bool ok = t.dim() == xs[0].dim();
    for (std::size_t d = 0; ok && d < out.size(); ++d)
      ok = static_cast<std::int64_t>(d) == dim || t.shape()[d] == xs[0].shape()[d];
    if (!ok)
      throw std::invalid_argument("concat: shapes " + to_string(xs[0].shape()) + " and " + to_string(t.shape()) +
                                  " differ outside dim " + std::to_string(dim));
    out[static_cast<std::size_t>(dim)] += t.shape()[static_cast<std::size_t>(dim)];
  }
  return out;
}

struct SliceRange {
  std::int64_t dim, start, step, count;
};

// PyTorch's rules: negative indices count from the end, both ends clamped to the size.
SliceRange slice_range(const Tensor& x, const SliceParams& p) {
  if (x.dim() == 0) throw std::invalid_argument("slice: a 0-dim tensor has nothing to slice");
  if (p.step <= 0) throw std::invalid_argument("slice: step must be positive, got " + std::to_string(p.step));
  const std::int64_t dim = ops::normalize_dim(p.dim, x.dim(), "slice");
  const std::int64_t size = x.shape()[static_cast<std::size_t>(dim)];
  auto clampi = [size](std::int64_t i) { return std::clamp(i < 0 ? i + size : i, std::int64_t{0}, size); };
  const std::int64_t start = clampi(p.start), end = clampi(p.end);
  const std::int64_t count = end > start ? (end - start + p.step - 1) / p.step : 0;
  return {dim, start, p.step, count};
}

}  // namespace

// reshape: a view of the same storage; d x = g viewed back
Tensor reshape_forward(const ForwardArgs& a) { return a.in[0].view(std::get<ShapeParams>(a.params).shape); }
std::vector<Tensor> reshape_backward(const BackwardArgs& a) { return {a.grad.view(a.in[0].shape())}; }

// permute: d x = permute(g, inverse)
Tensor permute_forward(const ForwardArgs& a) {
  return permute_impl(a.in[0], checked_perm(std::get<PermuteParams>(a.params).perm, a.in[0].dim()));
}
std::vector<Tensor> permute_backward(const BackwardArgs& a) {
  const auto perm = checked_perm(std::get<PermuteParams>(a.params).perm, a.in[0].dim());
  std::vector<std::int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  return {permute_impl(a.grad, inverse)};
}

// concat: inputs converted to the widest dtype; d x_i = g's block of x_i
Tensor concat_forward(const ForwardArgs& a) {
  const std::int64_t dim = ops::normalize_dim(std::get<DimParams>(a.params).dim, a.in[0].dim(), "concat");
  DType dtype = a.in[0].dtype();
  for (const Tensor& t : a.in) {
    if (!t.defined()) throw std::invalid_argument("concat: an input is undefined");
    dtype = is_floating(dtype) && is_floating(t.dtype()) ? promote(dtype, t.dtype()) : dtype;
    if (is_floating(t.dtype()) != is_floating(dtype))
      throw std::invalid_argument("concat: cannot mix i64 and float tensors; cast first");
  }
  const Device device = common_device("concat", a.in);
  const ShapeKernels& kernels = kernels_on<ShapeKernels>(device);
  Tensor out = Tensor::empty(concat_shape(a.in, dim), dtype, device);
  std::int64_t at = 0;
  for (const Tensor& t : a.in) {
    const Tensor src = t.dtype() == dtype ? t : t.to(dtype);
    const std::int64_t len = t.shape()[static_cast<std::size_t>(dim)];
    kernels.copy_along(view_of(src), view_of(out), CopyAlong{dim, len, 0, 1, at, 1});
    at += len;
  }
  return out;
}
std::vector<Tensor> concat_backward(const BackwardArgs& a) {
  const std::int64_t dim = ops::normalize_dim(std::get<DimParams>(a.params).dim, a.in[0].dim(), "concat");
  const ShapeKernels& kernels = dispatch<ShapeKernels>("concat", {&a.grad});
  std::vector<Tensor> grads;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < a.in.size(); ++i) {
    const Tensor& t = a.in[i];
    const std::int64_t len = t.shape()[static_cast<std::size_t>(dim)];
    if (!a.needs(i)) {  // an input that needs no gradient: its slice is not copied out
      grads.emplace_back();
      at += len;
      continue;
    }
    Tensor g = Tensor::empty(t.shape(), a.grad.dtype(), a.grad.device());
    kernels.copy_along(view_of(a.grad), view_of(g), CopyAlong{dim, len, at, 1, 0, 1});
    at += len;
    grads.push_back(is_floating(t.dtype()) && g.dtype() != t.dtype() ? g.to(t.dtype()) : g);
  }
  return grads;
}

// slice: every step-th index in [start, end) (a view for leading rows, else a copy);
// d x = g scattered into zeros
Tensor slice_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const SliceRange r = slice_range(x, std::get<SliceParams>(a.params));
  if (r.dim == 0 && r.step == 1) return x.rows(r.start, r.count);  // contiguous: a view
  Shape shape = x.shape();
  shape[static_cast<std::size_t>(r.dim)] = r.count;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  dispatch<ShapeKernels>("slice", {&x}).copy_along(view_of(x), view_of(out),
                                                    CopyAlong{r.dim, r.count, r.start, r.step, 0, 1});
  return out;
}
std::vector<Tensor> slice_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const SliceRange r = slice_range(x, std::get<SliceParams>(a.params));
  const ShapeKernels& kernels = dispatch<ShapeKernels>("slice", {&x, &a.grad});
  // The zeros in the gradient's dtype, so the copy moves elements of one size.
  Tensor g = Tensor::zeros(x.shape(), a.grad.dtype(), a.grad.device());
  kernels.copy_along(view_of(a.grad), view_of(g), CopyAlong{r.dim, r.count, 0, 1, r.start, r.step});
  return {g.dtype() == x.dtype() ? g : g.to(x.dtype())};
}

}  // namespace impl

Tensor reshape(const Tensor& x, const Shape& shape) { return call(Op::reshape, {x}, ShapeParams{shape}); }

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  const std::int64_t s = ops::normalize_dim(start_dim, x.dim(), "flatten");
  const std::int64_t e = ops::normalize_dim(end_dim, x.dim(), "flatten");
  if (s > e) throw std::invalid_argument("flatten: start_dim " + std::to_string(start_dim) + " is after end_dim " + std::to_string(end_dim));
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  std::int64_t merged = 1;
  for (std::int64_t d = s; d <= e; ++d) merged *= x.shape()[static_cast<std::size_t>(d)];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& perm) {
  return call(Op::permute, {x}, PermuteParams{perm});
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(x.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<std::size_t>(ops::normalize_dim(dim0, x.dim(), "transpose"))],
            perm[static_cast<std::size_t>(ops::normalize_dim(dim1, x.dim(), "transpose"))]);
  return permute(x, perm);
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  if (xs.empty()) throw std::invalid_argument("concat: no tensors given");
  return call(Op::concat, xs, DimParams{dim});
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  return call(Op::slice, {x}, SliceParams{dim, start, end, step});
}

}  // namespace ampcheck
