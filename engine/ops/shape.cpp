// Shape ops: reshape (a view), permute, concat, slice. They move values without
// arithmetic, so every dtype passes through bit for bit.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/ops/cpu_util.h"
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"

namespace ampcheck {
namespace impl {
namespace {

std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// n elements of `es` bytes from src (every `stride` elements) to contiguous dst.
void copy_strided(char* dst, const char* src, std::int64_t n, std::int64_t stride, std::size_t es) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * es);
    return;
  }
  auto typed = [&](auto word) {
    using W = decltype(word);
    for (std::int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<std::size_t>(i) * sizeof(W), src + static_cast<std::size_t>(i * stride) * sizeof(W),
                  sizeof(W));
  };
  switch (es) {
    case 1: typed(std::uint8_t{}); break;
    case 2: typed(std::uint16_t{}); break;
    case 4: typed(std::uint32_t{}); break;
    default: typed(std::uint64_t{}); break;
  }
}

// The output walked row by row (its last dim): one source offset computed per work item,
// then stepped like an odometer, and each row copied as one run (a memcpy where the
// source row is contiguous). Heads split and merged in attention are exactly that.
Tensor permute_impl(const Tensor& x, const std::vector<std::int64_t>& perm) {
  const Shape& s = x.shape();
  const std::size_t rank = perm.size();
  Shape out_shape(rank);
  const auto in_strides = strides_of(s);
  std::vector<std::int64_t> src_stride(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    out_shape[i] = s[static_cast<std::size_t>(perm[i])];
    src_stride[i] = in_strides[static_cast<std::size_t>(perm[i])];
  }
  Tensor out = Tensor::empty(out_shape, x.dtype());
  if (out.numel() == 0) return out;
  const std::size_t es = element_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(out.raw());
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return out;
  }
  const std::int64_t inner = out_shape[rank - 1], inner_stride = src_stride[rank - 1];
  const std::int64_t rows = out.numel() / inner;
  parallel_for(rows, std::max<std::int64_t>(1, cpu::kChunk / inner), [&](std::int64_t rb, std::int64_t re) {
    std::vector<std::int64_t> idx(rank - 1);
    std::int64_t off = 0;
    for (std::size_t d = rank - 1, r = static_cast<std::size_t>(rb); d-- > 0;) {
      idx[d] = static_cast<std::int64_t>(r) % out_shape[d];
      off += idx[d] * src_stride[d];
      r /= static_cast<std::size_t>(out_shape[d]);
    }
    for (std::int64_t row = rb; row < re; ++row) {
      copy_strided(dst + static_cast<std::size_t>(row * inner) * es, src + static_cast<std::size_t>(off) * es, inner,
                   inner_stride, es);
      for (std::size_t d = rank - 1; d-- > 0;) {
        off += src_stride[d];
        if (++idx[d] < out_shape[d]) break;
        off -= src_stride[d] * out_shape[d];
        idx[d] = 0;
      }
    }
  });
  return out;
}

std::vector<std::int64_t> checked_perm(const std::vector<std::int64_t>& perm, std::int64_t rank) {
  if (static_cast<std::int64_t>(perm.size()) != rank)
    throw std::invalid_argument("permute: " + std::to_string(perm.size()) + " dims given for a tensor of rank " +
                                std::to_string(rank));
  std::vector<std::int64_t> p(perm.size());
  std::vector<bool> used(perm.size(), false);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    p[i] = cpu::normalize_dim(perm[i], rank, "permute");
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
  const std::int64_t dim = cpu::normalize_dim(p.dim, x.dim(), "slice");
  const std::int64_t size = x.shape()[static_cast<std::size_t>(dim)];
  auto clampi = [size](std::int64_t i) { return std::clamp(i < 0 ? i + size : i, std::int64_t{0}, size); };
  const std::int64_t start = clampi(p.start), end = clampi(p.end);
  const std::int64_t count = end > start ? (end - start + p.step - 1) / p.step : 0;
  return {dim, start, p.step, count};
}

// Copies x's [outer, size, inner] blocks: element j of dim `dim` in x goes to
// index j' of dim in out, for the pairs the mapping lists.
void copy_along(const Tensor& src, Tensor& dst, std::int64_t dim,
                const std::vector<std::pair<std::int64_t, std::int64_t>>& map) {
  const Shape& ss = src.shape();
  const Shape& ds = dst.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= ss[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < ss.size(); ++d) inner *= ss[d];
  const std::size_t es = element_size(src.dtype());
  const auto* s = static_cast<const char*>(src.raw());
  auto* t = static_cast<char*>(dst.raw());
  const std::int64_t sn = ss[static_cast<std::size_t>(dim)], dn = ds[static_cast<std::size_t>(dim)];
  for (std::int64_t o = 0; o < outer; ++o)
    for (const auto& [from, to] : map)
      std::memcpy(t + static_cast<std::size_t>((o * dn + to) * inner) * es,
                  s + static_cast<std::size_t>((o * sn + from) * inner) * es, static_cast<std::size_t>(inner) * es);
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
  const std::int64_t dim = cpu::normalize_dim(std::get<DimParams>(a.params).dim, a.in[0].dim(), "concat");
  DType dtype = a.in[0].dtype();
  for (const Tensor& t : a.in) {
    if (!t.defined()) throw std::invalid_argument("concat: an input is undefined");
    dtype = is_floating(dtype) && is_floating(t.dtype()) ? promote(dtype, t.dtype()) : dtype;
    if (is_floating(t.dtype()) != is_floating(dtype))
      throw std::invalid_argument("concat: cannot mix i64 and float tensors; cast first");
  }
  Tensor out = Tensor::empty(concat_shape(a.in, dim), dtype);
  std::int64_t at = 0;
  for (const Tensor& t : a.in) {
    const Tensor src = t.dtype() == dtype ? t : t.to(dtype);
    std::vector<std::pair<std::int64_t, std::int64_t>> map;
    for (std::int64_t j = 0; j < t.shape()[static_cast<std::size_t>(dim)]; ++j) map.emplace_back(j, at + j);
    copy_along(src, out, dim, map);
    at += t.shape()[static_cast<std::size_t>(dim)];
  }
  return out;
}
std::vector<Tensor> concat_backward(const BackwardArgs& a) {
  const std::int64_t dim = cpu::normalize_dim(std::get<DimParams>(a.params).dim, a.in[0].dim(), "concat");
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
    Tensor g = Tensor::empty(t.shape(), a.grad.dtype());
    std::vector<std::pair<std::int64_t, std::int64_t>> map;
    for (std::int64_t j = 0; j < len; ++j) map.emplace_back(at + j, j);
    copy_along(a.grad, g, dim, map);
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
  Tensor out = Tensor::empty(shape, x.dtype());
  std::vector<std::pair<std::int64_t, std::int64_t>> map;
  for (std::int64_t j = 0; j < r.count; ++j) map.emplace_back(r.start + j * r.step, j);
  copy_along(x, out, r.dim, map);
  return out;
}
std::vector<Tensor> slice_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const SliceRange r = slice_range(x, std::get<SliceParams>(a.params));
  Tensor g = Tensor::zeros(x.shape(), x.dtype());
  std::vector<std::pair<std::int64_t, std::int64_t>> map;
  for (std::int64_t j = 0; j < r.count; ++j) map.emplace_back(j, r.start + j * r.step);
  copy_along(a.grad, g, r.dim, map);
  return {g};
}

}  // namespace impl

Tensor reshape(const Tensor& x, const Shape& shape) { return call(Op::reshape, {x}, ShapeParams{shape}); }

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  const std::int64_t s = cpu::normalize_dim(start_dim, x.dim(), "flatten");
  const std::int64_t e = cpu::normalize_dim(end_dim, x.dim(), "flatten");
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
  std::swap(perm[static_cast<std::size_t>(cpu::normalize_dim(dim0, x.dim(), "transpose"))],
            perm[static_cast<std::size_t>(cpu::normalize_dim(dim1, x.dim(), "transpose"))]);
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
