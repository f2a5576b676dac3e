// `ampcheck config explain FILE`: reads an AMP config in any framework's key names and
// prints what ampcheck makes of it.
#pragma once

#include <iosfwd>
#include <string>

#include "cli/command.h"

namespace ampcheck::cli {

struct ConfigOptions {
  std::string file;
  bool json = false;
};

// `config` and its `explain` subcommand.
Command add_config_command(CLI::App& app);

}  // namespace ampcheck::cli
