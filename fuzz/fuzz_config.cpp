// AMP configs in any framework's key names (PaddlePaddle, PyTorch, DeepSpeed, Apex,
// ampcheck): explained, then used for one training step of the mlp sample.
#include <cstdint>
#include <string>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string file = ampcheck::fuzz::input_file("config.json", data, size);
  if (ampcheck::fuzz::run_checked({"config", "explain", file}, file) != 0) return 0;
  ampcheck::fuzz::run_checked({"run", "--model", "mlp", "--config", file, "--steps", "2", "--batch", "4", "--inspect",
                               "stats", "--device", "cpu", "-q"},
                              file);
  return 0;
}
