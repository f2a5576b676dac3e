// `ampcheck fp`: the number explorer.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ampcheck::cli {

struct FpOptions {
  std::vector<std::string> values;
  std::vector<std::string> dtypes{"f16", "bf16"};
  bool limits = false;
  bool json = false;
  std::string device = "auto";
  std::string output;  // empty: standard output
};

// Registers the subcommand's options into `options`.
CLI::App* add_fp_command(CLI::App& app, FpOptions& options);

// Runs it; returns the exit code. Bad input throws UsageError (cli/usage_error.h).
int run_fp(const FpOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ampcheck::cli
