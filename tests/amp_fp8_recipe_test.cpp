// TransformerEngine's fp8 recipes (engine/amp/fp8_recipe.h) against TE's own rule. The
// reference below is a transcription of TE's source, written as the source is written
// (one loop iteration per CUDA thread of the kernel), not as engine/amp/fp8_recipe.cpp is:
//   delayed scaling: transformer_engine/common/recipe/delayed_scaling.cu,
//     amax_and_scale_update_impl::kernel_bulk (NVIDIA/TransformerEngine at commit
//     6b71a0adeedf9ab82c0ed2b179dc419cec2cc789): the roll, the max or most recent amax,
//     scaled_max = fp8_max * 2^-margin, the scale kept for a zero or non-finite amax and
//     FLT_MAX for one that overflows, the history left alone when the step's amax is 0;
//   current scaling: compute_scale_from_amax, transformer_engine/common/recipe/recipe_common.cuh;
//   the options: transformer_engine/common/recipe/__init__.py.
// Hand-worked sequences check the transcription itself.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "engine/amp/fp8_recipe.h"

namespace ampcheck::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMax = std::numeric_limits<float>::max();

// ---- the transcription of kernel_bulk for one scale (count), bsize threads in turn
struct TeColumn {
  std::vector<float> amax_history;
  float scale = 1.0f;
  float scale_inv = 1.0f;
};

void te_kernel_bulk(TeColumn& col, const float* amax_reduction_buffer, bool algo_max, float scaled_max) {
  const std::size_t length = col.amax_history.size();
  constexpr std::size_t bsize = 256;
  float* amax_history = col.amax_history.data();
  const float last_amax = (amax_reduction_buffer != nullptr && amax_reduction_buffer[0] != 0.0f)
                              ? amax_reduction_buffer[0]
                              : amax_history[0];
  // Every "thread" tid keeps its own running amax; the block then reduces them.
  std::vector<float> thread_amax(bsize, 0.0f);
  if (last_amax != 0.0f) {
    for (std::size_t off = 0; off < length; off += bsize) {
      std::vector<float> a_of(bsize, 0.0f);
      for (std::size_t tid = 0; tid < bsize; ++tid) {  // before __syncthreads: all reads
        const std::size_t i = off + tid;
        float a = 0;
        if (i < length) {
          a = (i < length - 1) ? amax_history[i + 1] : last_amax;
          thread_amax[tid] = std::fmax(thread_amax[tid], a);
        }
        a_of[tid] = a;
      }
      for (std::size_t tid = 0; tid < bsize; ++tid) {  // after it: the writes
        const std::size_t i = off + tid;
        if (i < length) amax_history[i] = (i > 0) ? a_of[tid] : 0;
      }
    }
  }
  float amax;
  if (!algo_max) {
    amax = last_amax;
  } else {
    std::vector<float> shared_amax = thread_amax;
    for (std::size_t off = bsize / 2; off > 0; off /= 2)
      for (std::size_t tid = 0; tid < off; ++tid) shared_amax[tid] = std::fmax(shared_amax[tid], shared_amax[tid + off]);
    amax = shared_amax[0];
  }
  float scale;
  if (std::isfinite(amax) && amax > 0) {
    scale = scaled_max / amax;
  } else {
    scale = col.scale;
  }
  if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  col.scale = scale;
  col.scale_inv = 1 / scale;
}

float te_scaled_max(Fp8Format format, int margin) {
  const float max = format == Fp8Format::e4m3 ? 448.0f : 57344.0f;  // fp8_dtype_max
  return max * std::pow(2.f, static_cast<float>(-margin));
}

// compute_scale_from_amax (value_for_inf: f32's max)
float te_compute_scale_from_amax(float amax, float max_fp8, bool force_pow_2_scales, float epsilon) {
  if (amax < epsilon) amax = epsilon;
  float scale = 1.f;
  if (std::isinf(amax) || amax == 0.f || std::isnan(amax)) return scale;
  scale = max_fp8 / amax;
  if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  if (force_pow_2_scales) scale = std::bit_cast<float>(std::bit_cast<std::uint32_t>(scale) & 0xFF800000u);
  return scale;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

DelayedScaling delayed(std::int64_t length, AmaxComputeAlgo algo, int margin = 0) {
  DelayedScaling r;
  r.amax_history_len = length;
  r.amax_compute_algo = algo;
  r.margin = margin;
  return r;
}

// Runs a sequence of step amaxes through both and returns the engine's scales.
std::vector<float> run_both(const DelayedScaling& recipe, Fp8Format format, const std::vector<float>& amaxes,
                            const std::vector<std::optional<float>>& reduced = {}) {
  DelayedScalingState state = initial_state(recipe);
  TeColumn te{std::vector<float>(static_cast<std::size_t>(recipe.amax_history_len), 0.0f), 1.0f, 1.0f};
  std::vector<float> scales;
  for (std::size_t step = 0; step < amaxes.size(); ++step) {
    const std::optional<float> r = step < reduced.size() ? reduced[step] : std::nullopt;
    record_amax(state, amaxes[step]);
    te.amax_history[0] = std::fmax(te.amax_history[0], amaxes[step]);  // the cast's atomic max into slot 0
    update(state, recipe, format, r);
    const float buffer = r.value_or(0.0f);
    te_kernel_bulk(te, r ? &buffer : nullptr, recipe.amax_compute_algo == AmaxComputeAlgo::max,
                   te_scaled_max(format, recipe.margin));
    EXPECT_TRUE(same_bits(state.scale, te.scale)) << "step " << step << ": scale " << state.scale << ", TE " << te.scale;
    EXPECT_TRUE(same_bits(state.scale_inv, te.scale_inv)) << "step " << step;
    for (std::size_t i = 0; i < te.amax_history.size(); ++i)
      EXPECT_TRUE(same_bits(state.amax_history[i], te.amax_history[i]))
          << "step " << step << " history[" << i << "]: " << state.amax_history[i] << ", TE " << te.amax_history[i];
    scales.push_back(state.scale);
  }
  return scales;
}

TEST(Fp8DelayedScaling, AHandWorkedMaxWindowHoldsASpikeForExactlyTheHistoryLength) {
  // L = 4, "max": the window after step t is the last 4 step amaxes. Step 2's spike of 2
  // sets the scale (448 / 2) for steps 2..5 and leaves it at step 6.
  const auto s = run_both(delayed(4, AmaxComputeAlgo::max), Fp8Format::e4m3, {1, 2, 0.5f, 0.25f, 0.1f, 0.1f, 0.1f});
  EXPECT_EQ(s, (std::vector<float>{448, 224, 224, 224, 224, 896, 1792}));
}

TEST(Fp8DelayedScaling, MostRecentFollowsEachStepAndMarginAndHybridGradientsScaleTheMax) {
  EXPECT_EQ(run_both(delayed(4, AmaxComputeAlgo::most_recent), Fp8Format::e4m3, {1, 2, 0.5f, 8}),
            (std::vector<float>{448, 224, 896, 56}));
  // margin 2: 448 / 4 = 112 over the amax; e5m2 (HYBRID's gradients): 57344.
  EXPECT_EQ(run_both(delayed(2, AmaxComputeAlgo::max, 2), Fp8Format::e4m3, {1, 0.5f, 0.5f}),
            (std::vector<float>{112, 112, 224}));
  EXPECT_EQ(run_both(delayed(1, AmaxComputeAlgo::max), Fp8Format::e5m2, {4, 1024}), (std::vector<float>{14336, 56}));
  EXPECT_EQ(format_for(Fp8RecipeFormat::hybrid, Fp8Role::grad_output), Fp8Format::e5m2);
  EXPECT_EQ(format_for(Fp8RecipeFormat::hybrid, Fp8Role::weight), Fp8Format::e4m3);
  EXPECT_EQ(format_for(Fp8RecipeFormat::e4m3, Fp8Role::grad_output), Fp8Format::e4m3);
}

TEST(Fp8DelayedScaling, AZeroAmaxNeitherRollsNorChangesTheScaleAndAnInfKeepsTheScaleWhileInTheWindow) {
  // Zero at step 1: nothing moves (kernel_bulk skips the roll), the scale stays 224.
  DelayedScaling r = delayed(3, AmaxComputeAlgo::max);
  DelayedScalingState st = initial_state(r);
  record_amax(st, 2);
  update(st, r, Fp8Format::e4m3);
  const std::vector<float> before = st.amax_history;
  const DelayedScalingUpdate u = update(st, r, Fp8Format::e4m3);  // nothing recorded: amax 0
  EXPECT_FALSE(u.rolled);
  EXPECT_TRUE(u.kept_scale);
  EXPECT_EQ(st.amax_history, before);
  EXPECT_EQ(st.scale, 224);
  // An Inf amax rolls in; while it is in the max window the scale is kept (not 0).
  EXPECT_EQ(run_both(delayed(2, AmaxComputeAlgo::max), Fp8Format::e4m3, {1, kInf, 2, 4, 8}),
            (std::vector<float>{448, 448, 448, 112, 56}));
  // A NaN reduced amax rolls in and is passed over by the max (fmaxf).
  run_both(delayed(3, AmaxComputeAlgo::max), Fp8Format::e4m3, {1, 1, 1, 1}, {std::nullopt, kNaN, std::nullopt, 2.0f});
}

TEST(Fp8DelayedScaling, ATinyAmaxGivesTheLargestFloatNotAnInfiniteScale) {
  DelayedScaling r = delayed(1, AmaxComputeAlgo::most_recent);
  DelayedScalingState st = initial_state(r);
  record_amax(st, 1e-40f);  // subnormal: 448 / 1e-40 overflows f32
  const DelayedScalingUpdate u = update(st, r, Fp8Format::e4m3);
  EXPECT_TRUE(u.clamped_to_max);
  EXPECT_EQ(st.scale, kFltMax);
  EXPECT_TRUE(same_bits(st.scale_inv, 1.0f / kFltMax));
  run_both(r, Fp8Format::e4m3, {1e-40f, 1e-38f, 3e-39f});
}

TEST(Fp8DelayedScaling, TheReductionsAmaxReplacesTheLocalOneUnlessItIsZero) {
  // Rank-local amax 1, group's 4: the scale follows the group (the synchronised ranks).
  EXPECT_EQ(run_both(delayed(1, AmaxComputeAlgo::most_recent), Fp8Format::e4m3, {1, 1, 1}, {4.0f, 0.0f, 2.0f}),
            (std::vector<float>{112, 448, 224}));
}

TEST(Fp8DelayedScaling, RandomSequencesGiveTeBitsForEveryLengthAlgorithmMarginAndFormat) {
  std::mt19937_64 rng(20261127);
  std::uniform_real_distribution<double> log_amax(-45, 40);
  std::uniform_int_distribution<int> kind(0, 99);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t length = std::uniform_int_distribution<std::int64_t>(1, trial % 10 == 0 ? 600 : 40)(rng);
    const auto algo = trial % 2 ? AmaxComputeAlgo::max : AmaxComputeAlgo::most_recent;
    const int margin = std::uniform_int_distribution<int>(-3, 4)(rng);
    const Fp8Format format = trial % 3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
    std::vector<float> amaxes;
    std::vector<std::optional<float>> reduced;
    for (int step = 0; step < 300; ++step) {
      const int k = kind(rng);
      amaxes.push_back(k < 10 ? 0.0f : k < 12 ? kInf : static_cast<float>(std::exp2(log_amax(rng))));
      const int j = kind(rng);
      reduced.push_back(j < 70 ? std::nullopt
                               : j < 75 ? std::optional<float>(0.0f)
                               : j < 77 ? std::optional<float>(kNaN)
                                        : std::optional<float>(static_cast<float>(std::exp2(log_amax(rng)))));
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": length " + std::to_string(length) + ", margin " +
                 std::to_string(margin));
    run_both(delayed(length, algo, margin), format, amaxes, reduced);
    if (HasFailure()) return;
  }
}

TEST(Fp8CurrentScaling, TheScaleIsTesComputeScaleFromAmax) {
  Float8CurrentScaling plain;
  EXPECT_EQ(current_scale(2, Fp8Format::e4m3, plain), 224);
  EXPECT_EQ(current_scale(0, Fp8Format::e4m3, plain), 1);  // a zero amax: scale 1, no Inf
  EXPECT_EQ(current_scale(kInf, Fp8Format::e4m3, plain), 1);
  EXPECT_EQ(current_scale(kNaN, Fp8Format::e5m2, plain), 1);
  EXPECT_EQ(current_scale(1e-40f, Fp8Format::e4m3, plain), kFltMax);
  Float8CurrentScaling pow2;
  pow2.use_power_2_scales = true;
  EXPECT_EQ(current_scale(3, Fp8Format::e4m3, pow2), 128);  // 149.33 rounded down to 2^7
  EXPECT_EQ(current_scale(1e-40f, Fp8Format::e4m3, pow2), std::ldexp(1.0f, 127));
  Float8CurrentScaling eps;
  eps.amax_epsilon = 1e-3f;
  EXPECT_EQ(current_scale(1e-6f, Fp8Format::e4m3, eps), 448 / 1e-3f);
  EXPECT_EQ(current_scale(0, Fp8Format::e4m3, eps), 448 / 1e-3f);  // zero raised to epsilon first
  // Every binary32 exponent and a spread of mantissas against the transcription.
  for (std::uint32_t e = 0; e < 256; ++e)
    for (std::uint32_t m : {0u, 1u, 0x2AAAAAu, 0x400000u, 0x7FFFFFu})
      for (bool p2 : {false, true})
        for (float epsilon : {0.0f, 1e-12f, 1.0f})
          for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
            const float amax = std::bit_cast<float>(e << 23 | m);
            Float8CurrentScaling r;
            r.use_power_2_scales = p2;
            r.amax_epsilon = epsilon;
            ASSERT_TRUE(same_bits(current_scale(amax, f, r), te_compute_scale_from_amax(amax, fp8_max(f), p2, epsilon)))
                << "amax " << amax << " pow2 " << p2 << " epsilon " << epsilon;
          }
}

// ---- the recipe as a script writes it
TEST(Fp8RecipeText, TransformerEnginesConstructorsAreReadKeywordForKeyword) {
  // TE's documentation example (docs/features/low_precision_training/fp8_delayed_scaling).
  auto r = parse_fp8_recipe("DelayedScaling(margin=0, amax_history_len=1024, amax_compute_algo=\"max\")");
  const auto& d = std::get<DelayedScaling>(r);
  EXPECT_EQ(d.margin, 0);
  EXPECT_EQ(d.amax_history_len, 1024);
  EXPECT_EQ(d.fp8_format, Fp8RecipeFormat::hybrid);  // TE's default
  r = parse_fp8_recipe(
      "transformer_engine.common.recipe.DelayedScaling(fp8_format=recipe.Format.E4M3, amax_history_len=16,"
      " amax_compute_algo='most_recent', margin=1, reduce_amax=False)");
  EXPECT_EQ(std::get<DelayedScaling>(r).amax_compute_algo, AmaxComputeAlgo::most_recent);
  EXPECT_EQ(std::get<DelayedScaling>(r).fp8_format, Fp8RecipeFormat::e4m3);
  EXPECT_FALSE(std::get<DelayedScaling>(r).reduce_amax);
  r = parse_fp8_recipe("recipe.Float8CurrentScaling()");
  EXPECT_EQ(std::get<Float8CurrentScaling>(r).fp8_format, Fp8RecipeFormat::hybrid);
  r = parse_fp8_recipe("Float8CurrentScaling(use_power_2_scales=True)");
  EXPECT_TRUE(std::get<Float8CurrentScaling>(r).use_power_2_scales);
  r = parse_fp8_recipe(
      "Float8CurrentScaling(fp8_quant_fwd_inp=QParams(power_2_scale=True, amax_epsilon=1e-12), "
      "fp8_quant_fwd_weight=QParams(power_2_scale=True, amax_epsilon=1e-12), "
      "fp8_quant_bwd_grad=QParams(power_2_scale=True, amax_epsilon=1e-12))");
  EXPECT_TRUE(std::get<Float8CurrentScaling>(r).use_power_2_scales);
  EXPECT_EQ(std::get<Float8CurrentScaling>(r).amax_epsilon, 1e-12f);
  r = parse_fp8_recipe("MXFP8BlockScaling(fp8_format=Format.E4M3)");
  EXPECT_EQ(std::get<MXFP8BlockScaling>(r).fp8_format, Fp8RecipeFormat::e4m3);
  // Written back, read again: the same recipe.
  for (const char* text : {"DelayedScaling(margin=2, amax_history_len=7, amax_compute_algo=\"most_recent\")",
                           "Float8CurrentScaling(use_power_2_scales=True, fp8_format=Format.E4M3)",
                           "MXFP8BlockScaling()"}) {
    const Fp8Recipe once = parse_fp8_recipe(text);
    EXPECT_EQ(to_string(parse_fp8_recipe(to_string(once))), to_string(once)) << text;
  }
}

TEST(Fp8RecipeText, WhatCannotRunIsRefusedNamingTheKeywordAndTheCure) {
  const auto message = [](const char* text) {
    try {
      parse_fp8_recipe(text);
    } catch (const Fp8RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message("DelayedScaling(fp8_format=Format.E5M2)").find("Format.HYBRID"), std::string::npos);
  const std::string unknown = message("DelayedScaling(amax_history=16)");
  EXPECT_NE(unknown.find("amax_history is not a keyword of DelayedScaling"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("amax_history_len"), std::string::npos) << unknown;
  EXPECT_NE(message("DelayedScaling(0, Format.HYBRID)").find("by keyword"), std::string::npos);
  EXPECT_NE(message("DelayedScaling(amax_compute_algo=my_amax)").find("callable"), std::string::npos);
  EXPECT_NE(message("DelayedScaling(amax_history_len=0)").find("amax_history_len must be an integer"), std::string::npos);
  EXPECT_NE(message("NVFP4BlockScaling()").find("is not a recipe ampcheck runs"), std::string::npos);
  EXPECT_NE(message("DelayedScaling(margin=1").find("expected ',' or ')'"), std::string::npos);
  EXPECT_NE(message("DelayedScaling(fp8_dpa=True)").find("fp8 attention"), std::string::npos);
  EXPECT_NE(message("DelayedScaling(margin=1, margin=2)").find("given twice"), std::string::npos);
  EXPECT_NE(message("Float8CurrentScaling(fp8_quant_fwd_inp=QParams(stochastic_rounding=True))").find("NVFP4"),
            std::string::npos);
  EXPECT_NE(message("DelayedScaling(margin=\"x)").find("not closed"), std::string::npos);
  EXPECT_NE(message("HYBRID").find("constructor"), std::string::npos);
}

// ---- DelayedScaling(scaling_factor_compute_algo=lambda ...): TE's Python update path
// (transformer_engine/pytorch/fp8.py: _update_amax_history, the history rolled by -1 and
// slot 0 zeroed at every update; _default_get_amax_and_update_history, torch.max over the
// whole history before the roll; _compute_scaling_factor, the function's value as the
// scale, unguarded). Values worked by hand in float32; tests/e2e/torch_fp8_scale_fn.sh
// replays random sequences against PyTorch itself.
float eval_fn(const char* lambda, float amax, float scale = 1.0f, int margin = 0, float fp8_max_value = 448.0f) {
  return Fp8ScaleFunction::parse(lambda)(amax, scale, fp8_max_value, margin, 1024);
}

TEST(Fp8ScaleFunction, EvaluatesAsPyTorchOnFloat32TensorsAndPythonNumbers) {
  const char* plain = "lambda amax, scale, fp8_max, recipe: fp8_max / amax / 2 ** recipe.margin";
  // fp8_max / amax is Tensor.__rtruediv__: amax.reciprocal() * fp8_max, two float32 roundings
  // (448 / 3 in one rounding is 149.333328; through the reciprocal, 149.333344).
  const float via_reciprocal = (1.0f / 3.0f) * 448.0f;
  EXPECT_NE(via_reciprocal, 448.0f / 3.0f);
  EXPECT_EQ(eval_fn(plain, 3.0f), via_reciprocal);
  EXPECT_EQ(eval_fn(plain, 3.0f, 1.0f, 2), via_reciprocal / 4.0f);
  EXPECT_EQ(eval_fn(plain, 3.0f, 1.0f, -1), via_reciprocal / 0.5f);  // 2 ** -1 is Python's 0.5
  EXPECT_EQ(eval_fn("lambda a, s, m, r: a / 3", 448.0f), 448.0f / 3.0f);  // a tensor over a number: one division
  EXPECT_EQ(eval_fn(plain, 0.0f), kInf);                               // the unguarded zero amax
  // A Python number meets a tensor as float32: 0.1 is rounded to float before the product.
  EXPECT_EQ(eval_fn("lambda a, s, m, r: 0.1 * s", 0.0f, 3.0f), 0.1f * 3.0f);
  // Between Python numbers, Python's double arithmetic; the result meets the tensor as float32.
  EXPECT_EQ(eval_fn("lambda a, s, m, r: (1 / 3) * s", 0.0f, 3.0f), static_cast<float>(static_cast<float>(1.0 / 3.0) * 3.0f));
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.where(a > 0, m / a, s)", 0.0f, 5.0f), 5.0f);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.where(torch.isfinite(a) & (a > 0), m / a, s)", kInf, 5.0f), 5.0f);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: m / a if a > 0 else s * 0.5", 0.0f, 5.0f), 2.5f);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: m / torch.clamp(a, min=1e-12)", 0.0f), (1.0f / 1e-12f) * 448.0f);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.pow(2.0, torch.floor(torch.log2(m / a)) - r.margin)", 3.0f, 1.0f, 1),
            64.0f);  // 448/3 = 149.3: 2^7, less the margin
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.finfo(torch.float32).max", 1.0f), std::numeric_limits<float>::max());
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.round(a * 2.5)", 1.0f), 2.0f);  // half to even
  EXPECT_EQ(eval_fn("lambda a, s, m, r: -2 ** 2 + r.amax_history_len // 100", 1.0f), 6.0f);  // -(2**2) + 10
  EXPECT_EQ(eval_fn("lambda a, s, m, r: max(a, s)", 1.0f, 4.0f), 4.0f);
  EXPECT_TRUE(std::isnan(eval_fn("lambda a, s, m, r: torch.maximum(a, s)", kNaN, 4.0f)));  // propagates NaN
  EXPECT_EQ(eval_fn("lambda a, s, m, r: torch.fmax(a, s)", kNaN, 4.0f), 4.0f);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: float('inf') if a == 0 else 1", 0.0f), kInf);
}

TEST(Fp8ScaleFunction, WhatIsNotAScalingFunctionIsRefusedWhenTheRecipeIsRead) {
  const auto message = [](const std::string& fn) {
    try {
      parse_fp8_recipe("DelayedScaling(scaling_factor_compute_algo=" + fn + ")");
    } catch (const Fp8RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message("None"), "(accepted)");
  EXPECT_NE(message("my_fn").find("write its body as a lambda"), std::string::npos) << message("my_fn");
  EXPECT_NE(message("lambda a, s, m: m / a").find("four arguments"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: np.max(a)").find("is not a function a scaling function may call here"),
            std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: a.clamp(min=1)").find("methods and attributes"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: r.fp8_format").find("r.margin"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: a > 0").find("boolean"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: torch.where(a, m, s)").find("condition is not a boolean"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: torch.clamp(a, lo=1)").find("takes no keyword"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: (m / a").find("expected ',' or ')'"), std::string::npos);
  EXPECT_NE(message("lambda a, s, m, r: m / 0").find("division by zero"), std::string::npos);
  // The lambda ends at the ',' that ends its keyword: the recipe's other keywords still count.
  const auto r = parse_fp8_recipe(
      "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: torch.where(a > 0, m / a, s), amax_history_len=4)");
  EXPECT_EQ(std::get<DelayedScaling>(r).amax_history_len, 4);
  ASSERT_TRUE(std::get<DelayedScaling>(r).scaling_factor_compute_algo);
  EXPECT_EQ(std::get<DelayedScaling>(r).scaling_factor_compute_algo->text(),
            "lambda a, s, m, r: torch.where(a > 0, m / a, s)");
  EXPECT_EQ(to_string(parse_fp8_recipe(to_string(r))), to_string(r));
}

TEST(Fp8ScaleFunction, TheUpdateIsTesPythonPathRollingEveryStepAndKeepingNoGuard) {
  const Fp8Recipe r = parse_fp8_recipe(
      "DelayedScaling(amax_history_len=3, scaling_factor_compute_algo=lambda amax, scale, fp8_max, recipe: fp8_max / amax)");
  const DelayedScaling& d = std::get<DelayedScaling>(r);
  DelayedScalingState s = initial_state(d);
  // Step 1: a zero-initialised weight, amax 0: the history [0, 0, 0] has max 0 and the
  // function gives 448 / 0 = inf (TE's default would keep the scale 1).
  record_amax(s, 0.0f);
  DelayedScalingUpdate u = update(s, d, Fp8Format::e4m3);
  EXPECT_EQ(s.scale, kInf);
  EXPECT_EQ(s.scale_inv, 0.0f);
  EXPECT_TRUE(u.rolled);
  // Steps 2-4: amaxes 2, 8, 1. Python's roll: after [a, b, c] comes [0, c, a] (slot 0
  // moves to the end, slot 1 is overwritten by the zeroed slot 0).
  record_amax(s, 2.0f);
  update(s, d, Fp8Format::e4m3);
  EXPECT_EQ(s.amax_history, (std::vector<float>{0.0f, 0.0f, 2.0f}));
  EXPECT_EQ(s.scale, 224.0f);  // 0.5 * 448: the reciprocal of a power of 2 is exact
  record_amax(s, 8.0f);
  update(s, d, Fp8Format::e4m3);
  EXPECT_EQ(s.amax_history, (std::vector<float>{0.0f, 2.0f, 8.0f}));
  EXPECT_EQ(s.scale, 56.0f);
  record_amax(s, 1.0f);
  update(s, d, Fp8Format::e4m3);  // max over [1, 2, 8] before the roll
  EXPECT_EQ(s.amax_history, (std::vector<float>{0.0f, 8.0f, 1.0f}));
  EXPECT_EQ(s.scale, 56.0f);
  record_amax(s, 1.0f);
  update(s, d, Fp8Format::e4m3);  // [1, 8, 1]: the 2 has left, the 8 not yet
  EXPECT_EQ(s.scale, 56.0f);
  record_amax(s, 1.0f);
  update(s, d, Fp8Format::e4m3);  // [1, 1, 1]
  EXPECT_EQ(s.scale, 448.0f);
  // A reduced amax replaces slot 0, a zero one included.
  record_amax(s, 4.0f);
  update(s, d, Fp8Format::e4m3, 0.0f);
  EXPECT_EQ(s.amax_history, (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

// Hostile recipes are refused by name, not recursed into (each of these overflowed the
// stack before the limits), and the message quotes their start, not all of them.
TEST(Fp8RecipeText, DeeplyNestedOrEndlessRecipesAreRefusedWithAShortMessage) {
  const auto message = [](const std::string& text) {
    try {
      parse_fp8_recipe(text);
    } catch (const Fp8RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::size_t n = 100000;
  const std::string calls = "Float8CurrentScaling(fp8_quant_fwd_inp=" + [&] {
    std::string t;
    for (std::size_t i = 0; i < n; ++i) t += "QParams(x=";
    return t + "1" + std::string(n, ')');
  }() + ")";
  // Within the token limit, too deep; and far beyond it.
  const std::string parens = "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: " + std::string(400, '(') +
                             "1" + std::string(400, ')') + ")";
  const std::string minus = "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: " + std::string(400, '-') + "1)";
  const std::string long_parens = "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: " + std::string(n, '(') +
                                  "1" + std::string(n, ')') + ")";
  std::string sum = "DelayedScaling(scaling_factor_compute_algo=lambda a, s, m, r: 1";
  for (std::size_t i = 0; i < n; ++i) sum += "+1";
  sum += ")";
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {calls, "calls nested more than 8 deep"},
           {parens, "nested more than 64 deep"},
           {minus, "nested more than 64 deep"},
           {long_parens, "longer than 1000 tokens"},
           {sum, "longer than 1000 tokens"}}) {
    const std::string m = message(text);
    EXPECT_NE(m.find(says), std::string::npos) << m.substr(0, 300);
    EXPECT_LT(m.size(), 1000u) << m.substr(0, 300);
  }
}

// A Python number beyond float32's range meets a tensor as IEEE rounding makes it (+-Inf,
// or FLT_MAX below the midpoint 2^128 - 2^103), never through an undefined C++ cast.
TEST(Fp8ScaleFunction, NumbersBeyondFloat32RoundAsIeeeRoundsThem) {
  const double midpoint = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  EXPECT_EQ(kernels::f64_to_f32(static_cast<double>(kFltMax)), kFltMax);
  EXPECT_EQ(kernels::f64_to_f32(std::nextafter(midpoint, 0.0)), kFltMax);
  EXPECT_EQ(kernels::f64_to_f32(midpoint), kInf);  // the tie goes to the even significand: Inf
  EXPECT_EQ(kernels::f64_to_f32(-1e300), -kInf);
  EXPECT_EQ(kernels::f64_to_f32(1e-50), 0.0f);
  EXPECT_TRUE(std::isnan(kernels::f64_to_f32(std::nan(""))));
  EXPECT_EQ(eval_fn("lambda a, s, m, r: 1e300 * a", 1.0f), kInf);
  EXPECT_EQ(eval_fn("lambda a, s, m, r: -1e300 * a", 1.0f), -kInf);
}

}  // namespace
}  // namespace ampcheck::amp
