// AMP configuration files in each framework's own key names — a PaddlePaddle
// `amp_configs` dict or auto_cast/decorate/GradScaler arguments, PyTorch
// autocast/GradScaler arguments, a DeepSpeed `fp16`/`bf16` block, Apex
// `amp.initialize` arguments — and ampcheck's own form, normalised into one Config.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"

namespace ampcheck::amp {

enum class ConfigStyle { ampcheck, paddle, pytorch, deepspeed, apex };
std::string_view style_name(ConfigStyle s);

// fp8 training of the linear layers (docs/fp8.md): TransformerEngine's recipe, as the
// script constructs it, and the layers kept out of fp8.
struct Fp8Settings {
  std::string recipe;              // normalised: amp::to_string(parse_fp8_recipe(...))
  std::vector<std::string> keep;   // module paths, or prefixes of them
};

struct Config {
  ConfigStyle style = ConfigStyle::ampcheck;
  AmpOptions amp;
  ScalingOptions scaling = TorchScaling{};
  // ampcheck's form only: op names or module paths whose Inf/-Inf is intended (an
  // attention mask's -inf); the inspector does not count them as a failure.
  std::vector<std::string> allow_inf;
  // ampcheck's and PyTorch's forms: "fp8", a TransformerEngine recipe for the linear layers.
  std::optional<Fp8Settings> fp8;
  // One line per decision taken in normalising (which semantics, which defaults filled).
  std::vector<std::string> notes;
};

// A bad key, type or value: the message names the key, what was given and what is
// accepted ("decr_ratio: 1.5 is not in (0, 1)"; "unknown key \"incr_ratoi\" (did you
// mean \"incr_ratio\"?)").
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Parses JSON text; the style is detected from the keys, or named by a top-level
// "framework": "paddle" | "pytorch" | "deepspeed" | "apex" | "ampcheck".
Config parse_config(const std::string& json_text, const std::string& source = "config");
Config load_config(const std::string& path);  // ConfigError also for unreadable files

// The normalised config as ampcheck's own JSON form (parse_config reads it back to the
// same Config), and a human-readable explanation of it.
std::string to_json(const Config& config);
std::string explain(const Config& config);

}  // namespace ampcheck::amp
