// Small string helpers for messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ampcheck {

// A library's message on one line (the ONNX checker's node dumps span several): each line
// break and the indentation after it become one space; a trailing break goes; any other
// control character (a file's bytes quoted in a message) is written \xNN.
std::string one_line(std::string_view text);

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` within `max_distance` edits, or empty.
std::string_view closest(std::string_view word, const std::vector<std::string_view>& candidates,
                         std::size_t max_distance = 2);

}  // namespace ampcheck
