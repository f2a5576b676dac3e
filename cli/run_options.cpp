#include "cli/run_options.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>
#include <unistd.h>  // isatty

#include <algorithm>
#include <iostream>
#include <variant>

#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "cli/interrupt.h"  // ReportWrite
#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "engine/amp/fp8_recipe.h"
#include "engine/device.h"
#include "engine/dist/communicator.h"
#include "engine/dtype/convert.h"
#include "engine/ops/registry.h"  // op_from_name: allow-list names
#include "engine/util/strings.h"  // closest
#include "inspector/to_report.h"
#include "reports/atomic_file.h"
#include "models/onnx_file.h"
#include "samples/builtin_models.h"

namespace ampcheck::cli {

namespace {

template <typename T>
void add_optional(CLI::App* cmd, const std::string& name, std::optional<T>& slot, const std::string& help) {
  cmd->add_option_function<T>(name, [&slot](const T& v) { slot = v; }, help);
}

// Sorts allow-list names into op names and module paths: a registry op's name is an op;
// anything else must be a module of the model (a node's path, or a path below or above
// one). An unknown name is the user's to fix, with the closest op or module.
void sort_allowed(const std::vector<std::string>& names, const models::ModelFile& file, const std::string& source,
                  Resolved& r) {
  const std::vector<std::string> modules = models::module_names(file);
  auto related = [](const std::string& path, const std::string& node) {
    auto under = [](const std::string& a, const std::string& b) {  // a is b or inside b
      return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '.');
    };
    return under(path, node) || under(node, path);
  };
  for (const std::string& name : names) {
    if (op_from_name(name)) {
      r.allowed_ops.push_back(name);
      continue;
    }
    if (std::any_of(modules.begin(), modules.end(), [&](const std::string& m) { return related(name, m); })) {
      r.allowed_modules.push_back(name);
      continue;
    }
    std::vector<std::string_view> known;
    for (int i = 0; i < kOpCount; ++i) known.push_back(op_name(static_cast<Op>(i)));
    for (const std::string& m : modules) known.emplace_back(m);
    const std::string_view best = closest(name, known);
    throw UsageError(fmt::format("{}: \"{}\" is neither an op nor a module of the model{}; give an op name "
                                 "(`ampcheck ops` lists them) or a node's name",
                                 source, name, best.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", best)));
  }
}

std::string sample_list() {
  std::string s;
  for (std::string_view n : models::names_of(samples::builtin_models())) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace

void add_run_args(CLI::App* cmd, RunArgs& a, bool level) {
  cmd->add_option("--model", a.model,
                  "a sample (" + sample_list() + "), a model file (docs/model-format.md) or an ONNX model (.onnx, docs/onnx.md)")
      ->capture_default_str();
  cmd->add_option("--data", a.overrides.data,
                  "the training data: an .npz with the arrays input and labels, or .npy/.pb files in a folder (docs/onnx.md)");
  cmd->add_option("--loss", a.overrides.loss, "the loss on the model's output: cross_entropy or mse (default: the model's)");
  cmd->add_option("--output", a.overrides.output, "the model's output the loss reads (a node, or an ONNX graph's value)");
  if (level) add_optional(cmd, "--level", a.level, "AMP level: O0 (fp32), O1, O2, O3 (default: the model's, else O2)");
  add_optional(cmd, "--dtype", a.dtype, "low-precision dtype: float16 or bfloat16 (default: the model's, else float16)");
  add_optional(cmd, "--steps", a.steps, "training steps (default: the model's)");
  add_optional(cmd, "--batch", a.batch, "batch size (default: the model's)");
  add_optional(cmd, "--lr", a.lr, "learning rate (default: the model's)");
  cmd->add_option("--seed", a.seed, "seed of the model and data")->capture_default_str();
  cmd->add_option("--config", a.config, "AMP config (PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck JSON)");
  cmd->add_option("--white", a.white, "custom_white_list, comma separated")->delimiter(',');
  cmd->add_option("--black", a.black, "custom_black_list, comma separated")->delimiter(',');
  cmd->add_option("--allow-inf", a.allow_inf,
                  "op names or module paths whose Inf/-Inf is intended (an attention mask's -inf), comma "
                  "separated: not counted as a failure")
      ->delimiter(',');
  cmd->add_option("--device", a.device, "where to train: auto, cpu, cuda")->capture_default_str();
  if (level) {  // data parallel: run and bisect-nan
    cmd->add_option("--nproc", a.nproc, "data parallel over N processes: starts `mpirun -np N` (or start under mpirun yourself)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--dp-reduce-dtype", a.dp_reduce_dtype,
                    "data parallel: average the gradients in float32 after unscaling, or in their own dtype (grad: "
                    "float16/bfloat16 at O2) before, as DDP does")
        ->capture_default_str();
    cmd->add_flag("--dp-no-inf-reduce", a.dp_no_inf_reduce,
                  "debug: each rank acts on its own found_inf instead of the reduced one (the consensus check must "
                  "flag the divergence)");
  }
  if (level) {  // fp8: run and bisect-nan
    cmd->add_option("--fp8", a.fp8,
                    "train the model's linear layers in fp8 with a TransformerEngine recipe, its constructor as in "
                    "your script: 'DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, "
                    "amax_compute_algo=\"max\")', 'Float8CurrentScaling()' or 'MXFP8BlockScaling()' (on the CPU); it "
                    "replaces the model's or the config's \"fp8\" recipe, and none turns fp8 off (docs/fp8.md)");
    cmd->add_option("--fp8-keep", a.fp8_keep,
                    "with --fp8: linear layers (module paths, or a path's prefix) kept out of fp8, comma separated")
        ->delimiter(',');
    cmd->add_option("--fp8-amax-group", a.fp8_amax_group,
                    "debug, data parallel with --fp8: reduce the amaxes over groups of N consecutive ranks instead of "
                    "all of them (the wrong group: the consensus check must flag it)")
        ->check(CLI::Range(0, 4096));
  }
  if (level)  // run and bisect-nan; compare's levels train side by side, and CUPTI traces one at a time
    cmd->add_option("--cupti", a.cupti,
                    "on a GPU with --inspect trace or above: record which kernels each op really ran (CUPTI), on or off")
        ->capture_default_str();
  cmd->add_flag("--quiet,-q", a.quiet, "no progress line, no device notice");
}

Resolved resolve(const RunArgs& a) {
  if (a.steps && *a.steps <= 0) throw UsageError("--steps must be positive, got " + std::to_string(*a.steps));
  if (a.batch && *a.batch <= 0) throw UsageError("--batch must be positive, got " + std::to_string(*a.batch));
  if (a.lr && !(*a.lr > 0)) throw UsageError("--lr must be positive, got " + fmt::format("{}", *a.lr));
  models::ModelFile file;
  try {
    file = models::load_model(a.model, samples::builtin_models());
    models::apply(file, a.overrides);
  } catch (const models::ModelFileError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  Resolved r;
  models::RunOptions& o = r.options;
  o.model = a.model;
  o.catalog = samples::builtin_models();
  o.overrides = a.overrides;
  o.reduce_found_inf = !a.dp_no_inf_reduce;
  if (a.dp_reduce_dtype != "float32" && a.dp_reduce_dtype != "grad")
    throw UsageError("--dp-reduce-dtype \"" + a.dp_reduce_dtype + "\": use float32 (after unscaling) or grad (the "
                     "gradients' own dtype, before)");
  o.reduce_dtype = a.dp_reduce_dtype;
  r.onnx = file.onnx_graph;
  o.steps = a.steps.value_or(file.train.steps);
  o.batch = a.batch.value_or(0);  // 0: the model's (the batch size its export fixed, or its file's)
  o.lr = a.lr.value_or(file.train.lr);
  o.seed = a.seed;
  // AMP: the model file's block, or the defaults; a config file replaces it.
  o.amp.level = *amp::parse_level(RunArgs::kLevel);
  o.amp.dtype = *try_parse_dtype(RunArgs::kDtype);
  if (file.amp) {
    if (!file.amp->allow_inf.empty())
      throw UsageError("--model: \"amp\": \"allow_inf\" belongs at the top of the model file, beside \"amp\"");
    o.amp = file.amp->amp;
    o.scaling = file.amp->scaling;
    r.semantics = std::string(amp::style_name(file.amp->style));
  }
  // fp8: the model file's "amp" block, replaced by a config file's (with or without fp8),
  // its recipe replaced by --fp8 ("none" turns it off), its kept layers added to by --fp8-keep.
  std::optional<amp::Fp8Settings> fp8;
  std::string fp8_from, fp8_keep_from;  // where the recipe, and the kept layers, were given
  if (file.amp && file.amp->fp8) {
    fp8 = file.amp->fp8;
    fp8_from = fp8_keep_from = "--model " + a.model + ": \"amp\": \"fp8\"";
  }
  std::vector<std::string> config_allow_inf;
  if (!a.config.empty()) {
    try {
      const amp::Config c = amp::load_config(a.config);
      config_allow_inf = c.allow_inf;
      fp8 = c.fp8;
      fp8_from = fp8_keep_from = a.config + ": \"fp8\"";
      o.amp = c.amp;
      o.scaling = c.scaling;
      r.semantics = std::string(amp::style_name(c.style));
    } catch (const amp::ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  if (a.level) {
    const auto level = amp::parse_level(*a.level);
    if (!level) throw UsageError("--level \"" + *a.level + "\" is not a level; use O0, O1, O2 or O3");
    o.amp.level = *level;
  }
  if (a.dtype) {
    const auto dtype = try_parse_dtype(*a.dtype);
    if (!dtype || !is_low_precision(*dtype))
      throw UsageError("--dtype \"" + *a.dtype + "\": AMP runs in float16 or bfloat16");
    o.amp.dtype = *dtype;
  }
  if (a.fp8 == "none" || a.fp8 == "off") {
    fp8.reset();
  } else if (!a.fp8.empty()) {
    if (!fp8) fp8.emplace();
    fp8->recipe = a.fp8;
    fp8_from = "--fp8";
  }
  if (fp8) {
    amp::Fp8Recipe recipe;
    try {
      recipe = amp::parse_fp8_recipe(fp8->recipe);
    } catch (const amp::Fp8RecipeError& e) {
      throw UsageError(fp8_from + ": " + e.what());
    }
    o.fp8 = recipe;
    o.fp8_keep = fp8->keep;
    o.fp8_keep_from.assign(fp8->keep.size(), fp8_keep_from + ": \"keep\":");
    o.fp8_keep.insert(o.fp8_keep.end(), a.fp8_keep.begin(), a.fp8_keep.end());
    o.fp8_amax_group = a.fp8_amax_group;
  } else if (!a.fp8_keep.empty() || a.fp8_amax_group != 0) {
    throw UsageError(std::string(!a.fp8_keep.empty() ? "--fp8-keep" : "--fp8-amax-group") +
                     " applies to an fp8 run: give --fp8 RECIPE too");
  }
  sort_allowed(file.allow_inf, file, "--model: " + a.model + ": \"allow_inf\"", r);
  if (!a.config.empty()) sort_allowed(config_allow_inf, file, a.config + ": \"allow_inf\"", r);
  sort_allowed(a.allow_inf, file, "--allow-inf", r);
  o.amp.custom_white_list.insert(o.amp.custom_white_list.end(), a.white.begin(), a.white.end());
  o.amp.custom_black_list.insert(o.amp.custom_black_list.end(), a.black.begin(), a.black.end());
  try {
    const amp::Policy check(o.amp);  // list errors name the op before any training
  } catch (const amp::PolicyError& e) {
    throw UsageError(e.what());
  }
  const auto device = parse_device_request(a.device);
  if (!device) throw UsageError("--device \"" + a.device + "\" is not a device; use auto, cpu or cuda");
  // A GPU asked for by name and absent is a usage error; auto falls back with a notice.
  // MXFP8's block-scaled GEMMs are emulated on the CPU only (kernels/fp8_gemm_kernels.h).
  const bool block_scaled = o.fp8 && std::holds_alternative<amp::MXFP8BlockScaling>(*o.fp8);
  if (block_scaled && *device == DeviceRequest::cuda)
    throw UsageError("--device cuda: " + amp::to_string(*o.fp8) + " trains on the CPU (--device cpu): ampcheck's GPU "
                     "backend runs Hopper's per-tensor fp8 GEMMs (DelayedScaling, Float8CurrentScaling), not "
                     "Blackwell's block-scaled ones");
  try {
    std::ostringstream notices;
    r.options.device = resolve_device(block_scaled ? DeviceRequest::cpu : *device, notices);
    r.device_notice = notices.str();
    std::ostringstream unused;
    if (block_scaled && *device == DeviceRequest::any && resolve_device(DeviceRequest::any, unused) == Device::cuda)
      r.device_notice += "ampcheck: note: " + amp::to_string(*o.fp8) +
                         " runs on the CPU (its block-scaled GEMMs are emulated there, not on the GPU)\n";
    if (r.onnx && !r.onnx->check_note.empty()) r.device_notice += "ampcheck: note: " + a.model + ": " + r.onnx->check_note + "\n";
  } catch (const DeviceError& e) {
    throw UsageError(e.what());  // it names --device cuda itself
  }
  if (a.cupti != "on" && a.cupti != "off")
    throw UsageError("--cupti \"" + a.cupti + "\" is not a choice; use on (trace the GPU kernels) or off");
  r.cupti = a.cupti == "on" && r.options.device == Device::cuda;
  return r;
}

models::RunOptions with_level(models::RunOptions o, amp::Level level) {
  o.amp.level = level;
  return o;
}

reports::RunInfo run_info(const std::string& command, const RunArgs& a, const Resolved& r,
                          const models::RunResult& result, const std::string& inspect) {
  const models::RunOptions& o = r.options;
  reports::RunInfo info;
  info.command = command;
  info.model = o.model;
  info.model_description = result.description;
  info.parameters = result.parameters;
  info.level = std::string(amp::level_name(o.amp.level));
  info.dtype = o.amp.level == amp::Level::O0 ? "float32" : inspector::dtype_text(o.amp.dtype);
  info.device = std::string(device_name(o.device));
  info.seed = o.seed;
  info.steps = o.steps;
  info.batch = result.batch;
  if (result.fixed_batch) info.fixed_batch = result.batch / std::max(1, result.world);
  info.lr = result.lr;
  info.optimizer = result.optimizer;
  info.inspect = inspect;
  info.amp.semantics = r.semantics;
  info.amp.config_file = a.config;
  info.amp.custom_white_list = o.amp.custom_white_list;
  info.amp.custom_black_list = o.amp.custom_black_list;
  info.amp.fp32_modules = o.amp.fp32_modules;
  info.amp.loss_scaling = result.scaling;
  info.amp.init_loss_scaling = result.steps.empty() ? result.final_scale : result.steps.front().loss_scale;
  info.versions = {AMPCHECK_VERSION, cuda_build_description(), reports::kCpuPathsAlike};
  if (o.device == Device::cuda)
    if (const auto m = device_memory_stats())
      info.device_memory = reports::DeviceMemory{m->allocated_bytes.peak, m->reserved_bytes.peak, m->raw_allocs,
                                                 m->cache_hits,           m->cache_misses,        m->oom_retries};
  return info;
}

amp::AmpOptions amp_options_of(const std::string& config, const std::string& level, const std::string& dtype,
                               const std::vector<std::string>& white, const std::vector<std::string>& black) {
  amp::AmpOptions o;
  if (!config.empty()) {
    try {
      o = amp::load_config(config).amp;
    } catch (const amp::ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  if (!level.empty()) {
    const auto parsed = amp::parse_level(level);
    if (!parsed) throw UsageError("--level \"" + level + "\" is not an AMP level; use O0, O1, O2 or O3");
    o.level = *parsed;
  }
  if (!dtype.empty()) {
    try {
      o.dtype = parse_dtype(dtype);
    } catch (const DTypeError& e) {
      throw UsageError(std::string("--dtype: ") + e.what());
    }
  }
  o.custom_white_list.insert(o.custom_white_list.end(), white.begin(), white.end());
  o.custom_black_list.insert(o.custom_black_list.end(), black.begin(), black.end());
  return o;
}

void check_output(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  try {
    reports::check_writable_target(path);
  } catch (const reports::WriteError& e) {
    throw UsageError(option + ": " + e.what());
  }
}

void write_output(const std::string& option, const std::string& path, const std::string& content) {
  if (dist::launched_by_mpi() && dist::world().rank() != 0) return;  // rank 0 writes the job's files
  const ReportWrite whole;  // a second Ctrl-C meanwhile waits for this file to be in place
  try {
    reports::write_file_atomically(path, content);
  } catch (const reports::WriteError& e) {
    throw UsageError(option + ": " + e.what());
  }
}

Progress::Progress(std::ostream& err, bool quiet, std::string label, std::int64_t total)
    : err_(err), enabled_(!quiet && &err == &std::cerr && isatty(STDERR_FILENO)), label_(std::move(label)), total_(total) {}

Progress::~Progress() { done(); }

void Progress::update(std::int64_t n, const std::string& text) {
  if (!enabled_) return;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * n / total_) : kWidth;
  err_ << fmt::format("\r{} [{:#<{}}{:.<{}}] {}/{} {}\x1b[K", label_, "", filled, "", kWidth - filled, n, total_, text)
       << std::flush;
  open_ = true;
}

void Progress::done() {
  if (open_) err_ << "\r\x1b[K" << std::flush;
  open_ = false;
}

}  // namespace ampcheck::cli
