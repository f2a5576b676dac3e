#include "engine/optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "engine/dispatch.h"
#include "engine/hooks.h"
#include "engine/ops/registry.h"  // NoGradGuard
#include "kernels/training_kernels.h"

namespace ampcheck::optim {
namespace {

using kernels::TrainingKernels;

// The update formulas (kernels/training_kernels.h) run elementwise over (param, grad,
// buffers) in the compute type of the parameter's dtype; each buffer is kept in that
// compute type's dtype (f32 for f32/f16/bf16 parameters), so moments are not lost to
// 16-bit rounding, and on the parameter's device.
DType state_dtype(const Tensor& p) { return p.dtype() == DType::f64 ? DType::f64 : DType::f32; }

Tensor& buffer(std::map<std::string, Tensor>& buffers, const std::string& name, const Tensor& p) {
  auto it = buffers.find(name);
  if (it == buffers.end()) it = buffers.emplace(name, Tensor::zeros(p.shape(), state_dtype(p), p.device())).first;
  return it->second;
}

// A copy of t on `device` (a state loaded from a file is on the host).
Tensor copy_on(const Tensor& t, Device device) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), device);
  c.copy_from(t);
  return c;
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
  std::vector<std::size_t> updated;
  std::vector<Target> targets;
  std::vector<Tensor> before;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor g = gradient(i);
    if (!g.defined()) continue;
    auto& [name, p] = params_[i];
    if (observe) before.push_back(p.clone());
    // The update kernels read a gradient of another float dtype exactly
    // (training_kernels.h): no f32 copy of a low-precision gradient first.
    if (masters_.empty()) targets.push_back({&p, g, &state_.buffers[name], nullptr});
    else targets.push_back({&masters_[i], g, &state_.buffers[name], &p});
    updated.push_back(i);
  }
  if (!targets.empty()) update(targets, state_.step);
  if (!observe) return;
  for (std::size_t k = 0; k < updated.size(); ++k) {
    const std::size_t i = updated[k];
    ParamUpdate u;
    u.name = params_[i].first;
    u.step = state_.step;
    u.before = &before[k];
    u.after = &params_[i].second;
    u.grad = &targets[k].grad;
    u.master = masters_.empty() ? nullptr : &masters_[i];
    u.state = &state_.buffers[params_[i].first];
    hooks::param_update(u);
  }
}

kernels::UpdateTensor Optimizer::update_tensor(const Target& t, const Tensor* state0, const Tensor* state1,
                                               const char* op) {
  common_device(op, {t.weights, &t.grad, state0, state1, t.copy});
  kernels::UpdateTensor u;
  u.weights = view_of(*t.weights);
  u.grad = view_of(t.grad);
  if (state0 != nullptr) u.state0 = view_of(*state0);
  if (state1 != nullptr) u.state1 = view_of(*state1);
  if (t.copy != nullptr) u.copy = view_of(*t.copy);
  return u;
}

void Optimizer::per_device(const std::vector<Target>& targets, const std::vector<kernels::UpdateTensor>& tensors,
                           const std::function<void(const TrainingKernels&, const std::vector<kernels::UpdateTensor>&)>& run) {
  std::vector<kernels::UpdateTensor> on_cpu, on_gpu;
  for (std::size_t k = 0; k < tensors.size(); ++k)
    (targets[k].weights->device() == Device::cuda ? on_gpu : on_cpu).push_back(tensors[k]);
  if (!on_cpu.empty()) run(kernels_on<TrainingKernels>(Device::cpu), on_cpu);
  if (!on_gpu.empty()) run(kernels_on<TrainingKernels>(Device::cuda), on_gpu);
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
      copy.buffers[name][bname] = copy_on(t, it->second->device());
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
        const Tensor host = t.to(Device::cpu);
        out.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.nbytes()));
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

void SGD::update(const std::vector<Target>& targets, std::int64_t) {
  kernels::SgdStep step;
  step.lr = lr();
  step.weight_decay = o_.weight_decay;
  step.momentum = o_.momentum;
  step.one_minus_dampening = 1 - o_.dampening;
  step.nesterov = o_.nesterov;
  // The parameters whose momentum buffer starts now (it takes the gradient as it is), and
  // the others: one call each.
  std::vector<bool> starts;
  for (const Target& t : targets)
    starts.push_back(o_.momentum != 0 && t.buffers->find("momentum_buffer") == t.buffers->end());
  for (const bool first : {true, false}) {
    std::vector<Target> some;
    std::vector<kernels::UpdateTensor> tensors;
    for (std::size_t k = 0; k < targets.size(); ++k) {
      if (starts[k] != first) continue;
      const Target& t = targets[k];
      Tensor* b = o_.momentum != 0 ? &buffer(*t.buffers, "momentum_buffer", *t.weights) : nullptr;
      some.push_back(t);
      tensors.push_back(update_tensor(t, b, nullptr, "SGD step"));
    }
    step.first = first;
    per_device(some, tensors, [&](const TrainingKernels& k, const std::vector<kernels::UpdateTensor>& on) {
      k.sgd_all(on, step);
    });
  }
}

// ---- Adam (PyTorch): g += wd p (Adam) or p *= 1 - lr wd (AdamW);
//      m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//      p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
Adam::Adam(NamedParams params, double lr, Options o) : Optimizer(std::move(params), lr), o_(o) {
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    throw std::invalid_argument("Adam: betas must be in [0, 1), got " + std::to_string(o.beta1) + ", " +
                                std::to_string(o.beta2));
}

void Adam::update(const std::vector<Target>& targets, std::int64_t step) {
  const double lr_d = lr(), b1 = o_.beta1, b2 = o_.beta2;
  kernels::AdamStep s;
  s.lr_over_bias1 = lr_d / (1 - std::pow(b1, static_cast<double>(step)));
  s.bias2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(step)));
  s.beta1 = b1;
  s.one_minus_beta1 = 1 - b1;
  s.beta2 = b2;
  s.one_minus_beta2 = 1 - b2;
  s.eps = o_.eps;
  s.weight_decay = o_.weight_decay;
  s.decay = 1 - lr_d * o_.weight_decay;
  s.decoupled = o_.decoupled;
  std::vector<kernels::UpdateTensor> tensors;
  for (const Target& t : targets) {
    Tensor& m = buffer(*t.buffers, "exp_avg", *t.weights);
    Tensor& v = buffer(*t.buffers, "exp_avg_sq", *t.weights);
    tensors.push_back(update_tensor(t, &m, &v, "Adam step"));
  }
  per_device(targets, tensors, [&](const TrainingKernels& k, const std::vector<kernels::UpdateTensor>& on) {
    k.adam_all(on, s);
  });
}

double clip_grad_norm(Optimizer& optimizer, double max_norm) {
  // Each gradient carried as the .grad of a stand-in tensor: the clipping below scales
  // .grad in place, so it scales the optimizer's own gradient tensors.
  NamedParams grads;
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    const Tensor g = optimizer.gradient(i);
    if (!g.defined()) continue;
    Tensor carrier = Tensor::empty(g.shape(), g.dtype(), g.device());
    carrier.set_grad(g);
    grads.emplace_back(optimizer.params()[i].first, carrier);
  }
  return clip_grad_norm(grads, max_norm);
}

double clip_grad_norm(const NamedParams& params, double max_norm) {
  // One sum over every gradient in turn, as a single loop over all their elements.
  double total = 0;
  for (const auto& [name, p] : params) {
    const Tensor& g = p.grad();
    if (g.defined()) total = kernels_on<TrainingKernels>(g.device()).sum_squares(view_of(g), total);
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard no_grad;
    for (const auto& [name, p] : params) {
      const Tensor& g = p.grad();
      if (g.defined()) kernels_on<TrainingKernels>(g.device()).scale(view_of(g), coef);
    }
  }
  return total;
}

}  // namespace ampcheck::optim
