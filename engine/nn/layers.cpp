#include "engine/nn/layers.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace ampcheck::nn {
namespace {
Tensor uniform_bound(const Shape& shape, double bound, Generator& gen) {
  return Tensor::uniform(shape, gen, -bound, bound);
}
}  // namespace

Linear::Linear(std::int64_t in, std::int64_t out, Generator& gen, bool with_bias) : Linear("Linear", in, out, gen, with_bias) {}
Linear::Linear(std::string type, std::int64_t in, std::int64_t out, Generator& gen, bool with_bias)
    : Module(std::move(type)) {
  if (in <= 0 || out <= 0)
    throw std::invalid_argument("Linear(" + std::to_string(in) + ", " + std::to_string(out) + "): sizes must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", uniform_bound({out, in}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform_bound({out}, bound, gen));
}
Tensor Linear::forward(const Tensor& x) {
  return fp8_ ? fp8_linear(x, weight, bias, fp8_->meta) : linear(x, weight, bias);
}

std::int64_t fp8_size_multiple(const amp::Fp8Recipe& recipe) {
  return std::holds_alternative<amp::MXFP8BlockScaling>(recipe) ? 32 : 16;
}

void Linear::enable_fp8(const amp::Fp8Recipe& recipe) {
  const std::int64_t out = weight.size(0), in = weight.size(1), multiple = fp8_size_multiple(recipe);
  if (in % multiple != 0 || out % multiple != 0)
    throw std::invalid_argument(
        "linear layer " + (path().empty() ? std::string() : "'" + path() + "' ") + "[" + std::to_string(out) + ", " +
        std::to_string(in) + "]: " +
        (multiple == 32 ? "MXFP8 needs sizes that are multiples of 32 (TransformerEngine's MXFP8 quantizer: its blocks of 32)"
                        : "fp8 GEMMs need sizes that are multiples of 16 (cuBLASLt's, and TransformerEngine's check)") +
        "; keep this layer out of fp8 or pad it");
  auto s = std::make_shared<Fp8State>();
  s->meta = std::make_shared<Fp8LinearMeta>();
  amp::Fp8RecipeFormat format = amp::Fp8RecipeFormat::hybrid;
  if (const auto* d = std::get_if<amp::DelayedScaling>(&recipe)) {
    s->delayed = *d;
    format = d->fp8_format;
    for (amp::DelayedScalingState& st : s->states) st = amp::initial_state(*d);
  } else if (const auto* mx = std::get_if<amp::MXFP8BlockScaling>(&recipe)) {
    format = mx->fp8_format;
    s->meta->block_scaling = true;
  } else {
    const auto& c = std::get<amp::Float8CurrentScaling>(recipe);
    format = c.fp8_format;
    s->meta->current = Fp8LinearMeta::Current{c.use_power_2_scales, c.amax_epsilon};
  }
  s->meta->input_format = amp::format_for(format, amp::Fp8Role::input);
  s->meta->weight_format = amp::format_for(format, amp::Fp8Role::weight);
  s->meta->grad_format = amp::format_for(format, amp::Fp8Role::grad_output);
  s->meta->input_scale = s->states[0].scale;
  s->meta->weight_scale = s->states[1].scale;
  s->meta->grad_scale = s->states[2].scale;
  fp8_ = std::move(s);
}

const Linear::Fp8State& Linear::fp8_state_or_throw() const {
  if (!fp8_) throw std::logic_error("linear layer '" + path() + "' does not run in fp8 (enable_fp8 first)");
  return *fp8_;
}
const Fp8LinearMeta& Linear::fp8_meta() const { return *fp8_state_or_throw().meta; }
const amp::DelayedScalingState& Linear::fp8_state(amp::Fp8Role role) const {
  return fp8_state_or_throw().states[static_cast<std::size_t>(role)];
}

std::array<float, 3> Linear::step_amaxes() const {
  const Fp8LinearMeta& m = fp8_meta();
  return {m.input_amax, m.weight_amax, m.grad_amax};
}

std::array<amp::DelayedScalingUpdate, 3> Linear::update_scales(const std::optional<std::array<float, 3>>& reduced) {
  fp8_state_or_throw();
  Fp8LinearMeta& m = *fp8_->meta;
  const std::array<float, 3> amax = step_amaxes();
  const std::array<Fp8Format, 3> formats = {m.input_format, m.weight_format, m.grad_format};
  std::array<amp::DelayedScalingUpdate, 3> done;
  if (!fp8_->delayed) {  // current or block scaling: each cast made its own scale; nothing is carried
    const std::array<float, 3> used = {m.input_scale, m.weight_scale, m.grad_scale};
    for (std::size_t r = 0; r < 3; ++r) {
      done[r].step_amax = amax[r];
      done[r].amax_used = amax[r];
      done[r].scale_before = done[r].scale_after = used[r];
    }
    m.input_amax = m.weight_amax = m.grad_amax = 0.0f;
    return done;
  }
  for (std::size_t r = 0; r < 3; ++r) {
    amp::record_amax(fp8_->states[r], amax[r]);
    done[r] = amp::update(fp8_->states[r], *fp8_->delayed, formats[r],
                          reduced ? std::optional<float>((*reduced)[r]) : std::optional<float>());
  }
  m.input_scale = fp8_->states[0].scale;
  m.weight_scale = fp8_->states[1].scale;
  m.grad_scale = fp8_->states[2].scale;
  m.input_amax = m.weight_amax = m.grad_amax = 0.0f;
  return done;
}

Fp8Linear::Fp8Linear(std::int64_t in, std::int64_t out, Generator& gen, const amp::Fp8Recipe& recipe,
                     bool with_bias)
    : Linear("Fp8Linear", in, out, gen, with_bias) {
  enable_fp8(recipe);
}

Conv2d::Conv2d(std::int64_t in, std::int64_t out, std::array<std::int64_t, 2> kernel, Generator& gen,
               Conv2dOptions opts, bool with_bias)
    : Module("Conv2d"), options(opts) {
  if (opts.groups <= 0 || in % opts.groups != 0 || out % opts.groups != 0)
    throw std::invalid_argument("Conv2d: channels " + std::to_string(in) + " -> " + std::to_string(out) +
                                " must both divide by groups " + std::to_string(opts.groups));
  const std::int64_t fan_in = in / opts.groups * kernel[0] * kernel[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  weight = register_parameter("weight", uniform_bound({out, in / opts.groups, kernel[0], kernel[1]}, bound, gen));
  if (with_bias) bias = register_parameter("bias", uniform_bound({out}, bound, gen));
}
Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options); }

BatchNorm2d::BatchNorm2d(std::int64_t channels, double eps_, double momentum_)
    : Module("BatchNorm2d"), eps(eps_), momentum(momentum_) {
  weight = register_parameter("weight", Tensor::ones({channels}));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::ones({channels}));
}
Tensor BatchNorm2d::forward(const Tensor& x) {
  return batch_norm(x, weight, bias, running_mean, running_var, training(), momentum, eps);
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps_) : Module("LayerNorm"), eps(eps_) {
  weight = register_parameter("weight", Tensor::ones(normalized_shape));
  bias = register_parameter("bias", Tensor::zeros(normalized_shape));
}
Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight.dim(), weight, bias, eps); }

Embedding::Embedding(std::int64_t num, std::int64_t dim, Generator& gen) : Module("Embedding") {
  weight = register_parameter("weight", Tensor::randn({num, dim}, gen));
}
Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

Dropout::Dropout(double p_, std::uint64_t seed) : Module("Dropout"), p(p_), gen(seed) {}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training(), gen); }

MultiHeadAttention::MultiHeadAttention(std::int64_t dim, std::int64_t heads_, Generator& gen)
    : Module("MultiHeadAttention"), heads(heads_) {
  if (heads <= 0 || dim % heads != 0)
    throw std::invalid_argument("MultiHeadAttention: dim " + std::to_string(dim) + " must divide by heads " +
                                std::to_string(heads));
  q = register_module("q", std::make_shared<Linear>(dim, dim, gen));
  k = register_module("k", std::make_shared<Linear>(dim, dim, gen));
  v = register_module("v", std::make_shared<Linear>(dim, dim, gen));
  out = register_module("out", std::make_shared<Linear>(dim, dim, gen));
}

Tensor MultiHeadAttention::forward(const Tensor& x) { return forward(x, x, x); }

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& mask) {
  if (query.dim() != 3 || key.dim() != 3 || value.dim() != 3)
    throw std::invalid_argument("MultiHeadAttention: expects [batch, time, dim] inputs, got " +
                                to_string(query.shape()));
  const std::int64_t b = query.size(0), tq = query.size(1), tk = key.size(1), d = query.size(2);
  const std::int64_t dh = d / heads;
  // [B, T, D] -> [B, H, T, dh]
  auto split = [&](const Tensor& t, std::int64_t len) { return permute(reshape(t, {b, len, heads, dh}), {0, 2, 1, 3}); };
  const Tensor qh = split((*q)(query), tq), kh = split((*k)(key), tk), vh = split((*v)(value), tk);
  Tensor scores = matmul(qh, transpose(kh, -2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
  if (mask.defined()) scores = masked_fill(scores, mask, -std::numeric_limits<double>::infinity());
  const Tensor attended = matmul(softmax(scores, -1), vh);  // [B, H, Tq, dh]
  return (*out)(reshape(permute(attended, {0, 2, 1, 3}), {b, tq, d}));
}

Sequential& Sequential::add(ModulePtr m, const std::string& name) {
  register_module(name.empty() ? std::to_string(layers_.size()) : name, m);
  layers_.push_back(std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const ModulePtr& m : layers_) y = (*m)(y);  // in each layer's path: its ops are named by it
  return y;
}

namespace {
const char* activation_type(Activation a) {
  switch (a) {
    case Activation::relu: return "ReLU";
    case Activation::gelu: return "GELU";
    case Activation::gelu_tanh: return "GELU(tanh)";
    case Activation::silu: return "SiLU";
    case Activation::sigmoid: return "Sigmoid";
    case Activation::tanh: return "Tanh";
    case Activation::hardswish: return "Hardswish";
    case Activation::hardsigmoid: return "Hardsigmoid";
  }
  return "?";
}
}  // namespace

Act::Act(Activation k) : Module(activation_type(k)), kind(k) {}

Tensor Act::forward(const Tensor& x) {
  switch (kind) {
    case Activation::relu: return relu(x);
    case Activation::gelu: return gelu(x);
    case Activation::gelu_tanh: return gelu(x, true);
    case Activation::silu: return silu(x);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::tanh: return ampcheck::tanh(x);
    case Activation::hardswish: return hardswish(x);
    case Activation::hardsigmoid: return hardsigmoid(x);
  }
  throw std::logic_error("Act: unknown activation");
}

}  // namespace ampcheck::nn
