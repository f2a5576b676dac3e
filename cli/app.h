// The ampcheck command line, callable in-process (tests) and from main().
#pragma once

#include <ostream>

namespace ampcheck::cli {

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace ampcheck::cli
