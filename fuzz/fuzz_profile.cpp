// Users' GPU profiles (PyTorch profiler / Kineto JSON, plain or gzipped; Nsight Systems
// SQLite and CSV; Nsight Compute CSV; tar archives of per-rank traces): read by the format
// their bytes show, whatever the name, and checked as `ampcheck kernels` checks them.
#include <cstdint>
#include <string>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = ampcheck::fuzz::input_file("profile", data, size);
  ampcheck::fuzz::run_checked({"kernels", file}, file);
  ampcheck::fuzz::run_checked({"kernels", file, "--report", file + ".json", "--html", file + ".html", "--fail-on", "fallback"}, file);
  return 0;
}
