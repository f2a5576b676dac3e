// Where a command's text goes: standard output, or a file written atomically (`-o FILE`),
// a file that cannot be written being the user's to fix (exit 2).
#pragma once

#include <ostream>
#include <string>

#include "cli/usage_error.h"
#include "reports/atomic_file.h"

namespace ampcheck::cli {

inline void write_output(const std::string& text, const std::string& path, std::ostream& out) {
  if (path.empty()) {
    out << text;
    return;
  }
  try {
    reports::write_file_atomically(path, text);
  } catch (const reports::WriteError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace ampcheck::cli
