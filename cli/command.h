// One ampcheck subcommand: its CLI11 parser and what runs when it was the one parsed.
// Each command file exposes `Command add_<name>_command(CLI::App&)`, which owns its
// options (captured by `run`); app.cpp lists them all, in the order `--help` shows.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ampcheck::cli {

struct Command {
  CLI::App* app = nullptr;
  // Returns the exit code (cli/exit_codes.h); bad input throws UsageError.
  std::function<int(std::ostream& out, std::ostream& err)> run;
  // Optional: looks at the words after the command's name before CLI11 parses them and
  // throws UsageError for a mistake CLI11 would answer less helpfully.
  std::function<void(const std::vector<std::string>& words)> check_words = nullptr;
};

}  // namespace ampcheck::cli
