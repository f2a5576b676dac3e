// The inspector's overhead: one O1 fp16 training step of the MLP sample with the
// inspector off, in trace, stats and full mode, interleaved in one run; the summary
// prints each mode's step time as a ratio to off. With --device=cuda the step runs on GPU
// 0 and the rows are off, trace, and trace, stats and full with CUPTI tracing the kernels
// (the goal: trace with CUPTI within 1.05x of off).
//
//   ampcheck_bench_inspector [--device=cpu|cuda] [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>  // Google Benchmark: State, RegisterBenchmark

#include <cstdint>
#include <cstdio>
#include <string>

#include "bench/median_reporter.h"
#include "engine/amp/decorate.h"
#include "engine/device.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/optim/optimizer.h"
#include "inspector/inspector.h"
#include "kernels/cuda/cuda.h"
#include "models/data.h"
#include "samples/models.h"

namespace {

using namespace ampcheck;
using inspector::Mode;

constexpr Mode kModes[] = {Mode::off, Mode::trace, Mode::stats, Mode::full};
constexpr std::int64_t kSampledEvery = 10;  // the sampling option that bounds full's cost

Device g_device = Device::cpu;

std::string run_name(Mode m, std::int64_t every = 1, bool cupti = false) {
  return "inspector/" + std::string(inspector::mode_name(m)) + (every > 1 ? "_every" + std::to_string(every) : "") +
         (cupti ? "_cupti" : "");
}

void bm_step(benchmark::State& state, Mode mode, std::int64_t every, bool cupti) {
  Generator gen(0);
  samples::Mlp model(2, 256, 3, gen);
  models::Dataset data = models::spiral(86, 3, 0.2, 1);  // 258 points
  if (g_device == Device::cuda) {
    model.to(Device::cuda);
    data.x = data.x.to(Device::cuda);
    data.y = data.y.to(Device::cuda);
  }
  optim::Adam opt(model.named_parameters(), 1e-3);
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  const amp::Policy policy(o);
  amp::GradScaler scaler;
  inspector::InspectorOptions io;
  io.mode = mode;
  io.sampler = inspector::Sampler(every);
  io.shadow_every = every;
  io.cupti = cupti;
  inspector::Inspector insp(io);
  insp.attach();
  if (cupti && insp.kernels() == nullptr) {
    state.SkipWithError(("CUPTI not running: " + insp.kernels_not_traced()).c_str());
    return;
  }
  auto step = [&] {
    begin_step();
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast on(&policy);
      loss = cross_entropy(model(data.x), data.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    const double value = loss.item();  // the step a user writes ends with loss.item(): the GPU is done
    end_step();
    return value;
  };
  step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  insp.detach();
}

class SummaryReporter : public ampcheck::bench::MedianReporter {
  void summary() override {
    const double off = seconds(run_name(Mode::off));
    std::printf("\nInspector overhead, MLP 2-256-256-3, batch 258, O1 fp16 step on %s (ratio to off):\n",
                std::string(device_name(g_device)).c_str());
    auto row = [&](const std::string& label, const std::string& run) {
      if (has(run)) std::printf("%-26s %10.3f ms %8.2fx\n", label.c_str(), seconds(run) * 1e3, off > 0 ? seconds(run) / off : 0.0);
    };
    for (Mode m : kModes) row(std::string(inspector::mode_name(m)), run_name(m));
    row("full, every " + std::to_string(kSampledEvery) + " steps", run_name(Mode::full, kSampledEvery));
    for (Mode m : kModes) row(std::string(inspector::mode_name(m)) + " + CUPTI", run_name(m, 1, true));
  }
};

}  // namespace

int main(int argc, char** argv) {
  // --device=cpu|cuda is ours; the rest is Google Benchmark's.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--device=", 0) == 0) {
      const auto d = parse_device_request(arg.substr(9));
      if (!d || *d == DeviceRequest::any) {
        std::fprintf(stderr, "ampcheck_bench_inspector: --device=%s: give cpu or cuda\n", arg.substr(9).c_str());
        return 2;
      }
      g_device = *d == DeviceRequest::cuda ? Device::cuda : Device::cpu;
      if (g_device == Device::cuda && kernels::cuda::probe().device_count == 0) {
        std::fprintf(stderr, "ampcheck_bench_inspector: --device=cuda: no GPU (%s)\n",
                     kernels::cuda::probe().why_none.c_str());
        return 2;
      }
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  const bool gpu = g_device == Device::cuda;
  for (Mode m : kModes) {
    // Full mode on every step recomputes each op in f64 on the GPU (the shadow): measured
    // where it is used, sampled (--inspect-every, below).
    if (gpu && m == Mode::full) continue;
    benchmark::RegisterBenchmark(run_name(m).c_str(), bm_step, m, 1, false)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  if (gpu) {
    for (Mode m : {Mode::trace, Mode::stats})
      benchmark::RegisterBenchmark(run_name(m, 1, true).c_str(), bm_step, m, 1, true)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
  // Full mode every kSampledEvery steps (the aim: <= 1.5x of the plain step); its
  // statistics are reduced on the device and read back once per step.
  benchmark::RegisterBenchmark(run_name(Mode::full, kSampledEvery).c_str(), bm_step, Mode::full, kSampledEvery, false)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
