// What every fuzz target checks: a file of any bytes, given to the ampcheck command that
// reads it, ends as a user's input must. Exit 0 or 1, or exit 2 with one line that names
// the file; never a signal (the sanitizers and libFuzzer catch those), never exit 3 (an
// internal error: ampcheck's own defect), never a line that does not say which file.
// The command runs in-process (cli::run), as `ampcheck ARGS...` would.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"

namespace ampcheck::fuzz {

// A file of this process under the temporary folder, holding the input: one path per
// target and extension, rewritten for each input (a reader sees a real file, as users'
// files are).
inline std::string input_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    // The pid in a fixed width: the path, which messages quote, has the same length in every
    // process (a fixed seed then makes the same inputs: fuzz/CMakeLists.txt).
    char pid[16];
    std::snprintf(pid, sizeof pid, "%07ld", static_cast<long>(::getpid()));
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/ampcheck-fuzz-" + pid;
  }();
  static const bool made = [] { return std::system(("mkdir -p '" + dir + "'").c_str()) == 0; }();
  if (!made) std::abort();
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                  static_cast<std::streamsize>(size));
  return path;
}

// Runs `ampcheck ARGS...` and aborts (a crash libFuzzer saves) when it breaks the rules
// above; returns the exit code.
inline int run_checked(const std::vector<std::string>& args, const std::string& file) {
  std::vector<std::string> all = {"ampcheck"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const std::string& a : all) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
  const std::string e = err.str();
  const auto fail = [&](const char* why) {
    std::fprintf(stderr, "fuzz: %s: `ampcheck", why);
    for (const std::string& a : args) std::fprintf(stderr, " %s", a.c_str());
    std::fprintf(stderr, "` exited %d with:\n%s\n", code, e.c_str());
    std::abort();
  };
  if (code == 3) fail("internal error (exit 3) on a user's file");
  if (code != 0 && code != 1 && code != 2) fail("an exit code no user input should give");
  if (code == 2) {
    const std::string body = !e.empty() && e.back() == '\n' ? e.substr(0, e.size() - 1) : e;
    if (body.empty()) fail("exit 2 without a message");
    if (body.find('\n') != std::string::npos) fail("an error of more than one line");
    if (body.find(file) == std::string::npos) fail("an error that does not name the file");
  }
  return code;
}

}  // namespace ampcheck::fuzz
