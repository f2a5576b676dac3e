// Data files: numpy .npy and .npz, ONNX TensorProto .pb, as `--data` of a training run.
// The file is named for what its first bytes look like (numpy's magic, a zip archive, else
// a TensorProto), as a user names theirs; seeds are real files of each kind.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string head(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 6));
  const char* name = head.rfind("\x93NUMPY", 0) == 0 ? "data.npy" : head.rfind("PK", 0) == 0 ? "data.npz" : "data.pb";
  const std::string file = ampcheck::fuzz::input_file(name, data, size);
  ampcheck::fuzz::run_checked({"run", "--model", "mlp", "--data", file, "--steps", "1", "--batch", "2", "--inspect",
                               "off", "--device", "cpu", "-q"},
                              file);
  return 0;
}
