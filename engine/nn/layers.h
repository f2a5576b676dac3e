// The layers users build models from. Initialisation follows PyTorch's defaults, drawn
// from the caller's seeded Generator, so a model is the same for the same seed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/amp/fp8_recipe.h"
#include "engine/nn/module.h"
#include "engine/ops/registry.h"  // Fp8LinearMeta
#include "engine/random.h"

namespace ampcheck::nn {

// y = x W^T + b; W [out, in] and b [out] ~ U(-1/sqrt(in), 1/sqrt(in))
//
// With fp8 on (enable_fp8), TransformerEngine's te.Linear under fp8_autocast with a
// DelayedScaling recipe: its three GEMMs run in fp8 (engine/ops/fp8_linear.cpp) with one
// scale per scaled tensor (the input, the weight, the output gradient), kept by the
// recipe's rule (engine/amp/fp8_recipe.h): each step's casts record their amaxes into
// fp8_meta(), and update_scales() at the end of the step (after the backward) rolls each
// amax history and sets the next step's scales, as TE's amax_and_scale_update does. Every
// scale starts at 1 and every history at zeros, as TE's.
// The multiple a linear layer's sizes must be of to run in fp8: 16 (cuBLASLt's fp8 GEMM and
// TransformerEngine's check), 32 under MXFP8BlockScaling (TE's MXFP8 quantizer refuses a
// tensor whose dims are not multiples of its blocks of 32).
std::int64_t fp8_size_multiple(const amp::Fp8Recipe& recipe);

class Linear : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;

  // Throws std::invalid_argument naming the layer where in or out is not a multiple of
  // fp8_size_multiple(recipe). Under MXFP8BlockScaling each cast scales its own blocks of
  // 32 (the CPU's only: engine/ops/fp8_linear.cpp).
  void enable_fp8(const amp::Fp8Recipe& recipe);
  bool fp8() const { return fp8_ != nullptr; }
  // Delayed scaling: the scales kept from step to step (current and block scaling have
  // none to keep).
  bool fp8_delayed() const { return fp8_ && fp8_->delayed.has_value(); }
  // The roles in amp::Fp8Role order (input, weight, grad_output). `reduced`: this step's
  // amaxes after the reduction over the amax reduction group, where there is one (data
  // parallel runs); without it the layer's own. std::logic_error without fp8. Under
  // current scaling the step's amaxes are cleared and each update says what the last cast
  // used (no history, nothing rolled).
  std::array<amp::DelayedScalingUpdate, 3> update_scales(const std::optional<std::array<float, 3>>& reduced = {});
  // This step's amaxes so far (what the casts recorded), in role order.
  std::array<float, 3> step_amaxes() const;
  const Fp8LinearMeta& fp8_meta() const;
  const amp::DelayedScalingState& fp8_state(amp::Fp8Role role) const;

 protected:
  Linear(std::string type, std::int64_t in, std::int64_t out, Generator& gen, bool bias);  // a Linear of another kind

 private:
  struct Fp8State {
    std::optional<amp::DelayedScaling> delayed;  // absent: current scaling
    std::shared_ptr<Fp8LinearMeta> meta;
    std::array<amp::DelayedScalingState, 3> states;
  };
  const Fp8State& fp8_state_or_throw() const;
  std::shared_ptr<Fp8State> fp8_;
};

// A Linear with fp8 on from the start (te.Linear).
class Fp8Linear : public Linear {
 public:
  Fp8Linear(std::int64_t in, std::int64_t out, Generator& gen, const amp::Fp8Recipe& recipe, bool bias = true);
};

// weight [out, in/groups, kH, kW] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in, std::int64_t out, std::array<std::int64_t, 2> kernel, Generator& gen,
         Conv2dOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv2dOptions options;
};

// Over dim 1 of [N, C, ...]: weight 1, bias 0, running mean 0 and var 1.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var;
  double eps, momentum;
};

// Over the trailing dims `normalized_shape`.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  double eps;
};

// weight [num, dim] ~ N(0, 1); forward takes i64 indices.
class Embedding : public Module {
 public:
  Embedding(std::int64_t num, std::int64_t dim, Generator& gen);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
};

// Its own generator, seeded at construction: masks are the same for the same seed.
class Dropout : public Module {
 public:
  explicit Dropout(double p, std::uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  double p;
  Generator gen;
};

// Multi-head scaled dot-product attention from registry ops, on [B, T, D]:
// softmax(Q K^T / sqrt(D/H) + mask) V per head, then an output projection.
class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(std::int64_t dim, std::int64_t heads, Generator& gen);
  Tensor forward(const Tensor& x) override;  // self-attention, no mask
  // mask: broadcastable to [B, H, Tq, Tk]; nonzero = masked out (attends nowhere)
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& mask = {});
  std::shared_ptr<Linear> q, k, v, out;
  std::int64_t heads;
};

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  // Appends a module named by its position ("0", "1", ...) or by `name`.
  Sequential& add(ModulePtr m, const std::string& name = "");
  Tensor forward(const Tensor& x) override;
  const std::vector<ModulePtr>& layers() const { return layers_; }

 private:
  std::vector<ModulePtr> layers_;
};

// Activations and flatten as modules, for Sequential.
enum class Activation { relu, gelu, gelu_tanh, silu, sigmoid, tanh, hardswish, hardsigmoid };
class Act : public Module {
 public:
  explicit Act(Activation kind);
  Tensor forward(const Tensor& x) override;
  Activation kind;
};
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t from_dim = 1) : Module("Flatten"), start_dim(from_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim); }
  std::int64_t start_dim;
};

}  // namespace ampcheck::nn
