// Small string helpers for messages.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace ampcheck {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` within `max_distance` edits, or empty.
std::string_view closest(std::string_view word, const std::vector<std::string_view>& candidates,
                         std::size_t max_distance = 2);

}  // namespace ampcheck
