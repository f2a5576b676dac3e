// `ampcheck kernels PROFILE`: is AMP really on in the user's own GPU run? Reads a profile
// they already have (PyTorch profiler or PaddlePaddle Chrome trace, Nsight Systems SQLite
// export or kern_sum CSV, Nsight Compute CSV; a folder of per-rank traces), checks its
// kernels against the policy they meant (inspector/profile_check.h) and prints, writes
// JSON (reports/schema/kernels.schema.json) and HTML. docs/kernels.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/command.h"

namespace ampcheck::cli {

Command add_kernels_command(CLI::App& app);

// "2G", "512M", "1.5G", "300000000": bytes; nothing for anything else.
std::optional<std::uint64_t> parse_byte_size(const std::string& text);

}  // namespace ampcheck::cli
