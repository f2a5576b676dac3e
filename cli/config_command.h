// `ampcheck config explain FILE`: reads an AMP config in any framework's key names and
// prints what ampcheck makes of it. `ampcheck config simulate FILE --found-inf 0010`:
// the loss scale that config's scaler holds after each step, given on which steps the
// gradients were non-finite (the scaler's state machine alone, no model).
#pragma once

#include <iosfwd>
#include <string>

#include "cli/command.h"

namespace ampcheck::cli {

struct ConfigOptions {
  std::string file;
  bool json = false;
  std::string found_inf;  // simulate: one 0/1 per step
};

// `config` and its `explain` and `simulate` subcommands.
Command add_config_command(CLI::App& app);

}  // namespace ampcheck::cli
