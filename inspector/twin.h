// The AMP run beside its fp32 twin (`ampcheck compare --script`): whether the AMP run's loss
// curve stays within the fp32 training's own noise, or departs from it and from which step.
//
// The twin is the same script with AMP off, from the same seeds; recorded N times (seeds
// s, s+1, ...), its runs of other seeds say how far training itself moves a loss curve. The
// AMP run shares its seed with the twin's first run, so the two start alike: the yardstick
// is how far another seed's fp32 run is from that same-seed fp32 run, step by step.
//
//   gap(t)   = trailing mean over `window` steps of |AMP(t) - fp32_seed(t)|
//   noise(t) = trailing mean over `window` steps of max over the other seeds k of
//              |fp32_k(t) - fp32_seed(t)|
//
// The run departs from step S when gap > kDepartureMargin x noise at S and at every step
// after it to the last (a departure that closes again is the noise it looks like), and lasts
// at least a window. The margin: an AMP run that merely behaved like one more seed would be
// the farthest of N runs from the same-seed twin about once in N at the end; 1.5x the
// largest other seed's distance keeps such a run from being called departed at --seeds 3;
// a loss that is not finite in the AMP run where the twin's is departs there. With one fp32
// run there is no yardstick, and the verdict says so rather than guess.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "reports/report.h"

namespace ampcheck::inspector {

inline constexpr double kDepartureMargin = 1.5;

// `swamping`: the AMP run's parameters whose updates were lost to rounding (the recorder's
// reading, as the engine's inspector makes it): where a departure is born when a quarter or
// more of a parameter's moving elements kept their value through its updates.
// compare --script's where-born: each forward op of the AMP run's first step beside the fp32
// twin's, from the same weights and data (the recorder's probe.py): its output's relative
// difference from the twin's, and the largest of its inputs' with the op that made that
// input. What the op adds (output less input) is its own rounding, or the cancellation that
// makes its inputs' small rounding large (a normalization over values with a large mean).
struct TwinDifference {
  std::string name, dtype;  // "norm/layer_norm#0", its output's dtype ("float32")
  double input = 0, output = 0;
  std::string from;  // the op instance that made the input that differs most ("lin1/linear#0")
  // A 16-bit op's own rounding: its output against the same call in fp32 on the inputs it
  // received; NaN where not measured (an op in fp32, one that cannot be run again).
  double own = std::numeric_limits<double>::quiet_NaN();
  double added() const;
};
inline constexpr double kBornNamed = 0.01;
// The ops that add at least kBornNamed, largest first.
std::vector<TwinDifference> ranked_beside_twin(std::vector<TwinDifference> ops);
// "born in the forward at NAME: ... its output is X% from REFERENCE where its inputs were at
// most Y% from theirs; ..." with the cure: the op itself in fp32, or the op that made its
// input where its own math amplified that input's rounding (a script's: keep_fp32; a model
// file's: --black TYPE). compare --script's wording, and compare of levels'.
enum class BirthOf { script, model };
std::string forward_birth_text(const TwinDifference& d, std::string_view reference, BirthOf of);
// As the report's table holds it: level "AMP", local_error = what it adds, output_error =
// its output's difference, share = the first over the second.
reports::CompareBirth as_birth(const TwinDifference& d);

// `loss_ops`: loss_ops_in_low_precision of the AMP run's recording, and `loss_dtype` the
// dtype they ran in. `beside_twin`: its first step's forward ops beside the twin's.
struct TwinEvidence {
  std::vector<reports::Swamping> swamping;
  std::vector<std::string> loss_ops;
  std::string loss_dtype;
  std::vector<TwinDifference> beside_twin;
};
reports::Twin compare_with_twin(std::string script, std::uint64_t seed, std::vector<double> amp_losses,
                                std::string amp_verdict, std::vector<reports::TwinRun> fp32,
                                const TwinEvidence& evidence = {});

// Where a level's difference from the reference is born (`ampcheck compare` of levels, the
// engine's runs): for each op instance, its own error (local: its output against its exact
// result on the inputs it received, the shadow error) and its output's difference from the
// reference level (output: what it added and what it inherited, from its inputs and from a
// training that took another path). The ops are ranked by their own error, largest first;
// `share` (local / output, at most 1) says how much of its output's difference the op adds
// itself: near 1, the difference is born there; near 0, it was inherited.
struct OpDifference {
  std::string name;
  double local_error = 0, output_error = 0;
};
std::vector<reports::CompareBirth> where_born(const std::string& level, std::vector<OpDifference> ops,
                                              std::size_t top);

// The share of a parameter's moving elements whose updates vanished above which it is named.
inline constexpr double kSwampedNamed = 0.25;

// The loss computed in 16 bits: the op types of a recording's forward that compute a loss
// (cross_entropy, nll_loss, mse_loss, kl_div, the binary cross-entropies, l1/smooth_l1/huber,
// ctc; log_softmax where an nll loss follows it, as cross_entropy runs) and ran in float16
// or bfloat16, in the order first seen; empty when the loss ran in fp32.
std::vector<std::string> loss_ops_in_low_precision(const std::vector<reports::OpInstance>& ops);

}  // namespace ampcheck::inspector
