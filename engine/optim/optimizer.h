// Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW, with PyTorch's update
// rules; gradient clipping by global norm; state that can be saved and loaded.
// Updates compute in f32 or f64 ("opmath") and round once into each parameter's dtype.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace ampcheck::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;

// Per-parameter buffers by name ("exp_avg", "momentum_buffer", ...), and the step count.
struct State {
  std::int64_t step = 0;
  std::map<std::string, std::map<std::string, Tensor>> buffers;  // param name -> buffers
};

class Optimizer {
 public:
  Optimizer(NamedParams params, double lr);
  virtual ~Optimizer() = default;

  void step();       // one update of every parameter that has a gradient
  void zero_grad();  // drops the gradients
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const NamedParams& params() const { return params_; }

  // A deep copy of the state, and back: load checks names, shapes and dtypes.
  State state() const;
  void load_state(const State& s);
  // The same through a file (a small binary format; throws naming the path on errors).
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // Updates one parameter in place from its gradient; `buffers` persist across steps.
  virtual void update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& buffers,
                      std::int64_t step) = 0;

 private:
  NamedParams params_;
  double lr_;
  State state_;
};

class SGD : public Optimizer {
 public:
  struct Options {
    double momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false;
  };
  SGD(NamedParams params, double lr, Options options);
  SGD(NamedParams params, double lr) : SGD(std::move(params), lr, Options{}) {}

 protected:
  void update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& buffers,
              std::int64_t step) override;

 private:
  Options o_;
};

class Adam : public Optimizer {
 public:
  struct Options {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    bool decoupled = false;  // AdamW: decay the weights, not the gradient
  };
  Adam(NamedParams params, double lr, Options options);
  Adam(NamedParams params, double lr) : Adam(std::move(params), lr, Options{}) {}

 protected:
  void update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& buffers,
              std::int64_t step) override;

 private:
  Options o_;
};

// AdamW: Adam with decoupled weight decay (default 0.01, as PyTorch).
class AdamW : public Adam {
 public:
  AdamW(NamedParams params, double lr, double weight_decay = 0.01, double beta1 = 0.9,
        double beta2 = 0.999, double eps = 1e-8)
      : Adam(std::move(params), lr, Options{beta1, beta2, eps, weight_decay, true}) {}
};

// Scales all gradients so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_: coefficient max_norm / (norm + 1e-6)); returns the norm before.
double clip_grad_norm(const NamedParams& params, double max_norm);

}  // namespace ampcheck::optim
