// ampcheck's side of bench/peers: one sample model file trained step by step, timed per
// step, driven over stdin so the peer script can interleave it with PyTorch and
// PaddlePaddle workers in one run. The step is the one `ampcheck run --inspect off`
// trains (models::Trainer::step: the batch, zero_grad, forward and loss under
// autocast, scaled backward, the scaler's unscale and check, the optimizer step, the
// scaler update, loss.item()).
//
//   ampcheck_bench_peer_step --model mlp --level O1 --dtype bfloat16 --scaler none
//   ampcheck_bench_peer_step --model resnet18.onnx --data resnet18.npz --loss cross_entropy --batch 16
//   stdin:  "steps K"   -> stdout: {"ms": [t1, ..., tK]}   (one line per command)
//
// --inspect trace|stats|full attaches the inspector in that mode for the whole run, as
// `ampcheck run --inspect MODE` does (its cost is then part of each step's time).
// --device cuda trains on GPU 0 (each step ends with loss.item(), so its time is the GPU's too).
// --scaler dynamic is PyTorch's GradScaler behaviour at its defaults; none is a static
// scale of 1 (what a bf16 user runs). O0 always runs unscaled.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/dtype/dtype.h"
#include "engine/parallel.h"
#include "inspector/inspector.h"
#include "models/runner.h"
#include "samples/builtin_models.h"

namespace {

using namespace ampcheck;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "ampcheck_bench_peer_step: %s\nusage: ampcheck_bench_peer_step --model NAME|FILE [--level O0|O1|O2] "
               "[--dtype float16|bfloat16] [--scaler dynamic|none] [--threads N] [--seed N] [--device cpu|cuda] "
               "[--data FILE] [--loss cross_entropy|mse] [--batch N] [--inspect off|trace|stats|full] [--inspect-every N]\n",
               why.c_str());
  std::exit(2);
}

struct Options {
  models::RunOptions run;
  inspector::Mode inspect = inspector::Mode::off;
  std::int64_t inspect_every = 1;  // full mode's sampling, as `ampcheck run --inspect-every`
};

Options parse(int argc, char** argv) {
  std::map<std::string, std::string> args{{"--model", "mlp"},     {"--level", "O0"},  {"--dtype", "float16"},
                                          {"--scaler", "dynamic"}, {"--threads", "0"}, {"--seed", "0"},
                                          {"--device", "cpu"},      {"--data", ""},     {"--loss", ""},
                                          {"--batch", "0"},        {"--inspect", "off"},  {"--inspect-every", "1"}};
  for (int i = 1; i < argc; i += 2) {
    if (!args.count(argv[i])) usage(std::string("unknown option ") + argv[i]);
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    args[argv[i]] = argv[i + 1];
  }
  Options options;
  const auto mode = inspector::parse_mode(args["--inspect"]);
  if (!mode) usage("--inspect " + args["--inspect"] + ": give off, trace, stats or full");
  options.inspect = *mode;
  options.inspect_every = std::stoll(args["--inspect-every"]);
  if (options.inspect_every < 1) usage("--inspect-every " + args["--inspect-every"] + ": give 1 or more");
  models::RunOptions& o = options.run;
  o.model = args["--model"];
  o.catalog = samples::builtin_models();
  o.seed = std::stoull(args["--seed"]);
  o.overrides.data = args["--data"];
  o.overrides.loss = args["--loss"];
  o.batch = std::stoll(args["--batch"]);
  const auto level = amp::parse_level(args["--level"]);
  if (!level) usage("--level " + args["--level"] + ": give O0, O1, O2 or O3");
  o.amp.level = *level;
  o.amp.dtype = parse_dtype(args["--dtype"]);
  if (args["--scaler"] == "none" || o.amp.level == amp::Level::O0)
    o.scaling = amp::StaticScaling{1.0};
  else if (args["--scaler"] != "dynamic")
    usage("--scaler " + args["--scaler"] + ": give dynamic or none");
  if (const int threads = std::stoi(args["--threads"]); threads > 0) set_num_threads(threads);
  if (args["--device"] == "cuda") o.device = Device::cuda;
  else if (args["--device"] != "cpu") usage("--device " + args["--device"] + ": give cpu or cuda");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    inspector::InspectorOptions io;
    io.mode = options.inspect;
    io.sampler = inspector::Sampler(options.inspect_every);
    io.shadow_every = options.inspect_every;
    io.trace.max_records = 0;  // as `ampcheck run` without --chrome-trace keeps none
    inspector::Inspector insp(io);
    models::Trainer trainer(options.run);
    if (options.inspect != inspector::Mode::off) insp.attach();
    std::string command;
    long steps = 0;
    while (std::cin >> command >> steps) {
      if (command != "steps" || steps <= 0) usage("stdin: expected \"steps K\" with K > 0, got \"" + command + "\"");
      std::string line = "{\"ms\": [";
      for (long i = 0; i < steps; ++i) {
        const auto start = std::chrono::steady_clock::now();
        trainer.step();
        const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
        line += (i ? ", " : "") + std::to_string(took.count());
      }
      std::cout << line << "]}" << std::endl;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ampcheck_bench_peer_step: %s\n", e.what());
    return 2;
  }
}
