// The ampcheck command line in-process, for the tests of its commands.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"

namespace ampcheck::testing {

struct CliResult {
  int code;
  std::string out, err;
};

// Runs `ampcheck ARGS...` and captures its exit code and both streams.
inline CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "ampcheck");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

inline bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace ampcheck::testing
