// LSTM, GRU and RNN as registry ops, one time step after another, so autograd trains them
// (back-propagation through time) and the AMP policy sees each GEMM and activation:
//   - the input projection of every step at once: X W^T + Wb, one linear over [T*B, I];
//   - per step: H R^T + Rb (one linear), the gates as slices of that sum, their
//     activations, and the state update, with ONNX's equations (onnx/defs/rnn/defs.cc);
//   - sequence_lens: a step past a sequence's end keeps its state and outputs zeros; the
//     reverse direction reads each sequence backwards from its own last step (a gather of
//     the projected inputs, and of the outputs back).
// Supported: directions forward, reverse and bidirectional, layout 0 and 1, initial states,
// LSTM peepholes, GRU linear_before_reset 0 and 1 (PyTorch exports 1), the activations
// Sigmoid, Tanh, Relu and HardSigmoid. Refused before anything runs: clip, input_forget and
// other activations.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {
namespace {

int gates_of(const std::string& op) { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
std::size_t activations_per_direction(const std::string& op) { return op == "LSTM" ? 3 : op == "GRU" ? 2 : 1; }
std::vector<std::string> default_activations(const std::string& op) {
  if (op == "LSTM") return {"Sigmoid", "Tanh", "Tanh"};
  if (op == "GRU") return {"Sigmoid", "Tanh"};
  return {"Tanh"};
}

std::string canonical(std::string name) {
  std::string low = name;
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* known : {"Sigmoid", "Tanh", "Relu", "HardSigmoid"}) {
    std::string k = known;
    std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (k == low) return known;
  }
  return "";
}

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  Tensor operator()(const Tensor& x) const {
    if (name == "Sigmoid") return sigmoid(x);
    if (name == "Tanh") return tanh(x);
    if (name == "Relu") return relu(x);
    return clamp(add(mul(x, alpha), beta), 0, 1);  // HardSigmoid
  }
};

// The activations of each direction, with activation_alpha/beta consumed in order by the
// ones that take them (as onnxruntime reads them).
std::vector<std::vector<Activation>> activations_of(const NodeAttrs& a, std::int64_t directions) {
  const std::string& op = a.node.op_type;
  const std::size_t per = activations_per_direction(op);
  std::vector<std::string> names = a.attr_strings("activations").value_or(std::vector<std::string>{});
  if (names.empty())
    for (std::int64_t d = 0; d < directions; ++d)
      for (const auto& n : default_activations(op)) names.push_back(n);
  if (names.size() == per && directions == 2) names.insert(names.end(), names.begin(), names.end());
  const std::vector<double> alphas = a.attr_floats("activation_alpha").value_or(std::vector<double>{});
  const std::vector<double> betas = a.attr_floats("activation_beta").value_or(std::vector<double>{});
  std::size_t next_alpha = 0, next_beta = 0;
  std::vector<std::vector<Activation>> out(static_cast<std::size_t>(directions));
  for (std::size_t k = 0; k < names.size(); ++k) {
    Activation act{canonical(names[k])};
    if (act.name == "HardSigmoid") {
      act.alpha = next_alpha < alphas.size() ? alphas[next_alpha++] : 0.2;
      act.beta = next_beta < betas.size() ? betas[next_beta++] : 0.5;
    }
    out[k / per].push_back(act);
  }
  return out;
}

std::int64_t directions_of(const NodeAttrs& a) { return a.attr_s("direction", "forward") == "bidirectional" ? 2 : 1; }

// Slice k of dim 0, without the dim.
Tensor part(const Tensor& t, std::int64_t k) {
  Shape s = t.shape();
  s.erase(s.begin());
  return reshape(slice(t, 0, k, k + 1), s);
}

// Rows `rows` of a [T*B, F] tensor (the reverse direction's per-sequence reading order).
Tensor reorder(const Exec& e, const Tensor& t, const std::vector<std::int64_t>& rows) {
  return take_rows(e, t, rows, {static_cast<std::int64_t>(rows.size())});
}

// Whether every direction's activations are those of PyTorch's layer of this type: LSTM
// Sigmoid, Tanh, Tanh; GRU Sigmoid, Tanh; RNN Tanh or Relu.
bool standard_activations(const std::string& op, const std::vector<std::vector<Activation>>& acts) {
  for (const auto& f : acts) {
    if (op == "LSTM" && !(f[0].name == "Sigmoid" && f[1].name == "Tanh" && f[2].name == "Tanh")) return false;
    if (op == "GRU" && !(f[0].name == "Sigmoid" && f[1].name == "Tanh")) return false;
    if (op == "RNN" && f[0].name != "Tanh" && f[0].name != "Relu") return false;
  }
  for (const auto& f : acts)
    if (op == "RNN" && f[0].name != acts[0][0].name) return false;
  return true;
}

// ONNX's gate blocks of W, R and B (LSTM i, o, f, c; GRU z, r, h) in PyTorch's order
// (LSTM i, f, g, o; GRU r, z, n): slices of the file's tensors, so the gradients reach them.
Tensor pytorch_gates(const Tensor& m, const std::string& op, std::int64_t hidden) {
  std::vector<std::int64_t> order;
  if (op == "LSTM") order = {0, 2, 3, 1};
  else if (op == "GRU") order = {1, 0, 2};
  else return m;
  std::vector<Tensor> blocks;
  for (std::int64_t k : order) blocks.push_back(slice(m, 0, k * hidden, (k + 1) * hidden));
  return concat(blocks, 0);
}

// One direction as one op: x [T, B, I] in time order, the direction's W [G*H, I], R, B
// [2*G*H], h0, c0 [B, H] (absent: zeros); the reverse direction reads the steps backwards
// and its outputs are put back in time order.
Tensor whole_layer(const Exec& e, Tensor x, const Tensor& w, const Tensor& r, const Tensor& b, const Tensor& h0,
                   const Tensor& c0, const std::vector<Activation>& f, bool reverse) {
  const std::string& op = e.node.op_type;
  const std::int64_t steps = x.size(0), batch = x.size(1), hidden = r.size(1);
  std::vector<std::int64_t> backwards;
  if (reverse) {
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t s = 0; s < batch; ++s) backwards.push_back((steps - 1 - t) * batch + s);
    x = reshape(reorder(e, reshape(x, {steps * batch, x.size(2)}), backwards), {steps, batch, x.size(2)});
  }
  RnnInputs in;
  in.x = x;
  in.w_ih = pytorch_gates(w, op, hidden);
  in.w_hh = pytorch_gates(r, op, hidden);
  if (b.defined()) {
    const std::int64_t gh = b.size(0) / 2;
    in.b_ih = pytorch_gates(slice(b, 0, 0, gh), op, hidden);
    in.b_hh = pytorch_gates(slice(b, 0, gh, 2 * gh), op, hidden);
  }
  in.h0 = h0;
  in.c0 = c0;
  Tensor y = op == "LSTM" ? lstm(in) : op == "GRU" ? gru(in) : f[0].name == "Relu" ? rnn_relu(in) : rnn_tanh(in);
  if (reverse) y = reshape(reorder(e, reshape(y, {steps * batch, hidden}), backwards), {steps, batch, hidden});
  return y;
}

}  // namespace

std::optional<OnnxRefusal> check_recurrent(const NodeAttrs& a) {
  const std::string& op = a.node.op_type;
  const std::string direction = a.attr_s("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return OnnxRefusal{"direction", "\"" + direction + "\" is not forward, reverse or bidirectional", "export a standard " + op};
  if (const std::int64_t layout = a.attr_i("layout", 0); layout != 0 && layout != 1)
    return OnnxRefusal{"layout", std::to_string(layout) + " is not 0 or 1", "export a standard " + op};
  if (a.attr("clip")) {
    std::ostringstream clip;
    clip << a.attr_f("clip", 0);
    return OnnxRefusal{"clip", "the cell clip " + clip.str(),
                       "export the " + op + " without clip (PyTorch's nn." + op + " has none)"};
  }
  if (op == "LSTM" && a.attr_i("input_forget", 0) != 0)
    return OnnxRefusal{"input_forget", "coupled input and forget gates (input_forget 1)",
                       "export an LSTM without input_forget (PyTorch's nn.LSTM has none)"};
  if (const auto names = a.attr_strings("activations")) {
    const std::size_t per = activations_per_direction(op);
    const auto directions = static_cast<std::size_t>(directions_of(a));
    if (names->size() != per && names->size() != per * directions)
      return OnnxRefusal{"activations", std::to_string(names->size()) + " activations for " + std::to_string(directions) +
                                            " direction(s) of " + std::to_string(per) + " each",
                         "give " + std::to_string(per) + " per direction"};
    for (const std::string& n : *names)
      if (canonical(n).empty())
        return OnnxRefusal{"activations", "activation \"" + n + "\" (Sigmoid, Tanh, Relu and HardSigmoid are supported)",
                           "use nn." + op + "'s own activations"};
  }
  return std::nullopt;
}

void op_recurrent(Exec& e) {
  const std::string& op = e.node.op_type;
  const bool lstm = op == "LSTM", gru = op == "GRU";
  const int g = gates_of(op);
  const bool batch_first = e.attr_i("layout", 0) == 1;
  Tensor x = e.tensor(0);
  if (x.dim() != 3) e.fail("X must be 3-D, got " + to_string(x.shape()));
  if (batch_first) x = permute(x, {1, 0, 2});
  const std::int64_t steps = x.size(0), batch = x.size(1), features = x.size(2);
  const Tensor w = e.tensor(1), r = e.tensor(2);
  const std::int64_t dirs = directions_of(e);
  const std::int64_t hidden = e.attr_i("hidden_size", r.dim() == 3 ? r.size(2) : 0);
  // hidden_size is the file's: it must be R's last size (a hostile one would overflow the
  // shape products below).
  if (r.dim() != 3 || hidden != r.size(2))
    e.fail("hidden_size " + std::to_string(hidden) + " is not R " + to_string(r.shape()) + "'s last size");
  if (w.shape() != Shape{dirs, g * hidden, features} || r.shape() != Shape{dirs, g * hidden, hidden})
    e.fail("W " + to_string(w.shape()) + " and R " + to_string(r.shape()) + " do not match " + std::to_string(dirs) +
           " direction(s), hidden_size " + std::to_string(hidden) + " and X " + to_string(x.shape()));
  const Tensor b = e.has(3) ? e.tensor(3) : Tensor();
  if (b.defined() && b.shape() != Shape{dirs, 2 * g * hidden}) e.fail("B " + to_string(b.shape()) + " does not match W");
  // Sequence lengths: all `steps` unless given.
  std::vector<std::int64_t> lens(static_cast<std::size_t>(batch), steps);
  if (e.has(4)) {
    const auto l = e.values(4, "sequence_lens");
    if (l->numel() != batch) e.fail("sequence_lens has " + std::to_string(l->numel()) + " values for a batch of " + std::to_string(batch));
    for (std::int64_t k = 0; k < batch; ++k) lens[static_cast<std::size_t>(k)] = std::clamp<std::int64_t>(l->int_at(k), 0, steps);
  }
  const bool ragged = std::any_of(lens.begin(), lens.end(), [&](std::int64_t n) { return n != steps; });
  auto initial = [&](std::size_t input) {
    if (!e.has(input)) return Tensor();
    Tensor t = e.tensor(input);
    if (batch_first) t = permute(t, {1, 0, 2});
    if (t.shape() != Shape{dirs, batch, hidden}) e.fail("initial state " + to_string(t.shape()) + " should be [num_directions, batch, hidden_size]");
    return t;
  };
  const Tensor h0 = initial(5), c0 = lstm ? initial(6) : Tensor();
  const Tensor peep = lstm && e.has(7) ? e.tensor(7) : Tensor();
  const bool before_reset = gru && e.attr_i("linear_before_reset", 0) != 0;
  const auto acts = activations_of(e, dirs);
  auto wants = [&](std::size_t k) { return e.has_output(k) && e.model.consumed(e.node.outputs[k]); };

  // The layer as PyTorch's nn.LSTM / nn.GRU / nn.RNN is one op over the whole sequence
  // (lstm, gru, rnn_tanh, rnn_relu: one cuDNN call per pass on a GPU, as PyTorch runs it)
  // where the node is what those layers export: PyTorch's activations, no peepholes, the
  // GRU's reset after the product (linear_before_reset), every sequence full length, and
  // the LSTM's final cell not read. Anything else runs step by step below.
  const bool whole = steps > 0 && !ragged && !peep.defined() && (!gru || before_reset) && !(lstm && wants(2)) &&
                     standard_activations(e.node.op_type, acts);
  std::vector<Tensor> ys, hs, cs;
  for (std::int64_t d = 0; d < dirs; ++d) {
    const bool reverse = (dirs == 2 && d == 1) || (dirs == 1 && e.attr_s("direction", "forward") == "reverse");
    const std::vector<Activation>& f = acts[static_cast<std::size_t>(d)];
    const Tensor wd = part(w, d), rd = part(r, d);
    if (whole) {
      const Tensor y = whole_layer(e, x, wd, rd, b.defined() ? part(b, d) : Tensor(), h0.defined() ? part(h0, d) : Tensor(),
                                   c0.defined() ? part(c0, d) : Tensor(), f, reverse);  // [T, B, H], time order
      hs.push_back(reshape(part(y, reverse ? 0 : steps - 1), {1, batch, hidden}));
      if (wants(0)) ys.push_back(reshape(y, {steps, 1, batch, hidden}));
      continue;
    }
    Tensor wb, rb;
    if (b.defined()) {
      const Tensor bd = part(b, d);
      wb = slice(bd, 0, 0, g * hidden);
      rb = slice(bd, 0, g * hidden, 2 * g * hidden);
    }
    // A GRU's hidden gate adds R_h's bias inside the reset (linear_before_reset) or after
    // it; the other gates, and every other cell, take both biases as one sum.
    Tensor xw = linear(reshape(x, {steps * batch, features}), wd, wb);  // [T*B, G*H]
    // The reverse direction reads each sequence from its own last step: row t*B + b of
    // the reordered input is step len_b - 1 - t of sequence b.
    std::vector<std::int64_t> order;
    if (reverse && ragged) {
      for (std::int64_t t = 0; t < steps; ++t)
        for (std::int64_t s = 0; s < batch; ++s) {
          const std::int64_t n = lens[static_cast<std::size_t>(s)];
          order.push_back((t < n ? n - 1 - t : t) * batch + s);
        }
      xw = reorder(e, xw, order);
    }
    xw = reshape(xw, {steps, batch, g * hidden});
    Tensor h = h0.defined() ? part(h0, d) : Tensor::zeros({batch, hidden}, xw.dtype(), xw.device());
    Tensor c = lstm ? (c0.defined() ? part(c0, d) : Tensor::zeros({batch, hidden}, xw.dtype(), xw.device())) : Tensor();
    Tensor pi, po, pf;
    if (peep.defined()) {
      const Tensor pd = part(peep, d);
      pi = slice(pd, 0, 0, hidden);
      po = slice(pd, 0, hidden, 2 * hidden);
      pf = slice(pd, 0, 2 * hidden, 3 * hidden);
    }
    std::vector<Tensor> outs;
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::int64_t t = reverse && !ragged ? steps - 1 - k : k;
      const Tensor xt = part(xw, t);  // [B, G*H]
      auto gate = [&](const Tensor& v, int i) { return slice(v, 1, i * hidden, (i + 1) * hidden); };
      Tensor h_new, c_new;
      if (gru) {
        const Tensor rb_zr = rb.defined() ? slice(rb, 0, 0, 2 * hidden) : Tensor();
        const Tensor hr = linear(h, slice(rd, 0, 0, 2 * hidden), rb_zr);  // z and r
        const Tensor z = f[0](add(gate(xt, 0), gate(hr, 0)));
        const Tensor rt = f[0](add(gate(xt, 1), gate(hr, 1)));
        const Tensor rh = slice(rd, 0, 2 * hidden, 3 * hidden);
        const Tensor rbh = rb.defined() ? slice(rb, 0, 2 * hidden, 3 * hidden) : Tensor();
        const Tensor hh = before_reset ? mul(rt, linear(h, rh, rbh)) : linear(mul(rt, h), rh, rbh);
        const Tensor n = f[1](add(gate(xt, 2), hh));
        h_new = add(n, mul(z, sub(h, n)));  // (1 - z) n + z h
      } else {
        const Tensor pre = add(xt, linear(h, rd, rb));
        if (lstm) {  // gates i, o, f, c
          Tensor i = gate(pre, 0), o = gate(pre, 1), fg = gate(pre, 2);
          if (peep.defined()) {
            i = add(i, mul(pi, c));
            fg = add(fg, mul(pf, c));
          }
          c_new = add(mul(f[0](fg), c), mul(f[0](i), f[1](gate(pre, 3))));
          if (peep.defined()) o = add(o, mul(po, c_new));
          h_new = mul(f[0](o), f[2](c_new));
        } else {
          h_new = f[0](pre);
        }
      }
      if (ragged) {  // past its end a sequence keeps its state and outputs zeros
        std::vector<std::int64_t> live;
        for (std::int64_t s = 0; s < batch; ++s) live.push_back(k < lens[static_cast<std::size_t>(s)]);
        const Tensor alive = Tensor::from(live, {batch, 1}).to(e.device);
        std::vector<std::int64_t> dead;
        for (std::int64_t v : live) dead.push_back(!v);
        outs.push_back(masked_fill(h_new, Tensor::from(dead, {batch, 1}).to(e.device), 0));
        h = where(alive, h_new, h);
        if (lstm) c = where(alive, c_new, c);
      } else {
        outs.push_back(h_new);
        h = h_new;
        c = c_new;
      }
    }
    hs.push_back(reshape(h, {1, batch, hidden}));
    if (lstm) cs.push_back(reshape(c, {1, batch, hidden}));
    if (wants(0)) {
      if (reverse && !ragged) std::reverse(outs.begin(), outs.end());
      Tensor y = concat(outs, 0);  // [T*B, H], step-major
      if (reverse && ragged) {
        // Back to time order: step t of sequence b is row len_b - 1 - t; past the end, zeros.
        std::vector<std::int64_t> back;
        for (std::int64_t t = 0; t < steps; ++t)
          for (std::int64_t s = 0; s < batch; ++s) {
            const std::int64_t n = lens[static_cast<std::size_t>(s)];
            back.push_back((t < n ? n - 1 - t : t) * batch + s);
          }
        y = reorder(e, y, back);
      }
      ys.push_back(reshape(y, {steps, 1, batch, hidden}));
    }
  }
  if (wants(0)) {
    Tensor y = ys.size() == 1 ? ys[0] : concat(ys, 1);  // [T, D, B, H]
    e.set(0, batch_first ? permute(y, {2, 0, 1, 3}) : y);
  }
  auto state = [&](const std::vector<Tensor>& v) {
    const Tensor s = v.size() == 1 ? v[0] : concat(v, 0);  // [D, B, H]
    return batch_first ? permute(s, {1, 0, 2}) : s;
  };
  if (wants(1)) e.set(1, state(hs));
  if (lstm && wants(2)) e.set(2, state(cs));
}

}  // namespace ampcheck::models::onnx_impl
