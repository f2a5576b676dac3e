// Index ops as registry ops: ArgMax, ArgMin, TopK, Hardmax, GatherElements, GatherND,
// ScatterElements (and the older Scatter), ScatterND, OneHot, NonZero, Compress,
// ReverseSequence, Einsum, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//
// Indices are integers, so they are host arrays (onnx_exec.h): computed from constants,
// from token ids, or read from float data (ArgMax, TopK's order). What is gathered from or
// scattered into a float tensor is an `embedding` lookup of rows computed on the host: a
// gather whose gradient is the scatter-add into its table, so every such op trains. A
// scatter is the same lookup the other way round: each output row takes the update that
// writes it (or, to add or multiply, one lookup per update that lands on the same row).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "engine/dtype/convert.h"
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {

Tensor take_rows(const Exec& e, const Tensor& table, const std::vector<std::int64_t>& index, const Shape& index_shape) {
  Shape out = index_shape;
  out.push_back(table.size(1));
  if (index.empty()) return Tensor::zeros(out, table.dtype(), table.device());
  return embedding(Tensor::from(index, index_shape).to(e.device), table);
}

Tensor take_along(const Exec& e, const Tensor& x, std::int64_t axis, const std::vector<std::int64_t>& index) {
  std::vector<std::int64_t> perm = {axis};
  Shape rest;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (d != axis) {
      perm.push_back(d);
      rest.push_back(x.size(d));
    }
  const Tensor table = reshape(axis == 0 ? x : permute(x, perm), {x.size(axis), numel(rest)});
  const auto n = static_cast<std::int64_t>(index.size());
  Shape shape = {n};
  shape.insert(shape.end(), rest.begin(), rest.end());
  const Tensor y = reshape(take_rows(e, table, index, {n}), shape);
  if (axis == 0) return y;
  std::vector<std::int64_t> back(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k) back[static_cast<std::size_t>(perm[k])] = static_cast<std::int64_t>(k);
  return permute(y, back);
}

namespace {

// A host array's element count along an axis, with the blocks before and after it.
struct Axis {
  std::int64_t outer = 1, size = 1, inner = 1;
};
Axis axis_of(const Shape& s, std::int64_t axis) {
  Axis a;
  for (std::size_t d = 0; d < s.size(); ++d) {
    const auto k = static_cast<std::int64_t>(d);
    if (k < axis) a.outer *= s[d];
    else if (k == axis) a.size = s[d];
    else a.inner *= s[d];
  }
  return a;
}

std::int64_t index_in(const Exec& e, std::int64_t v, std::int64_t size) {
  const std::int64_t i = v < 0 ? v + size : v;
  if (i < 0 || i >= size) e.fail("index " + std::to_string(v) + " is out of range for a dimension of " + std::to_string(size));
  return i;
}

// Rows `rows` of a value seen as [R, D]: an embedding lookup for a tensor, a copy for a
// host array (integers stay on the host).
void gather_rows(Exec& e, std::size_t input, const Shape& table, const std::vector<std::int64_t>& rows, const Shape& out) {
  if (e.is_host(input)) {
    std::vector<std::int64_t> idx;
    const std::int64_t d = table[1];
    for (std::int64_t r : rows)
      for (std::int64_t k = 0; k < d; ++k) idx.push_back(r * d + k);
    return e.set(0, take(e.host(input, "data"), out, idx));
  }
  const Tensor t = reshape(e.tensor(input), table);
  e.set(0, reshape(take_rows(e, t, rows, {static_cast<std::int64_t>(rows.size())}), out));
}

enum class Reduction { none, add, mul };
Reduction reduction_of(const NodeAttrs& a) {
  const std::string r = a.attr_s("reduction", "none");
  return r == "add" ? Reduction::add : r == "mul" ? Reduction::mul : Reduction::none;
}

// data [R, D] with update row u written to row targets[u] (replacing it, or added to or
// multiplying it), as registry ops: for each round k, the k-th update of each row (a
// lookup into the updates with an extra neutral row for the rows that have none).
Tensor scatter_rows(const Exec& e, const Tensor& data, const Tensor& updates, const std::vector<std::int64_t>& targets,
                    Reduction red) {
  const std::int64_t rows = data.size(0), u = static_cast<std::int64_t>(targets.size());
  std::vector<std::vector<std::int64_t>> writers(static_cast<std::size_t>(rows));
  for (std::int64_t j = 0; j < u; ++j) writers[static_cast<std::size_t>(targets[static_cast<std::size_t>(j)])].push_back(j);
  std::size_t rounds = 0;
  for (const auto& w : writers) rounds = std::max(rounds, w.size());
  if (rounds == 0) return data;
  const double neutral = red == Reduction::mul ? 1 : 0;
  const Tensor table = concat({updates, Tensor::full({1, updates.size(1)}, neutral, updates.dtype(), updates.device())}, 0);
  if (red == Reduction::none) {
    // The last update of a row wins (ONNX leaves duplicates undefined; this is the order of
    // the reference and of PyTorch's CPU kernel).
    std::vector<std::int64_t> src, written;
    for (const auto& w : writers) {
      src.push_back(w.empty() ? u : w.back());
      written.push_back(!w.empty());
    }
    const Tensor mask = Tensor::from(written, {rows, 1}).to(e.device);
    return where(mask, take_rows(e, table, src, {rows}), data);
  }
  Tensor out = data;
  for (std::size_t k = 0; k < rounds; ++k) {
    std::vector<std::int64_t> src;
    for (const auto& w : writers) src.push_back(k < w.size() ? w[k] : u);
    const Tensor part = reshape(take_rows(e, table, src, {rows}), data.shape());
    out = red == Reduction::add ? add(out, part) : mul(out, part);
  }
  return out;
}

Array scatter_rows_host(const Array& data, const Array& updates, std::int64_t width, const std::vector<std::int64_t>& targets,
                        Reduction red) {
  Array out = data;
  for (std::size_t j = 0; j < targets.size(); ++j)
    for (std::int64_t k = 0; k < width; ++k) {
      const auto at = static_cast<std::size_t>(targets[j] * width + k);
      const auto from = static_cast<std::int64_t>(j) * width + k;
      if (out.integer()) {
        const std::int64_t v = updates.int_at(from);
        out.i[at] = red == Reduction::add ? out.i[at] + v : red == Reduction::mul ? out.i[at] * v : v;
      } else {
        const double v = updates.at(from);
        double r = red == Reduction::add ? out.f[at] + v : red == Reduction::mul ? out.f[at] * v : v;
        if (out.dtype != DType::f64) r = round_to(r, out.dtype);
        out.f[at] = r;
      }
    }
  return out;
}

// One scatter, on the host when data and updates are, else as registry ops.
void scatter(Exec& e, const Shape& data_shape, std::int64_t width, const std::vector<std::int64_t>& targets) {
  const Reduction red = reduction_of(e);
  if (e.is_host(0) && e.is_host(2))
    return e.set(0, scatter_rows_host(e.host(0, "data"), e.host(2, "updates"), width, targets, red));
  const Tensor data = reshape(e.tensor(0), {numel(data_shape) / std::max<std::int64_t>(width, 1), width});
  const Tensor upd = reshape(e.tensor(2), {static_cast<std::int64_t>(targets.size()), width});
  e.set(0, reshape(scatter_rows(e, data, upd, targets, red), data_shape));
}

// For GatherElements and ScatterElements: the flat position in `data` of each element of
// `indices` (same rank), its index along `axis` replaced by the index's value.
std::vector<std::int64_t> element_positions(const Exec& e, const Shape& data, const Array& indices, std::int64_t axis) {
  if (indices.shape.size() != data.size())
    e.fail("indices " + to_string(indices.shape) + " must have the rank of the data " + to_string(data));
  const Shape ist = strides_of(indices.shape), dst = strides_of(data);
  std::vector<std::int64_t> pos;
  for (std::int64_t k = 0; k < indices.numel(); ++k) {
    std::int64_t rem = k, at = 0;
    for (std::size_t d = 0; d < data.size(); ++d) {
      std::int64_t c = rem / ist[d];
      rem %= ist[d];
      if (static_cast<std::int64_t>(d) == axis) c = index_in(e, indices.int_at(k), data[d]);
      else if (c >= data[d]) e.fail("indices " + to_string(indices.shape) + " are larger than the data " + to_string(data));
      at += c * dst[d];
    }
    pos.push_back(at);
  }
  return pos;
}

// For GatherND and ScatterND: the row of `data` seen as [prod(data[:b+k]), inner] that each
// index tuple (the last dim of `indices`, k long, after b batch dims) names.
struct NdRows {
  std::vector<std::int64_t> rows;
  Shape tuples;  // indices' shape without its last dim
  std::int64_t count = 0, inner = 1;
};
NdRows nd_rows(const Exec& e, const Shape& data, const Array& ind, std::int64_t b) {
  if (ind.shape.empty()) e.fail("indices must have at least one dim");
  const std::int64_t k = ind.shape.back();
  const auto rank = static_cast<std::int64_t>(data.size());
  if (b < 0 || b + k > rank) e.fail("batch_dims " + std::to_string(b) + " and index tuples of " + std::to_string(k) + " do not fit the data " + to_string(data));
  for (std::int64_t d = 0; d < b; ++d)
    if (ind.shape[static_cast<std::size_t>(d)] != data[static_cast<std::size_t>(d)]) e.fail("batch dims of indices and data differ");
  NdRows r;
  r.tuples.assign(ind.shape.begin(), ind.shape.end() - 1);
  r.count = numel(r.tuples);
  std::int64_t per_batch = 1;
  for (std::int64_t d = b; d < b + k; ++d) per_batch *= data[static_cast<std::size_t>(d)];
  for (std::int64_t d = b + k; d < rank; ++d) r.inner *= data[static_cast<std::size_t>(d)];
  std::int64_t batch_tuples = 1;
  for (std::size_t d = static_cast<std::size_t>(b); d + 1 < ind.shape.size(); ++d) batch_tuples *= ind.shape[d];
  for (std::int64_t t = 0; t < r.count; ++t) {
    std::int64_t row = (t / std::max<std::int64_t>(batch_tuples, 1)) * per_batch;
    std::int64_t stride = per_batch;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t size = data[static_cast<std::size_t>(b + j)];
      stride /= size;
      row += index_in(e, ind.int_at(t * k + j), size) * stride;
    }
    r.rows.push_back(row);
  }
  return r;
}

// ---- Einsum ----

struct Equation {
  std::vector<std::string> inputs;  // as written, "..." kept
  std::string output;
  bool explicit_output = false;
};

Equation parse_equation(std::string eq) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  Equation q;
  const std::size_t arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  if (arrow != std::string::npos) {
    q.output = eq.substr(arrow + 2);
    q.explicit_output = true;
  }
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = lhs.find(',', at);
    q.inputs.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return q;
}

// Letters without "...", and whether a term repeats one (a diagonal).
std::string letters(const std::string& term) {
  std::string s;
  for (char c : term)
    if (c != '.') s += c;
  return s;
}

std::string expand_ellipsis(const Exec& e, const std::string& term, std::int64_t rank, std::int64_t ell) {
  const std::string named = letters(term);
  const std::size_t dots = term.find("...");
  if (dots == std::string::npos) {
    if (static_cast<std::int64_t>(named.size()) != rank)
      e.fail("equation term \"" + term + "\" has " + std::to_string(named.size()) + " labels for an operand of rank " + std::to_string(rank));
    return named;
  }
  const std::int64_t n = rank - static_cast<std::int64_t>(named.size());
  if (n < 0) e.fail("equation term \"" + term + "\" has more labels than its operand's rank " + std::to_string(rank));
  std::string dims;
  for (std::int64_t k = ell - n; k < ell; ++k) dims += static_cast<char>('0' + k);  // right-aligned, as broadcasting
  return term.substr(0, dots) + dims + term.substr(dots + 3);
}

struct Operand {
  Tensor t;
  std::string labels;
};

Tensor sum_labels(Operand& o, const std::set<char>& keep) {
  std::vector<std::int64_t> dims;
  std::string rest;
  for (std::size_t d = 0; d < o.labels.size(); ++d)
    if (keep.count(o.labels[d])) rest += o.labels[d];
    else dims.push_back(static_cast<std::int64_t>(d));
  if (!dims.empty()) {
    o.t = sum(o.t, dims, false);
    o.labels = rest;
  }
  return o.t;
}

Tensor permuted(const Operand& o, const std::string& order) {
  std::vector<std::int64_t> perm;
  bool identity = true;
  for (std::size_t d = 0; d < order.size(); ++d) {
    perm.push_back(static_cast<std::int64_t>(o.labels.find(order[d])));
    identity = identity && perm.back() == static_cast<std::int64_t>(d);
  }
  return identity ? o.t : permute(o.t, perm);
}

// a x b over their shared labels: the ones still needed (`keep`) stay as batch dims, the
// others are contracted by one batched matmul.
Operand contract(const Exec& e, Operand a, Operand b, const std::set<char>& keep) {
  std::set<char> keep_a = keep, keep_b = keep;
  for (char c : b.labels) keep_a.insert(c);
  for (char c : a.labels) keep_b.insert(c);
  sum_labels(a, keep_a);
  sum_labels(b, keep_b);
  std::string batch, left, right, inner;
  std::map<char, std::int64_t> size;
  for (std::size_t d = 0; d < a.labels.size(); ++d) size[a.labels[d]] = a.t.size(static_cast<std::int64_t>(d));
  for (std::size_t d = 0; d < b.labels.size(); ++d) {
    const char c = b.labels[d];
    const std::int64_t s = b.t.size(static_cast<std::int64_t>(d));
    if (size.count(c) && size[c] != s)
      e.fail("label '" + std::string(1, c) + "' is " + std::to_string(size[c]) + " in one operand and " + std::to_string(s) +
             " in another (broadcasting in Einsum is not supported)");
    size[c] = s;
  }
  for (char c : a.labels) {
    if (b.labels.find(c) == std::string::npos) left += c;
    else if (keep.count(c)) batch += c;
    else inner += c;
  }
  for (char c : b.labels)
    if (a.labels.find(c) == std::string::npos) right += c;
  auto prod = [&](const std::string& ls) {
    std::int64_t p = 1;
    for (char c : ls) p *= size[c];
    return p;
  };
  const Tensor lhs = reshape(permuted(a, batch + left + inner), {prod(batch), prod(left), prod(inner)});
  const Tensor rhs = reshape(permuted(b, batch + inner + right), {prod(batch), prod(inner), prod(right)});
  Shape shape;
  for (char c : batch + left + right) shape.push_back(size[c]);
  return {reshape(matmul(lhs, rhs), shape), batch + left + right};
}

}  // namespace

// ---- ArgMax, ArgMin, Hardmax, TopK ----

// ArgMax / ArgMin along `axis`: on the host (the result is integers), NaN counting as the
// extreme (numpy's and PyTorch's rule), the first or, with select_last_index, the last.
void op_arg_reduce(Exec& e) {
  const auto x = e.values(0, "data");
  const auto rank = static_cast<std::int64_t>(x->shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), std::max<std::int64_t>(rank, 1), "axis");
  const bool keep = e.attr_i("keepdims", 1) != 0, last = e.attr_i("select_last_index", 0) != 0;
  const bool is_max = e.node.op_type == "ArgMax";
  const Axis a = axis_of(x->shape, axis);
  if (a.size == 0) e.fail("ArgMax/ArgMin of an empty axis");
  std::vector<std::int64_t> out;
  for (std::int64_t o = 0; o < a.outer; ++o)
    for (std::int64_t i = 0; i < a.inner; ++i) {
      // NaN is the extreme (the first one, or with select_last_index the last).
      auto better = [&](double v, double bv) {
        if (std::isnan(bv)) return last && std::isnan(v);
        if (std::isnan(v)) return true;
        return is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
      };
      std::int64_t best = 0;
      double bv = x->at(o * a.size * a.inner + i);
      for (std::int64_t k = 1; k < a.size; ++k) {
        const double v = x->at((o * a.size + k) * a.inner + i);
        if (better(v, bv)) {
          best = k;
          bv = v;
        }
      }
      out.push_back(best);
    }
  Shape shape = x->shape;
  if (rank > 0) {
    if (keep) shape[static_cast<std::size_t>(axis)] = 1;
    else shape.erase(shape.begin() + axis);
  }
  e.set(0, Array::ints(shape, out));
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere (before opset 13 over the
// input flattened to 2-D at `axis`). Piecewise constant: no gradient, computed on the host.
void op_hardmax(Exec& e) {
  const auto x = e.values(0, "input");
  const auto rank = static_cast<std::int64_t>(x->shape.size());
  std::int64_t axis = norm_axis(e.attr_i("axis", e.node.opset < 13 ? 1 : -1), rank, "axis");
  Axis a = axis_of(x->shape, axis);
  if (e.node.opset < 13) a = {a.outer, a.size * a.inner, 1};
  Array o = *x;
  for (auto& v : o.f) v = 0;
  for (std::int64_t p = 0; p < a.outer; ++p)
    for (std::int64_t i = 0; i < a.inner; ++i) {
      std::int64_t best = 0;
      for (std::int64_t k = 1; k < a.size; ++k)
        if (x->at((p * a.size + k) * a.inner + i) > x->at((p * a.size + best) * a.inner + i)) best = k;
      o.f[static_cast<std::size_t>((p * a.size + best) * a.inner + i)] = 1;
    }
  e.set(0, std::move(o));
}

namespace {
// TopK's order along the axis (largest or smallest first; equal values in index order),
// as flat positions of the input, and the output shape.
std::vector<std::int64_t> topk_positions(Exec& e, const Array& x, Shape& shape, Array& indices) {
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  const std::int64_t axis = norm_axis(e.attr_i("axis", -1), rank, "axis");
  const std::int64_t k = e.node.opset < 10 ? e.attr_i("k", 0) : e.host(1, "K").int_at(0);
  const bool largest = e.attr_i("largest", 1) != 0;
  const Axis a = axis_of(x.shape, axis);
  if (k < 0 || k > a.size) e.fail("k = " + std::to_string(k) + " is out of range for an axis of " + std::to_string(a.size));
  shape = x.shape;
  shape[static_cast<std::size_t>(axis)] = k;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(numel(shape))), idx(pos.size());
  std::vector<std::int64_t> order(static_cast<std::size_t>(a.size));
  for (std::int64_t o = 0; o < a.outer; ++o)
    for (std::int64_t i = 0; i < a.inner; ++i) {
      std::iota(order.begin(), order.end(), std::int64_t{0});
      auto val = [&](std::int64_t j) { return x.at((o * a.size + j) * a.inner + i); };
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t p, std::int64_t q) {
        const double vp = val(p), vq = val(q);
        const bool np = std::isnan(vp), nq = std::isnan(vq);  // NaN is the largest
        if (np || nq) return largest ? np && !nq : !np && nq;
        return largest ? vp > vq : vp < vq;
      });
      for (std::int64_t j = 0; j < k; ++j) {
        const auto at = static_cast<std::size_t>((o * k + j) * a.inner + i);
        idx[at] = order[static_cast<std::size_t>(j)];
        pos[at] = (o * a.size + order[static_cast<std::size_t>(j)]) * a.inner + i;
      }
    }
  indices = Array::ints(shape, idx);
  return pos;
}
}  // namespace

// TopK: the order on the host; the values a gather of the input at it (their gradient goes
// back to the elements chosen), the indices integers.
void op_topk(Exec& e) {
  const auto x = e.values(0, "X");
  Shape shape;
  Array indices;
  const std::vector<std::int64_t> pos = topk_positions(e, *x, shape, indices);
  const Tensor t = e.tensor(0);
  e.set(0, reshape(take_rows(e, reshape(t, {t.numel(), 1}), pos, {static_cast<std::int64_t>(pos.size())}), shape));
  e.set(1, std::move(indices));
}

void host_topk(Exec& e) {
  const Array& x = e.host(0, "X");
  Shape shape;
  Array indices;
  const std::vector<std::int64_t> pos = topk_positions(e, x, shape, indices);
  e.set(0, take(x, shape, pos));
  e.set(1, std::move(indices));
}

// ---- gathers ----

void op_gather_elements(Exec& e) {
  const Shape data = e.shape_of(0);
  const Array& ind = *e.values(1, "indices");
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), static_cast<std::int64_t>(data.size()), "axis");
  gather_rows(e, 0, {numel(data), 1}, element_positions(e, data, ind, axis), ind.shape);
}

void op_gather_nd(Exec& e) {
  const Shape data = e.shape_of(0);
  const Array& ind = *e.values(1, "indices");
  const NdRows r = nd_rows(e, data, ind, e.attr_i("batch_dims", 0));
  Shape out = r.tuples;
  out.insert(out.end(), data.begin() + e.attr_i("batch_dims", 0) + ind.shape.back(), data.end());
  gather_rows(e, 0, {numel(data) / std::max<std::int64_t>(r.inner, 1), r.inner}, r.rows, out);
}

// ---- scatters ----

std::optional<OnnxRefusal> check_scatter(const NodeAttrs& a) {
  const std::string r = a.attr_s("reduction", "none");
  if (r != "none" && r != "add" && r != "mul")
    return OnnxRefusal{"reduction", "\"" + r + "\" (none, add and mul are supported)", "scatter with reduction none, add or mul"};
  return std::nullopt;
}

void op_scatter_elements(Exec& e) {
  const Shape data = e.shape_of(0);
  const Array& ind = *e.values(1, "indices");
  if (e.shape_of(2) != ind.shape) e.fail("updates " + to_string(e.shape_of(2)) + " and indices " + to_string(ind.shape) + " differ");
  const std::int64_t axis = norm_axis(e.attr_i("axis", 0), static_cast<std::int64_t>(data.size()), "axis");
  scatter(e, data, 1, element_positions(e, data, ind, axis));
}

void op_scatter_nd(Exec& e) {
  const Shape data = e.shape_of(0);
  const Array& ind = *e.values(1, "indices");
  const NdRows r = nd_rows(e, data, ind, 0);
  Shape want = r.tuples;
  want.insert(want.end(), data.begin() + ind.shape.back(), data.end());
  if (e.shape_of(2) != want) e.fail("updates " + to_string(e.shape_of(2)) + " should be " + to_string(want));
  scatter(e, data, r.inner, r.rows);
}

// ---- host index ops ----

// OneHot: `values` [off, on] at each index's position along a new axis of `depth`; an
// index out of range (after adding depth to a negative one) gives a row of off values.
void host_one_hot(Exec& e) {
  const auto ind = e.values(0, "indices");
  const auto depth_a = e.values(1, "depth");
  const auto vals = e.values(2, "values");
  const std::int64_t depth = depth_a->int_at(0);
  if (depth < 1 || vals->numel() != 2) e.fail("depth must be positive and values [off, on]");
  const auto rank = static_cast<std::int64_t>(ind->shape.size()) + 1;
  const std::int64_t axis = norm_axis(e.attr_i("axis", -1), rank, "axis");
  const Axis a = axis_of(ind->shape, axis);  // the new axis goes before dim `axis` of the indices
  const std::int64_t outer = a.outer, inner = ind->numel() / std::max<std::int64_t>(outer, 1);
  Shape shape = ind->shape;
  shape.insert(shape.begin() + axis, depth);
  Array o = *vals;
  o.shape = shape;
  o.f.clear();
  o.i.clear();
  for (std::int64_t p = 0; p < outer; ++p)
    for (std::int64_t d = 0; d < depth; ++d)
      for (std::int64_t i = 0; i < inner; ++i) {
        std::int64_t v = ind->int_at(p * inner + i);
        if (v < 0) v += depth;
        const std::int64_t pick = v == d ? 1 : 0;
        if (o.integer()) o.i.push_back(vals->int_at(pick));
        else o.f.push_back(vals->at(pick));
      }
  e.set(0, std::move(o));
}

void host_non_zero(Exec& e) {
  const auto x = e.values(0, "X");
  const Shape st = strides_of(x->shape);
  std::vector<std::int64_t> hits;
  for (std::int64_t k = 0; k < x->numel(); ++k)
    if (x->at(k) != 0) hits.push_back(k);
  const auto rank = static_cast<std::int64_t>(x->shape.size()), n = static_cast<std::int64_t>(hits.size());
  std::vector<std::int64_t> out(static_cast<std::size_t>(rank * n));
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t d = 0; d < rank; ++d)
      out[static_cast<std::size_t>(d * n + j)] = (hits[static_cast<std::size_t>(j)] / st[static_cast<std::size_t>(d)]) % x->shape[static_cast<std::size_t>(d)];
  e.set(0, Array::ints({rank, n}, out));
}

// Compress: the slices along `axis` (or of the flattened input) whose condition holds.
void op_compress(Exec& e) {
  const Shape data = e.shape_of(0);
  const auto cond = e.values(1, "condition");
  const Attribute* axis_attr = e.attr("axis");
  const std::int64_t axis = axis_attr ? norm_axis(e.attr_i("axis", 0), static_cast<std::int64_t>(data.size()), "axis") : 0;
  const Shape flat = axis_attr ? data : Shape{numel(data)};
  const Axis a = axis_of(flat, axis);
  if (cond->numel() > a.size) e.fail("the condition has " + std::to_string(cond->numel()) + " values for " + std::to_string(a.size) + " slices");
  std::vector<std::int64_t> keep;
  for (std::int64_t k = 0; k < cond->numel(); ++k)
    if (cond->at(k) != 0) keep.push_back(k);
  std::vector<std::int64_t> rows;
  for (std::int64_t o = 0; o < a.outer; ++o)
    for (std::int64_t k : keep)
      for (std::int64_t i = 0; i < a.inner; ++i) rows.push_back((o * a.size + k) * a.inner + i);
  Shape out = flat;
  out[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(keep.size());
  gather_rows(e, 0, {numel(data), 1}, rows, out);
}

// ReverseSequence: the first sequence_lens[b] steps of each batch element reversed.
void op_reverse_sequence(Exec& e) {
  const Shape data = e.shape_of(0);
  const auto lens = e.values(1, "sequence_lens");
  const std::int64_t ta = e.attr_i("time_axis", 0), ba = e.attr_i("batch_axis", 1);
  if (data.size() < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0))) e.fail("time_axis and batch_axis must be 0 and 1");
  const std::int64_t t_size = data[static_cast<std::size_t>(ta)], b_size = data[static_cast<std::size_t>(ba)];
  if (lens->numel() != b_size) e.fail("sequence_lens has " + std::to_string(lens->numel()) + " values for a batch of " + std::to_string(b_size));
  const std::int64_t inner = numel(data) / std::max<std::int64_t>(t_size * b_size, 1);
  std::vector<std::int64_t> rows;
  for (std::int64_t p = 0; p < data[0]; ++p)
    for (std::int64_t q = 0; q < data[1]; ++q) {
      const std::int64_t t = ta == 0 ? p : q, b = ta == 0 ? q : p;
      const std::int64_t len = std::clamp<std::int64_t>(lens->int_at(b), 0, t_size);
      const std::int64_t src = t < len ? len - 1 - t : t;
      rows.push_back(ta == 0 ? src * b_size + b : b * t_size + src);
    }
  gather_rows(e, 0, {t_size * b_size, inner}, rows, data);
}

// Unique: the distinct values (or slices along `axis`), sorted or in order of first
// occurrence, found on the host from the values. Y gathers them from X (the gradient goes
// to each first occurrence); indices, inverse_indices and counts are integers.
void op_unique(Exec& e) {
  const auto x = e.values(0, "X");
  const bool by_axis = e.attr("axis") != nullptr;
  const bool sorted = e.attr_i("sorted", 1) != 0;
  const Shape flat = by_axis ? x->shape : Shape{x->numel()};
  const std::int64_t axis = by_axis ? norm_axis(e.attr_i("axis", 0), static_cast<std::int64_t>(flat.size()), "axis") : 0;
  const Axis a = axis_of(flat, axis);
  std::map<std::vector<double>, std::int64_t> seen;  // a slice's values -> its unique's number
  std::vector<std::int64_t> firsts, counts, inverse;
  for (std::int64_t k = 0; k < a.size; ++k) {
    std::vector<double> key;
    for (std::int64_t o = 0; o < a.outer; ++o)
      for (std::int64_t i = 0; i < a.inner; ++i) key.push_back(x->at((o * a.size + k) * a.inner + i));
    const auto [it, added] = seen.emplace(std::move(key), static_cast<std::int64_t>(firsts.size()));
    if (added) {
      firsts.push_back(k);
      counts.push_back(0);
    }
    ++counts[static_cast<std::size_t>(it->second)];
    inverse.push_back(it->second);
  }
  // The order of the output: first occurrences, or the slices' sorted (lexicographic) order.
  std::vector<std::int64_t> order(firsts.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (sorted) {
    std::int64_t rank = 0;
    for (const auto& [key, number] : seen) order[static_cast<std::size_t>(rank++)] = number;
  }
  std::vector<std::int64_t> position(order.size()), take_at, counted;
  for (std::size_t r = 0; r < order.size(); ++r) {
    position[static_cast<std::size_t>(order[r])] = static_cast<std::int64_t>(r);
    take_at.push_back(firsts[static_cast<std::size_t>(order[r])]);
    counted.push_back(counts[static_cast<std::size_t>(order[r])]);
  }
  for (auto& v : inverse) v = position[static_cast<std::size_t>(v)];
  Shape out = flat;
  out[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(take_at.size());
  if (e.is_host(0)) {
    std::vector<std::int64_t> idx;
    for (std::int64_t o = 0; o < a.outer; ++o)
      for (std::int64_t k : take_at)
        for (std::int64_t i = 0; i < a.inner; ++i) idx.push_back((o * a.size + k) * a.inner + i);
    e.set(0, take(*x, out, idx));
  } else {
    e.set(0, take_along(e, reshape(e.tensor(0), flat), axis, take_at));
  }
  const auto n = static_cast<std::int64_t>(take_at.size());
  if (e.has_output(1)) e.set(1, Array::ints({n}, take_at));
  if (e.has_output(2)) e.set(2, Array::ints({a.size}, inverse));
  if (e.has_output(3)) e.set(3, Array::ints({n}, counted));
}

// ---- Einsum ----

std::optional<OnnxRefusal> check_einsum(const NodeAttrs& a) {
  const std::string eq = a.attr_s("equation", "");
  const Equation q = parse_equation(eq);
  for (const std::string& t : q.inputs) {
    const std::string l = letters(t);
    for (std::size_t i = 0; i < l.size(); ++i)
      if (l.find(l[i], i + 1) != std::string::npos)
        return OnnxRefusal{"equation", "\"" + eq + "\" repeats label '" + std::string(1, l[i]) + "' in one operand (a diagonal)",
                           "take the diagonal with torch.diagonal before the einsum"};
  }
  return std::nullopt;
}

// Einsum as registry ops: labels only one operand has and the output lacks are summed
// out, operands are contracted left to right by one batched matmul each (their shared
// labels that are still needed stay batch dims), and the result is permuted to the output.
void op_einsum(Exec& e) {
  const Equation q = parse_equation(e.attr_s("equation", ""));
  std::size_t n = 0;
  for (std::size_t k = 0; k < e.in.size(); ++k) n += e.has(k);
  if (q.inputs.size() != n) e.fail("the equation has " + std::to_string(q.inputs.size()) + " terms for " + std::to_string(n) + " inputs");
  std::int64_t ell = 0;
  for (std::size_t k = 0; k < n; ++k)
    if (q.inputs[k].find("...") != std::string::npos)
      ell = std::max<std::int64_t>(ell, static_cast<std::int64_t>(e.shape_of(k).size()) - static_cast<std::int64_t>(letters(q.inputs[k]).size()));
  std::vector<Operand> ops;
  for (std::size_t k = 0; k < n; ++k) {
    const Tensor t = e.tensor(k);
    if (!is_floating(t.dtype())) e.fail("Einsum of integer tensors is not supported");
    ops.push_back({t, expand_ellipsis(e, q.inputs[k], t.dim(), ell)});
  }
  std::string out;
  if (q.explicit_output) {
    std::string dims;
    for (std::int64_t k = 0; k < ell; ++k) dims += static_cast<char>('0' + k);
    const std::size_t dots = q.output.find("...");
    out = dots == std::string::npos ? q.output : q.output.substr(0, dots) + dims + q.output.substr(dots + 3);
  } else {  // numpy's implicit output: the ellipsis dims, then the labels seen once, sorted
    std::map<char, int> seen;
    for (const Operand& o : ops)
      for (char c : o.labels) ++seen[c];
    for (std::int64_t k = 0; k < ell; ++k) out += static_cast<char>('0' + k);
    for (const auto& [c, count] : seen)
      if (count == 1 && !(c >= '0' && c <= '9')) out += c;
  }
  for (char c : out) {
    bool found = false;
    for (const Operand& o : ops) found = found || o.labels.find(c) != std::string::npos;
    if (!found) e.fail("output label '" + std::string(1, c) + "' is in no input");
  }
  Operand acc = ops[0];
  for (std::size_t k = 1; k < ops.size(); ++k) {
    std::set<char> keep(out.begin(), out.end());
    for (std::size_t j = k + 1; j < ops.size(); ++j) keep.insert(ops[j].labels.begin(), ops[j].labels.end());
    acc = contract(e, acc, ops[k], keep);
  }
  sum_labels(acc, std::set<char>(out.begin(), out.end()));
  Shape shape;
  for (char c : out) shape.push_back(acc.t.size(static_cast<std::int64_t>(acc.labels.find(c))));
  Tensor y = permuted(acc, out);
  e.set(0, y.shape() == shape ? y : reshape(y, shape));
}

// ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----

std::optional<OnnxRefusal> check_loss(const NodeAttrs& a) {
  const std::string r = a.attr_s("reduction", "mean");
  if (r != "none" && r != "sum" && r != "mean")
    return OnnxRefusal{"reduction", "\"" + r + "\" is not one ONNX defines", "use none, sum or mean"};
  return std::nullopt;
}

// -x[n, target, d...] * weight[target] per element (0 where target is ignore_index), then
// reduced: none, sum, or mean = sum / the sum of the weights taken. SoftmaxCrossEntropyLoss
// is that on log_softmax over the classes (dim 1), which it may also return.
void op_nll_loss(Exec& e) {
  Tensor x = e.tensor(0);
  const bool softmax_form = e.node.op_type == "SoftmaxCrossEntropyLoss";
  if (x.dim() < 2) e.fail("takes [N, C, ...], got " + to_string(x.shape()));
  if (softmax_form) {
    x = log_softmax(x, 1);
    if (e.has_output(1)) e.set(1, x);
  }
  const auto target = e.values(1, "target");
  const std::int64_t n = x.size(0), c = x.size(1);
  Shape tshape = {n};
  for (std::int64_t d = 2; d < x.dim(); ++d) tshape.push_back(x.size(d));
  if (target->shape != tshape) e.fail("target " + to_string(target->shape) + " should be " + to_string(tshape));
  const Attribute* ignore_attr = e.attr("ignore_index");
  const std::int64_t ignore = e.attr_i("ignore_index", 0);
  const std::int64_t m = target->numel(), inner = m / n;
  std::vector<std::int64_t> rows, cls;
  std::vector<double> taken;  // 1 for an element that counts, 0 for one ignored
  for (std::int64_t k = 0; k < m; ++k) {
    const std::int64_t t = target->int_at(k);
    const bool ignored = ignore_attr && t == ignore;
    if (!ignored && (t < 0 || t >= c)) e.fail("target " + std::to_string(t) + " is out of range for " + std::to_string(c) + " classes");
    const std::int64_t cl = ignored ? 0 : t;
    cls.push_back(cl);
    rows.push_back(((k / inner) * c + cl) * inner + k % inner);  // [N, C, inner] flattened
    taken.push_back(ignored ? 0 : 1);
  }
  const Tensor picked = reshape(take_rows(e, reshape(x, {x.numel(), 1}), rows, {m}), tshape);
  const Tensor counts = Tensor::from(taken, tshape, DType::f64).to(x.dtype()).to(e.device);
  Tensor w = counts;
  double total = std::accumulate(taken.begin(), taken.end(), 0.0);
  const bool weighted = e.has(2);
  if (weighted) {
    const Tensor weight = e.tensor(2);
    w = mul(reshape(take_rows(e, reshape(weight, {c, 1}), cls, {m}), tshape), counts);
  }
  const Tensor loss = neg(mul(picked, w));
  const std::string reduction = e.attr_s("reduction", "mean");
  if (reduction == "none") return e.set(0, loss);
  const Tensor s = sum(loss);
  if (reduction == "sum") return e.set(0, s);
  e.set(0, weighted ? div(s, sum(w)) : div(s, total));
}

}  // namespace ampcheck::models::onnx_impl
