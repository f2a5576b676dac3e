// Reports are never left half-written: they go to a temporary file beside the target,
// which is renamed over it only once complete.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string_view>

namespace ampcheck::reports {

class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws WriteError when `path` cannot be written (a directory, a path ending in '/', a
// parent that is missing, not a directory or not writable), creating nothing: commands
// check their outputs before a long run rather than fail at its end.
void check_writable_target(const std::filesystem::path& path);

// Writes `content` to `path` atomically (same-directory temp file, flush, close, rename).
// Throws WriteError naming the path and the system's reason; the target is untouched
// on failure and the temporary file removed.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace ampcheck::reports
