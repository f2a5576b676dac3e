#include "engine/optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <type_traits>

#include "engine/hooks.h"
#include "engine/ops/cpu_util.h"
#include "engine/ops/registry.h"  // NoGradGuard

namespace ampcheck::optim {
namespace {

// The update formulas run elementwise over (param, grad, buffers) in the compute type
// of the parameter's dtype; each buffer is kept in that compute type's dtype (f32 for
// f32/f16/bf16 parameters), so moments are not lost to 16-bit rounding.
DType state_dtype(const Tensor& p) { return p.dtype() == DType::f64 ? DType::f64 : DType::f32; }

Tensor& buffer(std::map<std::string, Tensor>& buffers, const std::string& name, const Tensor& p) {
  auto it = buffers.find(name);
  if (it == buffers.end()) it = buffers.emplace(name, Tensor::zeros(p.shape(), state_dtype(p))).first;
  return it->second;
}

// Runs f(p, g, b0, b1) over every element in chunks; p and the buffers are written back.
template <typename F>
void for_each_element(Tensor& p, const Tensor& g, Tensor* b0, Tensor* b1, F f) {
  cpu::with_compute_type(p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    parallel_for(p.numel(), cpu::kChunk, [&](std::int64_t lo, std::int64_t hi) {
      const std::int64_t n = hi - lo;
      T pv[cpu::kChunk], gv[cpu::kChunk], v0[cpu::kChunk], v1[cpu::kChunk];
      cpu::load(p, lo, n, pv);
      cpu::load(g, lo, n, gv);
      if (b0) cpu::load(*b0, lo, n, v0);
      if (b1) cpu::load(*b1, lo, n, v1);
      for (std::int64_t i = 0; i < n; ++i) f(pv[i], gv[i], v0[i], v1[i]);
      cpu::store(p, lo, n, pv);
      if (b0) cpu::store(*b0, lo, n, v0);
      if (b1) cpu::store(*b1, lo, n, v1);
    });
  });
}

// ---- the state file: magic, then per tensor: name, dtype, rank, dims, bytes ----
constexpr char kMagic[8] = {'A', 'M', 'P', 'O', 'P', 'T', '1', '\n'};

void write_string(std::ofstream& out, const std::string& s) {
  const auto n = static_cast<std::uint64_t>(s.size());
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}
std::string read_string(std::ifstream& in) {
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!in || n > (1u << 20)) throw std::runtime_error("corrupt string");
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  return s;
}

}  // namespace

Optimizer::Optimizer(NamedParams params, double lr)
    : params_(std::move(params)), overrides_(params_.size()), lr_(lr) {
  if (!(lr >= 0)) throw std::invalid_argument("optimizer: learning rate must be >= 0, got " + std::to_string(lr));
  for (const auto& [name, p] : params_)
    if (!p.defined() || !is_floating(p.dtype()))
      throw std::invalid_argument("optimizer: parameter \"" + name + "\" is not a float tensor");
}

Tensor Optimizer::gradient(std::size_t i) const {
  return overrides_.at(i).defined() ? overrides_[i] : params_.at(i).second.grad();
}

void Optimizer::set_gradient(std::size_t i, const Tensor& g) {
  const Tensor& p = params_.at(i).second;
  if (g.defined() && g.shape() != p.shape())
    throw std::invalid_argument("set_gradient: " + params_[i].first + " is " + to_string(p.shape()) +
                                ", the gradient " + to_string(g.shape()));
  overrides_[i] = g;
}

void Optimizer::enable_master_weights() {
  if (has_master_weights()) return;
  for (const auto& [name, p] : params_)
    masters_.push_back(p.to(p.dtype() == DType::f64 ? DType::f64 : DType::f32));
}

void Optimizer::step() {
  ++state_.step;
  NoGradGuard no_grad;
  const PhaseScope phase(Phase::optimizer);
  const bool observe = observed();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = gradient(i);
    if (!g.defined()) continue;
    auto& [name, p] = params_[i];
    const Tensor before = observe ? p.clone() : Tensor();
    update_one(i, g);
    if (observe) {
      ParamUpdate u;
      u.name = name;
      u.step = state_.step;
      u.before = &before;
      u.after = &p;
      u.grad = &g;
      u.master = masters_.empty() ? nullptr : &masters_[i];
      u.state = &state_.buffers[name];
      hooks::param_update(u);
    }
  }
}

void Optimizer::update_one(std::size_t i, const Tensor& g) {
  auto& [name, p] = params_[i];
  if (masters_.empty()) {
    update(p, g, state_.buffers[name], state_.step);
    return;
  }
  Tensor& m = masters_[i];
  update(m, g.dtype() == m.dtype() ? g : g.to(m.dtype()), state_.buffers[name], state_.step);
  p.copy_from(m);  // the low-precision copy, re-derived from the master
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
  for (Tensor& o : overrides_) o = Tensor();
}

State Optimizer::state() const {
  State s;
  s.step = state_.step;
  for (const auto& [name, bufs] : state_.buffers)
    for (const auto& [bname, t] : bufs) s.buffers[name][bname] = t.clone();
  return s;
}

void Optimizer::load_state(const State& s) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, p] : params_) by_name[name] = &p;
  State copy;
  copy.step = s.step;
  for (const auto& [name, bufs] : s.buffers) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw std::invalid_argument("optimizer state: parameter \"" + name + "\" is not one of this optimizer's");
    for (const auto& [bname, t] : bufs) {
      if (t.shape() != it->second->shape())
        throw std::invalid_argument("optimizer state: " + name + "." + bname + " has shape " +
                                    to_string(t.shape()) + ", the parameter " + to_string(it->second->shape()));
      copy.buffers[name][bname] = t.clone();
    }
  }
  state_ = std::move(copy);
}

void Optimizer::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("optimizer save: cannot write " + tmp);
    out.write(kMagic, sizeof kMagic);
    out.write(reinterpret_cast<const char*>(&state_.step), sizeof state_.step);
    for (const auto& [name, bufs] : state_.buffers)
      for (const auto& [bname, t] : bufs) {
        write_string(out, name);
        write_string(out, bname);
        const auto dtype = static_cast<std::uint8_t>(t.dtype());
        out.write(reinterpret_cast<const char*>(&dtype), 1);
        const auto rank = static_cast<std::uint64_t>(t.dim());
        out.write(reinterpret_cast<const char*>(&rank), sizeof rank);
        out.write(reinterpret_cast<const char*>(t.shape().data()), static_cast<std::streamsize>(rank * sizeof(std::int64_t)));
        out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
      }
    if (!out) throw std::runtime_error("optimizer save: writing " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("optimizer save: cannot rename " + tmp + " to " + path);
}

void Optimizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("optimizer load: cannot open " + path);
  char magic[sizeof kMagic];
  in.read(magic, sizeof magic);
  if (!in || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw std::runtime_error("optimizer load: " + path + " is not an ampcheck optimizer state file");
  State s;
  in.read(reinterpret_cast<char*>(&s.step), sizeof s.step);
  try {
    while (in.peek() != std::char_traits<char>::eof()) {
      const std::string name = read_string(in), bname = read_string(in);
      std::uint8_t dtype = 0;
      in.read(reinterpret_cast<char*>(&dtype), 1);
      std::uint64_t rank = 0;
      in.read(reinterpret_cast<char*>(&rank), sizeof rank);
      if (!in || rank > 16 || dtype > static_cast<std::uint8_t>(DType::i64)) throw std::runtime_error("corrupt header");
      Shape shape(rank);
      in.read(reinterpret_cast<char*>(shape.data()), static_cast<std::streamsize>(rank * sizeof(std::int64_t)));
      Tensor t = Tensor::empty(shape, static_cast<DType>(dtype));
      in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
      if (!in) throw std::runtime_error("truncated tensor " + name + "." + bname);
      s.buffers[name][bname] = t;
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("optimizer load: " + path + ": " + e.what());
  }
  load_state(s);
}

// ---- SGD (PyTorch): g += wd p; b = mu b + (1 - dampening) g (b = g on the first step);
//      g = nesterov ? g + mu b : b; p -= lr g
SGD::SGD(NamedParams params, double lr, Options o) : Optimizer(std::move(params), lr), o_(o) {
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw std::invalid_argument("SGD: Nesterov momentum needs momentum > 0 and dampening 0");
}

void SGD::update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& buffers, std::int64_t) {
  const double lr_d = lr(), wd = o_.weight_decay, mu = o_.momentum, damp = o_.dampening;
  const bool nesterov = o_.nesterov;
  if (mu == 0) {
    for_each_element(p, g, nullptr, nullptr, [&](auto& pv, auto gv, auto&, auto&) {
      using T = std::remove_reference_t<decltype(pv)>;
      if (wd != 0) gv += T(wd) * pv;  // (not 0 * p: an Inf weight must not turn into NaN)
      pv -= T(lr_d) * gv;
    });
    return;
  }
  const bool first = buffers.find("momentum_buffer") == buffers.end();
  Tensor& b = buffer(buffers, "momentum_buffer", p);
  for_each_element(p, g, &b, nullptr, [&](auto& pv, auto gv, auto& bv, auto&) {
    using T = std::remove_reference_t<decltype(pv)>;
    if (wd != 0) gv += T(wd) * pv;
    bv = first ? gv : T(mu) * bv + T(1 - damp) * gv;
    const T d = nesterov ? gv + T(mu) * bv : bv;
    pv -= T(lr_d) * d;
  });
}

// ---- Adam (PyTorch): g += wd p (Adam) or p *= 1 - lr wd (AdamW);
//      m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//      p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
Adam::Adam(NamedParams params, double lr, Options o) : Optimizer(std::move(params), lr), o_(o) {
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    throw std::invalid_argument("Adam: betas must be in [0, 1), got " + std::to_string(o.beta1) + ", " +
                                std::to_string(o.beta2));
}

void Adam::update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& buffers, std::int64_t step) {
  Tensor& m = buffer(buffers, "exp_avg", p);
  Tensor& v = buffer(buffers, "exp_avg_sq", p);
  const double lr_d = lr(), b1 = o_.beta1, b2 = o_.beta2, eps = o_.eps, wd = o_.weight_decay;
  const bool decoupled = o_.decoupled;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(step)));
  for_each_element(p, g, &m, &v, [&](auto& pv, auto gv, auto& mv, auto& vv) {
    using T = std::remove_reference_t<decltype(pv)>;
    if (wd != 0 && decoupled) pv *= T(1 - lr_d * wd);
    if (wd != 0 && !decoupled) gv += T(wd) * pv;
    mv = T(b1) * mv + T(1 - b1) * gv;
    vv = T(b2) * vv + T(1 - b2) * gv * gv;
    pv -= T(lr_d / bc1) * mv / (std::sqrt(vv) / T(bc2_sqrt) + T(eps));
  });
}

double clip_grad_norm(Optimizer& optimizer, double max_norm) {
  // Each gradient carried as the .grad of a stand-in tensor: the clipping below scales
  // .grad in place, so it scales the optimizer's own gradient tensors.
  NamedParams grads;
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    const Tensor g = optimizer.gradient(i);
    if (!g.defined()) continue;
    Tensor carrier = Tensor::empty(g.shape(), g.dtype());
    carrier.set_grad(g);
    grads.emplace_back(optimizer.params()[i].first, carrier);
  }
  return clip_grad_norm(grads, max_norm);
}

double clip_grad_norm(const NamedParams& params, double max_norm) {
  double total = 0;
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    for (double x : p.grad().to_f64()) total += x * x;
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard no_grad;
    for (const auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      Tensor g = p.grad();
      g.copy_from(cpu::map_unary(g, [coef](auto x) { return x * decltype(x)(coef); }));
    }
  }
  return total;
}

}  // namespace ampcheck::optim
