// `ampcheck fp`: the number explorer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"

namespace ampcheck::cli {

struct FpOptions {
  std::vector<std::string> values;
  std::vector<std::string> dtypes{"f16", "bf16"};
  bool limits = false;
  bool json = false;
  std::string device = "cpu";  // the same bits anywhere: the GPU only where asked, as a cross-check
  std::string output;  // empty: standard output
  // MXFP8: the largest |value| of the block of 32 the values sit in (absent: no block view).
  std::optional<std::string> mx_amax;
};

Command add_fp_command(CLI::App& app);

}  // namespace ampcheck::cli
