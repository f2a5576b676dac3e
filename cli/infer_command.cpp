#include "cli/infer_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/exit_codes.h"
#include "cli/run_options.h"
#include "cli/usage_error.h"
#include "engine/amp/decorate.h"
#include "engine/amp/policy.h"
#include "engine/device.h"
#include "models/arrays.h"
#include "models/data.h"
#include "models/model_file.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"
#include "samples/builtin_models.h"

namespace ampcheck::cli {
namespace {

struct InferOptions {
  std::string model, data, out, output;
  std::string level = "O0", dtype = "float16", config;
  std::vector<std::string> white, black;
  std::int64_t batch = 0;  // 0: the batch size the export fixed, else 64
  std::uint64_t seed = 0;
  std::string device = "auto";
  bool quiet = false;
};

int run_infer(const InferOptions& o, std::ostream& out, std::ostream& err) {
  if (o.batch < 0) throw UsageError("--batch must be positive, got " + std::to_string(o.batch));
  check_output("--out", o.out);
  models::ModelFile file;
  try {
    file = models::load_model(o.model, samples::builtin_models());
    models::apply(file, {"", "", o.output});
  } catch (const models::ModelFileError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  if (!file.onnx_graph)
    throw UsageError("--model " + o.model + ": infer runs ONNX models (a .onnx file, or a model file with \"onnx\")");
  const models::onnx_file::Graph& g = *file.onnx_graph;
  std::int64_t batch = o.batch > 0 ? o.batch : 64;
  std::optional<std::int64_t> fixed;
  try {
    fixed = models::fixed_batch(file);
  } catch (const models::ModelFileError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  if (fixed) {
    const std::string input = g.inputs.empty() ? "input" : g.inputs.front().name;
    if (o.batch > 0 && o.batch != *fixed)
      throw UsageError("--batch " + std::to_string(o.batch) + " contradicts the model: its input \"" + input +
                       "\" has a fixed batch size of " + std::to_string(*fixed) + "; leave --batch out, or " +
                       models::dynamic_batch_hint(file, input));
    batch = *fixed;
  }
  std::string data_path = o.data.empty() ? file.data.file : o.data;
  if (data_path.empty()) throw UsageError("--data: give the inputs (an .npz with the array \"input\", an .npy or a .pb)");
  if (g.inputs.empty()) throw UsageError("--model " + o.model + ": the graph has no data input");
  // One array per graph input, as training finds them (models::dataset_of).
  std::vector<std::string> names;
  for (const auto& v : g.inputs) names.push_back(v.name);
  std::vector<Tensor> inputs;
  try {
    models::Dataset data = models::dataset_of(models::read_arrays(data_path), data_path, names, false);
    inputs.push_back(data.x);
    inputs.insert(inputs.end(), data.more.begin(), data.more.end());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--data: ") + e.what());
  }
  const amp::AmpOptions options = amp_options_of(o.config, o.level, o.dtype, o.white, o.black);
  std::optional<amp::Policy> policy;
  try {
    policy.emplace(options);
  } catch (const amp::PolicyError& e) {
    throw UsageError(e.what());
  }
  const auto request = parse_device_request(o.device);
  if (!request) throw UsageError("--device \"" + o.device + "\" is not a device; use auto, cpu or cuda");
  Device device = Device::cpu;
  try {
    std::ostringstream notices;
    device = resolve_device(*request, notices);
    if (!o.quiet) err << notices.str();
  } catch (const DeviceError& e) {
    throw UsageError(e.what());
  }

  std::shared_ptr<nn::Module> model;
  try {
    model = models::build_onnx(file.onnx_graph, file.output, o.seed);
  } catch (const models::ModelFileError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  model->to(device);
  amp::decorate(*model, nullptr, options);
  model->eval();
  NoGradGuard no_grad;
  const amp::Autocast on(options.level != amp::Level::O0 ? &*policy : nullptr);
  std::vector<Tensor> parts;
  const std::string out_name = file.output.empty() ? (g.outputs.empty() ? "?" : g.outputs[0].name) : file.output;
  const std::int64_t n = inputs[0].size(0);
  if (fixed && n < *fixed)
    throw UsageError("--data " + data_path + ": " + std::to_string(n) + " rows, but the model's input has a fixed batch size of " +
                     std::to_string(*fixed) + "; give at least that many rows, or " +
                     models::dynamic_batch_hint(file, g.inputs.front().name));
  for (std::int64_t start = 0; start < n; start += batch) {
    // A fixed batch size is filled up to from the first rows; their outputs are left out.
    const std::int64_t count = std::min(batch, n - start), take = fixed ? batch : count;
    std::vector<Tensor> rows;
    for (const Tensor& in : inputs) rows.push_back(models::rows_around(in, start, take).to(device));
    try {
      Tensor y = models::run_onnx(*model, rows, {out_name}).front().to(Device::cpu);
      parts.push_back(take == count ? y : y.rows(0, count).clone());
    } catch (const models::ModelFileError& e) {
      throw UsageError(std::string("--model: ") + e.what());
    }
  }
  const Tensor y = parts.size() == 1 ? parts[0] : concat(parts, 0);
  const models::Array a = models::Array::of_tensor(y);
  write_output("--out", o.out, models::npy_bytes(a));
  std::int64_t nonfinite = 0;
  if (!a.integer())
    for (double v : a.f) nonfinite += !std::isfinite(v);
  out << fmt::format("infer: {} \"{}\" {} computed in {} at {} on {} -> {} ({}){}\n", o.model, out_name,
                     to_string(y.shape()), options.level == amp::Level::O0 ? "float32" : std::string(info(options.dtype).long_name),
                     amp::level_name(options.level), device_name(device), o.out,
                     a.integer() ? "int64" : a.dtype == DType::f64 ? "float64" : "float32",
                     nonfinite ? fmt::format("; {} values are NaN or Inf", nonfinite) : "");
  return kOk;
}

}  // namespace

Command add_infer_command(CLI::App& app) {
  auto o = std::make_shared<InferOptions>();
  CLI::App* cmd = app.add_subcommand(
      "infer", "Write an ONNX model's outputs for the data's inputs (eval mode, any AMP level) to an .npy");
  cmd->add_option("--model", o->model, "an ONNX model (.onnx) or a model file with \"onnx\"")->required();
  cmd->add_option("--data", o->data, "the inputs: an .npz (array \"input\" or the model's input name), .npy, .pb or a folder");
  cmd->add_option("--out", o->out, "the .npy to write (the output's values; float32, float64 or int64)")->required();
  cmd->add_option("--output", o->output, "the graph value to write (default: the graph's first output)");
  cmd->add_option("--level", o->level, "AMP level: O0 (fp32), O1, O2, O3")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "low-precision dtype: float16 or bfloat16")->capture_default_str();
  cmd->add_option("--config", o->config, "AMP config (PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck JSON)");
  cmd->add_option("--white", o->white, "custom_white_list, comma separated")->delimiter(',');
  cmd->add_option("--black", o->black, "custom_black_list, comma separated")->delimiter(',');
  cmd->add_option("--batch", o->batch, "rows per forward pass (default: the batch size the export fixed, else 64)");
  cmd->add_option("--seed", o->seed, "seed (Dropout, which eval mode leaves off)")->capture_default_str();
  cmd->add_option("--device", o->device, "where to run: auto, cpu, cuda")->capture_default_str();
  cmd->add_flag("--quiet,-q", o->quiet, "no device notice");
  return {cmd, [o](std::ostream& out, std::ostream& err) { return run_infer(*o, out, err); }};
}

}  // namespace ampcheck::cli
