#include "inspector/fp8_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <tuple>

#include "engine/dispatch.h"  // dispatch, view_of
#include "engine/dtype/fp8.h"  // info: the formats' max and names
#include "engine/ops/registry.h"

namespace ampcheck::inspector {
namespace {

using kernels::Fp8Format;

double fp8_max(Fp8Format f) { return info(f).max(); }
// "E4M3": the name TransformerEngine's Format uses.
std::string format_name(Fp8Format f) {
  std::string s(info(f).name);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::int64_t nonzero_finite(const kernels::Fp8CastStats& s) { return s.count - s.nan - s.inf - s.zero; }

std::string percent(double share) { return fmt::format("{:.3g}%", 100.0 * share); }

}  // namespace

std::string_view fp8_tensor_name(Fp8Tensor t) {
  switch (t) {
    case Fp8Tensor::input: return "input";
    case Fp8Tensor::weight: return "weight";
    case Fp8Tensor::grad_output: return "grad_output";
  }
  return "?";
}

std::string_view fp8_finding_name(Fp8FindingKind k) {
  switch (k) {
    case Fp8FindingKind::zero_amax_infinite_scale: return "zero_amax_infinite_scale";
    case Fp8FindingKind::saturation: return "saturation";
    case Fp8FindingKind::underflow: return "underflow";
    case Fp8FindingKind::te_shape: return "te_shape";
  }
  return "?";
}

void Fp8Watch::on_op_end(const OpEvent& e) {
  if (e.op != Op::fp8_linear || e.params == nullptr || e.inputs == nullptr || e.inputs->size() < 2) return;
  const auto* p = std::get_if<Fp8LinearParams>(e.params);
  if (p == nullptr || !p->meta) return;
  const Fp8LinearMeta& m = *p->meta;
  const Tensor& x = (*e.inputs)[0];
  if (x.dtype() == DType::f64) return;  // the exact form: no cast ran
  if (e.phase == Phase::forward) {
    // Under block scaling: the rowwise casts (the input's and the weight's blocks along
    // `in`, the gradient's along `out`), those of the forward GEMM and of dgrad.
    const Tensor& w = (*e.inputs)[1];
    note_shape(e.module, e.step, x, m.block_scaling);
    record(e.module, Fp8Tensor::input, e.step, x, m.input_scale, m.input_format, m.block_scaling ? w.size(1) : 0);
    record(e.module, Fp8Tensor::weight, e.step, w, m.weight_scale, m.weight_format, m.block_scaling ? w.size(1) : 0);
  } else if (e.phase == Phase::backward && e.grad_output != nullptr) {
    const std::int64_t out = (*e.inputs)[1].size(0);
    record(e.module, Fp8Tensor::grad_output, e.step, *e.grad_output, m.grad_scale, m.grad_format,
           m.block_scaling ? out : 0);
  }
}

void Fp8Watch::record(const std::string& layer, Fp8Tensor tensor, std::int64_t step, const Tensor& values, float scale,
                      Fp8Format format, std::int64_t mx_row) {
  const auto& casts = dispatch<kernels::Fp8Kernels>("fp8 inspector", {&values});
  const kernels::Fp8CastStats s = mx_row > 0 ? casts.cast_stats_mx(view_of(values), mx_row, format)
                                             : casts.cast_stats(view_of(values), scale, format);
  if (mx_row > 0)  // the scale of the block that holds the amax (each block has its own)
    scale = kernels::e8m0_multiplier(kernels::e8m0_scale_bits(s.amax, static_cast<float>(fp8_max(format))));
  const auto key = std::make_pair(layer, tensor);
  auto [it, added] = index_.try_emplace(key, histories_.size());
  if (added) histories_.push_back({layer, tensor, {}});
  std::vector<Fp8CastStep>& steps = histories_[it->second].steps;
  if (!steps.empty() && steps.back().step == step) {  // the layer called again in this step
    steps.back().stats.merge(s);
    return;
  }
  steps.push_back({step, scale, format, s});
}

void Fp8Watch::note_shape(const std::string& layer, std::int64_t step, const Tensor& x, bool block_scaling) {
  const std::int64_t in = x.dim() > 0 ? x.size(-1) : 1, rows = in > 0 ? x.numel() / in : 0, multiple = block_scaling ? 32 : 8;
  if (rows % multiple == 0) return;
  for (const Fp8Finding& f : shape_findings_)
    if (f.layer == layer) return;
  Fp8Finding f;
  f.kind = Fp8FindingKind::te_shape;
  f.layer = layer;
  f.tensor = Fp8Tensor::input;
  f.step = step;
  f.steps = 1;
  f.text = fmt::format(
      "'{}' input {}: {} rows ahead of its last dim, not a multiple of {}: TransformerEngine refuses it ({}); "
      "pad the batch or the sequence to a multiple of {} (ampcheck computed on{})",
      layer, to_string(x.shape()), rows, multiple,
      block_scaling ? "\"MXFP8 requires tensor dims that are divisible by 32\""
                    : "\"FP8 execution requires the product of all dimensions except the last to be divisible by 8\"",
      multiple, block_scaling ? ", casting the short blocks as blocks" : "");
  shape_findings_.push_back(std::move(f));
}

std::vector<Fp8Finding> fp8_findings(const Fp8TensorHistory& h, const Fp8WatchOptions& o) {
  std::vector<Fp8Finding> out;
  const std::string what = fmt::format("'{}' {}", h.layer, fp8_tensor_name(h.tensor));
  // One finding per kind: its first step, how many steps, the worst share.
  // The tensor's first cast ran with the initial scale, before any amax was recorded
  // (TE's start): what it clamps or flushes is delayed scaling starting up, which the next
  // step's scale corrects; judged as a failure only from the second step on.
  std::vector<double> judged(3, 0.0);  // per kind: the worst share after the first step
  bool saturation_failed = false;      // after the first step: a step that clamped enough, by enough
  // (Under current scaling no step is the initial scale's: first_step matches none.)
  const std::int64_t first_step = h.steps.empty() || !o.delayed ? -1 : h.steps.front().step;
  auto note = [&](Fp8FindingKind kind, const Fp8CastStep& s, double share) -> Fp8Finding& {
    if (s.step != first_step) {
      double& j = judged[static_cast<std::size_t>(kind)];
      j = std::max(j, share);
    }
    for (Fp8Finding& f : out)
      if (f.kind == kind) {
        ++f.steps;
        f.worst_share = std::max(f.worst_share, share);
        return f;
      }
    Fp8Finding f;
    f.kind = kind;
    f.layer = h.layer;
    f.tensor = h.tensor;
    f.step = s.step;
    f.steps = 1;
    f.share = f.worst_share = share;
    f.amax = s.stats.amax;
    f.scale = s.scale;
    out.push_back(f);
    return out.back();
  };
  for (const Fp8CastStep& s : h.steps) {
    const double values = static_cast<double>(std::max<std::int64_t>(1, s.stats.count));
    if (!std::isfinite(s.scale)) {
      note(Fp8FindingKind::zero_amax_infinite_scale, s, static_cast<double>(nonzero_finite(s.stats)) / values);
      continue;  // everything it cast is +-max or NaN: the other findings say nothing more
    }
    if (s.stats.saturated > 0) {
      const double share = static_cast<double>(s.stats.saturated) / values;
      const double overshoot = static_cast<double>(s.stats.amax) * static_cast<double>(s.scale) / fp8_max(s.format);
      if (share >= o.saturation_failure || overshoot >= o.saturation_overshoot) note(Fp8FindingKind::saturation, s, share);
      if (s.step != first_step && share >= o.saturation_failure &&
          (overshoot >= o.saturation_failure_overshoot || share >= o.saturation_failure_alone))
        saturation_failed = true;
    }
    const std::int64_t nonzero = nonzero_finite(s.stats);
    if (nonzero > 0) {
      const double flushed = static_cast<double>(s.stats.flushed) / static_cast<double>(nonzero);
      if (flushed >= o.underflow_warning) note(Fp8FindingKind::underflow, s, flushed);
    }
  }
  for (Fp8Finding& f : out) {
    const Fp8CastStep& first = *std::find_if(h.steps.begin(), h.steps.end(), [&](const Fp8CastStep& s) { return s.step == f.step; });
    const double max = fp8_max(first.format);
    const std::string fmt_name = format_name(first.format);
    switch (f.kind) {
      case Fp8FindingKind::zero_amax_infinite_scale:
        f.failure = true;
        f.text = fmt::format(
            "{} was cast to {} at step {} with scale {} (amax {:.6g}): a scale computed as fp8_max / amax from an amax "
            "of 0; every nonzero value becomes +-{} and every zero NaN (0 x Inf). Keep the previous scale when the amax "
            "is 0 or not finite, as TransformerEngine's update does, or raise the amax to an epsilon "
            "(Float8CurrentScaling's amax_epsilon)",
            what, fmt_name, f.step, f.scale, static_cast<double>(f.amax), max);
        break;
      case Fp8FindingKind::saturation:
        f.failure = saturation_failed;
        f.text = fmt::format(
            "{}: {} of its values saturated to +-{} in {} at step {} (amax {:.6g} x scale {:.6g} = {:.6g} > {}), {} "
            "step(s), at worst {}: the scale from the amax history could not hold this step's amax. A shorter "
            "amax_history_len or amax_compute_algo=\"most_recent\" follows a jump sooner, margin=k keeps 2^k of "
            "headroom, Float8CurrentScaling scales each cast by its own amax",
            what, percent(f.share), max, fmt_name, f.step, static_cast<double>(f.amax), static_cast<double>(f.scale),
            static_cast<double>(f.amax) * static_cast<double>(f.scale), max, f.steps, percent(f.worst_share));
        break;
      case Fp8FindingKind::underflow: {
        f.failure = judged[static_cast<std::size_t>(f.kind)] >= o.underflow_failure;
        const int below = kernels::fp8_min_exponent(first.format) - 1;  // half the smallest subnormal
        const int binades = kernels::fp8_max_exponent(first.format) - kernels::fp8_min_exponent(first.format) + 1;
        const std::string lost =
            f.failure ? ": most of its mass lies below the format's smallest subnormal, its signal is lost" : "";
        const std::string bf16 = fmt::format("a tensor whose range exceeds {}'s {} binades needs its GEMMs in bf16 "
                                             "(ampcheck bisect-nan finds which layers)",
                                             fmt_name, binades);
        if (o.block) {  // each block's own scale: what flushes lies too far below its block's largest value
          f.text = fmt::format(
              "{}: {} of its nonzero values flushed to 0 in {} at step {}, {} step(s), at worst {}{}. Each block of 32 "
              "is scaled by its own largest value, and a value more than {}'s {} binades below it flushes (|x| <= 2^{} "
              "x the block's scale); {}",
              what, percent(f.share), fmt_name, f.step, f.steps, percent(f.worst_share), lost, fmt_name, binades,
              below, bf16);
          break;
        }
        f.text = fmt::format(
            "{}: {} of its nonzero values flushed to 0 in {} at step {} (|x| <= 2^{} / scale = {:.3g}, scale "
            "{:.6g}), {} step(s), at worst {}{}. {}; {}",
            what, percent(f.share), fmt_name, f.step, below, std::ldexp(1.0, below) / static_cast<double>(f.scale),
            static_cast<double>(f.scale), f.steps, percent(f.worst_share), lost,
            o.delayed ? "A scale held small by an old spike in the amax history recovers sooner with a shorter "
                        "amax_history_len or amax_compute_algo=\"most_recent\""
                      : "The scale came from this cast's own amax: the flushed values lie that far below the "
                        "tensor's largest",
            bf16);
        break;
      }
      case Fp8FindingKind::te_shape:  // Fp8Watch::note_shape's, not a history's
        break;
    }
    f.first_cast_only = f.kind != Fp8FindingKind::zero_amax_infinite_scale && f.steps == 1 && f.step == first_step;
    if (f.first_cast_only)
      f.text += fmt::format(" (its first cast, with the initial scale {:.6g} before any amax was recorded: delayed "
                            "scaling corrects it from the next step)",
                            static_cast<double>(f.scale));
  }
  return out;
}

std::vector<Fp8Finding> Fp8Watch::findings() const {
  std::vector<Fp8Finding> all = shape_findings_;
  for (const Fp8TensorHistory& h : histories_) {
    std::vector<Fp8Finding> f = fp8_findings(h, options_);
    all.insert(all.end(), f.begin(), f.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Fp8Finding& a, const Fp8Finding& b) {
    return std::make_tuple(!a.failure, a.step, -a.worst_share) < std::make_tuple(!b.failure, b.step, -b.worst_share);
  });
  return all;
}

reports::Fp8Training to_report(const Fp8Watch& watch) {
  reports::Fp8Training out;
  for (const Fp8TensorHistory& h : watch.histories()) {
    reports::Fp8TensorRecord t;
    t.layer = h.layer;
    t.tensor = std::string(fp8_tensor_name(h.tensor));
    const Fp8Format format = h.steps.empty() ? Fp8Format::e4m3 : h.steps.front().format;
    t.format = format_name(format);
    t.min_exponent = kernels::fp8_min_exponent(format);
    t.binades.assign(static_cast<std::size_t>(kernels::fp8_max_exponent(format) - kernels::fp8_min_exponent(format) + 1), 0);
    for (const Fp8CastStep& s : h.steps) {
      t.steps.push_back(s.step);
      t.amax.push_back(static_cast<double>(s.stats.amax));
      t.scale.push_back(static_cast<double>(s.scale));
      t.count.push_back(s.stats.count);
      t.saturated.push_back(s.stats.saturated + s.stats.inf);
      t.flushed.push_back(s.stats.flushed);
      t.zero.push_back(s.stats.zero);
      t.nan.push_back(s.stats.nan);
      for (std::size_t i = 0; i < t.binades.size(); ++i) t.binades[i] += s.stats.binade[i];
    }
    out.tensors.push_back(std::move(t));
  }
  for (const Fp8Finding& f : watch.findings())
    out.findings.push_back({std::string(fp8_finding_name(f.kind)), f.failure, f.layer, std::string(fp8_tensor_name(f.tensor)),
                            f.step, f.steps, f.share, f.worst_share, static_cast<double>(f.amax),
                            static_cast<double>(f.scale), f.text});
  return out;
}

}  // namespace ampcheck::inspector
