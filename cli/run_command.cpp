#include "cli/run_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/exit_codes.h"
#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "inspector/inspector.h"
#include "samples/runner.h"

namespace ampcheck::cli {

namespace {

CLI::App* add_options(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand("run", "Train a sample under AMP with the inspector attached, then summarise");
  run->add_option("--model", o.model, "sample: mlp, cnn, transformer")->capture_default_str();
  run->add_option("--level", o.level, "AMP level: O0 (fp32), O1, O2, O3")->capture_default_str();
  run->add_option("--dtype", o.dtype, "low-precision dtype: float16 or bfloat16")->capture_default_str();
  run->add_option("--steps", o.steps, "training steps")->capture_default_str();
  run->add_option("--batch", o.batch, "batch size (default: the sample's)");
  run->add_option("--lr", o.lr, "Adam learning rate (default: the sample's)");
  run->add_option("--seed", o.seed, "seed of the model and data")->capture_default_str();
  run->add_option("--config", o.config, "AMP config (PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck JSON)");
  run->add_option("--white", o.white, "custom_white_list, comma separated")->delimiter(',');
  run->add_option("--black", o.black, "custom_black_list, comma separated")->delimiter(',');
  run->add_option("--inspect", o.inspect, "off, trace, stats, full")->capture_default_str();
  run->add_option("--log-level", o.log_level, "GLOG-style op log at 5 (default: GLOG_v)");
  return run;
}

int run_run(const RunOptions& o, std::ostream& out, std::ostream& err) {
  samples::RunOptions ro;
  ro.model = o.model;
  ro.steps = o.steps;
  ro.batch = o.batch;
  ro.lr = o.lr;
  ro.seed = o.seed;
  std::string semantics = "ampcheck";
  if (!o.config.empty()) {
    try {
      const amp::Config c = amp::load_config(o.config);
      ro.amp = c.amp;
      ro.scaling = c.scaling;
      semantics = std::string(amp::style_name(c.style));
    } catch (const amp::ConfigError& e) {
      throw UsageError(e.what());
    }
  } else {
    const auto level = amp::parse_level(o.level);
    if (!level) throw UsageError("--level \"" + o.level + "\" is not a level; use O0, O1, O2 or O3");
    ro.amp.level = *level;
    const auto dtype = try_parse_dtype(o.dtype);
    if (!dtype || !is_low_precision(*dtype))
      throw UsageError("--dtype \"" + o.dtype + "\": AMP runs in float16 or bfloat16");
    ro.amp.dtype = *dtype;
  }
  ro.amp.custom_white_list.insert(ro.amp.custom_white_list.end(), o.white.begin(), o.white.end());
  ro.amp.custom_black_list.insert(ro.amp.custom_black_list.end(), o.black.begin(), o.black.end());
  try {
    const amp::Policy check(ro.amp);  // list errors name the op before any training
  } catch (const amp::PolicyError& e) {
    throw UsageError(e.what());
  }

  inspector::InspectorOptions io;
  const auto mode = inspector::parse_mode(o.inspect);
  if (!mode) throw UsageError("--inspect \"" + o.inspect + "\" is not a mode; use off, trace, stats or full");
  io.mode = *mode;
  io.glog_level = o.log_level >= 0 ? o.log_level : inspector::glog_level_from_env();
  io.glog = &err;
  inspector::Inspector insp(io);

  samples::RunResult r;
  insp.attach();
  try {
    r = samples::run(ro);
  } catch (const std::invalid_argument& e) {
    insp.detach();
    throw UsageError(e.what());
  }
  insp.detach();

  const std::string level(amp::level_name(ro.amp.level));
  out << fmt::format("ampcheck run: {} ({} parameters)\n", r.description, r.parameters);
  out << fmt::format("  {} {}, {} semantics, {} steps, batch {}, Adam lr {}, seed {}\n", level,
                     ro.amp.level == amp::Level::O0 ? "float32" : std::string(info(ro.amp.dtype).long_name), semantics,
                     ro.steps, r.batch, r.lr, ro.seed);
  out << fmt::format("  loss {:.4f} -> {:.4f}, training accuracy {:.1f}%, skipped steps {} of {}, final loss scale {:g} ({})\n\n",
                     r.losses.front(), r.losses.back(), 100 * r.accuracy, r.skipped, ro.steps, r.final_scale,
                     r.scaling);
  out << insp.summary(8);

  // The verdict: is AMP really on, and is the run healthy.
  std::uint64_t low_calls = 0, all_calls = 0;
  if (const inspector::OpTrace* t = insp.trace())
    for (const auto& [op, calls] : t->op_stats()) {
      low_calls += calls.fp16 + calls.bf16;
      all_calls += calls.total();
    }
  const bool failed = insp.nan() && insp.nan()->report().failed();
  std::string verdict;
  if (failed)
    verdict = "FAILED: non-finite values or a collapsing loss scale (see the NaN/Inf report above)";
  else if (ro.amp.level == amp::Level::O0)
    verdict = "healthy fp32 reference run";
  else if (insp.trace() && low_calls == 0)
    verdict = "AMP is NOT on: no op ran in a low-precision dtype";
  else if (insp.trace())
    verdict = fmt::format("healthy: AMP is on ({} of {} op calls ran in {}), {} skipped step(s) absorbed by the scaler",
                          low_calls, all_calls, info(ro.amp.dtype).long_name, r.skipped);
  else
    verdict = "trained; run with --inspect trace or above to see whether AMP is on";
  out << "\nverdict: " << verdict << '\n';
  return failed ? kCheckFailed : kOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_run(*options, out, err); }};
}

}  // namespace ampcheck::cli
