// Trains a sample model on its synthetic data set with the AMP settings asked for: the
// loop `ampcheck run` drives (an inspector, when attached, hears every step of it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"

namespace ampcheck::samples {

// "mlp" (spiral), "cnn" (oriented stripes, BatchNorm), "transformer" (a sequence task).
const std::vector<std::string_view>& sample_names();

struct RunOptions {
  std::string model = "mlp";
  std::int64_t steps = 200;
  std::int64_t batch = 0;  // 0: the sample's own
  double lr = 0;           // 0: the sample's own (Adam)
  std::uint64_t seed = 0;
  amp::AmpOptions amp;     // O0: no autocast, no decorate
  amp::ScalingOptions scaling = amp::TorchScaling{};  // O0 runs unscaled
};

struct RunResult {
  std::string description;  // "Mlp 2-64-64-3 on spiral (300 samples)"
  std::int64_t parameters = 0;
  std::int64_t batch = 0;
  double lr = 0;
  std::vector<double> losses;  // per step (the unscaled loss)
  double accuracy = 0;         // on the whole data set after training, eval mode
  std::int64_t skipped = 0;    // optimizer steps the scaler skipped
  double final_scale = 1;
  std::string scaling;         // the behaviour's name
};

// Throws std::invalid_argument naming an unknown model (with the closest name) or a
// bad number.
RunResult run(const RunOptions& options);

}  // namespace ampcheck::samples
