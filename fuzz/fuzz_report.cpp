// Reports (and recordings: the same JSON) read back: rendered as text and HTML, and
// compared with themselves as `ampcheck diff` does in CI.
#include <cstdint>
#include <string>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = ampcheck::fuzz::input_file("report.json", data, size);
  if (ampcheck::fuzz::run_checked({"report", file, "--html", file + ".html"}, file) != 0) return 0;
  ampcheck::fuzz::run_checked({"diff", file, file}, file);
  return 0;
}
