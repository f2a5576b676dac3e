// `ampcheck run`: trains a sample under the AMP settings asked for, with the inspector
// attached, and ends with a summary a person reads in ten seconds.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"

namespace ampcheck::cli {

struct RunOptions {
  std::string model = "mlp";
  std::string level = "O2";
  std::string dtype = "float16";
  std::int64_t steps = 200;
  std::int64_t batch = 0;
  double lr = 0;
  std::uint64_t seed = 0;
  std::string config;  // an AMP config file in any framework's key names
  std::vector<std::string> white, black;
  std::string inspect = "full";
  int log_level = -1;  // -1: GLOG_v
};

// Exit 0: healthy; 1: the inspector found a real failure (a non-finite forward value, a
// collapsing scale, too many skipped steps); bad options throw UsageError.
Command add_run_command(CLI::App& app);

}  // namespace ampcheck::cli
