// F.scaled_dot_product_attention as the model ran it. PyTorch's exporters write it out as
// plain ONNX nodes, in one recognisable form (torch/onnx/symbolic_opset14.py and torchlib's
// aten_scaled_dot_product_attention): the scale split over both operands,
//   Mul(Q, sqrt(s)), Mul(Transpose(K, swap the last two), sqrt(s)) -> MatMul
//   -> [Add(mask)] -> Softmax(last axis) -> [Where(IsNaN(P), 0, P)] -> MatMul(., V)
// with a causal mask as a constant of 0 and -inf, and a boolean mask as a Where of 0 and
// -inf followed by the safe softmax (a query that sees no key gets zeros, as the op does;
// the op keeps a NaN of its inputs, as PyTorch's own _safe_softmax does). Attention written by hand (nanoGPT's
// slow path, `(q @ k.transpose(-2, -1)) / sqrt(d)`) scales after the product and is not
// this form: it runs node by node, as its framework ran it, where every op of it can be
// black-listed. The SDPA form runs as one scaled_dot_product_attention, as the framework
// ran it (fused on a GPU), named by PyTorch's op in every report.
//
// Found once, at load (find_attention): the nodes of each such group, each intermediate
// value read by the group's next node only. Each run checks what only values tell (the
// scales are one-element constants, the Transpose permutes K's dims, the softmax axis
// is the last, the mask broadcasts to the scores, the dtypes agree); where one
// does not hold, the group's nodes run one by one instead (run_attention returns nothing).
#include <cmath>
#include <limits>
#include <map>

#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {
namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// The input index of a Mul's non-scale operand: the other one is produced by no node of the
// graph that takes the data (a constant, an initializer, or a Sqrt of one); decided at run.
bool one_element_float(const Value& v) {
  return v.host != nullptr && v.host->numel() == 1 && !v.host->integer();
}

// Whether a host mask is exactly PyTorch's is_causal mask over its last two dims: 0 where
// key j <= query i, -inf (or float32's lowest, as transformers writes it) where j > i, the
// same for every leading index.
bool is_causal_mask(const Array& m, std::int64_t tq, std::int64_t tk) {
  if (m.integer() || m.shape.size() < 2) return false;
  if (m.shape[m.shape.size() - 2] != tq || m.shape.back() != tk) return false;
  const double lowest = std::numeric_limits<float>::lowest();
  const std::int64_t n = m.numel();
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t j = k % tk, i = (k / tk) % tq;
    const double v = m.at(k);
    if (j <= i ? v != 0 : !(v == -std::numeric_limits<double>::infinity() || v == lowest)) return false;
  }
  return true;
}

}  // namespace

std::vector<AttentionGroup> find_attention(const Graph& g, const std::set<std::string>& graph_outputs) {
  std::map<std::string, std::size_t> producer;
  std::map<std::string, int> readers;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    for (const std::string& o : g.nodes[k].outputs)
      if (!o.empty()) producer[o] = k;
    for (const std::string& i : g.nodes[k].inputs)
      if (!i.empty()) ++readers[i];
  }
  // The node that makes `value`, when it is of `type`, in the default domain, and `value`
  // is read by one node only and is not an output of the graph.
  auto sole = [&](const std::string& value, const char* type) -> std::size_t {
    const auto p = producer.find(value);
    if (p == producer.end() || readers[value] != 1 || graph_outputs.count(value)) return kNone;
    const Node& n = g.nodes[p->second];
    return n.op_type == type && n.domain.empty() && n.outputs.size() == 1 ? p->second : kNone;
  };
  std::vector<AttentionGroup> groups;
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& out = g.nodes[k];
    if (out.op_type != "MatMul" || !out.domain.empty() || out.inputs.size() != 2) continue;
    AttentionGroup a;
    a.out = k;
    a.softmax = sole(out.inputs[0], "Softmax");
    if (a.softmax == kNone) {
      // The exporters' safe softmax (a boolean mask, torch 2.5+):
      // Where(IsNaN(P), 0, P), P = Softmax(...) read by those two nodes only.
      a.safe_where = sole(out.inputs[0], "Where");
      if (a.safe_where == kNone) continue;
      const Node& w = g.nodes[a.safe_where];
      if (w.inputs.size() != 3) continue;
      a.is_nan = sole(w.inputs[0], "IsNaN");
      const auto p = producer.find(w.inputs[2]);
      if (a.is_nan == kNone || p == producer.end() || g.nodes[a.is_nan].inputs.size() != 1 ||
          g.nodes[a.is_nan].inputs[0] != w.inputs[2] || readers[w.inputs[2]] != 2 || graph_outputs.count(w.inputs[2]))
        continue;
      const Node& sm = g.nodes[p->second];
      if (sm.op_type != "Softmax" || !sm.domain.empty() || sm.outputs.size() != 1) continue;
      a.softmax = p->second;
    }
    const std::string& scores_or_sum = g.nodes[a.softmax].inputs.at(0);
    a.add = sole(scores_or_sum, "Add");
    if (a.add != kNone) {
      const Node& add = g.nodes[a.add];
      if (add.inputs.size() != 2) continue;
      for (std::size_t side = 0; side < 2 && a.scores == kNone; ++side) {
        a.scores = sole(add.inputs[side], "MatMul");
        a.mask_input = 1 - side;
      }
    } else {
      a.scores = sole(scores_or_sum, "MatMul");
    }
    if (a.scores == kNone) continue;
    const Node& scores = g.nodes[a.scores];
    if (scores.inputs.size() != 2) continue;
    a.mul_q = sole(scores.inputs[0], "Mul");
    a.mul_k = sole(scores.inputs[1], "Mul");
    if (a.mul_q == kNone || a.mul_k == kNone) continue;
    const Node& mul_k = g.nodes[a.mul_k];
    if (mul_k.inputs.size() != 2) continue;
    for (std::size_t side = 0; side < 2 && a.transpose_k == kNone; ++side) {
      a.transpose_k = sole(mul_k.inputs[side], "Transpose");
      a.k_side = side;
    }
    if (a.transpose_k == kNone || g.nodes[a.mul_q].inputs.size() != 2) continue;
    groups.push_back(a);
  }
  return groups;
}

std::vector<std::size_t> AttentionGroup::nodes() const {
  std::vector<std::size_t> n = {mul_q, transpose_k, mul_k, scores};
  if (add != kNone) n.push_back(add);
  n.push_back(softmax);
  if (safe_where != kNone) {
    n.push_back(is_nan);
    n.push_back(safe_where);
  }
  n.push_back(out);
  return n;
}

std::optional<Tensor> run_attention(const AttentionGroup& a, const Graph& g,
                                    const std::function<Value(const std::string&)>& value, Device device,
                                    ExecContext& model) {
  const Node& mul_q = g.nodes[a.mul_q];
  const Node& mul_k = g.nodes[a.mul_k];
  const Node& transpose = g.nodes[a.transpose_k];
  const Node& softmax_node = g.nodes[a.softmax];
  // Q's Mul: one operand the data, the other a one-element constant; K's likewise.
  const Value q0 = value(mul_q.inputs[0]), q1 = value(mul_q.inputs[1]);
  const bool q_scale_second = one_element_float(q1);
  if (!q_scale_second && !one_element_float(q0)) return std::nullopt;
  const Value& q = q_scale_second ? q0 : q1;
  const Value k_scale = value(mul_k.inputs[1 - a.k_side]);
  if (!one_element_float(k_scale) || transpose.inputs.empty()) return std::nullopt;
  const Value k_source = value(transpose.inputs[0]);
  const Value v = value(g.nodes[a.out].inputs[1]);
  if (a.safe_where != kNone) {
    // The safe softmax fills 0 where P is NaN: the op's own rule for a fully masked query.
    const Value fill = value(g.nodes[a.safe_where].inputs[1]);
    if (!one_element_float(fill) || fill.host->at(0) != 0) return std::nullopt;
  }
  if (!q.t.defined() || !k_source.t.defined() || !v.t.defined()) return std::nullopt;
  const Tensor& qt = q.t;
  const Tensor& vt = v.t;
  const std::int64_t rank = qt.dim();
  if (rank < 2 || k_source.t.dim() != rank || vt.dim() != rank) return std::nullopt;
  // The Transpose makes K^T: K is its input permuted the same way but for the last two
  // dims (the exporter folds the heads' transpose into it: perm [0, 2, 3, 1] of [B, T, H,
  // E]); where that is no permutation at all, K is the input itself.
  const NodeAttrs t_attrs{transpose};
  auto perm = t_attrs.attr_ints("perm");
  if (!perm || static_cast<std::int64_t>(perm->size()) != rank) return std::nullopt;
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  for (const std::int64_t d : *perm) {
    if (d < 0 || d >= rank || seen[static_cast<std::size_t>(d)]) return std::nullopt;
    seen[static_cast<std::size_t>(d)] = true;
  }
  std::swap((*perm)[static_cast<std::size_t>(rank - 2)], (*perm)[static_cast<std::size_t>(rank - 1)]);
  bool identity = true;
  for (std::int64_t d = 0; d < rank; ++d) identity = identity && (*perm)[static_cast<std::size_t>(d)] == d;
  Shape ks;  // K's shape
  for (const std::int64_t d : *perm) ks.push_back(k_source.t.shape()[static_cast<std::size_t>(d)]);
  if (qt.dtype() != k_source.t.dtype() || qt.dtype() != vt.dtype() || !is_floating(qt.dtype())) return std::nullopt;
  // The softmax runs along the last axis (opset 13's default; an older opset's axis flattens
  // the dims after it, which is the last axis only when it is the last).
  const NodeAttrs s_attrs{softmax_node};
  const std::int64_t axis = s_attrs.attr_i("axis", softmax_node.opset < 13 ? 1 : -1);
  if (axis != -1 && axis != rank - 1) return std::nullopt;
  const Shape& qs = qt.shape();
  if (Shape(qs.begin(), qs.end() - 2) != Shape(ks.begin(), ks.end() - 2) ||
      Shape(qs.begin(), qs.end() - 2) != Shape(vt.shape().begin(), vt.shape().end() - 2) || qs.back() != ks.back() ||
      ks[ks.size() - 2] != vt.shape()[vt.shape().size() - 2])
    return std::nullopt;
  const std::int64_t tq = qs[qs.size() - 2], tk = ks[ks.size() - 2];
  const double scale = (q_scale_second ? q1 : q0).host->at(0) * k_scale.host->at(0);

  Tensor mask;
  bool causal = false;
  if (a.add != kNone) {
    const Value m = value(g.nodes[a.add].inputs[a.mask_input]);
    if (!m.defined()) return std::nullopt;
    Shape scores = Shape(qs.begin(), qs.end() - 2);
    scores.push_back(tq);
    scores.push_back(tk);
    const Shape ms = m.t.defined() ? m.t.shape() : m.host->shape;
    if (ms.size() > scores.size()) return std::nullopt;
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const std::int64_t md = ms[ms.size() - 1 - i], sd = scores[scores.size() - 1 - i];
      if (md != 1 && md != sd) return std::nullopt;  // the mask would widen the scores
    }
    if (m.host != nullptr && is_causal_mask(*m.host, tq, tk)) {
      causal = true;
    } else {
      if (m.host != nullptr && m.host->integer()) return std::nullopt;
      mask = m.t.defined() ? m.t : model.host_tensor(m.host, device);
      if (!is_floating(mask.dtype())) return std::nullopt;
    }
  }
  const Tensor kt = identity ? k_source.t : permute(k_source.t, *perm);
  return scaled_dot_product_attention(qt, kt, vt, mask, scale, causal);
}

}  // namespace ampcheck::models::onnx_impl
