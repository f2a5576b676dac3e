#include "inspector/twin.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

namespace ampcheck::inspector {
namespace {

// Trailing means over `window` values (fewer at the start).
std::vector<double> trailing_mean(const std::vector<double>& v, std::size_t window) {
  std::vector<double> out(v.size());
  double sum = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

std::string loss_text(double x) { return std::isfinite(x) ? fmt::format("{:.4g}", x) : fmt::format("{}", x); }

// The verdict from the loss curves alone.
reports::Twin judge(std::string script, std::uint64_t seed, std::vector<double> amp_losses, std::string amp_verdict,
                    std::vector<reports::TwinRun> fp32) {
  reports::Twin t;
  t.script = std::move(script);
  t.seed = seed;
  t.amp_losses = std::move(amp_losses);
  t.amp_verdict = std::move(amp_verdict);
  t.fp32 = std::move(fp32);
  if (t.fp32.empty()) {
    t.verdict = "no_yardstick";
    t.verdict_text = "no fp32 run of the script was recorded: nothing to compare with";
    return t;
  }
  const std::vector<double>& same = t.fp32.front().losses;
  const std::size_t steps = std::min(t.amp_losses.size(), same.size());
  const std::size_t window = std::max<std::size_t>(1, steps / 10);
  t.window = static_cast<std::int64_t>(window);

  // A loss the AMP run lost (not finite) where the twin's is finite: a departure there.
  std::size_t lost = steps;
  for (std::size_t i = 0; i < steps; ++i)
    if (!std::isfinite(t.amp_losses[i]) && std::isfinite(same[i])) {
      lost = i;
      break;
    }
  std::vector<double> gap(steps), noise;
  for (std::size_t i = 0; i < steps; ++i)
    gap[i] = i < lost ? std::abs(t.amp_losses[i] - same[i]) : 0.0;
  t.gap = trailing_mean(gap, window);
  if (t.fp32.size() >= 2) {
    noise.assign(steps, 0.0);
    for (std::size_t k = 1; k < t.fp32.size(); ++k)
      for (std::size_t i = 0; i < steps && i < t.fp32[k].losses.size(); ++i)
        noise[i] = std::max(noise[i], std::abs(t.fp32[k].losses[i] - same[i]));
    t.noise = trailing_mean(noise, window);
  }
  if (lost < steps) {
    t.gap.resize(lost);
    if (!t.noise.empty()) t.noise.resize(lost);
    t.departs_at = static_cast<std::int64_t>(lost) + 1;
    t.verdict = "departs";
    t.verdict_text = fmt::format("the AMP run departs from its fp32 twin at step {}: its loss is {} where fp32's is {}",
                                 lost + 1, loss_text(t.amp_losses[lost]), loss_text(same[lost]));
    return t;
  }
  if (steps == 0) {
    t.verdict = "no_yardstick";
    t.verdict_text = "no step ran in both the AMP run and its fp32 twin";
    return t;
  }
  const std::size_t last = steps - 1;
  const double relative = std::abs(same[last]) > 0 ? t.gap[last] / std::abs(same[last]) : 0.0;
  if (t.noise.empty()) {
    t.verdict = "no_yardstick";
    t.verdict_text = fmt::format(
        "at the last step the AMP run's loss is {} and the fp32 twin's {} (a gap of {:.3g}, {:.1f}% over the last {} "
        "step(s)); with one fp32 run there is no yardstick for how much training itself varies: give --seeds 2 or more",
        loss_text(t.amp_losses[last]), loss_text(same[last]), t.gap[last], 100 * relative, window);
    return t;
  }
  // The departure that lasts: the first step from which the gap stays above the noise.
  std::size_t from = steps;
  for (std::size_t i = steps; i-- > 0;) {
    if (!(t.gap[i] > kDepartureMargin * t.noise[i])) break;
    from = i;
  }
  if (from < steps && steps - from >= window) {
    t.departs_at = static_cast<std::int64_t>(from) + 1;
    t.verdict = "departs";
    t.verdict_text = fmt::format(
        "the AMP run departs from its fp32 twin from step {}: at the last step its loss is {} against fp32's {}, a gap "
        "of {:.3g} ({:.1f}%, mean of the last {} step(s)), {:.1f}x the largest spread between fp32 runs of other seeds "
        "({:.3g})",
        from + 1, loss_text(t.amp_losses[last]), loss_text(same[last]), t.gap[last], 100 * relative, window,
        t.noise[last] > 0 ? t.gap[last] / t.noise[last] : std::numeric_limits<double>::infinity(), t.noise[last]);
    return t;
  }
  std::size_t widest = 0;
  for (std::size_t i = 0; i < steps; ++i)
    if (t.gap[i] - kDepartureMargin * t.noise[i] > t.gap[widest] - kDepartureMargin * t.noise[widest]) widest = i;
  t.verdict = "within_noise";
  t.verdict_text = fmt::format(
      "the AMP run stays within fp32's own noise: over {} steps its gap from the fp32 twin of the same seed (last "
      "{:.3g}) stays within {:g}x of how far the {} fp32 run(s) of other seeds are from it (last {:.3g}){}",
      steps, t.gap[last], kDepartureMargin, t.fp32.size() - 1, t.noise[last],
      t.gap[widest] > kDepartureMargin * t.noise[widest]
          ? fmt::format("; it passed them for a while (widest at step {}: {:.3g} against {:.3g}) and came back",
                        widest + 1, t.gap[widest], t.noise[widest])
          : std::string());
  return t;
}

}  // namespace

reports::Twin compare_with_twin(std::string script, std::uint64_t seed, std::vector<double> amp_losses,
                                std::string amp_verdict, std::vector<reports::TwinRun> fp32,
                                const TwinEvidence& evidence) {
  reports::Twin t = judge(std::move(script), seed, std::move(amp_losses), std::move(amp_verdict), std::move(fp32));
  if (t.verdict != "departs") return t;
  // The causes the recording shows, in the order a cure is cheapest to try: the state the
  // optimizer keeps (parameters without fp32 masters, 16-bit moments), the loss, then the op
  // of the forward where the difference from the twin grows most.
  std::vector<std::string> causes;
  // Parameters ("0.weight") and the optimizer's state kept beside them ("0.weight:exp_avg_sq").
  std::vector<const reports::Swamping*> params, state;
  for (const reports::Swamping& s : evidence.swamping)
    if (s.fraction >= kSwampedNamed) (s.parameter.find(':') == std::string::npos ? params : state).push_back(&s);
  auto named = [](std::vector<const reports::Swamping*> lost) {
    std::stable_sort(lost.begin(), lost.end(), [](const auto* a, const auto* b) { return a->fraction > b->fraction; });
    std::string text;
    for (std::size_t i = 0; i < lost.size() && i < 6; ++i)
      text += (text.empty() ? "" : ", ") + fmt::format("{} ({:.0f}% over {} update(s))", lost[i]->parameter,
                                                       100 * lost[i]->fraction, lost[i]->updates);
    if (lost.size() > 6) text += fmt::format(" and {} more", lost.size() - 6);
    return text;
  };
  if (!params.empty())
    causes.push_back(fmt::format(
        "born in the weights: {} parameter(s) stored in 16 bits and updated there, without fp32 master weights, kept "
        "their value through a share of their updates that an fp32 copy would have taken: {}. Keep fp32 master "
        "weights: train the fp32 model under torch.autocast instead of casting it (model.bfloat16() / .half()), or "
        "give the optimizer fp32 copies of the low-precision parameters",
        params.size(), named(params)));
  if (!state.empty())
    causes.push_back(fmt::format(
        "born in the optimizer's state: {} state tensor(s) kept in 16 bits (its moments) lost a share of their "
        "updates to rounding: {}. Keep the optimizer's state in fp32 (create the moments in the parameter's fp32, "
        "e.g. torch.zeros_like(p), not in bfloat16)",
        state.size(), named(state)));
  if (!evidence.loss_ops.empty())
    causes.push_back(fmt::format(
        "born in the loss: it was computed in {} ({}), which rounds its value and the gradient the backward starts "
        "from. Compute the loss in fp32: cast the logits or predictions with .float() before it (e.g. "
        "F.cross_entropy(logits.float(), targets))",
        evidence.loss_dtype.empty() ? "16 bits" : evidence.loss_dtype, fmt::join(evidence.loss_ops, ", ")));
  if (const std::vector<TwinDifference> born = ranked_beside_twin(evidence.beside_twin); !born.empty())
    causes.push_back(forward_birth_text(born.front(), "the fp32 twin's", BirthOf::script));
  if (causes.empty()) {
    t.verdict_text += "; where it is born is not in the recording (no parameter, optimizer state or loss in 16 bits "
                      "lost precision, and no op of the first step's forward departs from the twin's): bisect-nan "
                      "--script \"...\" --loss-tolerance T searches the ops to keep in fp32";
    return t;
  }
  t.cause = fmt::format("{}", fmt::join(causes, "; and "));
  t.verdict_text += "; " + t.cause;
  return t;
}

std::string forward_birth_text(const TwinDifference& b, std::string_view reference, BirthOf of) {
  // A script's cure is the recorder's keep_fp32 (its module, or its op type outside every
  // module); a model file's, its op type on the black list.
  auto keep = [&](const std::string& instance) {
    const std::size_t slash = instance.find('/'), hash = instance.find('#');
    const std::string module = instance.substr(0, slash), type = instance.substr(slash + 1, hash - slash - 1);
    if (of == BirthOf::model) return fmt::format("--black {}", type);
    if (!module.empty()) return fmt::format("keep_fp32(model, modules=['{}']), from ampcheck_recorder", module);
    return fmt::format("keep_fp32(model, ops=['{}']), from ampcheck_recorder", type);
  };
  // Its own rounding (measured for a 16-bit op) against what it adds: where that is most of
  // it, the op is the cure; otherwise (or an op in fp32) its inputs' small rounding was made
  // large by its own math, and the cure is where that input was made.
  const bool low = b.dtype == "float16" || b.dtype == "bfloat16";
  const bool amplified = !b.from.empty() && (std::isnan(b.own) ? !low : b.own < 0.5 * b.added());
  const std::string own_text =
      std::isnan(b.own) ? std::string()
                        : fmt::format("its own rounding on the inputs it received is {:.3g}%", 100 * b.own);
  std::string cure;
  if (amplified)
    cure = fmt::format(
        "{}: its input, made by {} in 16 bits, was rounded there by little, and its own math makes that rounding "
        "large (as a cancellation does: a normalization over values with a large mean, a difference of near "
        "values). Keep the op that makes its input in fp32 ({}), or remove what makes its values large before the "
        "16-bit op",
        own_text.empty() ? fmt::format("it ran in {} itself", b.dtype.empty() ? "fp32" : b.dtype) : own_text,
        b.from, keep(b.from));
  else
    cure = fmt::format("{}. Keep it in fp32 ({})",
                       own_text.empty() ? std::string("the difference is its own") : own_text, keep(b.name));
  return fmt::format(
      "born in the forward at {}: at the first step, from the same weights and data, its output is {:.3g}% from "
      "{} where its inputs were at most {:.3g}% from theirs; {}",
      b.name, 100 * b.output, reference, 100 * b.input, cure);
}

std::vector<std::string> loss_ops_in_low_precision(const std::vector<reports::OpInstance>& ops) {
  // As the recorder names them (aten's, "nll_loss_forward") and as the engine's op list does.
  static const std::set<std::string, std::less<>> kLoss = {
      "cross_entropy", "nll_loss", "nll_loss_forward", "nll_loss2d_forward", "nll_loss_nd", "mse_loss", "kl_div",
      "binary_cross_entropy", "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss", "huber_loss",
      "ctc_loss", "soft_margin_loss", "multilabel_margin_loss", "poisson_nll_loss", "cosine_embedding_loss",
      "margin_ranking_loss", "hinge_embedding_loss", "multi_margin_loss", "triplet_margin_loss"};
  auto low = [](const reports::OpInstance& op) {
    return op.phase == "forward" && op.kernel_dtypes.fp16 + op.kernel_dtypes.bf16 > 0;
  };
  std::vector<std::string> out;
  bool nll = false;
  for (const reports::OpInstance& op : ops) {
    if (!low(op) || !kLoss.count(op.type)) continue;
    nll = nll || op.type.starts_with("nll_loss");
    if (std::find(out.begin(), out.end(), op.type) == out.end()) out.push_back(op.type);
  }
  if (nll)  // cross_entropy as it runs: log_softmax, then the nll loss
    for (const reports::OpInstance& op : ops)
      if (low(op) && op.type == "log_softmax" && std::find(out.begin(), out.end(), op.type) == out.end())
        out.insert(out.begin(), op.type);
  return out;
}

double TwinDifference::added() const {
  if (!std::isfinite(output)) return std::isfinite(input) ? std::numeric_limits<double>::infinity() : 0.0;
  return std::max(0.0, output - input);
}

std::vector<TwinDifference> ranked_beside_twin(std::vector<TwinDifference> ops) {
  std::erase_if(ops, [](const TwinDifference& d) { return !(d.added() >= kBornNamed); });
  std::stable_sort(ops.begin(), ops.end(),
                   [](const TwinDifference& a, const TwinDifference& b) { return a.added() > b.added(); });
  return ops;
}

reports::CompareBirth as_birth(const TwinDifference& d) {
  const double a = d.added();
  const double share = std::isfinite(d.output) && d.output > 0 ? std::min(1.0, a / d.output) : 1.0;
  return {"AMP", d.name, a, d.output, share};
}

std::vector<reports::CompareBirth> where_born(const std::string& level, std::vector<OpDifference> ops,
                                              std::size_t top) {
  std::erase_if(ops, [](const OpDifference& o) { return !(o.local_error > 0) || !std::isfinite(o.local_error); });
  std::stable_sort(ops.begin(), ops.end(),
                   [](const OpDifference& a, const OpDifference& b) { return a.local_error > b.local_error; });
  std::vector<reports::CompareBirth> out;
  for (std::size_t i = 0; i < ops.size() && i < top; ++i) {
    const OpDifference& o = ops[i];
    const double share = o.output_error > 0 ? std::min(1.0, o.local_error / o.output_error) : 1.0;
    out.push_back({level, o.name, o.local_error, o.output_error, share});
  }
  return out;
}

}  // namespace ampcheck::inspector
