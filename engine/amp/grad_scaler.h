// The one loss scaler. Static scaling and the dynamic behaviours of PyTorch, PaddlePaddle,
// DeepSpeed and Apex, each exactly as that framework documents it, selected by the
// options' type. The state machine (update(found_inf)) is separate from the tensor work
// (scale, unscale_, step), so it can be checked against reference machines on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/tensor.h"

namespace ampcheck::optim {
class Optimizer;
}

namespace ampcheck::amp {

// A fixed scale. skip_nonfinite: a step whose gradients hold Inf/NaN is skipped, as a
// scaler that checks does (Paddle's GradScaler with a static scale, DeepSpeed's fixed
// loss_scale); false for no scaler at all: PyTorch's GradScaler(enabled=False) and
// Paddle's enable=False make scaler.step(opt) a plain opt.step(), which steps on
// whatever the gradients hold.
struct StaticScaling {
  double scale = 1.0;
  bool skip_nonfinite = true;
};
// torch.cuda.amp.GradScaler
struct TorchScaling {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};
// paddle.amp.GradScaler / fleet amp_configs
struct PaddleScaling {
  double init_loss_scaling = 32768.0;
  double incr_ratio = 2.0;
  double decr_ratio = 0.5;
  std::int64_t incr_every_n_steps = 1000;
  std::int64_t decr_every_n_nan_or_inf = 2;
  bool use_dynamic_loss_scaling = true;
};
// DeepSpeed "fp16" block (DynamicLossScaler)
struct DeepSpeedScaling {
  int initial_scale_power = 16;  // initial scale 2^power
  std::int64_t loss_scale_window = 1000;
  std::int64_t hysteresis = 2;
  double min_loss_scale = 1.0;
  bool consecutive_hysteresis = false;
  bool raise_error_at_min_scale = true;
};
// apex.amp.initialize(loss_scale="dynamic" | number, min_loss_scale, max_loss_scale)
struct ApexScaling {
  bool dynamic = true;
  double loss_scale = 65536.0;    // the initial (dynamic) or fixed scale
  double min_loss_scale = 0.0;    // 0: none
  double max_loss_scale = 16777216.0;  // 2^24
  std::int64_t scale_window = 2000;
};

using ScalingOptions =
    std::variant<StaticScaling, TorchScaling, PaddleScaling, DeepSpeedScaling, ApexScaling>;
// "static", "pytorch", "paddle", "deepspeed", "apex"
std::string behaviour_name(const ScalingOptions& options);

// What one update did: for the inspector's loss-scale history.
struct ScalerEvent {
  std::int64_t step = 0;       // updates so far, this one included
  double scale_before = 0;
  double scale_after = 0;
  bool found_inf = false;
  bool skipped = false;        // the optimizer step was skipped
  std::map<std::string, std::int64_t> counters;  // growth_tracker, incr_count, ...
  // The parameters whose gradients held Inf/NaN when unscaled: how many, and the first
  // kNamedNonFinite of them by name, in the optimizer's order (empty without found_inf).
  std::int64_t nonfinite_params = 0;
  std::vector<std::string> nonfinite_names;
  static constexpr std::size_t kNamedNonFinite = 8;
};

// Thrown by DeepSpeed's behaviour when an overflow arrives at the minimum scale with
// raise_error_at_min_scale (DeepSpeed raises and the run stops).
class ScaleAtMinimumError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GradScaler {
 public:
  explicit GradScaler(ScalingOptions options = TorchScaling{});

  const ScalingOptions& options() const { return options_; }
  double scale() const { return scale_; }

  // loss * scale (a registry op, so it is recorded like any other).
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale in f32 (or f64) and records whether
  // any is non-finite, all gradients in one kernel call (on CUDA: one launch, and one
  // flag copied back). Once per step: a second call before update() throws, as PyTorch.
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ if not done yet; then the optimizer step unless a gradient was non-finite.
  // Returns whether the step ran.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from this step's finding (the state machine), and clears the
  // per-step state. Emits and returns the event.
  ScalerEvent update();
  // The state machine alone: the next scale after a step with or without Inf/NaN.
  ScalerEvent update(bool found_inf);

  bool found_inf() const { return found_inf_; }
  // Data parallelism: the decision reduced over the ranks replaces this rank's own finding,
  // between unscale_() and step().
  void set_found_inf(bool found) { found_inf_ = found; }
  const std::vector<ScalerEvent>& history() const { return history_; }
  void set_listener(std::function<void(const ScalerEvent&)> listener) { listener_ = std::move(listener); }

  struct State {
    double scale = 0;
    std::int64_t step = 0;
    std::map<std::string, std::int64_t> counters;
  };
  State state() const;
  void load_state(const State& s);

 private:
  ScalingOptions options_;
  double scale_ = 1.0;
  std::int64_t step_ = 0;
  std::map<std::string, std::int64_t> counters_;
  bool unscaled_ = false;
  bool stepped_ = false;  // step() ran since the last update()
  bool found_inf_ = false;
  std::int64_t nonfinite_params_ = 0;         // this step's, for the event
  std::vector<std::string> nonfinite_names_;
  std::vector<ScalerEvent> history_;
  std::function<void(const ScalerEvent&)> listener_;
};

}  // namespace ampcheck::amp
