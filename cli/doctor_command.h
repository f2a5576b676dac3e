// `ampcheck doctor`: what this machine and this build give mixed precision — CPU
// features and conversion path, BLAS, threads, the CUDA stack and every GPU.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

struct DoctorOptions {
  bool json = false;
};

Command add_doctor_command(CLI::App& app);

}  // namespace ampcheck::cli
