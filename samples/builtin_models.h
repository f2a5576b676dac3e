// The sample model files of samples/models/, compiled into the binary (the build
// generates builtin_models.cpp from them), so `ampcheck run --model mlp` works from any
// directory.
#pragma once

#include <string_view>
#include <vector>

namespace ampcheck::samples {

struct BuiltinModel {
  std::string_view name;  // the file's stem: "mlp" for samples/models/mlp.json
  std::string_view text;  // the file's JSON
};

// In the order of samples/models/ORDER.
const std::vector<BuiltinModel>& builtin_models();

}  // namespace ampcheck::samples
