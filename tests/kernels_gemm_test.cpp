// The CPU GEMM (kernels/cpu/gemm.h) against its definition: every element of C is one
// chain of fused multiply-adds over k in ascending order, starting from 0 or from C.
// The reference below is that definition written as the plainest triple loop (std::fma),
// and every ISA path this CPU runs must equal it bit for bit, for every shape class
// (edges of the micro-tiles, k across cache blocks, empty dims), both transposes, any
// strides, accumulation, any split of the tiles over threads, and non-finite inputs. A
// second, looser check bounds the error against f64 so that the reference itself is
// sane.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/tensor_io.h"  // kernels::cpu::gemm with the threading the ops use
#include "engine/parallel.h"
#include "kernels/cpu/gemm.h"

namespace ampcheck {
namespace {

namespace kc = kernels::cpu;
using i64 = std::int64_t;

template <typename T>
struct Problem {
  bool ta = false, tb = false, accumulate = false;
  i64 m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<T> a, b, c;  // c: the initial C (read when accumulating)

  kc::GemmArgs<T> args(T* out) const {
    kc::GemmArgs<T> g;
    g.trans_a = ta;
    g.trans_b = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a.data();
    g.lda = lda;
    g.b = b.data();
    g.ldb = ldb;
    g.c = out;
    g.ldc = ldc;
    g.accumulate = accumulate;
    return g;
  }
  T at_a(i64 i, i64 p) const { return ta ? a[static_cast<std::size_t>(p * lda + i)] : a[static_cast<std::size_t>(i * lda + p)]; }
  T at_b(i64 p, i64 j) const { return tb ? b[static_cast<std::size_t>(j * ldb + p)] : b[static_cast<std::size_t>(p * ldb + j)]; }
};

// The definition, nothing more.
template <typename T>
std::vector<T> reference(const Problem<T>& p) {
  std::vector<T> c = p.c;
  for (i64 i = 0; i < p.m; ++i)
    for (i64 j = 0; j < p.n; ++j) {
      T acc = p.accumulate ? p.c[static_cast<std::size_t>(i * p.ldc + j)] : T(0);
      for (i64 q = 0; q < p.k; ++q) acc = std::fma(p.at_a(i, q), p.at_b(q, j), acc);
      c[static_cast<std::size_t>(i * p.ldc + j)] = acc;
    }
  return c;
}

// Random values with a spread of exponents, so that the order of the sum matters.
template <typename T>
Problem<T> make(std::mt19937_64& rng, i64 m, i64 n, i64 k, bool ta, bool tb, bool accumulate, i64 pad) {
  Problem<T> p;
  p.m = m, p.n = n, p.k = k, p.ta = ta, p.tb = tb, p.accumulate = accumulate;
  p.lda = std::max<i64>(1, (ta ? m : k) + pad);
  p.ldb = std::max<i64>(1, (tb ? k : n) + pad);
  p.ldc = std::max<i64>(1, n + pad);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-6, 6);
  auto fill = [&](std::vector<T>& v, i64 rows, i64 ld) {
    v.assign(static_cast<std::size_t>(std::max<i64>(rows, 1) * std::max<i64>(ld, 1)), T(0));
    for (T& x : v) x = static_cast<T>(std::ldexp(mant(rng), expo(rng)));
  };
  fill(p.a, ta ? k : m, p.lda);
  fill(p.b, tb ? n : k, p.ldb);
  fill(p.c, m, p.ldc);
  return p;
}

std::vector<kc::GemmIsa> supported_isas() {
  std::vector<kc::GemmIsa> out;
  for (kc::GemmIsa isa : {kc::GemmIsa::scalar, kc::GemmIsa::avx2, kc::GemmIsa::avx512})
    if (kc::gemm_isa_supported(isa)) out.push_back(isa);
  return out;
}

template <typename T>
void expect_bits(const std::vector<T>& want, const std::vector<T>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  i64 bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0 && bad++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the fma chain gives " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

// The shapes: each dim below, at, and above the micro-tile sizes (4, 6, 8, 12, 16, 32),
// a tile (8 micro-tiles), and k across the 256-step cache blocks.
const std::vector<i64> kDims = {1, 2, 5, 6, 7, 12, 13, 17, 31, 33, 64, 97};
const std::vector<i64> kDepths = {0, 1, 3, 16, 255, 256, 257, 600};

template <typename T>
void check_all_shapes() {
  std::mt19937_64 rng(20261125);
  std::uniform_int_distribution<std::size_t> pick_dim(0, kDims.size() - 1);
  int cases = 0;
  for (const i64 k : kDepths)
    for (int t = 0; t < 8; ++t) {
      const bool ta = t & 1, tb = t & 2, acc = t & 4;
      const i64 m = kDims[pick_dim(rng)], n = kDims[pick_dim(rng)];
      const i64 pad = t % 3;
      const Problem<T> p = make<T>(rng, m, n, k, ta, tb, acc, pad);
      const std::vector<T> want = reference(p);
      for (kc::GemmIsa isa : supported_isas()) {
        std::vector<T> got = p.c;
        kc::gemm(p.args(got.data()), isa);
        expect_bits(want, got,
                    std::string(kc::gemm_isa_name(isa)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                        " k=" + std::to_string(k) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                        " accumulate=" + std::to_string(acc) + " pad=" + std::to_string(pad));
        ++cases;
      }
    }
  EXPECT_GE(cases, 64);
}

TEST(Gemm, EveryPathIsTheFmaChainF32) { check_all_shapes<float>(); }
TEST(Gemm, EveryPathIsTheFmaChainF64) { check_all_shapes<double>(); }

// Large and square, across several tiles in both dims and several k blocks.
TEST(Gemm, LargeSquareEveryPathSameBits) {
  std::mt19937_64 rng(7);
  const Problem<float> p = make<float>(rng, 200, 300, 700, false, true, false, 0);
  const std::vector<float> want = reference(p);
  for (kc::GemmIsa isa : supported_isas()) {
    std::vector<float> got = p.c;
    kc::gemm(p.args(got.data()), isa);
    expect_bits(want, got, std::string(kc::gemm_isa_name(isa)));
  }
}

// The reference is the definition; this checks the definition is a dot product: within
// the classic bound k * eps * sum |a||b| of the exact (f64) value.
TEST(Gemm, WithinTheSummationBoundOfF64) {
  std::mt19937_64 rng(11);
  const Problem<float> p = make<float>(rng, 33, 17, 500, true, false, false, 0);
  std::vector<float> got = p.c;
  kc::gemm(p.args(got.data()), kc::GemmIsa::scalar);
  for (i64 i = 0; i < p.m; ++i)
    for (i64 j = 0; j < p.n; ++j) {
      double exact = 0, magnitude = 0;
      for (i64 q = 0; q < p.k; ++q) {
        exact += static_cast<double>(p.at_a(i, q)) * p.at_b(q, j);
        magnitude += std::fabs(static_cast<double>(p.at_a(i, q)) * p.at_b(q, j));
      }
      const double bound = static_cast<double>(p.k) * std::numeric_limits<float>::epsilon() * magnitude;
      EXPECT_LE(std::fabs(got[static_cast<std::size_t>(i * p.ldc + j)] - exact), bound) << i << "," << j;
    }
}

// Tiles in any order and any grouping (what threads do) give the same bits.
TEST(Gemm, AnySplitOfTheTilesSameBits) {
  std::mt19937_64 rng(5);
  const Problem<float> p = make<float>(rng, 150, 260, 300, false, false, false, 0);
  const std::vector<float> want = reference(p);
  for (kc::GemmIsa isa : supported_isas()) {
    const kc::GemmPlan plan = kc::gemm_plan(p.args(nullptr), isa);
    ASSERT_GT(plan.tiles(), 2) << kc::gemm_isa_name(isa);
    std::vector<float> got = p.c;
    for (i64 t = plan.tiles(); t-- > 0;) kc::gemm_tiles(plan, p.args(got.data()), t, t + 1);
    expect_bits(want, got, std::string(kc::gemm_isa_name(isa)) + " reversed tiles");
  }
}

// Through the engine's entry point on 1, 2 and 3 threads.
TEST(Gemm, ThreadCountsSameBits) {
  std::mt19937_64 rng(9);
  const Problem<float> p = make<float>(rng, 300, 200, 150, true, true, true, 1);
  const std::vector<float> want = reference(p);
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<float> got = p.c;
    kc::gemm(p.ta, p.tb, p.m, p.n, p.k, p.a.data(), p.lda, p.b.data(), p.ldb, got.data(), p.ldc, p.accumulate);
    expect_bits(want, got, std::to_string(threads) + " threads");
  }
  set_num_threads(before);
}

// Without accumulate C is only written: NaN there must not leak in. Elements outside
// the m x n block (the row padding of ldc) are never touched.
TEST(Gemm, WritesOnlyTheOutputBlock) {
  std::mt19937_64 rng(3);
  Problem<float> p = make<float>(rng, 13, 37, 40, false, false, false, 5);
  const float sentinel = -12345.0f;
  for (float& x : p.c) x = std::numeric_limits<float>::quiet_NaN();
  for (i64 i = 0; i < p.m; ++i)
    for (i64 j = p.n; j < p.ldc; ++j) p.c[static_cast<std::size_t>(i * p.ldc + j)] = sentinel;
  const std::vector<float> want = reference(p);
  for (kc::GemmIsa isa : supported_isas()) {
    std::vector<float> got = p.c;
    kc::gemm(p.args(got.data()), isa);
    expect_bits(want, got, kc::gemm_isa_name(isa).data());
    for (i64 i = 0; i < p.m; ++i)
      for (i64 j = 0; j < p.n; ++j) EXPECT_FALSE(std::isnan(got[static_cast<std::size_t>(i * p.ldc + j)]));
  }
}

// IEEE through the chain: Inf * 0 is NaN, Inf + -Inf is NaN, a finite chain that
// overflows f32 is Inf, as the definition says.
TEST(Gemm, NonFiniteInputsFollowTheChain) {
  std::mt19937_64 rng(1);
  Problem<float> p = make<float>(rng, 7, 19, 9, false, false, false, 0);
  const float inf = std::numeric_limits<float>::infinity();
  p.a[0] = inf;                              // row 0: Inf * b
  p.b[static_cast<std::size_t>(p.ldb) + 3] = 0.0f;  // column 3, k = 1
  p.a[1 * static_cast<std::size_t>(p.lda) + 1] = inf;  // row 1, k = 1: Inf * 0 in column 3
  p.a[2 * static_cast<std::size_t>(p.lda)] = inf;
  p.a[2 * static_cast<std::size_t>(p.lda) + 1] = -inf;
  p.a[3 * static_cast<std::size_t>(p.lda)] = 3e38f;
  p.a[3 * static_cast<std::size_t>(p.lda) + 1] = 3e38f;
  for (i64 j = 0; j < p.n; ++j) p.b[static_cast<std::size_t>(j)] = 2.0f, p.b[static_cast<std::size_t>(p.ldb + j)] = j == 3 ? 0.0f : 2.0f;
  const std::vector<float> want = reference(p);
  EXPECT_TRUE(std::isnan(want[static_cast<std::size_t>(1 * p.ldc + 3)]));
  EXPECT_TRUE(std::isnan(want[static_cast<std::size_t>(2 * p.ldc + 0)]));
  EXPECT_TRUE(std::isinf(want[static_cast<std::size_t>(3 * p.ldc + 0)]));
  for (kc::GemmIsa isa : supported_isas()) {
    std::vector<float> got = p.c;
    kc::gemm(p.args(got.data()), isa);
    expect_bits(want, got, kc::gemm_isa_name(isa).data());
  }
}

TEST(Gemm, BadArgumentsAreNamed) {
  std::vector<float> a(6), b(6), c(4);
  kc::GemmArgs<float> g;
  g.m = 2, g.n = 2, g.k = 3, g.a = a.data(), g.lda = 2, g.b = b.data(), g.ldb = 2, g.c = c.data(), g.ldc = 2;
  try {
    kc::gemm_plan(g, kc::GemmIsa::scalar);
    ADD_FAILURE() << "lda 2 < k 3 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lda"), std::string::npos) << e.what();
  }
  g.lda = 3;
  g.m = -1;
  EXPECT_THROW(kc::gemm_plan(g, kc::GemmIsa::scalar), std::invalid_argument);
}

}  // namespace
}  // namespace ampcheck
