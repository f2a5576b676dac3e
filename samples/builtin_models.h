// The sample model files of samples/models/, compiled into the binary (the build
// generates builtin_models.cpp from them), so `ampcheck run --model mlp` works from any
// directory: the catalog the commands resolve a model's name in (models::load_model).
#pragma once

#include "models/model_file.h"

namespace ampcheck::samples {

// In the order of samples/models/ORDER.
const models::ModelCatalog& builtin_models();

}  // namespace ampcheck::samples
