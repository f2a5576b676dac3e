// `ampcheck ops`: every op, its AMP category, and the dtype it runs in under a policy.
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"

namespace ampcheck::cli {

struct OpsOptions {
  std::string level;   // empty: the config's, else O1
  std::string dtype;   // empty: the config's, else float16
  std::string config;  // an AMP config file (any framework's keys)
  std::vector<std::string> white, black;  // added to the custom lists
  bool json = false;
  bool nodes = false;  // list the model file's node kinds instead
  std::string onnx;    // an ONNX model: its op types and the AMP decision for each
};

Command add_ops_command(CLI::App& app);

}  // namespace ampcheck::cli
