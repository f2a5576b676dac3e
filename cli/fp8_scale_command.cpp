#include "cli/fp8_scale_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>  // std::strtod
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/exit_codes.h"
#include "cli/output.h"
#include "cli/usage_error.h"
#include "engine/amp/fp8_recipe.h"
#include "engine/dtype/fp8.h"
#include "engine/memory_budget.h"
#include "reports/text_table.h"

namespace ampcheck::cli {
namespace {

using nlohmann::ordered_json;

std::string g(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{:.6g}", v);
}
ordered_json json_number(double v) { return std::isfinite(v) ? ordered_json(v) : ordered_json(g(v)); }

// The amaxes of a list ("1.5,2,900") or a file (one per line, or separated by spaces or
// commas; '#' starts a comment), in order.
void add_amaxes(const std::string& text, const std::string& where, std::vector<float>& out) {
  std::string cleaned;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    for (char& c : line)
      if (c == ',' || c == '\t' || c == '\r') c = ' ';
    cleaned += line + ' ';
  }
  std::istringstream words(cleaned);
  for (std::string w; words >> w;) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(w.c_str(), &end);
    if (end == w.c_str() || *end != '\0')
      throw UsageError(fmt::format("{}: cannot read \"{}\" as an amax (a number: 12.5, 3e4, inf, nan)", where, w));
    if (v < 0)
      throw UsageError(fmt::format("{}: amax {} is negative; an amax is the largest |x| of the tensor", where, w));
    out.push_back(kernels::f64_to_f32(v));  // 1e300 is +inf in binary32, as the cast of a tensor would make it
  }
}

std::vector<float> read_amaxes(const Fp8ScaleOptions& o) {
  std::vector<float> amaxes;
  for (const std::string& a : o.amax) add_amaxes(a, "--amax", amaxes);
  if (!o.amax_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(o.amax_file, ec))
      throw UsageError(fmt::format("--amax-file {}: is a folder; give the file of amaxes", o.amax_file));
    std::ifstream f(o.amax_file, std::ios::binary);
    if (!f) throw UsageError(fmt::format("--amax-file {}: cannot be read (does it exist?)", o.amax_file));
    // The text and its parsed values: about five times the file's size in memory.
    const auto size = std::filesystem::file_size(o.amax_file, ec);
    if (!ec)
      if (const auto why = over_budget(static_cast<std::uint64_t>(size) * 5))
        throw UsageError(fmt::format("--amax-file {}: too large to read: {} (--max-memory raises the limit)",
                                     o.amax_file, *why));
    std::ostringstream s;
    s << f.rdbuf();
    add_amaxes(s.str(), o.amax_file, amaxes);
  }
  if (amaxes.empty())
    throw UsageError("no amax to follow: give the tensor's amax per step, --amax 1.5,2,900 or --amax-file FILE "
                     "(TransformerEngine's debug features log them, as does fp8_meta['scaling_fwd'].amax_history)");
  return amaxes;
}

amp::Fp8Role parse_role(const std::string& r) {
  if (r == "input") return amp::Fp8Role::input;
  if (r == "weight") return amp::Fp8Role::weight;
  if (r == "grad_output" || r == "grad") return amp::Fp8Role::grad_output;
  throw UsageError(fmt::format("--role {}: not a role; use input, weight or grad_output (TE's fp8_quant_fwd_inp, "
                               "fp8_quant_fwd_weight, fp8_quant_bwd_grad)",
                               r));
}

struct Row {
  std::int64_t step = 0;
  float amax = 0, scale = 0, scale_after = 0;
  double scaled = 0;        // amax x scale (in binary32): the largest magnitude the cast meets
  float from_amax = 0;      // the amax the scale was computed from (0: the initial scale)
  std::string status;       // ok, saturates, zero, nonfinite
};

int run_fp8_scale(const Fp8ScaleOptions& o, std::ostream& out) {
  amp::Fp8Recipe recipe;
  try {
    recipe = amp::parse_fp8_recipe(o.recipe);
  } catch (const amp::Fp8RecipeError& e) {
    throw UsageError(e.what());
  }
  if (std::holds_alternative<amp::MXFP8BlockScaling>(recipe))
    throw UsageError("MXFP8BlockScaling scales each block of 32 values by that block's own amax at the cast: no "
                     "scale is carried from step to step, so there is nothing to follow here (`ampcheck fp VALUE "
                     "--mx-amax AMAX` shows what a value becomes in a block of that largest value)");
  const amp::Fp8Role role = parse_role(o.role);
  const std::vector<float> amaxes = read_amaxes(o);
  const auto* delayed = std::get_if<amp::DelayedScaling>(&recipe);
  const auto* current = std::get_if<amp::Float8CurrentScaling>(&recipe);
  const Fp8Format format = amp::format_for(delayed ? delayed->fp8_format : current->fp8_format, role);
  const float max = amp::fp8_max(format);

  std::vector<Row> rows;
  amp::DelayedScalingState state;
  if (delayed) state = amp::initial_state(*delayed);
  float from = 0;
  for (std::size_t i = 0; i < amaxes.size(); ++i) {
    Row r;
    r.step = static_cast<std::int64_t>(i) + 1;
    r.amax = amaxes[i];
    if (delayed) {
      r.scale = state.scale;
      r.from_amax = from;
      amp::record_amax(state, r.amax);
      const amp::DelayedScalingUpdate u = amp::update(state, *delayed, format);
      r.scale_after = u.scale_after;
      if (!u.kept_scale) from = u.amax_used;
    } else {
      r.scale = amp::current_scale(r.amax, format, *current);
      r.from_amax = r.amax;
      r.scale_after = r.scale;
    }
    // The cast scales in binary32 (x * scale, TE's) and rounds to the format: the largest
    // value saturates when that rounding, without saturation, would leave the format
    // (448 x (1 + 2^-20) still rounds to 448; 465 does not).
    const float scaled = r.amax * r.scale;
    r.scaled = scaled;
    const bool beyond =
        !std::isfinite(decode_fp8(encode_fp8(scaled, format, kernels::Fp8Overflow::to_nonfinite), format));
    r.status = !std::isfinite(r.scale) ? "nonfinite_scale"
               : !std::isfinite(r.amax) ? "nonfinite"
               : r.amax == 0            ? "zero"
               : beyond                 ? "saturates"
                                        : "ok";
    rows.push_back(r);
  }
  const Row* first = nullptr;
  std::int64_t saturating = 0;
  for (const Row& r : rows)
    if (r.status == "saturates") {
      ++saturating;
      if (first == nullptr) first = &r;
    }
  const std::string fmt_name(info(format).name);
  std::string verdict;
  if (first == nullptr) {
    verdict = fmt::format("fp8-scale: no step saturates: every amax x scale is within {} ({} steps)", g(max),
                          rows.size());
  } else {
    verdict = fmt::format(
        "fp8-scale: {} of {} steps saturate; the first is step {}: amax {} x scale {} = {} > {} ({} max), so its "
        "values above {} became +-{}",
        saturating, rows.size(), first->step, g(first->amax), g(first->scale), g(first->scaled), g(max), fmt_name,
        g(max / first->scale), g(max));
    if (delayed)
      verdict += first->from_amax > 0
                     ? fmt::format("; the scale came from the history's amax {}: a delayed scale lags an amax that "
                                   "jumps (a shorter amax_history_len or amax_compute_algo=\"most_recent\" follows "
                                   "it sooner, a margin leaves headroom)",
                                   g(first->from_amax))
                     : "; it was the initial scale 1, before any amax was seen";
  }
  for (const Row& r : rows)
    if (r.status == "nonfinite_scale") {
      verdict += fmt::format(
          "; step {} casts with scale {}, made from the amax {} by the scaling_factor_compute_algo: every nonzero "
          "value becomes +-{} and every zero NaN (guard it as TE's default does: keep the scale where the amax is 0 "
          "or not finite)",
          r.step, g(r.scale), g(r.from_amax), g(max));
      break;
    }
  for (const Row& r : rows)
    if (r.status == "nonfinite") {
      verdict += fmt::format("; step {}'s amax is {}: its cast made non-finite values and TE kept the scale", r.step,
                             g(r.amax));
      break;
    }

  std::string text;
  if (o.json) {
    ordered_json j;
    j["recipe"] = amp::to_string(recipe);
    j["role"] = std::string(amp::role_name(role));
    j["format"] = fmt_name;
    j["max"] = max;
    ordered_json steps = ordered_json::array();
    for (const Row& r : rows)
      steps.push_back({{"step", r.step},
                       {"amax", json_number(r.amax)},
                       {"scale", json_number(r.scale)},
                       {"amax_x_scale", json_number(r.scaled)},
                       {"status", r.status},
                       {"scale_after", json_number(r.scale_after)}});
    j["steps"] = steps;
    j["saturating_steps"] = saturating;
    j["first_saturating_step"] = first ? first->step : 0;
    j["verdict"] = verdict;
    text = j.dump(2) + "\n";
  } else {
    text = fmt::format("recipe: {}\nrole: {} -> {} (max {})\n\n", amp::to_string(recipe), amp::role_name(role),
                       fmt_name, g(max));
    reports::TextTable t({"step", "amax", "scale", "amax x scale", "fits", "scale after"});
    for (const Row& r : rows)
      t.add_row({std::to_string(r.step), g(r.amax), g(r.scale), g(r.scaled),
                 r.status == "ok" ? "yes" : r.status == "saturates" ? "SATURATES" : r.status, g(r.scale_after)});
    text += t.render() + "\n" + verdict + "\n";
  }
  write_output(text, o.output, out);
  return first ? kCheckFailed : kOk;
}

}  // namespace

Command add_fp8_scale_command(CLI::App& app) {
  auto o = std::make_shared<Fp8ScaleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fp8-scale", "What a TransformerEngine fp8 recipe's scale makes of a tensor's amax, step by step: where "
                   "values saturate");
  cmd->add_option("--recipe", o->recipe,
                  "the recipe as TE's constructor (DelayedScaling(margin=0, fp8_format=Format.HYBRID, "
                  "amax_history_len=16, amax_compute_algo=\"max\"), Float8CurrentScaling())")
      ->capture_default_str();
  cmd->add_option("--amax", o->amax, "the tensor's amax per step, comma separated (1.5,2,900)");
  cmd->add_option("--amax-file", o->amax_file, "a file of amaxes, one per step (spaces, commas or lines; # comments)");
  cmd->add_option("--role", o->role, "the tensor's role: input, weight or grad_output (HYBRID: e5m2)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON instead of a table");
  cmd->add_option("-o,--output", o->output, "write to this file (atomically) instead of stdout");
  return {cmd, [o](std::ostream& out, std::ostream&) { return run_fp8_scale(*o, out); }};
}

}  // namespace ampcheck::cli
