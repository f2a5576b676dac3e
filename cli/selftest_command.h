// `ampcheck selftest`: the backend parity harness (engine/parity.h) from the command line:
// every op, dtype and case on a device against the CPU reference, as a table and a
// summary; exit 0 when every case passes, 1 when one fails.
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"

namespace ampcheck::cli {

struct SelftestOptions {
  std::string device = "auto";     // auto: the GPU when usable, else the CPU against itself
  std::vector<std::string> ops;    // empty: every op
  std::vector<std::string> dtypes; // empty: f64, f32, f16, bf16
  std::string json;                // write the results here too (atomically)
};

Command add_selftest_command(CLI::App& app);

}  // namespace ampcheck::cli
