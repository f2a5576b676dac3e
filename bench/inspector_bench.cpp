// The inspector's overhead: one O1 fp16 training step of the MLP sample with the
// inspector off, in trace, stats and full mode, interleaved in one run; the summary
// prints each mode's step time as a ratio to off.
//
//   ampcheck_bench_inspector [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>  // Google Benchmark: State, RegisterBenchmark

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

std::string run_name(Mode m) { return "inspector/" + std::string(inspector::mode_name(m)); }

void bm_step(benchmark::State& state, Mode mode) {
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
    for (Mode m : kModes)
      if (has(run_name(m)))
        std::printf("%-6s %10.3f ms %8.2fx\n", std::string(inspector::mode_name(m)).c_str(), seconds(run_name(m)) * 1e3,
                    off > 0 ? seconds(run_name(m)) / off : 0.0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (Mode m : kModes)
    benchmark::RegisterBenchmark(run_name(m).c_str(), bm_step, m)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
