// `ampcheck report FILE.json --html out.html | --text`: renders a saved report (one a
// run, bisect-nan or compare wrote with --report) as HTML or as the text summary.
#pragma once

#include "cli/command.h"

namespace ampcheck::cli {

// Exit 0; a missing, malformed or newer-major report throws UsageError naming it.
Command add_report_command(CLI::App& app);

}  // namespace ampcheck::cli
