// Trains a model (a sample, a model file, an ONNX export) on its data set with the AMP settings asked for: the
// loop `ampcheck run`, `bisect-nan` and `compare` drive (an inspector, when attached,
// hears every step of it). A Trainer goes one step at a time, so several can run in
// lock step (compare); run() is the whole loop.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/amp/fp8_recipe.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "models/model_file.h"

namespace ampcheck::models {

struct RunOptions {
  std::string model = "mlp";  // a name in `catalog`, or a model file's or an ONNX file's path
  ModelCatalog catalog;       // the models known by name (samples::builtin_models())
  ModelOverrides overrides;   // --data, --loss, --output
  std::int64_t steps = 0;     // 0: the model file's
  std::int64_t batch = 0;     // 0: the model file's
  double lr = 0;              // 0: the model file's
  std::uint64_t seed = 0;
  Device device = Device::cpu;  // where the model, its data and every op live
  amp::AmpOptions amp;     // O0: no autocast, no decorate
  amp::ScalingOptions scaling = amp::TorchScaling{};  // O0 runs unscaled
  // Under mpirun (dist::world() of several ranks): each rank trains on its shard of every
  // global batch of `batch` rows. A debug switch turns the found_inf reduction off.
  bool reduce_found_inf = true;
  std::string reduce_dtype = "float32";  // dist::DataParallelOptions::reduce_dtype
  // fp8 (TransformerEngine's fp8_autocast with a DelayedScaling or Float8CurrentScaling
  // recipe): every linear layer
  // of the model runs its GEMMs in fp8 (nn::Linear::enable_fp8) but those named in
  // fp8_keep (a layer's path, or a prefix of paths ending before a '.') and those whose
  // sizes are not multiples of 16, which stay as the AMP level has them. Each step ends
  // with the scale update; under mpirun the amaxes are reduced (max) over the ranks first
  // (the recipe's reduce_amax), over groups of fp8_amax_group consecutive ranks where that
  // is set (a debug switch: the wrong group, as Megatron-LM PR 442's bug reduced).
  // Current scaling carries no scale from step to step: nothing to reduce or to agree on.
  std::optional<amp::Fp8Recipe> fp8;
  std::vector<std::string> fp8_keep;
  // Where each kept layer was named, for the message when none is so named ("--fp8-keep",
  // or a config's "fp8" block); an entry without one is --fp8-keep's.
  std::vector<std::string> fp8_keep_from;
  int fp8_amax_group = 0;
};

// A linear layer and whether it runs in fp8, and if not, why.
struct Fp8Layer {
  std::string layer;
  bool fp8 = false;
  std::string kept;  // why not: "kept by name", "[out, in]: not multiples of 16"
};

// One optimizer step as the scaler saw it.
struct StepResult {
  double loss = 0;        // the unscaled loss
  double loss_scale = 1;  // the scale the backward used
  bool found_inf = false;
  bool skipped = false;
};

struct RunResult {
  std::string description;  // the model file's
  std::int64_t parameters = 0;
  std::int64_t steps_asked = 0;  // the options' steps, or the model file's
  std::int64_t batch = 0;   // the global batch (every rank's rows together)
  bool fixed_batch = false; // the ONNX export fixed the rows per forward: batch is world x that
  double lr = 0;
  std::string optimizer;    // "adam", "adamw", "sgd"
  std::vector<StepResult> steps;
  double accuracy = 0;         // on the whole data set after training, eval mode
  std::int64_t skipped = 0;    // optimizer steps the scaler skipped
  double final_scale = 1;
  std::string scaling;         // the behaviour's name
  int world = 1;               // ranks that trained (dist::world())
  std::vector<DataParallelStep> data_parallel;  // this rank's view of each step, with several ranks
  std::vector<Fp8Layer> fp8_layers;  // with RunOptions::fp8: every linear layer, in model order
};

class Trainer {
 public:
  // Loads the model file, builds the model, data, optimizer and scaler. Throws
  // ModelFileError for a bad model (unknown sample, a file's error) and
  // std::invalid_argument for a bad number.
  explicit Trainer(const RunOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One training step (begin_step / end_step around it, so observers see it).
  StepResult step();
  // Accuracy on the whole data set in eval mode, under the run's autocast; the model
  // stays in eval mode afterwards.
  double evaluate();
  // What the steps so far made, with the accuracy of evaluate() (0 before it).
  const RunResult& result() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The whole loop: the steps asked for (or the model file's), then evaluate().
RunResult run(const RunOptions& options);

}  // namespace ampcheck::models
