// The values a graph makes rather than reads: Constant, ConstantOfShape, Range, EyeLike and
// Trilu. They are host arrays (positions, causal masks, fills of a computed shape), so the
// shape arithmetic can read them, and no gradient flows into them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {

void op_constant(Exec& e) {
  if (const Attribute* a = e.attr("value")) {
    if (a->kind != Attribute::Kind::t) e.fail("attribute \"value\" must be a tensor");
    return e.set(0, a->t);
  }
  if (const Attribute* a = e.attr("value_float")) return e.set(0, Array::floats({}, {a->f}));
  if (const Attribute* a = e.attr("value_floats"))
    return e.set(0, Array::floats({static_cast<std::int64_t>(a->floats.size())}, a->floats));
  if (const Attribute* a = e.attr("value_int")) return e.set(0, Array::ints({}, {a->i}));
  if (const Attribute* a = e.attr("value_ints"))
    return e.set(0, Array::ints({static_cast<std::int64_t>(a->ints.size())}, a->ints));
  e.fail("a Constant needs \"value\", \"value_float(s)\" or \"value_int(s)\" (sparse and string constants are not supported)");
}

std::optional<OnnxRefusal> check_constant(const NodeAttrs& a) {
  for (const char* k : {"value", "value_float", "value_floats", "value_int", "value_ints"})
    if (a.attr(k)) return std::nullopt;
  const std::string given = a.node.attributes.empty() ? "none" : a.node.attributes.begin()->first;
  return OnnxRefusal{given, "a Constant of " + given + " (tensor, float(s) and int(s) values are supported; sparse and string ones are not)",
                     "keep string and sparse constants out of the exported graph"};
}

void op_constant_of_shape(Exec& e) {
  const Array& s = e.host(0, "shape");
  Shape shape;
  for (std::int64_t k = 0; k < s.numel(); ++k) shape.push_back(s.int_at(k));
  Array v = Array::floats({1}, {0.0});
  if (const Attribute* a = e.attr("value")) {
    if (a->kind != Attribute::Kind::t || a->t.numel() != 1) e.fail("attribute \"value\" must be a one-element tensor");
    v = a->t;
  }
  Array o = v;
  o.shape = shape;
  const std::int64_t n = host_elements(shape);
  if (v.integer()) o.i.assign(static_cast<std::size_t>(n), v.i[0]);
  else o.f.assign(static_cast<std::size_t>(n), v.f[0]);
  e.set(0, std::move(o));
}

void op_range(Exec& e) {
  const Array &s = e.host(0, "start"), &l = e.host(1, "limit"), &d = e.host(2, "delta");
  if (s.integer()) {
    const std::int64_t a = s.int_at(0), b = l.int_at(0), st = d.int_at(0);
    if (st == 0) e.fail("delta is 0");
    // The count as ONNX defines it, max(ceil((limit - start) / delta), 0), in 128 bits: the
    // difference of two int64 can overflow, and x += delta past INT64_MAX would never end.
    __extension__ typedef __int128 Wide;  // GCC's and clang's 128-bit integer
    const Wide span = static_cast<Wide>(b) - a;
    const Wide count = span / st + (span % st != 0 && (span > 0) == (st > 0) ? 1 : 0);
    const std::int64_t n = count <= 0 ? 0 : count > std::numeric_limits<std::int64_t>::max() ? -1 : static_cast<std::int64_t>(count);
    if (n < 0) e.fail("start " + std::to_string(a) + ", limit " + std::to_string(b) + ", delta " + std::to_string(st) + " make more elements than int64 counts");
    host_elements({n});
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    // Each element lies between start and limit, but k * delta alone may not fit in int64.
    for (std::int64_t k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(a + static_cast<Wide>(k) * st);
    return e.set(0, Array::ints({n}, v));
  }
  const double a = s.at(0), b = l.at(0), st = d.at(0);
  if (st == 0) e.fail("delta is 0");
  const double count = std::max(0.0, std::ceil((b - a) / st));
  if (!std::isfinite(count) || count > 9.0e18)
    e.fail("start " + std::to_string(a) + ", limit " + std::to_string(b) + ", delta " + std::to_string(st) + " make no finite count of elements");
  const auto n = static_cast<std::int64_t>(count);
  host_elements({n});
  std::vector<double> v;
  for (std::int64_t k = 0; k < n; ++k) v.push_back(a + static_cast<double>(k) * st);
  e.set(0, Array::floats({n}, v, s.dtype));
}

// EyeLike: ones on diagonal k of a 2-D shape, on the host (a constant of the input's shape).
void host_eye_like(Exec& e) {
  const Shape s = e.shape_of(0);
  if (s.size() != 2) e.fail("takes a 2-D input, got " + to_string(s));
  const std::int64_t k = e.attr_i("k", 0);
  const Attribute* dt = e.attr("dtype");
  std::optional<CastTarget> t = dt ? cast_target(e.attr_i("dtype", 1)) : std::nullopt;
  if (dt && !t) e.fail("dtype " + std::to_string(e.attr_i("dtype", 1)) + " is not supported");
  const bool integer = t ? t->integer : e.in[0].host ? e.in[0].host->integer() : !is_floating(e.in[0].t.dtype());
  std::vector<double> v;
  for (std::int64_t r = 0; r < s[0]; ++r)
    for (std::int64_t c = 0; c < s[1]; ++c) v.push_back(c - r == k ? 1 : 0);
  if (integer) {
    Array o = Array::ints(s, std::vector<std::int64_t>(v.begin(), v.end()));
    if (t) o.stored = t->stored;
    return e.set(0, std::move(o));
  }
  e.set(0, Array::floats(s, v, t ? t->dtype : e.in[0].host ? e.in[0].host->dtype : e.in[0].t.dtype()));
}

// Trilu on the host (causal masks).
void host_trilu(Exec& e) {
  Array a = e.host(0, "input");
  if (a.shape.size() < 2) e.fail("takes at least 2 dims");
  const std::int64_t k = e.has(1) ? e.host(1, "k").int_at(0) : 0;
  const bool upper = e.attr_i("upper", 1) != 0;
  const std::int64_t rows = a.shape[a.shape.size() - 2], cols = a.shape.back();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    if (keep) continue;
    if (a.integer()) a.i[static_cast<std::size_t>(i)] = 0;
    else a.f[static_cast<std::size_t>(i)] = 0;
  }
  e.set(0, std::move(a));
}

}  // namespace ampcheck::models::onnx_impl
