// ampcheck's CPU GEMM (kernels/cpu/gemm.h, through kernels::cpu::gemm, as the ops call it) against
// OpenBLAS sgemm, interleaved: for every shape, rounds alternate the two (and, when the
// CPU has them, ampcheck's avx2 and scalar paths), each timing a block of calls long
// enough to read, and the table gives the median time per call and OpenBLAS's time over
// ampcheck's (>= 1: ampcheck is as fast or faster). The shapes are those the samples'
// training steps call most (collected from their steps: mlp, cnn, mobilenet,
// transformer; N = no transpose, T = transposed, +C = accumulate into C) and square
// products up to 1024.
//
//   ampcheck_bench_gemm [--threads N] [--blas-threads N] [--rounds R] [--square-only] [--best-path-only]
//                       [--filter TEXT]
//   OPENBLAS_CORETYPE=Haswell ampcheck_bench_gemm   (OpenBLAS's kernel set for another CPU)
#include <cblas.h>  // cblas_sgemm, openblas_set_num_threads, openblas_get_corename (OpenBLAS)

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/device.h"        // cpu_gemm_isa, cpu_features
#include "kernels/cpu/tensor_io.h"  // kernels::cpu::gemm with the threading the ops use
#include "engine/parallel.h"      // set_num_threads
#include "kernels/cpu/gemm.h"     // gemm_plan/gemm_tiles for the forced paths

namespace {

using namespace ampcheck;
using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

struct GemmShape {
  const char* from;
  bool ta, tb, accumulate;
  i64 m, n, k;
};

// The samples' most called GEMMs (of 3 steps each), then squares.
const std::vector<GemmShape> kSampleShapes = {
    {"mlp fc fwd", false, true, false, 60, 64, 64},
    {"mlp fc dx", false, false, false, 60, 64, 64},
    {"mlp fc dW", true, false, false, 64, 64, 60},
    {"cnn conv3x3 fwd", false, false, false, 8, 256, 72},
    {"cnn conv dx", true, false, false, 72, 256, 8},
    {"cnn conv dW", false, true, true, 8, 72, 256},
    {"mobilenet dw fwd", false, false, false, 1, 16, 9},
    {"mobilenet dw fwd", false, false, false, 1, 64, 9},
    {"mobilenet pw fwd", false, false, false, 24, 64, 8},
    {"mobilenet pw fwd", false, false, false, 48, 16, 12},
    {"transformer bmm", false, false, false, 8, 8, 16},
    {"transformer bmm", false, false, false, 8, 16, 8},
    {"transformer qkv", false, true, false, 512, 32, 32},
    {"transformer dW", true, false, false, 32, 32, 512},
    {"transformer ffn", false, true, false, 512, 64, 32},
    {"transformer head", false, true, false, 4096, 32, 32},
};
const std::vector<GemmShape> kSquares = {
    {"square", false, false, false, 128, 128, 128},
    {"square", false, false, false, 256, 256, 256},
    {"square", false, false, false, 512, 512, 512},
    {"square", false, false, false, 1024, 1024, 1024},
};

struct Operands {
  std::vector<float> a, b, c;
  i64 lda, ldb, ldc;
};

Operands operands(const GemmShape& s) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  Operands o;
  o.lda = s.ta ? s.m : s.k;
  o.ldb = s.tb ? s.k : s.n;
  o.ldc = s.n;
  o.a.resize(static_cast<std::size_t>(s.m * s.k));
  o.b.resize(static_cast<std::size_t>(s.k * s.n));
  o.c.resize(static_cast<std::size_t>(s.m * s.n));
  for (float& x : o.a) x = u(rng);
  for (float& x : o.b) x = u(rng);
  for (float& x : o.c) x = u(rng);
  return o;
}

// Seconds per call of f, over a block of calls of about `target` seconds.
template <typename F>
double time_block(F&& f, i64 calls) {
  const auto t0 = Clock::now();
  for (i64 i = 0; i < calls; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(calls);
}

template <typename F>
i64 calls_for(F&& f, double target) {
  i64 calls = 1;
  for (;;) {
    const double t = time_block(f, calls) * static_cast<double>(calls);
    if (t >= target / 4 || calls > (i64{1} << 26)) return std::max<i64>(1, static_cast<i64>(static_cast<double>(calls) * target / std::max(t, 1e-9)));
    calls *= 4;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 7, blas_threads = -1;
  bool square_only = false, other_paths = true;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--blas-threads" && i + 1 < argc) {
      blas_threads = std::atoi(argv[++i]);
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--square-only") {
      square_only = true;
    } else if (arg == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (arg == "--best-path-only") {
      other_paths = false;
    } else {
      std::fprintf(stderr, "usage: ampcheck_bench_gemm [--threads N] [--blas-threads N] [--rounds R] [--square-only] [--best-path-only] [--filter TEXT]\n");
      return 2;
    }
  }
  if (threads < 1 || rounds < 1) {
    std::fprintf(stderr, "ampcheck_bench_gemm: --threads and --rounds must be at least 1\n");
    return 2;
  }
  set_num_threads(threads);
  // Both libraries' idle threads spin for a while after a call: with as many threads as
  // cores each steals the other's cores, so time them on separate runs when threads > 1
  // (--blas-threads 1 keeps OpenBLAS's out of the way of ampcheck's, and the reverse).
  if (blas_threads < 1) blas_threads = threads;
  openblas_set_num_threads(blas_threads);
  const CpuFeatures& cpu = cpu_features();
  std::printf("CPU: %s; threads: ampcheck %d, OpenBLAS %d; rounds: %d (interleaved)\n", cpu.brand.c_str(), threads,
              blas_threads, rounds);
  std::printf("ampcheck GEMM: %s path; OpenBLAS: %s, core %s\n\n",
              std::string(kernels::cpu::gemm_isa_name(cpu_gemm_isa())).c_str(), openblas_get_config(),
              openblas_get_corename());

  // The paths to time besides the best one: each other path this CPU runs, single call
  // of the kernel's own tiles on the calling thread (threads apply to the best path).
  std::vector<kernels::cpu::GemmIsa> others;
  for (auto isa : {kernels::cpu::GemmIsa::avx2, kernels::cpu::GemmIsa::scalar})
    if (other_paths && isa != cpu_gemm_isa() && kernels::cpu::gemm_isa_supported(isa)) others.push_back(isa);

  std::printf("%-18s %-5s %5s %5s %5s %12s %12s %9s %9s", "shape", "op", "m", "n", "k", "ampcheck us",
              "OpenBLAS us", "GFLOP/s", "OB/ours");
  for (auto isa : others) std::printf(" %10s", (std::string(kernels::cpu::gemm_isa_name(isa)) + " us").c_str());
  std::printf("\n");

  std::vector<GemmShape> shapes = square_only ? std::vector<GemmShape>{} : kSampleShapes;
  shapes.insert(shapes.end(), kSquares.begin(), kSquares.end());
  for (const GemmShape& s : shapes) {
    if (!filter.empty() && std::string(s.from).find(filter) == std::string::npos) continue;
    Operands o = operands(s);
    auto ours = [&] {
      kernels::cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc, s.accumulate);
    };
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, o.a.data(),
                  static_cast<int>(o.lda), o.b.data(), static_cast<int>(o.ldb), s.accumulate ? 1.0f : 0.0f,
                  o.c.data(), static_cast<int>(o.ldc));
    };
    std::vector<std::function<void()>> forced;
    for (auto isa : others)
      forced.emplace_back([&, isa] {
        kernels::cpu::GemmArgs<float> g;
        g.trans_a = s.ta, g.trans_b = s.tb, g.m = s.m, g.n = s.n, g.k = s.k;
        g.a = o.a.data(), g.lda = o.lda, g.b = o.b.data(), g.ldb = o.ldb, g.c = o.c.data(), g.ldc = o.ldc;
        g.accumulate = s.accumulate;
        kernels::cpu::gemm(g, isa);
      });
    // Accumulating shapes grow C without bound: keep it finite by resetting each block.
    const std::vector<float> c0 = o.c;
    const double target = 0.02;
    const i64 n_ours = calls_for(ours, target), n_blas = calls_for(blas, target);
    std::vector<i64> n_forced;
    for (auto& f : forced) n_forced.push_back(calls_for(f, target));
    std::vector<double> t_ours, t_blas;
    std::vector<std::vector<double>> t_forced(forced.size());
    for (int r = 0; r < rounds; ++r) {
      // Alternate which goes first, so that neither always runs on a warmer cache.
      if (r % 2 == 0) {
        o.c = c0, t_ours.push_back(time_block(ours, n_ours));
        o.c = c0, t_blas.push_back(time_block(blas, n_blas));
      } else {
        o.c = c0, t_blas.push_back(time_block(blas, n_blas));
        o.c = c0, t_ours.push_back(time_block(ours, n_ours));
      }
      for (std::size_t f = 0; f < forced.size(); ++f) o.c = c0, t_forced[f].push_back(time_block(forced[f], n_forced[f]));
    }
    const double mo = median(t_ours), mb = median(t_blas);
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const std::string op = std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N") + (s.accumulate ? "+C" : "");
    std::printf("%-18s %-5s %5lld %5lld %5lld %12.3f %12.3f %9.1f %9.2f", s.from, op.c_str(),
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), mo * 1e6,
                mb * 1e6, flops / mo / 1e9, mb / mo);
    for (auto& t : t_forced) std::printf(" %10.3f", median(t) * 1e6);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
