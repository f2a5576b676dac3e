// The loss scaler. Each behaviour's update rule is written from that framework's own
// source (cited at each rule); the tensor work (scale, unscale_, step) is shared.
#include "engine/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "engine/hooks.h"
#include "engine/ops/ops.h"
#include "engine/ops/registry.h"  // NoGradGuard
#include "engine/optim/optimizer.h"
#include "kernels/training_kernels.h"

namespace ampcheck::amp {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;  // clang 14 deduces no aggregate's arguments by itself

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

[[noreturn]] void reject(const char* behaviour, const char* field, const char* range,
                         const std::string& got) {
  throw std::invalid_argument(std::string("GradScaler (") + behaviour + "): " + field + " must be " +
                              range + ", got " + got);
}

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

// PyTorch and Paddle keep the scale in a float32 tensor, so every value they hold is a
// float32 value: an initial scale must still be positive and finite once rounded.
void check_f32_scale(const char* behaviour, const char* field, double v) {
  const float f = static_cast<float>(v);
  if (!(std::isfinite(v) && f > 0 && std::isfinite(f)))
    reject(behaviour, field, "positive and finite as a float32 (0, 3.4028235e38]", number(v));
}
void check_interval(const char* behaviour, const char* field, std::int64_t v, std::int64_t max) {
  if (v < 1 || v > max)
    reject(behaviour, field, ("an integer in [1, " + std::to_string(max) + "]").c_str(), std::to_string(v));
}

void validate(const ScalingOptions& options) {
  std::visit(
      Overloaded{
          [](const StaticScaling& o) {
            if (!(std::isfinite(o.scale) && o.scale > 0))
              reject("static", "scale", "positive and finite", number(o.scale));
          },
          [](const TorchScaling& o) {
            check_f32_scale("pytorch", "init_scale", o.init_scale);
            // torch/amp/grad_scaler.py asserts growth_factor > 1 and backoff_factor < 1.
            if (!(std::isfinite(o.growth_factor) && o.growth_factor > 1))
              reject("pytorch", "growth_factor", "> 1 and finite", number(o.growth_factor));
            if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
              reject("pytorch", "backoff_factor", "in (0, 1)", number(o.backoff_factor));
            // growth_interval is an int in the update kernel.
            check_interval("pytorch", "growth_interval", o.growth_interval, kInt32Max);
          },
          [](const PaddleScaling& o) {
            check_f32_scale("paddle", "init_loss_scaling", o.init_loss_scaling);
            // python/paddle/amp/grad_scaler.py asserts incr_ratio > 1 and decr_ratio < 1; the
            // ratios multiply a float32 scale as float32 values, so they are checked as such.
            const float incr = static_cast<float>(o.incr_ratio), decr = static_cast<float>(o.decr_ratio);
            if (!(std::isfinite(incr) && incr > 1))
              reject("paddle", "incr_ratio", "> 1 and finite as a float32", number(o.incr_ratio));
            if (!(decr > 0 && decr < 1))
              reject("paddle", "decr_ratio", "in (0, 1) as a float32", number(o.decr_ratio));
            check_interval("paddle", "incr_every_n_steps", o.incr_every_n_steps, kInt32Max);
            check_interval("paddle", "decr_every_n_nan_or_inf", o.decr_every_n_nan_or_inf, kInt32Max);
          },
          [](const DeepSpeedScaling& o) {
            // The initial scale is 2**initial_scale_power: a positive finite double.
            if (o.initial_scale_power < -1074 || o.initial_scale_power > 1023)
              reject("deepspeed", "initial_scale_power", "an integer in [-1074, 1023]",
                     std::to_string(o.initial_scale_power));
            check_interval("deepspeed", "loss_scale_window", o.loss_scale_window,
                           std::numeric_limits<std::int64_t>::max());
            check_interval("deepspeed", "hysteresis", o.hysteresis, std::numeric_limits<std::int64_t>::max());
            // deepspeed/runtime/fp16/loss_scaler.py validates min_scale as positive finite.
            if (!(std::isfinite(o.min_loss_scale) && o.min_loss_scale > 0))
              reject("deepspeed", "min_loss_scale", "positive and finite", number(o.min_loss_scale));
          },
          [](const ApexScaling& o) {
            if (!(std::isfinite(o.loss_scale) && o.loss_scale > 0))
              reject("apex", "loss_scale", "positive and finite", number(o.loss_scale));
            if (!(std::isfinite(o.min_loss_scale) && o.min_loss_scale >= 0))
              reject("apex", "min_loss_scale", ">= 0 and finite (0: no minimum)", number(o.min_loss_scale));
            if (!(o.max_loss_scale > 0))
              reject("apex", "max_loss_scale", "> 0 (+inf: no maximum)", number(o.max_loss_scale));
            check_interval("apex", "scale_window", o.scale_window, std::numeric_limits<std::int64_t>::max());
          },
      },
      options);
}

double initial_scale(const ScalingOptions& options) {
  return std::visit(
      Overloaded{
          [](const StaticScaling& o) { return o.scale; },
          [](const TorchScaling& o) { return static_cast<double>(static_cast<float>(o.init_scale)); },
          [](const PaddleScaling& o) { return static_cast<double>(static_cast<float>(o.init_loss_scaling)); },
          [](const DeepSpeedScaling& o) { return std::ldexp(1.0, o.initial_scale_power); },
          [](const ApexScaling& o) { return o.loss_scale; },
      },
      options);
}

// Each framework's counters under its own names, at their initial values.
std::map<std::string, std::int64_t> initial_counters(const ScalingOptions& options) {
  return std::visit(
      Overloaded{
          [](const StaticScaling&) { return std::map<std::string, std::int64_t>{}; },
          [](const TorchScaling&) { return std::map<std::string, std::int64_t>{{"growth_tracker", 0}}; },
          [](const PaddleScaling&) {
            return std::map<std::string, std::int64_t>{{"incr_count", 0}, {"decr_count", 0}};
          },
          [](const DeepSpeedScaling& o) {
            return std::map<std::string, std::int64_t>{
                {"cur_iter", 0}, {"last_overflow_iter", -1}, {"cur_hysteresis", o.hysteresis}};
          },
          [](const ApexScaling&) { return std::map<std::string, std::int64_t>{{"unskipped", 0}}; },
      },
      options);
}

// Whether a step with a non-finite gradient is skipped. Apex with a fixed loss_scale does
// not even look: LossScaler.unscale_python passes check_overflow=self.dynamic and
// update_scale only reports should_skip when self.dynamic (NVIDIA/apex apex/amp/scaler.py).
// A disabled scaler (StaticScaling::skip_nonfinite false) steps on anything.
bool skips_on_inf(const ScalingOptions& options) {
  if (const auto* apex = std::get_if<ApexScaling>(&options)) return apex->dynamic;
  if (const auto* fixed = std::get_if<StaticScaling>(&options)) return fixed->skip_nonfinite;
  return true;
}

}  // namespace

std::string behaviour_name(const ScalingOptions& options) {
  return std::visit(Overloaded{
                        [](const StaticScaling&) { return std::string("static"); },
                        [](const TorchScaling&) { return std::string("pytorch"); },
                        [](const PaddleScaling&) { return std::string("paddle"); },
                        [](const DeepSpeedScaling&) { return std::string("deepspeed"); },
                        [](const ApexScaling&) { return std::string("apex"); },
                    },
                    options);
}

GradScaler::GradScaler(ScalingOptions options) : options_(std::move(options)) {
  validate(options_);
  scale_ = initial_scale(options_);
  counters_ = initial_counters(options_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  // The scaler's own op, not the model's: observers see it in the optimizer phase.
  const PhaseScope phase(Phase::optimizer);
  return mul(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (unscaled_)
    throw std::logic_error(
        "unscale_() called twice in one step: it has already been called on this optimizer since the "
        "last update() (the gradients would be divided by the scale twice)");
  if (stepped_)
    throw std::logic_error("unscale_() called after step(): the gradients were already unscaled and used");
  NoGradGuard no_grad;
  // Every gradient into a new f32 (f64 for f64) tensor on its device, checked for Inf/NaN
  // before and after the multiplication, all in one call (on CUDA: one launch).
  std::vector<std::size_t> index;
  std::vector<Tensor> grads, unscaled;
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    const Tensor g = optimizer.gradient(i);
    if (!g.defined()) continue;
    index.push_back(i);
    grads.push_back(g);
    unscaled.push_back(Tensor::empty(g.shape(), g.dtype() == DType::f64 ? DType::f64 : DType::f32, g.device()));
  }
  std::vector<kernels::View> in, out;
  for (std::size_t k = 0; k < grads.size(); ++k) {
    in.push_back(view_of(grads[k]));
    out.push_back(view_of(unscaled[k]));
  }
  // As PyTorch: the reciprocal in double, rounded once to the compute type. One flag per
  // gradient, so that a skipped step names the parameters whose gradients overflowed.
  std::vector<std::uint8_t> flags(grads.size(), 0);
  const bool found = !grads.empty() && dispatch<kernels::TrainingKernels>("unscale_", grads)
                                           .unscale(in, out, 1.0 / scale_, flags.data());
  for (std::size_t k = 0; k < grads.size(); ++k) optimizer.set_gradient(index[k], unscaled[k]);
  nonfinite_params_ = 0;
  nonfinite_names_.clear();
  for (std::size_t k = 0; k < grads.size(); ++k)
    if (flags[k] != 0 && nonfinite_params_++ < static_cast<std::int64_t>(ScalerEvent::kNamedNonFinite))
      nonfinite_names_.push_back(optimizer.params()[index[k]].first);
  found_inf_ = found;
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (stepped_) throw std::logic_error("step() called twice in one step: call update() between steps");
  if (!unscaled_) unscale_(optimizer);
  stepped_ = true;
  const bool skip = found_inf_ && skips_on_inf(options_);
  if (!skip) optimizer.step();
  return !skip;
}

ScalerEvent GradScaler::update() { return update(found_inf_); }

ScalerEvent GradScaler::update(bool found_inf) {
  ScalerEvent event;
  event.scale_before = scale_;
  event.found_inf = found_inf;
  event.skipped = found_inf && skips_on_inf(options_);

  std::visit(
      Overloaded{
          [](const StaticScaling&) {},

          // PyTorch: aten/src/ATen/native/cuda/AmpKernels.cu (amp_update_scale_cuda_kernel)
          // and torch/amp/grad_scaler.py (pytorch/pytorch). The scale is a float32 tensor, the
          // factors doubles: Inf/NaN -> scale *= backoff_factor, growth_tracker = 0; else
          // growth_tracker + 1 == growth_interval -> scale *= growth_factor unless the float32
          // result is Inf ("do not grow the scale past fp32 bounds"), growth_tracker = 0;
          // else growth_tracker += 1.
          [&](const TorchScaling& o) {
            std::int64_t& tracker = counters_.at("growth_tracker");
            const float s = static_cast<float>(scale_);
            if (found_inf) {
              scale_ = static_cast<float>(static_cast<double>(s) * o.backoff_factor);
              tracker = 0;
              return;
            }
            if (tracker + 1 == o.growth_interval) {
              const float grown = static_cast<float>(static_cast<double>(s) * o.growth_factor);
              if (std::isfinite(grown)) scale_ = grown;
              tracker = 0;
            } else {
              ++tracker;
            }
          },

          // PaddlePaddle: python/paddle/amp/grad_scaler.py (AmpScaler._update; GradScaler.update
          // only runs it with use_dynamic_loss_scaling). The scale is a float32 tensor and
          // `scale * ratio` is Paddle's scale op in float32, so the ratio is rounded to float32.
          // Inf/NaN -> incr_count = 0, decr_count += 1, and when it reaches
          // decr_every_n_nan_or_inf: scale *= decr_ratio, decr_count = 0. Clean -> decr_count = 0
          // (so only consecutive bad steps count), incr_count += 1, and when it reaches
          // incr_every_n_steps: scale *= incr_ratio, incr_count = 0. The dygraph scaler has no
          // floor and no cap (the static-graph kernel, paddle/phi/kernels/impl/amp_kernel_impl.h
          // Update, floors at 1 and refuses a non-finite growth).
          [&](const PaddleScaling& o) {
            if (!o.use_dynamic_loss_scaling) return;
            std::int64_t& incr = counters_.at("incr_count");
            std::int64_t& decr = counters_.at("decr_count");
            const float s = static_cast<float>(scale_);
            if (found_inf) {
              incr = 0;
              if (++decr == o.decr_every_n_nan_or_inf) {
                scale_ = s * static_cast<float>(o.decr_ratio);
                decr = 0;
              }
            } else {
              decr = 0;
              if (++incr == o.incr_every_n_steps) {
                scale_ = s * static_cast<float>(o.incr_ratio);
                incr = 0;
              }
            }
          },

          // DeepSpeed: deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale
          // (deepspeedai/DeepSpeed). Python floats, scale_factor 2, cur_iter 0,
          // last_overflow_iter -1, cur_hysteresis = hysteresis ("delayed_shift").
          // Overflow: when hysteresis == 1 or cur_hysteresis == 1 the scale drops to
          // max(scale / 2, min_scale) -- raising instead when it already equals min_scale and
          // raise_error_at_min_scale -- otherwise cur_hysteresis -= 1; last_overflow_iter =
          // cur_iter. Clean: consecutive_hysteresis refills cur_hysteresis; with
          // stable_interval = cur_iter - last_overflow_iter - 1, the scale doubles when
          // stable_interval > 0 and stable_interval % window == 0 (refilling cur_hysteresis
          // without consecutive_hysteresis). The first growth is thus on the window+1-th
          // clean step. cur_iter += 1 after either.
          [&](const DeepSpeedScaling& o) {
            std::int64_t& cur_iter = counters_.at("cur_iter");
            std::int64_t& last_overflow_iter = counters_.at("last_overflow_iter");
            std::int64_t& cur_hysteresis = counters_.at("cur_hysteresis");
            if (found_inf) {
              if (o.hysteresis == 1 || cur_hysteresis == 1) {
                if (scale_ == o.min_loss_scale && o.raise_error_at_min_scale)
                  throw ScaleAtMinimumError(
                      "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run. "
                      "(DeepSpeed: loss scale " + number(scale_) + " == min_loss_scale at iteration " +
                      std::to_string(cur_iter) + ")");
                scale_ = std::max(scale_ / 2.0, o.min_loss_scale);
              } else {
                --cur_hysteresis;
              }
              last_overflow_iter = cur_iter;
            } else {
              if (o.consecutive_hysteresis) cur_hysteresis = o.hysteresis;
              const std::int64_t stable_interval = cur_iter - last_overflow_iter - 1;
              if (stable_interval > 0 && stable_interval % o.loss_scale_window == 0) {
                if (!o.consecutive_hysteresis) cur_hysteresis = o.hysteresis;
                scale_ *= 2.0;
              }
            }
            ++cur_iter;
          },

          // Apex: apex/amp/scaler.py, LossScaler.update_scale (NVIDIA/apex). Python floats.
          // Overflow with dynamic scaling: scale = max(min_loss_scale, scale / 2) when a
          // minimum is set (else scale / 2), unskipped = 0; otherwise unskipped += 1 (a fixed
          // loss_scale counts every step). When unskipped == scale_window and dynamic:
          // scale = min(max_loss_scale, scale * 2), unskipped = 0.
          [&](const ApexScaling& o) {
            std::int64_t& unskipped = counters_.at("unskipped");
            if (found_inf && o.dynamic) {
              scale_ = o.min_loss_scale != 0 ? std::max(o.min_loss_scale, scale_ / 2.0) : scale_ / 2.0;
              unskipped = 0;
            } else {
              ++unskipped;
            }
            if (unskipped == o.scale_window && o.dynamic) {
              scale_ = std::min(o.max_loss_scale, scale_ * 2.0);
              unskipped = 0;
            }
          },
      },
      options_);

  event.step = ++step_;
  event.scale_after = scale_;
  event.counters = counters_;
  if (found_inf) {
    event.nonfinite_params = nonfinite_params_;
    event.nonfinite_names = nonfinite_names_;
  }
  nonfinite_params_ = 0;
  nonfinite_names_.clear();
  unscaled_ = false;
  stepped_ = false;
  found_inf_ = false;
  history_.push_back(event);
  if (listener_) listener_(event);
  if (observed()) hooks::scaler_update(event);
  return event;
}

GradScaler::State GradScaler::state() const { return State{scale_, step_, counters_}; }

void GradScaler::load_state(const State& s) {
  const auto expected = initial_counters(options_);
  bool same_names = expected.size() == s.counters.size();
  for (const auto& [name, value] : expected) same_names = same_names && s.counters.count(name) == 1;
  if (!same_names) {
    std::string want, got;
    for (const auto& [name, value] : expected) want += (want.empty() ? "" : ", ") + name;
    for (const auto& [name, value] : s.counters) got += (got.empty() ? "" : ", ") + name;
    throw std::invalid_argument("GradScaler::load_state: the " + behaviour_name(options_) +
                                " scaler keeps the counters {" + want + "}, the state has {" + got + "}");
  }
  if (std::isnan(s.scale) || s.scale < 0)
    throw std::invalid_argument("GradScaler::load_state: scale must be >= 0, got " + number(s.scale));
  if (s.step < 0)
    throw std::invalid_argument("GradScaler::load_state: step must be >= 0, got " + std::to_string(s.step));
  // PyTorch and Paddle load the saved value into their float32 scale tensor.
  const bool f32_scale =
      std::holds_alternative<TorchScaling>(options_) || std::holds_alternative<PaddleScaling>(options_);
  scale_ = f32_scale ? static_cast<double>(static_cast<float>(s.scale)) : s.scale;
  step_ = s.step;
  counters_ = s.counters;
  unscaled_ = false;
  stepped_ = false;
  found_inf_ = false;
}

}  // namespace ampcheck::amp
