// Shape and layout ops: Reshape, Squeeze, Unsqueeze, Flatten, Shape, Size, Transpose,
// Concat, Split, Slice, Gather, Expand, Tile, Pad and Resize (and the older Upsample). On host
// arrays they compute the shapes and indices a graph derives from its inputs' sizes; on
// tensors each is a registry op that moves data (reshape, permute, slice, concat) or a
// gather (embedding), so its gradient is autograd's.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {
namespace {

// The shape Reshape asks for, with 0 (copy) and -1 (infer) resolved against `in`.
Shape reshape_target(const Exec& e, const Shape& in) {
  const Array& s = e.host(1, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  const bool allowzero = e.attr_i("allowzero", 0) != 0;
  std::int64_t known = 1, infer = -1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allowzero) {
      if (d >= in.size()) e.fail("shape " + to_string(shape) + " copies a dimension the input " + to_string(in) + " lacks");
      shape[d] = in[d];
    }
    if (shape[d] == -1) {
      if (infer >= 0) e.fail("shape " + to_string(shape) + " has more than one -1");
      infer = static_cast<std::int64_t>(d);
    } else if (shape[d] < 0) {
      e.fail("shape " + to_string(shape) + " has a negative size");
    } else if (__builtin_mul_overflow(known, shape[d], &known)) {
      e.fail("shape " + to_string(shape) + " has more elements than int64 counts");
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel(in) % known != 0) e.fail("cannot reshape " + to_string(in) + " to " + to_string(shape));
    shape[static_cast<std::size_t>(infer)] = numel(in) / known;
  }
  if (numel(shape) != numel(in)) e.fail("cannot reshape " + to_string(in) + " to " + to_string(shape));
  return shape;
}

Shape unsqueeze_shape(const Exec& e, const Shape& in) {
  const auto axes = e.ints_from("axes", 1, 13);
  if (!axes) e.fail("Unsqueeze needs axes");
  const std::int64_t rank = static_cast<std::int64_t>(in.size() + axes->size());
  std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
  for (std::int64_t a : *axes) {
    const std::int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank || inserted[static_cast<std::size_t>(n)]) e.fail("axes are out of range or repeated");
    inserted[static_cast<std::size_t>(n)] = true;
  }
  Shape out;
  std::size_t from = 0;
  for (std::int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<std::size_t>(d)] ? 1 : in[from++]);
  return out;
}

Shape squeeze_shape(const Exec& e, const Shape& in) {
  const auto axes = e.ints_from("axes", 1, 13);
  std::set<std::int64_t> drop;
  const auto rank = static_cast<std::int64_t>(in.size());
  if (axes) {
    for (std::int64_t a : *axes) {
      const std::int64_t n = a < 0 ? a + rank : a;
      if (n < 0 || n >= rank) e.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
      if (in[static_cast<std::size_t>(n)] != 1) e.fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[static_cast<std::size_t>(n)]));
      drop.insert(n);
    }
  } else {
    for (std::int64_t d = 0; d < rank; ++d)
      if (in[static_cast<std::size_t>(d)] == 1) drop.insert(d);
  }
  Shape out;
  for (std::int64_t d = 0; d < rank; ++d)
    if (!drop.count(d)) out.push_back(in[static_cast<std::size_t>(d)]);
  return out;
}

}  // namespace

// Flatten's [outer, inner]; Softmax before opset 13 flattens its input the same way.
Shape flatten_shape(const Exec& e, const Shape& in) {
  const auto rank = static_cast<std::int64_t>(in.size());
  std::int64_t axis = e.attr_i("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) e.fail("axis is out of range");
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= in[static_cast<std::size_t>(d)];
  return {outer, inner};
}

void host_shape_op(Exec& e) {
  const Array& a = e.host(0, "data");
  const std::string& op = e.node.op_type;
  if (op == "Reshape") {
    Array o = a;
    o.shape = reshape_target(e, a.shape);
    return e.set(0, std::move(o));
  }
  Array o = a;
  if (op == "Unsqueeze") o.shape = unsqueeze_shape(e, a.shape);
  else if (op == "Squeeze") o.shape = squeeze_shape(e, a.shape);
  else if (op == "Flatten") o.shape = flatten_shape(e, a.shape);
  e.set(0, std::move(o));
}

void op_reshape_like(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::string& op = e.node.op_type;
  Shape shape;
  if (op == "Reshape") shape = reshape_target(e, x.shape());
  else if (op == "Unsqueeze") shape = unsqueeze_shape(e, x.shape());
  else if (op == "Squeeze") shape = squeeze_shape(e, x.shape());
  else shape = flatten_shape(e, x.shape());
  e.set(0, shape == x.shape() ? x : reshape(x, shape));
}

// Shape and Size of a tensor or of a host array.
void op_shape(Exec& e) {
  const Shape s = e.shape_of(0);
  const auto rank = static_cast<std::int64_t>(s.size());
  if (e.node.op_type == "Size") return e.set(0, Array::ints({}, {numel(s)}));
  auto clampi = [rank](std::int64_t v) { return std::clamp(v < 0 ? v + rank : v, std::int64_t{0}, rank); };
  const std::int64_t start = clampi(e.attr_i("start", 0)), end = clampi(e.attr_i("end", rank));
  std::vector<std::int64_t> v;
  for (std::int64_t d = start; d < end; ++d) v.push_back(s[static_cast<std::size_t>(d)]);
  e.set(0, Array::ints({static_cast<std::int64_t>(v.size())}, v));
}

namespace {

std::vector<std::int64_t> transpose_perm(const Exec& e, std::int64_t rank) {
  std::vector<std::int64_t> perm;
  if (auto p = e.attr_ints("perm")) perm = *p;
  else
    for (std::int64_t d = rank; d-- > 0;) perm.push_back(d);
  if (static_cast<std::int64_t>(perm.size()) != rank) e.fail("perm has " + std::to_string(perm.size()) + " axes for rank " + std::to_string(rank));
  return perm;
}

}  // namespace

void host_transpose(Exec& e) {
  const Array& a = e.host(0, "data");
  const auto rank = static_cast<std::int64_t>(a.shape.size());
  const auto perm = transpose_perm(e, rank);
  Shape shape;
  for (std::int64_t p : perm) shape.push_back(a.shape[static_cast<std::size_t>(norm_axis(p, rank, "perm axis"))]);
  const Shape ist = strides_of(a.shape), ost = strides_of(shape);
  std::vector<std::int64_t> idx;
  for (std::int64_t k = 0; k < numel(shape); ++k) {
    std::int64_t rem = k, at = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::int64_t c = rem / ost[d];
      rem %= ost[d];
      at += c * ist[static_cast<std::size_t>(perm[d])];
    }
    idx.push_back(at);
  }
  e.set(0, take(a, shape, idx));
}

void op_transpose(Exec& e) {
  const Tensor x = e.tensor(0);
  auto perm = transpose_perm(e, x.dim());
  bool identity = true;
  for (std::size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == static_cast<std::int64_t>(d);
  e.set(0, identity ? x : permute(x, perm));
}

void host_concat(Exec& e) {
  std::vector<const Array*> parts;
  for (std::size_t k = 0; k < e.in.size(); ++k)
    if (e.has(k)) parts.push_back(&e.host(k, "inputs"));
  if (parts.empty()) e.fail("Concat has no inputs");
  const auto rank = static_cast<std::int64_t>(parts[0]->shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), rank, "axis");
  Shape shape = parts[0]->shape;
  shape[static_cast<std::size_t>(axis)] = 0;
  bool integer = true;
  for (const Array* p : parts) {
    if (p->shape.size() != shape.size()) e.fail("inputs of different ranks");
    shape[static_cast<std::size_t>(axis)] += p->shape[static_cast<std::size_t>(axis)];
    integer = integer && p->integer();
  }
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<std::size_t>(d)];
  Array o;
  o.shape = shape;
  o.dtype = integer ? DType::i64 : parts[0]->dtype;
  o.stored = parts[0]->stored;
  for (std::int64_t r = 0; r < outer; ++r)
    for (const Array* p : parts) {
      const std::int64_t block = p->numel() / std::max<std::int64_t>(outer, 1);
      for (std::int64_t k = 0; k < block; ++k) {
        if (integer) o.i.push_back(p->i[static_cast<std::size_t>(r * block + k)]);
        else o.f.push_back(p->at(r * block + k));
      }
    }
  e.set(0, std::move(o));
}

void op_concat(Exec& e) {
  std::vector<Tensor> xs;
  for (std::size_t k = 0; k < e.in.size(); ++k)
    if (e.has(k)) {
      Tensor t = e.tensor(k);
      if (t.numel() > 0 || xs.empty()) xs.push_back(t);  // ONNX allows empty parts
    }
  if (xs.empty()) e.fail("Concat has no inputs");
  e.set(0, xs.size() == 1 ? xs[0] : concat(xs, e.attr_i("axis", 0)));
}

void op_split(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), x.dim(), "axis");
  const std::int64_t size = x.size(axis);
  std::vector<std::int64_t> parts;
  if (auto s = e.ints_from("split", 1, 13)) parts = *s;
  if (parts.empty()) {
    const auto n = static_cast<std::int64_t>(e.node.opset >= 18 ? e.attr_i("num_outputs", 0) : static_cast<std::int64_t>(e.node.outputs.size()));
    if (n <= 0) e.fail("Split needs split sizes or num_outputs");
    const std::int64_t chunk = (size + n - 1) / n;
    for (std::int64_t k = 0; k < n; ++k) parts.push_back(std::max<std::int64_t>(0, std::min(chunk, size - k * chunk)));
  }
  if (std::accumulate(parts.begin(), parts.end(), std::int64_t{0}) != size) e.fail("split sizes do not add up to " + std::to_string(size));
  std::int64_t at = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    e.set(k, slice(x, axis, at, at + parts[k]));
    at += parts[k];
  }
}

namespace {

// Normalised Slice arguments for one axis; a negative step walks from start down to end
// (exclusive), as numpy's.
struct SliceAxis {
  std::int64_t axis, start, end, step;
  std::int64_t count() const {
    if (step > 0) return end > start ? (end - start + step - 1) / step : 0;
    return start > end ? (start - end - step - 1) / -step : 0;
  }
  std::vector<std::int64_t> indices() const {
    std::vector<std::int64_t> v;
    for (std::int64_t k = 0; k < count(); ++k) v.push_back(start + k * step);
    return v;
  }
};

std::vector<SliceAxis> slice_axes(const Exec& e, const Shape& shape) {
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (e.node.opset < 10) {
    starts = e.attr_ints("starts").value_or(std::vector<std::int64_t>{});
    ends = e.attr_ints("ends").value_or(std::vector<std::int64_t>{});
    axes = e.attr_ints("axes").value_or(std::vector<std::int64_t>{});
  } else {
    starts = e.ints_from("starts", 1, 10).value_or(std::vector<std::int64_t>{});
    ends = e.ints_from("ends", 2, 10).value_or(std::vector<std::int64_t>{});
    if (auto a = e.ints_from("axes", 3, 10)) axes = *a;
    if (auto s = e.ints_from("steps", 4, 10)) steps = *s;
  }
  if (starts.size() != ends.size()) e.fail("starts and ends differ in length");
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) e.fail("starts, ends, axes and steps differ in length");
  std::vector<SliceAxis> out;
  const auto rank = static_cast<std::int64_t>(shape.size());
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::int64_t axis = norm_axis(axes[k], rank, "axis");
    const std::int64_t size = shape[static_cast<std::size_t>(axis)];
    if (steps[k] == 0) e.fail("a step of 0");
    // Negative positions count from the end; then clamped to [0, size] (forward) or
    // [-1, size - 1] (backward).
    const bool up = steps[k] > 0;
    auto clampi = [&](std::int64_t v) {
      if (v < 0) v = v < -size ? (up ? 0 : -1) : v + size;
      return up ? std::min(v, size) : std::min(v, size - 1);
    };
    out.push_back({axis, clampi(starts[k]), clampi(ends[k]), steps[k]});
  }
  return out;
}

}  // namespace

void host_slice(Exec& e) {
  Array cur = e.host(0, "data");
  for (const SliceAxis& s : slice_axes(e, cur.shape)) {
    const Shape st = strides_of(cur.shape);
    Shape shape = cur.shape;
    shape[static_cast<std::size_t>(s.axis)] = s.count();
    std::vector<std::int64_t> idx;
    const Shape ost = strides_of(shape);
    for (std::int64_t k = 0; k < numel(shape); ++k) {
      std::int64_t rem = k, at = 0;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        std::int64_t c = rem / ost[d];
        rem %= ost[d];
        if (static_cast<std::int64_t>(d) == s.axis) c = s.start + c * s.step;
        at += c * st[d];
      }
      idx.push_back(at);
    }
    cur = take(cur, shape, idx);
  }
  e.set(0, std::move(cur));
}

// Slice: the registry's slice for positive steps; a negative step (torch.flip) gathers the
// elements in their reversed order (an embedding lookup along the axis).
void op_slice(Exec& e) {
  Tensor x = e.tensor(0);
  for (const SliceAxis& s : slice_axes(e, x.shape())) {
    if (s.start == 0 && s.end == x.size(s.axis) && s.step == 1) continue;
    x = s.step > 0 ? slice(x, s.axis, s.start, s.end, s.step) : take_along(e, x, s.axis, s.indices());
  }
  e.set(0, x);
}

void host_gather(Exec& e) {
  const Array& data = e.host(0, "data");
  const Array& ind = e.host(1, "indices");
  const auto rank = static_cast<std::int64_t>(data.shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), rank, "axis");
  const std::int64_t size = data.shape[static_cast<std::size_t>(axis)];
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d)
    if (d < axis) outer *= data.shape[static_cast<std::size_t>(d)];
    else if (d > axis) inner *= data.shape[static_cast<std::size_t>(d)];
  Shape shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), ind.shape.begin(), ind.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  std::vector<std::int64_t> idx;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < ind.numel(); ++j) {
      std::int64_t i = ind.int_at(j);
      if (i < 0) i += size;
      if (i < 0 || i >= size) e.fail("index " + std::to_string(ind.int_at(j)) + " is out of range for size " + std::to_string(size));
      for (std::int64_t k = 0; k < inner; ++k) idx.push_back((o * size + i) * inner + k);
    }
  e.set(0, take(data, shape, idx));
}

void op_gather(Exec& e) {
  const Tensor data = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), data.dim(), "axis");
  const std::int64_t size = data.size(axis);
  if (e.is_host(1) && e.in[1].host->shape.empty()) {
    // One index (x[:, 0]): a slice, the axis dropped.
    std::int64_t i = e.in[1].host->int_at(0);
    if (i < 0) i += size;
    if (i < 0 || i >= size) e.fail("index is out of range for size " + std::to_string(size));
    Shape shape = data.shape();
    shape.erase(shape.begin() + axis);
    return e.set(0, reshape(slice(data, axis, i, i + 1), shape));
  }
  Tensor indices;
  if (e.is_host(1)) {
    Array a = *e.in[1].host;
    if (!a.integer()) e.fail("indices must be integers");
    for (auto& v : a.i) {
      const std::int64_t given = v;
      if (v < 0) v += size;
      if (v < 0 || v >= size)
        e.fail("index " + std::to_string(given) + " is out of range for the " + std::to_string(size) + " rows of \"" +
               e.node.inputs[0] + "\" (token ids in the data must be below the vocabulary's size)");
    }
    indices = a.to_tensor().to(e.device);
  } else {
    indices = e.tensor(1);
    if (indices.dtype() != DType::i64) e.fail("indices must be int64 or int32 data");
  }
  // An embedding lookup over axis 0 of a 2-D table; other axes move to the front and back.
  if (axis == 0 && data.dim() == 2) return e.set(0, embedding(indices, data));
  Shape rest;
  std::vector<std::int64_t> perm = {axis};
  for (std::int64_t d = 0; d < data.dim(); ++d)
    if (d != axis) {
      perm.push_back(d);
      rest.push_back(data.size(d));
    }
  Tensor table = axis == 0 ? data : permute(data, perm);
  table = reshape(table, {size, numel(rest)});
  Tensor y = embedding(indices, table);  // [indices..., prod(rest)]
  Shape shape = indices.shape();
  shape.insert(shape.end(), rest.begin(), rest.end());
  y = reshape(y, shape);
  if (axis == 0) return e.set(0, y);
  // y is [idx..., rest...] with rest in data order minus axis; put idx dims at `axis`.
  const auto q = indices.dim();
  std::vector<std::int64_t> back;
  for (std::int64_t d = 0; d < axis; ++d) back.push_back(q + d);
  for (std::int64_t d = 0; d < q; ++d) back.push_back(d);
  for (std::int64_t d = axis; d < static_cast<std::int64_t>(rest.size()); ++d) back.push_back(q + d);
  e.set(0, permute(y, back));
}

namespace {

Shape expand_target(const Exec& e, const Shape& in) {
  const Array& s = e.host(1, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  try {
    return broadcast(in, shape);
  } catch (const std::invalid_argument& x) {
    e.fail(x.what());
  }
}

}  // namespace

void host_expand(Exec& e) {
  const Array& a = e.host(0, "input");
  const Shape shape = expand_target(e, a.shape);
  e.set(0, take(a, shape, broadcast_index(shape, a.shape)));
}

void op_expand(Exec& e) {
  const Tensor x = e.tensor(0);
  const Shape shape = expand_target(e, x.shape());
  if (shape == x.shape()) return e.set(0, x);
  // Broadcasting against zeros of x's dtype: the values and the gradient's reduction of
  // an expand.
  e.set(0, add(x, Tensor::zeros(shape, x.dtype(), x.device())));
}

void op_tile(Exec& e) {
  Tensor x = e.tensor(0);
  const Array& r = e.host(1, "repeats");
  if (r.numel() != x.dim()) e.fail("repeats has " + std::to_string(r.numel()) + " values for rank " + std::to_string(x.dim()));
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    const std::int64_t n = r.int_at(d);
    if (n < 0) e.fail("a negative repeat");
    if (n == 1) continue;
    x = n == 0 ? slice(x, d, 0, 0) : concat(std::vector<Tensor>(static_cast<std::size_t>(n), x), d);
  }
  e.set(0, x);
}

// Pad: constant (any value), reflect and edge, per axis; negative pads crop.
void op_pad(Exec& e) {
  Tensor x = e.tensor(0);
  const std::string mode = e.attr_s("mode", "constant");
  std::vector<std::int64_t> pads;
  double value = 0;
  if (e.node.opset < 11) {
    pads = e.attr_ints("pads").value_or(std::vector<std::int64_t>{});
    value = e.attr_f("value", 0);
  } else {
    pads = e.ints_from("pads", 1, 11).value_or(std::vector<std::int64_t>{});
    if (e.has(2) && e.host(2, "constant_value").numel() > 0) value = e.host(2, "constant_value").at(0);
  }
  const auto rank = x.dim();
  std::vector<std::int64_t> axes;
  if (e.node.opset >= 18 && e.has(3)) {
    const std::vector<std::int64_t> given = e.ints_from("axes", 3, 18).value_or(std::vector<std::int64_t>{});
    for (std::int64_t a : given) axes.push_back(norm_axis(a, rank, "axis"));
  } else {
    for (std::int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) e.fail("pads has " + std::to_string(pads.size()) + " values for " + std::to_string(axes.size()) + " axes");
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t axis = axes[k];
    std::int64_t before = pads[k], after = pads[k + axes.size()];
    if (before < 0 || after < 0) {  // crop first
      const std::int64_t size = x.size(axis);
      x = slice(x, axis, std::max<std::int64_t>(0, -before), size - std::max<std::int64_t>(0, -after));
      before = std::max<std::int64_t>(0, before);
      after = std::max<std::int64_t>(0, after);
    }
    if (before == 0 && after == 0) continue;
    const std::int64_t size = x.size(axis);
    std::vector<Tensor> parts;
    auto fill = [&](std::int64_t n) {
      Shape s = x.shape();
      s[static_cast<std::size_t>(axis)] = n;
      return Tensor::full(s, value, x.dtype(), x.device());
    };
    auto row = [&](std::int64_t i) { return slice(x, axis, i, i + 1); };
    if (mode == "reflect" && (before >= size || after >= size))
      e.fail("reflect padding of " + std::to_string(std::max(before, after)) + " needs more than " + std::to_string(size) + " elements");
    if (before > 0) {
      if (mode == "constant") parts.push_back(fill(before));
      else
        for (std::int64_t i = before; i >= 1; --i) parts.push_back(row(mode == "reflect" ? i : 0));
    }
    parts.push_back(x);
    if (after > 0) {
      if (mode == "constant") parts.push_back(fill(after));
      else
        for (std::int64_t i = 1; i <= after; ++i) parts.push_back(row(mode == "reflect" ? size - 1 - i : size - 1));
    }
    x = concat(parts, axis);
  }
  e.set(0, x);
}

std::optional<OnnxRefusal> check_pad(const NodeAttrs& a) {
  const std::string mode = a.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return OnnxRefusal{"mode", "\"" + mode + "\" (constant, reflect and edge are supported)", "pad with F.pad's constant, reflect or replicate modes"};
  return std::nullopt;
}

// Resize and Upsample, mode nearest. Each axis resized maps output index i to an input
// index (ONNX's coordinate_transformation_mode, then nearest_mode, clamped to the input) and
// gathers those slices (take_along, whose gradient adds into the elements read). A whole
// factor whose mapping repeats each element (asymmetric with floor, F.interpolate's
// nearest; half-pixel with either rounding) is a broadcast add of zeros instead, as cheap as
// a copy.
void op_resize(Exec& e) {
  Tensor x = e.tensor(0);
  const bool upsample = e.node.op_type == "Upsample";
  std::vector<double> scales;
  std::vector<std::int64_t> sizes;
  if (upsample) {
    if (e.node.opset < 9) {
      const Attribute* a = e.attr("scales");
      if (!a) e.fail("scales are missing");
      scales = a->floats;
    } else {
      const Array& s = e.host(1, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    }
  } else {
    const std::size_t scales_at = e.node.opset < 11 ? 1 : 2;
    if (e.has(scales_at) && e.host(scales_at, "scales").numel() > 0) {
      const Array& s = e.host(scales_at, "scales");
      for (std::int64_t k = 0; k < s.numel(); ++k) scales.push_back(s.at(k));
    } else if (e.has(3)) {
      const Array& given = e.host(3, "sizes");
      for (std::int64_t k = 0; k < given.numel(); ++k) sizes.push_back(given.int_at(k));
    }
  }
  const auto rank = static_cast<std::size_t>(x.dim());
  if (scales.size() != rank && sizes.size() != rank) e.fail("scales or sizes do not match the input's rank");
  // Resize before opset 11 is Upsample's mapping: asymmetric, floor.
  const bool legacy = upsample || e.node.opset < 11;
  const std::string coords = legacy ? "asymmetric" : e.attr_s("coordinate_transformation_mode", "half_pixel");
  const std::string rounding = legacy ? "floor" : e.attr_s("nearest_mode", "round_prefer_floor");
  const bool repeats = coords == "asymmetric" ? rounding == "floor"
                       : coords == "half_pixel" || coords == "pytorch_half_pixel"
                           ? rounding == "round_prefer_floor" || rounding == "round_prefer_ceil"
                           : false;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    const std::int64_t in = x.size(d);
    const double given = sizes.empty() ? scales[static_cast<std::size_t>(d)] : 0;
    const std::int64_t out = sizes.empty() ? static_cast<std::int64_t>(std::floor(static_cast<double>(in) * given))
                                           : sizes[static_cast<std::size_t>(d)];
    const double scale = sizes.empty() ? given : static_cast<double>(out) / static_cast<double>(in);
    if (out < 0 || scale <= 0) e.fail("scale or size of axis " + std::to_string(d) + " must be positive");
    if (out == in && scale == 1) continue;
    const auto n = static_cast<std::int64_t>(std::llround(scale));
    if (repeats && n >= 1 && out == in * n && std::fabs(scale - static_cast<double>(n)) < 1e-9) {
      Shape split = x.shape(), repeated = x.shape(), merged = x.shape();
      split.insert(split.begin() + d + 1, 1);
      repeated.insert(repeated.begin() + d + 1, n);
      merged[static_cast<std::size_t>(d)] *= n;
      x = reshape(add(reshape(x, split), Tensor::zeros(repeated, x.dtype(), x.device())), merged);
      continue;
    }
    std::vector<std::int64_t> index;
    for (std::int64_t i = 0; i < out; ++i) {
      const double o = static_cast<double>(i);
      double at = o / scale;  // asymmetric
      if (coords == "half_pixel") at = (o + 0.5) / scale - 0.5;
      else if (coords == "pytorch_half_pixel") at = out > 1 ? (o + 0.5) / scale - 0.5 : 0;
      else if (coords == "align_corners") at = out == 1 ? 0 : o * static_cast<double>(in - 1) / static_cast<double>(out - 1);
      else if (coords == "tf_half_pixel_for_nn") at = (o + 0.5) / scale;
      const bool half = at == std::floor(at) + 0.5;
      double r = std::round(at);
      if (rounding == "floor") r = std::floor(at);
      else if (rounding == "ceil") r = std::ceil(at);
      else if (half) r = rounding == "round_prefer_ceil" ? std::ceil(at) : std::floor(at);
      index.push_back(std::clamp<std::int64_t>(static_cast<std::int64_t>(r), 0, in - 1));
    }
    x = take_along(e, x, d, index);
  }
  e.set(0, x);
}

std::optional<OnnxRefusal> check_resize(const NodeAttrs& a) {
  const std::string mode = a.attr_s("mode", "nearest");
  if (mode != "nearest")
    return OnnxRefusal{"mode", "\"" + mode + "\" (nearest is supported)", "resize with F.interpolate(mode='nearest')"};
  if (a.node.op_type == "Resize" && a.node.opset >= 11) {
    const std::string coords = a.attr_s("coordinate_transformation_mode", "half_pixel");
    if (coords != "half_pixel" && coords != "pytorch_half_pixel" && coords != "align_corners" && coords != "asymmetric" &&
        coords != "tf_half_pixel_for_nn")
      return OnnxRefusal{"coordinate_transformation_mode", "\"" + coords + "\" (a region of interest)",
                         "resize the whole input (F.interpolate)"};
  }
  return std::nullopt;
}

}  // namespace ampcheck::models::onnx_impl
