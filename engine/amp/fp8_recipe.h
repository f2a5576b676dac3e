// fp8 scaling recipes as TransformerEngine defines them. The options are those of
// transformer_engine/common/recipe/__init__.py (DelayedScaling, Float8CurrentScaling,
// MXFP8BlockScaling and Format, keyword for keyword); the arithmetic is TE's own:
//   - delayed scaling: the amax history roll and the scale update of
//     transformer_engine/common/recipe/delayed_scaling.cu (kernel_bulk, the path of
//     te.autocast's amax reduction in PyTorch);
//   - current scaling: compute_scale_from_amax of
//     transformer_engine/common/recipe/recipe_common.cuh;
//   - MXFP8: one E8M0 scale per 32 values, kernels/fp_bits.h's e8m0_scale_bits.
// As with the loss scaler, the state machine is apart from the tensor work, so that it is
// checked on its own against a transcription of TE's rule (tests/fp8_recipe_test.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/amp/fp8_scale_fn.h"
#include "engine/dtype/fp8.h"

namespace ampcheck::amp {

// TE's recipe.Format: E4M3 everywhere, or HYBRID (e4m3 forward, e5m2 for gradients). TE
// refuses E5M2 alone ("Pure E5M2 training is not supported"), and so does the parser.
enum class Fp8RecipeFormat : std::uint8_t { e4m3, hybrid };

// Which operand of a GEMM a scale belongs to (TE's fp8_quant_fwd_inp, fp8_quant_fwd_weight,
// fp8_quant_bwd_grad): each GEMM keeps one scale per role.
enum class Fp8Role : std::uint8_t { input, weight, grad_output };
std::string_view role_name(Fp8Role role);  // "input", "weight", "grad_output"

// The format a role's values are cast to: HYBRID casts gradients to e5m2.
Fp8Format format_for(Fp8RecipeFormat format, Fp8Role role);

enum class AmaxComputeAlgo : std::uint8_t { max, most_recent };

// transformer_engine.common.recipe.DelayedScaling
struct DelayedScaling {
  int margin = 0;
  Fp8RecipeFormat fp8_format = Fp8RecipeFormat::hybrid;
  std::int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::max;
  bool reduce_amax = true;  // amaxes reduced (max) over the amax reduction group each step
  // The user's own amax -> scale function (TE's scaling_factor_compute_algo), or none for
  // TE's default. With one, the update is TE's Python path (fp8.py, _amax_and_scale_update):
  // the history always rolls, the max propagates a NaN, and the function's result is the
  // scale, unguarded.
  std::shared_ptr<const Fp8ScaleFunction> scaling_factor_compute_algo;
};
// transformer_engine.common.recipe.Float8CurrentScaling: the scale from this tensor's own
// amax at each cast (QParams' power_2_scale and amax_epsilon, the same for every role).
struct Float8CurrentScaling {
  Fp8RecipeFormat fp8_format = Fp8RecipeFormat::hybrid;
  bool use_power_2_scales = false;
  float amax_epsilon = 0.0f;
};
// transformer_engine.common.recipe.MXFP8BlockScaling: 32 consecutive values share an E8M0
// (power of two) scale.
struct MXFP8BlockScaling {
  Fp8RecipeFormat fp8_format = Fp8RecipeFormat::e4m3;
  static constexpr int kBlock = 32;
};

using Fp8Recipe = std::variant<DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling>;

class Fp8RecipeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A recipe as a user writes it in their script, TE's constructor with its keywords:
//   DelayedScaling(margin=0, fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")
//   recipe.Float8CurrentScaling()            MXFP8BlockScaling(fp8_format=Format.E4M3)
//   Float8CurrentScaling(fp8_quant_fwd_inp=QParams(power_2_scale=True, amax_epsilon=1e-12))
// A module prefix (transformer_engine.common.recipe., recipe., te.recipe.) is accepted. An
// unknown recipe, keyword or value throws Fp8RecipeError naming it and what is known.
Fp8Recipe parse_fp8_recipe(std::string_view text);
// The recipe in the form parse_fp8_recipe reads, every keyword given.
std::string to_string(const Fp8Recipe& recipe);

// ---- delayed scaling: one scaled tensor's state (one column of TE's amax_history, its
// scale and scale_inv). amax_history[0] is the slot this step's casts write their amax
// into; after a roll the older values are [1 .. L-1], the most recent last.
struct DelayedScalingState {
  std::vector<float> amax_history;  // amax_history_len values, zero at the start (TE's)
  float scale = 1.0f;               // TE starts every scale at 1
  float scale_inv = 1.0f;
};
DelayedScalingState initial_state(const DelayedScaling& recipe);

// A cast of the tensor this step: its amax (max |x| as the cast computes it, fmaxf: a NaN
// element is passed over, an Inf kept) joins slot 0 by max, as TE's casts do.
void record_amax(DelayedScalingState& state, float amax);

// What one update did, for the inspector.
struct DelayedScalingUpdate {
  float step_amax = 0;    // the amax this step contributed (after the reduction, if any)
  float amax_used = 0;    // what the scale was computed from (0: none, the scale kept)
  float scale_before = 0;
  float scale_after = 0;
  bool rolled = false;            // the history moved on (TE does not roll on a zero amax)
  bool kept_scale = false;        // the amax was zero or not finite: the old scale stays
  bool clamped_to_max = false;    // fp8_max / amax overflowed f32: the scale is FLT_MAX
};

// The end of a step: TE's amax_and_scale_update for this tensor (delayed_scaling.cu,
// kernel_bulk). reduced_amax is the step's amax after the reduction over the amax
// reduction group (TE's amax_reduction_buffer) where there is one; a reduced amax of 0
// falls back to the local slot, as TE's kernel does. With a scaling_factor_compute_algo,
// TE's Python path instead (transformer_engine/pytorch/fp8.py: _update_amax_history,
// _default_get_amax_and_update_history, _compute_scaling_factor): the reduced amax, if
// any, replaces slot 0; the amax is torch.max over the history (or slot 0 for
// most_recent); the history rolls by -1 and slot 0 is zeroed, whatever the amax; the
// scale is the function's value.
DelayedScalingUpdate update(DelayedScalingState& state, const DelayedScaling& recipe, Fp8Format format,
                            std::optional<float> reduced_amax = std::nullopt);

// ---- current scaling: TE's compute_scale_from_amax (recipe_common.cuh): an amax below
// epsilon is raised to it; a zero, Inf or NaN amax gives scale 1; fp8_max / amax, FLT_MAX
// where that overflows; with power-of-2 scales the mantissa cleared (rounded down).
float current_scale(float amax, Fp8Format format, const Float8CurrentScaling& recipe);

// The largest finite value of the format as TE's recipes use it: 448, 57344.
float fp8_max(Fp8Format format);

}  // namespace ampcheck::amp
