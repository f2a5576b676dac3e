// Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW, with PyTorch's update
// rules; gradient clipping by global norm; state that can be saved and loaded.
// Updates compute in f32 or f64 ("opmath") and round once into each parameter's dtype,
// on the parameter's device (kernels/training_kernels.h), where its master weight and
// its buffers live too. A step updates every parameter at once: on a GPU one launch for
// all of them, the master weights written back into the parameters in the same pass.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "kernels/training_kernels.h"

namespace ampcheck::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;

// Per-parameter buffers by name ("exp_avg", "momentum_buffer", ...), each on its
// parameter's device, and the step count.
struct State {
  std::int64_t step = 0;
  std::map<std::string, std::map<std::string, Tensor>> buffers;  // param name -> buffers
};

class Optimizer {
 public:
  Optimizer(NamedParams params, double lr);
  virtual ~Optimizer() = default;

  void step();       // one update of every parameter that has a gradient
  void zero_grad();  // drops the gradients (and any set with set_gradient)
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const NamedParams& params() const { return params_; }
  std::size_t size() const { return params_.size(); }

  // The gradient step() uses for parameter i: the one given to set_gradient (the loss
  // scaler's unscaled f32 gradient), else the parameter's own .grad().
  Tensor gradient(std::size_t i) const;
  void set_gradient(std::size_t i, const Tensor& g);

  // Master weights (AMP O2): an f32 copy of every parameter, taken now; step() updates
  // the copy in f32 and writes it back, rounded once, into the parameter (which the
  // caller may then convert to f16/bf16). Call before converting the parameters.
  void enable_master_weights();
  bool has_master_weights() const { return !masters_.empty(); }
  const Tensor& master(std::size_t i) const { return masters_.at(i); }

  // A deep copy of the state, and back: load checks names, shapes and dtypes.
  State state() const;
  void load_state(const State& s);
  // The same through a file (a small binary format; throws naming the path on errors).
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // One parameter of a step: the weights the update changes in place (its master, or the
  // parameter itself), its gradient, its buffers (which persist across steps) and, with
  // master weights, the parameter, into which the updated weights are written.
  struct Target {
    Tensor* weights;
    Tensor grad;
    std::map<std::string, Tensor>* buffers;
    Tensor* copy;
  };
  // Updates every target at once (one kernel launch per device for all of them).
  virtual void update(const std::vector<Target>& targets, std::int64_t step) = 0;
  // The kernels' view of each target, checked to live on one device ("op" names the step).
  static kernels::UpdateTensor update_tensor(const Target& t, const Tensor* state0, const Tensor* state1,
                                             const char* op);
  // Runs `run(kernels, tensors)` once for the tensors on the CPU and once for those on the
  // GPU (targets[k] is the device's of tensors[k]).
  static void per_device(const std::vector<Target>& targets, const std::vector<kernels::UpdateTensor>& tensors,
                         const std::function<void(const kernels::TrainingKernels&,
                                                  const std::vector<kernels::UpdateTensor>&)>& run);

  NamedParams params_;
  std::vector<Tensor> masters_;    // empty, or one f32/f64 copy per parameter
  std::vector<Tensor> overrides_;  // set_gradient's gradients, per parameter
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
  void update(const std::vector<Target>& targets, std::int64_t step) override;

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
  void update(const std::vector<Target>& targets, std::int64_t step) override;

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
// The same over the gradients the optimizer will use (after the scaler's unscale_).
double clip_grad_norm(Optimizer& optimizer, double max_norm);

}  // namespace ampcheck::optim
