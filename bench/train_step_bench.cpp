// One training step (forward, cross-entropy, backward, Adam step) of each sample model
// at a realistic size, in f32 and with f16 storage, beside OpenBLAS sgemm on a square
// 1024^3 product in the same run. The closing table prints each model's time per step,
// its GFLOP/s and that rate as a fraction of sgemm's: how much of the GEMM ceiling the
// engine's step reaches.
//
// FLOP counting: only the GEMM-shaped work, counted as 2*M*N*K per product — the Linear
// layers, the convolutions (as their im2col GEMMs: M = C_out, N = OH*OW per sample, K =
// C_in*kH*kW) and the two attention products (Q K^T and softmax(.) V, per batch and
// head). A training step counts 3x its forward: the backward runs two GEMMs of the same
// size per product (the input gradient and the weight gradient; the engine computes the
// input gradient of the first layer too). Elementwise ops, norms, softmax, the loss and
// the optimizer are not counted, so the figures are a floor on the arithmetic done.
//
// f16 storage: AMP O2 as a user runs it (amp::decorate: f16 parameters except the
// norms', f32 masters; amp::Autocast; dynamic loss scaling): f16 activations, every op
// computing in f32, the casts and the master updates inside the timed step.
//
//   ampcheck_bench_train [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>  // Google Benchmark: State, RegisterBenchmark, reporters
#include <cblas.h>                // cblas_sgemm (OpenBLAS)

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/median_reporter.h"
#include "engine/amp/decorate.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel.h"
#include "models/data.h"
#include "samples/models.h"

namespace {

using namespace ampcheck;
using i64 = std::int64_t;

double gemm_flops(i64 m, i64 n, i64 k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}
// A conv's im2col GEMMs over a batch: [C_out, C_in*kh*kw] x [C_in*kh*kw, OH*OW] per sample.
double conv_flops(i64 batch, i64 c_in, i64 c_out, i64 k, i64 out_hw) {
  return static_cast<double>(batch) * gemm_flops(c_out, out_hw * out_hw, c_in * k * k);
}

// ---- the three configurations ----

struct Config {
  const char* name;
  std::function<std::unique_ptr<nn::Module>(Generator&)> build;
  std::function<models::Dataset()> data;
  double forward_flops;
};

// MLP 2 -> 512 -> 512 -> 3, batch 512.
constexpr i64 kMlpBatch = 512, kMlpHidden = 512;
double mlp_forward_flops() {
  return gemm_flops(kMlpBatch, kMlpHidden, 2) + gemm_flops(kMlpBatch, kMlpHidden, kMlpHidden) +
         gemm_flops(kMlpBatch, 3, kMlpHidden);
}

// SmallCnn, width 32, two blocks, 10 classes, on 3x32x32 images, batch 64.
constexpr i64 kCnnBatch = 64, kCnnWidth = 32, kCnnSize = 32, kCnnClasses = 10;
double cnn_forward_flops() {
  const i64 b = kCnnBatch, w = kCnnWidth, s = kCnnSize;
  return conv_flops(b, 3, w, 3, s)                                   // stem
         + 2 * conv_flops(b, w, w, 3, s)                             // block1: conv1, conv2
         + conv_flops(b, w, 2 * w, 3, s / 2)                         // block2.conv1, stride 2
         + conv_flops(b, 2 * w, 2 * w, 3, s / 2)                     // block2.conv2
         + conv_flops(b, w, 2 * w, 1, s / 2)                         // block2 shortcut, 1x1
         + gemm_flops(b, kCnnClasses, 2 * w);                        // head
}

// TinyTransformer T = 64, D = 128, 4 heads, feed-forward 512, batch 32, vocab 1000.
constexpr i64 kTfBatch = 32, kTfLen = 64, kTfDim = 128, kTfHeads = 4, kTfFfn = 512, kTfVocab = 1000;
double transformer_forward_flops() {
  const i64 rows = kTfBatch * kTfLen, dh = kTfDim / kTfHeads;
  return 4 * gemm_flops(rows, kTfDim, kTfDim)                            // q, k, v, out
         + 2 * static_cast<double>(kTfBatch * kTfHeads) * gemm_flops(kTfLen, kTfLen, dh)  // QK^T, AV
         + gemm_flops(rows, kTfFfn, kTfDim) + gemm_flops(rows, kTfDim, kTfFfn)  // ff1, ff2
         + gemm_flops(kTfBatch, 2, kTfDim);                                // head
}

std::vector<Config> configs() {
  return {
      {"mlp", [](Generator& g) { return std::make_unique<samples::Mlp>(2, kMlpHidden, 3, g); },
       [] { return models::batch(models::spiral(kMlpBatch / 3 + 1, 3, 0.2, 1), 0, kMlpBatch); },
       mlp_forward_flops()},
      {"cnn",
       [](Generator& g) { return std::make_unique<samples::SmallCnn>(3, kCnnClasses, g, kCnnWidth, 2); },
       [] { return models::images(kCnnBatch, kCnnClasses, 3, kCnnSize, 1); }, cnn_forward_flops()},
      {"transformer",
       [](Generator& g) {
         return std::make_unique<samples::TinyTransformer>(kTfVocab, kTfLen, kTfDim, kTfHeads, kTfFfn, 2, g);
       },
       [] { return models::sequences(kTfBatch, kTfLen, kTfVocab, 1); }, transformer_forward_flops()},
  };
}

void bm_train_step(benchmark::State& state, const Config& config, DType dtype) {
  Generator gen(0);
  std::unique_ptr<nn::Module> model = config.build(gen);
  models::Dataset data = config.data();
  optim::Adam opt(model->named_parameters(), 1e-3);
  // f16: AMP O2 as a user runs it: f16 parameters (norms f32), f32 masters, autocast,
  // dynamic loss scaling. f32: the plain step.
  amp::AmpOptions o;
  o.level = dtype == DType::f32 ? amp::Level::O0 : amp::Level::O2;
  o.dtype = DType::f16;
  amp::decorate(*model, &opt, o);
  const amp::Policy policy(o);
  amp::GradScaler scaler(dtype == DType::f32 ? amp::ScalingOptions{amp::StaticScaling{1.0}}
                                             : amp::ScalingOptions{amp::TorchScaling{}});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast on(dtype == DType::f32 ? nullptr : &policy);
      loss = cross_entropy((*model)(data.x), data.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  step();  // outside the timing: Adam allocates its moments on the first step
  for (auto _ : state) {
    Tensor loss = step();
    benchmark::DoNotOptimize(loss);
  }
  state.counters["FLOP"] = benchmark::Counter(3.0 * config.forward_flops,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

constexpr int kSgemmSize = 1024;

void bm_sgemm(benchmark::State& state) {
  const int n = kSgemmSize;
  Generator gen(0);
  const Tensor a = Tensor::uniform({n, n}, gen, -1, 1), b = Tensor::uniform({n, n}, gen, -1, 1);
  Tensor c = Tensor::zeros({n, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
                b.data<float>(), n, 0.0f, c.data<float>(), n);
    benchmark::DoNotOptimize(c.data<float>());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP"] =
      benchmark::Counter(gemm_flops(n, n, n), benchmark::Counter::kIsIterationInvariantRate);
}

std::string run_name(const Config& c, DType dtype) {
  return std::string("train_step/") + c.name + "/" + std::string(name(dtype));
}
const char* const kSgemmName = "sgemm/1024";

// A closing table: time per step, GFLOP/s and the fraction of sgemm's GFLOP/s.
class SummaryReporter : public ampcheck::bench::MedianReporter {
  void summary() override {
    const double ceiling = counter(kSgemmName, "FLOP");
    std::printf("\nThreads: %d. OpenBLAS sgemm %dx%dx%d: %.1f GFLOP/s\n", num_threads(),
                kSgemmSize, kSgemmSize, kSgemmSize, ceiling / 1e9);
    std::printf("%-12s %-6s %12s %14s %10s %12s\n", "model", "dtype", "ms/step", "GFLOP/step",
                "GFLOP/s", "of sgemm");
    for (const Config& c : configs()) {
      for (DType dtype : {DType::f32, DType::f16}) {
        const std::string run = run_name(c, dtype);
        if (!has(run)) continue;
        const double flops = counter(run, "FLOP");
        std::printf("%-12s %-6s %12.2f %14.3f %10.1f %12.2f\n", c.name,
                    std::string(name(dtype)).c_str(), seconds(run) * 1e3, 3.0 * c.forward_flops / 1e9,
                    flops / 1e9, ceiling > 0 ? flops / ceiling : 0.0);
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark(kSgemmName, bm_sgemm)->Unit(benchmark::kMillisecond)->UseRealTime();
  static const std::vector<Config> kConfigs = configs();
  for (const Config& c : kConfigs)
    for (DType dtype : {DType::f32, DType::f16})
      benchmark::RegisterBenchmark(run_name(c, dtype).c_str(), bm_train_step, c, dtype)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
