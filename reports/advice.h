// The sentences a person reads about what low precision lost, and the cures in the words
// of the framework whose loss scaler the run used: shared by the verdict, the text and
// the HTML, so each says the same thing.
//
// Which framework: a configuration in ampcheck's own form (RunInfo.amp.semantics
// "ampcheck", as the samples' model files) gets ampcheck's key and the PyTorch,
// PaddlePaddle and DeepSpeed ones, since the framework the model will train in is not
// known. Else the scaler's behaviour (RunInfo.amp.loss_scaling: "pytorch", "paddle",
// "deepspeed", "apex") names the keys of a setting that scaler has; a run whose scaler
// has none (a static scale) takes the configuration's style (semantics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reports/report.h"

namespace ampcheck::reports {

// A value lost, for a person: whole when between 1e-3 and 1e6 (65504, 90000), else three
// significant digits (2.06e-09, 5.96e-08).
std::string value_text(double v);

// "log in 'head' produced -Inf <- its input 0 came from sigmoid in 'gate', which flushed
// 3.1e-09 to 0 in float16 (smallest subnormal 5.96e-08; 60 values, step 1)", or for the
// producer's own result "bmm in 'attn' produced +Inf: its result 1.67e+05 overflowed
// float16 (largest finite 65504), which fp32 holds (12 values, step 3)".
std::string lost_text(const NanEvent& producer, const LostValue& lost);

// A backward cast that flushed a whole gradient to 0 (ZeroGradients::evidence): "an
// inserted cast in 'head' (backward, step 1) flushed every gradient it passed back to 0
// in float16: 180 values, the largest 1.1e-08 (smallest subnormal 5.96e-08)".
std::string flushed_gradient_text(const LostValue& lost);

// A skipped update's reading (SkippedUpdate::reading) for a person: "probing from the
// initial scale", "probing: a new low", "probing after growth", "counted", ...
std::string skip_reading_text(const std::string& reading);
// Whether a reading is the scaler probing for its scale (initial, lower, after_growth).
bool is_probing_reading(const std::string& reading);

// The scale written for a person: "2^13" for a power of two, else the number.
std::string scale_text(double scale);

// Where a dynamic scaler should start: "PyTorch GradScaler(init_scale=8192)".
std::string start_scale_advice(const AmpSettings& amp, double scale);

// How to turn dynamic loss scaling on, starting at `scale` (0: the framework's default):
// "PyTorch GradScaler(init_scale=8192) (dynamic)".
std::string dynamic_scaling_advice(const AmpSettings& amp, double scale);

// When nonfinite.probing is present: "23 of 200 steps were skipped while the loss scaler
// came down from 2^24 to 2^13: start it lower (PyTorch GradScaler(init_scale=8192))",
// with "(later 2^11)" and that scale when later skips took it lower; "" otherwise.
std::string probing_note(const Report& report);

// When nonfinite.zero_gradients is present: "gradients underflow: every parameter
// gradient was 0 in float16 from step 1 (200 of 200 steps); enable dynamic loss scaling
// or raise the scale to at least 2^13 (...)"; "" otherwise.
std::string gradient_underflow_text(const Report& report);

// A static loss scale under which gradients overflowed and steps were skipped, with
// nothing else failing: "the loss scale is static (1): ... a dynamic scaler backs off
// until they fit (PyTorch GradScaler(), enabled ...)"; "" otherwise.
std::string static_scale_overflow_text(const Report& report);

// The failures of one kind (a static scale that skips every step makes one per update):
// the first, how many more, and the last one's step. In the order each kind first failed.
struct FailureRun {
  Failure first;
  std::int64_t more = 0;
  std::int64_t last_step = 0;
};
std::vector<FailureRun> failure_runs(const std::vector<Failure>& failures);
// "; and 29 more at steps 2-30" ("" when none more).
std::string more_text(const FailureRun& run);

// The run failed by gradient underflow and nothing else, bar the scale below the floor
// that caused it (a static scale set under 1): its cure is the loss scale, not a black
// list. The `gradient_underflow` verdict, and bisect-nan's answer without a search.
bool loss_scale_is_the_cure(const Report& report);

}  // namespace ampcheck::reports
