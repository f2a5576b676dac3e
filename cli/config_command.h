// `ampcheck config explain FILE`: reads an AMP config in any framework's key names and
// prints what ampcheck makes of it.
#pragma once

#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace ampcheck::cli {

struct ConfigOptions {
  std::string file;
  bool json = false;
};

// Registers `config` and its `explain` subcommand; returns `config`.
CLI::App* add_config_command(CLI::App& app, ConfigOptions& options);

// Runs it; returns the exit code. A bad config throws UsageError (cli/usage_error.h).
int run_config(const ConfigOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ampcheck::cli
