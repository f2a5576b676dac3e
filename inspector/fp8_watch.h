// What fp8 training does to each scaled tensor, step by step, and the findings a user acts
// on before the loss shows anything.
//
// It listens to fp8_linear's events (engine/ops/fp8_linear.cpp): in the forward the input
// and the weight, in the backward the output gradient, each with the scale and format its
// cast used (the module's meta). For each of them, every observed step, it keeps the
// tensor's amax, the scale, and the account of the cast (kernels/fp8_kernels.h: values that
// saturate, values that flush to zero, the binades of the rest), computed on the tensor's
// own device by the same element rule the cast uses. Under block scaling (MXFP8) the
// account is of the rowwise casts, each block of 32 with its own scale, and the step's
// scale is that of the block holding the amax (no block saturates; values far below their
// block's largest still flush).
//
// Findings, each named with its layer, tensor, step and numbers:
// A tensor's first cast runs with the initial scale, before any amax was recorded: what it
// clamps or flushes there is a warning only (delayed scaling corrects it from the next step).
//
//   zero_amax_infinite_scale  a cast ran with a scale that is not finite: what fp8_max /
//                             amax gives when the amax is 0 (TE's rule keeps the old scale
//                             instead; a recipe of one's own may not): every nonzero value
//                             becomes +-max and every zero NaN (0 * Inf). A failure.
//   saturation                values beyond the format's range, clamped to +-max: the step's
//                             amax exceeded what the scale from the history can hold
//                             (delayed scaling's classic after an amax jump). A warning at
//                             its first step, with the share clamped, before the loss shows
//                             anything; a failure where the share reaches
//                             `saturation_failure` at an overshoot of
//                             `saturation_failure_overshoot`, or `saturation_failure_alone`.
//                             (With margin 0 any growth of the amax
//                             past its history's maximum clamps the largest values: a small
//                             share clipped by a little is delayed scaling working as
//                             designed, and is not reported; Fp8WatchOptions.)
//   te_shape                  an fp8 layer's input whose leading dims (batch x sequence) hold
//                             a number of rows TransformerEngine refuses: not a multiple of 8
//                             (its fp8 execution check), of 32 under MXFP8 (its quantizer's
//                             blocks). ampcheck computes on; TE would raise. A warning, once
//                             per layer: the cure is padding, not keeping layers out of fp8.
//   underflow                 a share of the tensor's nonzero values flushed to zero in the
//                             cast (the tensor's mass below the format's smallest subnormal:
//                             E5M2 gradients losing a layer's signal). A warning from
//                             `underflow_warning`, a failure from `underflow_failure`.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <string>
#include <vector>

#include "engine/hooks.h"
#include "kernels/fp8_kernels.h"
#include "reports/report.h"

namespace ampcheck::inspector {

enum class Fp8Tensor : std::uint8_t { input, weight, grad_output };
std::string_view fp8_tensor_name(Fp8Tensor t);  // "input", "weight", "grad_output"

// One cast of one step (several calls of a layer in one step: counts summed, amax the
// largest, the scale of the first).
struct Fp8CastStep {
  std::int64_t step = 0;
  float scale = 0;
  kernels::Fp8Format format = kernels::Fp8Format::e4m3;
  kernels::Fp8CastStats stats;
};

struct Fp8TensorHistory {
  std::string layer;  // the module's path
  Fp8Tensor tensor = Fp8Tensor::input;
  std::vector<Fp8CastStep> steps;  // in step order
};

enum class Fp8FindingKind : std::uint8_t { zero_amax_infinite_scale, saturation, underflow, te_shape };
std::string_view fp8_finding_name(Fp8FindingKind k);

struct Fp8Finding {
  Fp8FindingKind kind = Fp8FindingKind::saturation;
  bool failure = false;  // a failure, not a warning
  std::string layer;
  Fp8Tensor tensor = Fp8Tensor::input;
  std::int64_t step = 0;       // the first step it was seen
  std::int64_t steps = 0;      // steps it was seen on
  double share = 0;            // at its first step: saturated or flushed share of the values
  double worst_share = 0;      // the largest share over the steps
  float amax = 0, scale = 0;   // at its first step
  bool first_cast_only = false;  // seen at the tensor's first cast alone (the initial scale's)
  std::string text;            // one line, with the cure
};

struct Fp8WatchOptions {
  // Saturation is reported where the amax overshot the range by saturation_overshoot
  // (amax * scale / fp8_max) or the clamped share reaches saturation_failure: the largest
  // few values clipped by a few percent after a small amax growth (a weight after an
  // update, with margin 0) are delayed scaling at work.
  double saturation_overshoot = 1.25;
  // A failure: a step (not the first) that clamped saturation_failure of the values with
  // an overshoot of saturation_failure_overshoot (values cut to half and less: an amax
  // jump), or that clamped saturation_failure_alone of them by any overshoot. A percent of
  // a small gradient clipped by a fifth after it grew is delayed scaling with margin 0 at
  // work: a warning.
  double saturation_failure = 0.01;  // share of a tensor's values clamped to +-max
  double saturation_failure_overshoot = 2.0;
  double saturation_failure_alone = 0.1;
  double underflow_warning = 0.01;   // share of nonzero values flushed to zero
  double underflow_failure = 0.5;    // ... the tensor's mass below the smallest subnormal
  // Delayed scaling: a tensor's first cast runs with the initial scale (1), before any
  // amax; what it clamps or flushes is a warning only. Current scaling's first cast is
  // scaled by its own amax like every other: judged as any.
  bool delayed = true;
  // Block scaling (MXFP8): each block of 32 has the scale of its own amax; an underflow is
  // values too far below their block's largest.
  bool block = false;
};

class Fp8Watch : public Observer {
 public:
  explicit Fp8Watch(Fp8WatchOptions options = {}) : options_(options) {}
  void on_op_end(const OpEvent& e) override;

  // Every scaled tensor seen, layer by layer in the order first seen.
  const std::vector<Fp8TensorHistory>& histories() const { return histories_; }
  // The findings over everything seen so far: failures first, then by step, then the
  // largest share first.
  std::vector<Fp8Finding> findings() const;

 private:
  // mx_row > 0: block scaling (MXFP8), values as rows of mx_row values, each block of 32
  // scaled by its own amax; the step's scale is then that of the block holding the amax.
  void record(const std::string& layer, Fp8Tensor tensor, std::int64_t step, const Tensor& values, float scale,
              kernels::Fp8Format format, std::int64_t mx_row = 0);
  // A te_shape finding for the layer's input x where TE would refuse its rows (once).
  void note_shape(const std::string& layer, std::int64_t step, const Tensor& x, bool block_scaling);

  Fp8WatchOptions options_;
  std::vector<Fp8TensorHistory> histories_;
  std::map<std::pair<std::string, Fp8Tensor>, std::size_t> index_;
  std::vector<Fp8Finding> shape_findings_;  // te_shape, the first per layer
};

// The findings of one tensor's history (what findings() gathers): exposed for tests and
// for histories read back from elsewhere.
std::vector<Fp8Finding> fp8_findings(const Fp8TensorHistory& h, const Fp8WatchOptions& options);

// The report's fp8 section (schema 1.9): every history, step by step, with its binades
// summed over the steps, and the findings; the caller names the recipe and the layers.
reports::Fp8Training to_report(const Fp8Watch& watch);

}  // namespace ampcheck::inspector
