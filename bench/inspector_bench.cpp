// The inspector's overhead: one O1 fp16 training step of the MLP sample with the
// inspector off, in trace, stats and full mode, interleaved in one run; the summary
// prints each mode's step time as a ratio to off.
//
//   ampcheck_bench_inspector [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>  // Google Benchmark: State, RegisterBenchmark

#include <cstdint>
#include <cstdio>
#include <string>

#include "bench/median_reporter.h"
#include "engine/amp/decorate.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/optim/optimizer.h"
#include "inspector/inspector.h"
#include "samples/data.h"
#include "samples/models.h"

namespace {

using namespace ampcheck;
using inspector::Mode;

constexpr Mode kModes[] = {Mode::off, Mode::trace, Mode::stats, Mode::full};
constexpr std::int64_t kSampledEvery = 10;  // the sampling option that bounds full's cost

std::string run_name(Mode m, std::int64_t every = 1) {
  return "inspector/" + std::string(inspector::mode_name(m)) + (every > 1 ? "_every" + std::to_string(every) : "");
}

void bm_step(benchmark::State& state, Mode mode, std::int64_t every) {
  Generator gen(0);
  samples::Mlp model(2, 256, 3, gen);
  const samples::Dataset data = samples::spiral(86, 3, 0.2, 1);  // 258 points
  optim::Adam opt(model.named_parameters(), 1e-3);
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  const amp::Policy policy(o);
  amp::GradScaler scaler;
  inspector::InspectorOptions io;
  io.mode = mode;
  io.sampler = inspector::Sampler(every);
  io.shadow_every = every;
  inspector::Inspector insp(io);
  insp.attach();
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
    end_step();
    return loss;
  };
  step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  insp.detach();
}

class SummaryReporter : public ampcheck::bench::MedianReporter {
  void summary() override {
    const double off = seconds(run_name(Mode::off));
    std::printf("\nInspector overhead, MLP 2-256-256-3, batch 258, O1 fp16 step (ratio to off):\n");
    auto row = [&](const std::string& label, const std::string& run) {
      if (has(run)) std::printf("%-22s %10.3f ms %8.2fx\n", label.c_str(), seconds(run) * 1e3, off > 0 ? seconds(run) / off : 0.0);
    };
    for (Mode m : kModes) row(std::string(inspector::mode_name(m)), run_name(m));
    row("full, every " + std::to_string(kSampledEvery) + " steps", run_name(Mode::full, kSampledEvery));
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (Mode m : kModes)
    benchmark::RegisterBenchmark(run_name(m).c_str(), bm_step, m, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark(run_name(Mode::full, kSampledEvery).c_str(), bm_step, Mode::full, kSampledEvery)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
