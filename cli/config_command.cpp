#include "cli/config_command.h"

#include <CLI/CLI.hpp>  // CLI::App

#include <memory>
#include <ostream>

#include "cli/usage_error.h"
#include "engine/amp/config.h"

namespace ampcheck::cli {

namespace {

CLI::App* add_options(CLI::App& app, ConfigOptions& o) {
  CLI::App* config = app.add_subcommand(
      "config", "AMP configs in PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck key names");
  config->require_subcommand(1);
  CLI::App* explain = config->add_subcommand(
      "explain", "Print the normalised config: framework semantics, level, dtype, lists, loss scaling");
  explain->add_option("file", o.file, "the JSON config file (a framework's own keys; see docs/amp.md)")
      ->required();
  explain->add_flag("--json", o.json, "print ampcheck's own JSON form of it instead");
  return config;
}

int run_config(const ConfigOptions& o, std::ostream& out, std::ostream&) {
  amp::Config config;
  try {
    config = amp::load_config(o.file);
  } catch (const amp::ConfigError& e) {
    throw UsageError(e.what());
  }
  out << (o.json ? amp::to_json(config) : amp::explain(config));
  return 0;
}

}  // namespace

Command add_config_command(CLI::App& app) {
  auto options = std::make_shared<ConfigOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_config(*options, out, err); }};
}

}  // namespace ampcheck::cli
