// How much memory one allocation sized by a user's input may take: `--max-memory` (or the
// environment's AMPCHECK_MAX_MEMORY), else what this machine can allocate without swapping
// (Linux's MemAvailable, lowered by a cgroup's limit). Every size a file claims (a tensor
// of its shape, an array of its header, a zip member) is checked here before anything is
// allocated, so a 700-byte file cannot make ampcheck ask for 60 GiB.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ampcheck {

// "22.4 GiB": bytes in binary units, one decimal.
std::string human_bytes(double bytes);

// "8G", "512M", "1.5GiB", "123456": a size for --max-memory; nullopt when not one.
std::optional<std::uint64_t> parse_size(const std::string& text);

// 0: no limit set (the machine's memory decides).
void set_memory_limit(std::uint64_t bytes);
std::uint64_t memory_limit();

// nullopt when `bytes` fits; else why not, in words: "needs 3.0 GiB, and this machine has
// 1.2 GiB available (16 GiB in all)" or "... and --max-memory is 1 GiB". Blocks under
// 256 MiB fit without asking the machine (reading it costs more than they do) unless a
// limit is set.
std::optional<std::string> over_budget(std::uint64_t bytes);

}  // namespace ampcheck
