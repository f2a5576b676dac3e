// One ampcheck subcommand: its CLI11 parser and what runs when it was the one parsed.
// Each command file exposes `Command add_<name>_command(CLI::App&)`, which owns its
// options (captured by `run`); app.cpp lists them all, in the order `--help` shows.
#pragma once

#include <functional>
#include <ostream>

namespace CLI {
class App;
}

namespace ampcheck::cli {

struct Command {
  CLI::App* app = nullptr;
  // Returns the exit code (cli/exit_codes.h); bad input throws UsageError.
  std::function<int(std::ostream& out, std::ostream& err)> run;
};

}  // namespace ampcheck::cli
