// `ampcheck fp8-scale`: what a TransformerEngine fp8 recipe makes of a tensor's amax, step
// by step (the scale each step's cast uses, whether its values fit the fp8 format, the
// scale after the update), from the amaxes a run logged: the saturation a delayed scale
// lets through when the amax jumps is named at its first step.
#pragma once

#include <string>
#include <vector>

#include "cli/command.h"

namespace ampcheck::cli {

struct Fp8ScaleOptions {
  std::string recipe = "DelayedScaling()";  // TE's constructor text
  std::vector<std::string> amax;            // per step; commas split a value list
  std::string amax_file;                    // one amax per line (or separated by spaces/commas)
  std::string role = "input";               // input, weight, grad_output
  bool json = false;
  std::string output;  // empty: standard output
};

Command add_fp8_scale_command(CLI::App& app);

}  // namespace ampcheck::cli
