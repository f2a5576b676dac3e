// Conversion throughput, f32 <-> f16 and f32 <-> bf16, for the scalar and every vector
// path this CPU runs, beside memcpy of the same bytes, in one run. Throughput counts
// bytes moved (read + written), so a conversion and a memcpy compare directly: the
// summary prints each path as a fraction of memcpy at the same working-set size.
//
//   ampcheck_bench_convert [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>  // Google Benchmark: State, RegisterBenchmark

#include <cstdio>
#include <cstring>  // std::memcpy
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/median_reporter.h"
#include "engine/dtype/convert.h"
#include "kernels/cpu/convert.h"

namespace {

namespace cpu = ampcheck::kernels::cpu;

struct Direction {
  const char* name;
  bool from_f32;  // f32 -> 16-bit, else 16-bit -> f32
  bool bf16;
};
constexpr Direction kDirections[] = {{"f32->f16", true, false},
                                     {"f16->f32", false, false},
                                     {"f32->bf16", true, true},
                                     {"bf16->f32", false, true}};

// Sizes: one working set that sits in L2, one far beyond the last-level cache.
constexpr std::size_t kSizes[] = {std::size_t{1} << 15, std::size_t{1} << 24};

std::vector<float> random_floats(std::size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void bm_convert(benchmark::State& state, Direction dir, cpu::Isa isa) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> f32 = random_floats(n);
  std::vector<std::uint16_t> h(n);
  (dir.bf16 ? cpu::f32_to_bf16 : cpu::f32_to_f16)(f32.data(), h.data(), n, cpu::Isa::scalar);
  for (auto _ : state) {
    if (dir.from_f32)
      (dir.bf16 ? cpu::f32_to_bf16 : cpu::f32_to_f16)(f32.data(), h.data(), n, isa);
    else
      (dir.bf16 ? cpu::bf16_to_f32 : cpu::f16_to_f32)(h.data(), f32.data(), n, isa);
    benchmark::DoNotOptimize(h.data());
    benchmark::DoNotOptimize(f32.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 6));
}

// memcpy of the f32 side of the same conversion: the bandwidth ceiling to compare with.
void bm_memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> a = random_floats(n), b(n);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 8));
}

std::string run_name(const Direction& d, cpu::Isa isa) {
  return std::string(d.name) + "/" + std::string(cpu::isa_name(isa));
}

// A closing table: each path's bytes/s over memcpy's at the same size.
class SummaryReporter : public ampcheck::bench::MedianReporter {
  void summary() override {
    std::printf("\nThroughput as a fraction of memcpy (bytes read + written per second):\n");
    std::printf("%-10s %-12s %12s %12s\n", "direction", "path", "L2 (32Ki)", "DRAM (16Mi)");
    for (const Direction& d : kDirections) {
      for (int i = 0; i < cpu::kIsaCount; ++i) {
        const auto isa = static_cast<cpu::Isa>(i);
        if (!cpu::isa_supported(isa)) continue;
        std::printf("%-10s %-12s", d.name, std::string(cpu::isa_name(isa)).c_str());
        for (std::size_t n : kSizes) {
          const double conv = counter(run_name(d, isa) + "/" + std::to_string(n), "bytes_per_second");
          const double copy = counter("memcpy/" + std::to_string(n), "bytes_per_second");
          std::printf(" %12.2f", copy > 0 ? conv / copy : 0.0);
        }
        std::printf("\n");
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (std::size_t n : kSizes) {
    benchmark::RegisterBenchmark("memcpy", bm_memcpy)->Arg(static_cast<std::int64_t>(n));
    for (const Direction& d : kDirections)
      for (int i = 0; i < cpu::kIsaCount; ++i) {
        const auto isa = static_cast<cpu::Isa>(i);
        if (!cpu::isa_supported(isa)) continue;
        benchmark::RegisterBenchmark(run_name(d, isa).c_str(), bm_convert, d, isa)
            ->Arg(static_cast<std::int64_t>(n));
      }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  std::printf("CPU conversion path in use: %s\n",
              std::string(ampcheck::conversion_isa_name()).c_str());
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
