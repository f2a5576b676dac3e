// Why ampcheck has its own GEMM: OpenBLAS's summation order depends on the kernel set it
// picks for the CPU and on how its threads split the output. This probe runs one
// cblas_sgemm on 1 and on 2 threads and reports, per element, whether the two agree and
// whether each equals the sequential fma chain over k (ampcheck's definition,
// kernels/cpu/gemm.h), and where the deviating elements sit: by blocks of 8 columns and
// 16 rows. Run it under each kernel set:
//
//   for c in Haswell Zen SkylakeX Sandybridge; do OPENBLAS_CORETYPE=$c ampcheck_bench_blas_probe; done
//
// What it showed with OpenBLAS 0.3.21 (bench/results/2026-11-25-gemm-cpu-amd-epyc.md):
// the Haswell/Zen kernels sum the elements of the first and last 8 columns of each
// column range they are handed in another order than the rest; the threaded driver
// hands each thread its own range, so a second thread moves those edges into the middle
// of the matrix (columns 56-71 of 128) and the bits of ~14% of the outputs change.
// SkylakeX runs these shapes through its single-threaded small-matrix kernels, which sum
// every element in k order: the tests that compared 1 and 2 threads passed only there.
#include <cblas.h>  // cblas_sgemm, openblas_set_num_threads, openblas_get_corename (OpenBLAS)

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

struct Probe {
  int m, n, k;
  bool tb;
  const char* what;
};

void run(const Probe& p) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> a(static_cast<std::size_t>(p.m) * p.k), b(static_cast<std::size_t>(p.k) * p.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  auto bv = [&](int kk, int j) { return p.tb ? b[static_cast<std::size_t>(j) * p.k + kk] : b[static_cast<std::size_t>(kk) * p.n + j]; };
  std::vector<float> c[2];
  for (int t = 0; t < 2; ++t) {
    c[t].assign(static_cast<std::size_t>(p.m) * p.n, 0.0f);
    openblas_set_num_threads(t + 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.m, p.n, p.k, 1.0f, a.data(), p.k,
                b.data(), p.tb ? p.k : p.n, 0.0f, c[t].data(), p.n);
  }
  int differ = 0, chain[2] = {0, 0};
  std::vector<int> off_cols[2], off_rows[2];
  for (int t = 0; t < 2; ++t) off_cols[t].assign(static_cast<std::size_t>((p.n + 7) / 8), 0), off_rows[t].assign(static_cast<std::size_t>((p.m + 15) / 16), 0);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j) {
      float s = 0;
      for (int kk = 0; kk < p.k; ++kk) s = std::fma(a[static_cast<std::size_t>(i) * p.k + kk], bv(kk, j), s);
      const std::size_t at = static_cast<std::size_t>(i) * p.n + j;
      differ += std::memcmp(&c[0][at], &c[1][at], sizeof(float)) != 0;
      for (int t = 0; t < 2; ++t) {
        if (std::memcmp(&c[t][at], &s, sizeof(float)) == 0) {
          ++chain[t];
        } else {
          ++off_cols[t][static_cast<std::size_t>(j / 8)];
          ++off_rows[t][static_cast<std::size_t>(i / 16)];
        }
      }
    }
  const int total = p.m * p.n;
  std::printf("%s, %dx%dx%d %s (%s): %d of %d differ between 1 and 2 threads; equal to the k-order fma chain: "
              "1 thread %d, 2 threads %d\n",
              openblas_get_corename(), p.m, p.n, p.k, p.tb ? "NT" : "NN", p.what, differ, total, chain[0], chain[1]);
  for (int t = 0; t < 2; ++t) {
    std::printf("  %d thread(s), elements off the chain per 8-column block:", t + 1);
    for (int v : off_cols[t]) std::printf(" %d", v);
    std::printf("\n  %d thread(s), per 16-row block:", t + 1);
    for (int v : off_rows[t]) std::printf(" %d", v);
    std::printf("\n");
  }
}

}  // namespace

int main() {
  // The hidden layer of Determinism.MlpOneAndTwoThreadsSameBits (batch 200, width 128),
  // the first GEMM whose bits differed between its 1- and 2-thread runs, then a square.
  run({200, 128, 128, true, "x W^T of the determinism test's MLP"});
  run({256, 256, 256, false, "square"});
  return 0;
}
