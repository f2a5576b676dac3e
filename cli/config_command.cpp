#include "cli/config_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "engine/amp/grad_scaler.h"

namespace ampcheck::cli {

namespace {

using nlohmann::ordered_json;

struct Subcommands {
  CLI::App* config = nullptr;
  CLI::App* explain = nullptr;
  CLI::App* simulate = nullptr;
};

Subcommands add_options(CLI::App& app, ConfigOptions& o) {
  Subcommands s;
  s.config = app.add_subcommand(
      "config", "AMP configs in PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck key names");
  s.config->require_subcommand(1);
  s.explain = s.config->add_subcommand(
      "explain", "Print the normalised config: framework semantics, level, dtype, lists, loss scaling");
  s.explain->add_option("file", o.file, "the JSON config file (a framework's own keys; see docs/amp.md)")
      ->required();
  s.explain->add_flag("--json", o.json, "print ampcheck's own JSON form of it instead");
  s.simulate = s.config->add_subcommand(
      "simulate", "The loss scale the config's scaler holds after each step, given the steps whose gradients "
                  "were non-finite (every step is, once the scale is inf)");
  s.simulate->add_option("file", o.file, "the JSON config file (a framework's own keys; see docs/amp.md)")
      ->required();
  s.simulate
      ->add_option("--found-inf", o.found_inf,
                   "one character per step: 1 where the gradients held an Inf/NaN, 0 where they were finite "
                   "(e.g. 0001100)")
      ->required();
  s.simulate->add_flag("--json", o.json, "print the steps as JSON");
  return s;
}

amp::Config load(const std::string& file) {
  try {
    return amp::load_config(file);
  } catch (const amp::ConfigError& e) {
    throw UsageError(e.what());
  }
}

std::vector<bool> parse_found_inf(const std::string& text) {
  if (text.empty()) throw UsageError("--found-inf is empty: give one 0 or 1 per step, e.g. --found-inf 0001100");
  std::vector<bool> steps;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '0' && text[i] != '1')
      throw UsageError(fmt::format("--found-inf: character {} is '{}': give one 0 (finite gradients) or 1 "
                                   "(an Inf/NaN) per step, e.g. --found-inf 0001100",
                                   i + 1, text[i]));
    steps.push_back(text[i] == '1');
  }
  return steps;
}

// The events, and the DeepSpeed error that ended them early, if one did.
struct Simulation {
  std::vector<amp::ScalerEvent> events;
  std::string stopped;
};

Simulation simulate(const amp::Config& config, const std::vector<bool>& found_inf) {
  amp::GradScaler scaler(config.scaling);
  Simulation s;
  for (const bool inf : found_inf) {
    try {
      // A scale that grew to inf (PaddlePaddle does not stop growth at float32's max)
      // makes every scaled gradient non-finite, whatever the step was given.
      s.events.push_back(scaler.update(inf || !std::isfinite(scaler.scale())));
    } catch (const amp::ScaleAtMinimumError& e) {
      s.stopped = e.what();
      break;
    }
  }
  return s;
}

std::string to_text(const amp::Config& config, const Simulation& s) {
  std::string out = fmt::format("loss scaling: {}\n\n", amp::behaviour_name(config.scaling));
  out += fmt::format("{:>6}  {:>9}  {:>14}  {:>14}  {:>7}  {}\n", "step", "found_inf", "scale before", "scale after",
                     "skipped", "counters after");
  for (const amp::ScalerEvent& e : s.events) {
    std::string counters;
    for (const auto& [name, value] : e.counters) counters += fmt::format("{}{}={}", counters.empty() ? "" : " ", name, value);
    out += fmt::format("{:>6}  {:>9}  {:>14.8g}  {:>14.8g}  {:>7}  {}\n", e.step, e.found_inf ? "inf" : "-",
                       e.scale_before, e.scale_after, e.skipped ? "yes" : "no", counters);
  }
  if (!s.stopped.empty()) out += fmt::format("\nstopped at step {}: {}\n", s.events.size() + 1, s.stopped);
  return out;
}

// JSON has no infinity: a scale that grew past float32's range is "inf", as in reports.
ordered_json scale_json(double v) { return std::isinf(v) ? ordered_json("inf") : ordered_json(v); }

std::string to_json(const amp::Config& config, const Simulation& s) {
  ordered_json events = ordered_json::array();
  for (const amp::ScalerEvent& e : s.events) {
    ordered_json counters = ordered_json::object();
    for (const auto& [name, value] : e.counters) counters[name] = value;
    events.push_back({{"step", e.step},
                      {"found_inf", e.found_inf},
                      {"scale_before", scale_json(e.scale_before)},
                      {"scale_after", scale_json(e.scale_after)},
                      {"skipped", e.skipped},
                      {"counters", counters}});
  }
  ordered_json j = {{"loss_scaling", amp::behaviour_name(config.scaling)}, {"steps", events}};
  j["stopped"] = s.stopped.empty() ? ordered_json(nullptr) : ordered_json(s.stopped);
  return j.dump(2) + "\n";
}

int run_config(const Subcommands& s, const ConfigOptions& o, std::ostream& out) {
  const amp::Config config = load(o.file);
  if (s.simulate->parsed()) {
    const Simulation sim = simulate(config, parse_found_inf(o.found_inf));
    out << (o.json ? to_json(config, sim) : to_text(config, sim));
    return 0;
  }
  out << (o.json ? amp::to_json(config) : amp::explain(config));
  return 0;
}

}  // namespace

Command add_config_command(CLI::App& app) {
  auto options = std::make_shared<ConfigOptions>();
  const Subcommands s = add_options(app, *options);
  return {s.config, [s, options](std::ostream& out, std::ostream&) { return run_config(s, *options, out); }};
}

}  // namespace ampcheck::cli
