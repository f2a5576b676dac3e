// ampcheck model files (docs/model-format.md): read, built and trained one step.
#include <cstdint>
#include <string>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = ampcheck::fuzz::input_file("model.json", data, size);
  ampcheck::fuzz::run_checked({"run", "--model", file, "--steps", "1", "--batch", "2", "--inspect", "stats",
                               "--device", "cpu", "-q"},
                              file);
  return 0;
}
