// The GEMM and shape families over Views (kernels/gemm_kernels.h, kernels/shape_kernels.h):
// the tables; the batch maps; matmul, bmm and linear, forward and backward, against the
// GEMM's definition (every element one fma chain over k in ascending order, batches that
// share an output continuing one chain in batch order, one rounding at the end); the
// family's kernels called directly; the shape copies against plain index loops; and, on a
// machine with a GPU, the CUDA tables against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/ops.h"
#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"  // probe
#include "kernels/gemm_kernels.h"
#include "kernels/kernel_note.h"
#include "tests/gpu_test_util.h"
#include "kernels/shape_kernels.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

using kernels::CopyAlong;
using kernels::GemmDesc;
using kernels::GemmKernels;
using kernels::ShapeKernels;
using i64 = std::int64_t;

Tensor random(const Shape& shape, Generator& gen, DType dtype) { return Tensor::uniform(shape, gen, -2, 2, dtype); }

std::vector<float> floats(const Tensor& t) {
  const std::vector<double> v = t.to_f64();
  return std::vector<float>(v.begin(), v.end());  // exact: every input here is f32, f16 or bf16
}

// ---- the definition -----------------------------------------------------------------------

// C[m,n] (+)= op(A) op(B): each element one fma chain over k in ascending order, from C's
// value when accumulating, else from 0. The plainest loop that says so.
void gemm_definition(bool ta, bool tb, i64 m, i64 n, i64 k, const float* a, const float* b, float* c, bool accumulate) {
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j) {
      float acc = accumulate ? c[i * n + j] : 0.0f;
      for (i64 p = 0; p < k; ++p) acc = std::fmaf(ta ? a[p * m + i] : a[i * k + p], tb ? b[j * k + p] : b[p * n + j], acc);
      c[i * n + j] = acc;
    }
}

// matmul's forward and both gradients by the definition, for operands of shapes [..., m, k]
// and [..., k, n] whose batch dims broadcast (`a_of(i)`, `b_of(i)`: the operand matrices
// of output batch i); the gradients sum over the batches that share an operand, in
// batch order, as one chain.
struct MatmulDefinition {
  std::vector<float> y, ga, gb;
};
MatmulDefinition matmul_definition(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& g,
                                   i64 m, i64 k, i64 n, i64 batch, const std::function<i64(i64)>& a_of,
                                   const std::function<i64(i64)>& b_of) {
  MatmulDefinition d;
  d.y.assign(static_cast<std::size_t>(batch * m * n), 0.0f);
  d.ga.assign(a.size(), 0.0f);
  d.gb.assign(b.size(), 0.0f);
  for (i64 i = 0; i < batch; ++i) {
    const float* ai = a.data() + a_of(i) * m * k;
    const float* bi = b.data() + b_of(i) * k * n;
    const float* gi = g.data() + i * m * n;
    gemm_definition(false, false, m, n, k, ai, bi, d.y.data() + i * m * n, false);
    gemm_definition(false, true, m, k, n, gi, bi, d.ga.data() + a_of(i) * m * k, true);
    gemm_definition(true, false, k, n, m, ai, gi, d.gb.data() + b_of(i) * k * n, true);
  }
  return d;
}

// The definition's values rounded once to `dtype`, as bytes.
std::vector<std::uint8_t> rounded(const std::vector<float>& v, const Shape& shape, DType dtype) {
  return bytes_of(Tensor::from(v, shape, dtype));
}

// ---- the tables -----------------------------------------------------------------------------

TEST(GemmKernels, TheCpuTablesHaveEveryEntry) {
  EXPECT_NE(GemmKernels::cpu().gemm, nullptr);
  EXPECT_NE(GemmKernels::cpu().column_sum, nullptr);
  EXPECT_NE(ShapeKernels::cpu().permute, nullptr);
  EXPECT_NE(ShapeKernels::cpu().copy_along, nullptr);
}

TEST(GemmKernels, TheCudaTablesAreCompleteOrSayThereIsNoGpuBuild) {
  if (kernels::cuda::probe().built_with_cuda) {  // asking for a table touches no GPU
    EXPECT_NE(GemmKernels::cuda().gemm, nullptr);
    EXPECT_NE(GemmKernels::cuda().column_sum, nullptr);
    EXPECT_NE(ShapeKernels::cuda().permute, nullptr);
    EXPECT_NE(ShapeKernels::cuda().copy_along, nullptr);
    return;
  }
  for (const auto& ask : std::vector<std::function<void()>>{[] { GemmKernels::cuda(); }, [] { ShapeKernels::cuda(); }}) {
    try {
      ask();
      ADD_FAILURE() << "a build without CUDA handed out a CUDA table";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no GPU implementation"), std::string::npos) << e.what();
    }
  }
}

// ---- the batch maps ---------------------------------------------------------------------------

TEST(GemmKernels, BatchMapsNameMatricesAndTellSharedOnes) {
  const kernels::Broadcast plain = kernels::strided_batch(5, 1), shared = kernels::strided_batch(5, 0);
  for (i64 i = 0; i < 5; ++i) {
    EXPECT_EQ(plain.offset(i), i);
    EXPECT_EQ(shared.offset(i), 0);
  }
  EXPECT_TRUE(kernels::distinct_batches(plain));
  EXPECT_FALSE(kernels::distinct_batches(shared));
  EXPECT_TRUE(kernels::distinct_batches(kernels::strided_batch(1, 0)));  // one batch shares nothing
  EXPECT_TRUE(kernels::distinct_batches(kernels::Broadcast{}));
  // [2, 1] broadcast to [2, 3]: batches 0..2 read matrix 0, 3..5 matrix 1.
  const kernels::Broadcast rows = kernels::broadcast_of({2, 1}, {2, 3});
  EXPECT_FALSE(kernels::distinct_batches(rows));
  EXPECT_EQ(rows.offset(2), 0);
  EXPECT_EQ(rows.offset(3), 1);
}

// ---- the ops against the definition -----------------------------------------------------------

struct MatmulCase {
  const char* name;
  Shape a, b;
  i64 m, k, n, batch;
  std::function<i64(i64)> a_of, b_of;
};

std::vector<MatmulCase> matmul_cases() {
  auto same = [](i64 i) { return i; };
  auto shared = [](i64) { return i64{0}; };
  return {
      {"2-D", {5, 7}, {7, 6}, 5, 7, 6, 1, shared, shared},
      {"batched, shared right-hand side", {3, 5, 7}, {7, 6}, 5, 7, 6, 3, same, shared},
      {"shared left-hand side, batched right", {5, 7}, {3, 7, 6}, 5, 7, 6, 3, shared, same},
      {"both batched", {3, 5, 7}, {3, 7, 6}, 5, 7, 6, 3, same, same},
      // batch [2, 3]: a [2, 1] reads matrix i / 3, b [3] reads i % 3
      {"batch dims broadcast both ways", {2, 1, 5, 7}, {3, 7, 6}, 5, 7, 6, 6, [](i64 i) { return i / 3; },
       [](i64 i) { return i % 3; }},
      {"vector times matrix", {7}, {7, 6}, 1, 7, 6, 1, shared, shared},
      {"matrix times vector", {5, 7}, {7}, 5, 7, 1, 1, shared, shared},
      // nine batch dims, more than a kernel argument holds, merged into one
      {"nine batch dims", {2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 4}, {2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 2}, 3, 4, 2, 512, same, same},
  };
}

TEST(GemmKernels, MatmulAndItsGradientsAreTheDefinitionBitForBit) {
  Generator gen(5);
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const MatmulCase& c : matmul_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(name(d)));
      Tensor a = random(c.a, gen, d).set_requires_grad(true);
      Tensor b = random(c.b, gen, d).set_requires_grad(true);
      const Tensor y = matmul(a, b);
      const Tensor g = random(y.shape(), gen, d);
      y.backward(g);
      const MatmulDefinition def = matmul_definition(floats(a), floats(b), floats(g), c.m, c.k, c.n, c.batch, c.a_of, c.b_of);
      EXPECT_EQ(bytes_of(y), rounded(def.y, y.shape(), d));
      EXPECT_EQ(bytes_of(a.grad()), rounded(def.ga, a.shape(), d));
      EXPECT_EQ(bytes_of(b.grad()), rounded(def.gb, b.shape(), d));
    }
  }
}

TEST(GemmKernels, LinearAndItsGradientsAreTheDefinitionBitForBit) {
  Generator gen(6);
  for (DType d : {DType::f32, DType::f16}) {
    SCOPED_TRACE(name(d));
    const i64 rows = 6, in = 9, out = 5;
    Tensor x = random({2, 3, in}, gen, d).set_requires_grad(true);
    Tensor w = random({out, in}, gen, d).set_requires_grad(true);
    Tensor bias = random({out}, gen, d).set_requires_grad(true);
    const Tensor y = linear(x, w, bias);
    const Tensor g = random(y.shape(), gen, d);
    y.backward(g);
    const std::vector<float> xv = floats(x), wv = floats(w), bv = floats(bias), gv = floats(g);
    std::vector<float> yv(static_cast<std::size_t>(rows * out)), gx(xv.size()), gw(wv.size()), gb(bv.size(), 0.0f);
    gemm_definition(false, true, rows, out, in, xv.data(), wv.data(), yv.data(), false);
    for (i64 r = 0; r < rows; ++r)
      for (i64 j = 0; j < out; ++j) yv[static_cast<std::size_t>(r * out + j)] += bv[static_cast<std::size_t>(j)];
    gemm_definition(false, false, rows, in, out, gv.data(), wv.data(), gx.data(), false);
    gemm_definition(true, false, out, in, rows, gv.data(), xv.data(), gw.data(), false);
    for (i64 r = 0; r < rows; ++r)
      for (i64 j = 0; j < out; ++j) gb[static_cast<std::size_t>(j)] += gv[static_cast<std::size_t>(r * out + j)];
    EXPECT_EQ(bytes_of(y), rounded(yv, y.shape(), d));
    EXPECT_EQ(bytes_of(x.grad()), rounded(gx, x.shape(), d));
    EXPECT_EQ(bytes_of(w.grad()), rounded(gw, w.shape(), d));
    EXPECT_EQ(bytes_of(bias.grad()), rounded(gb, bias.shape(), d));
  }
}

// k = 0: every chain is empty, so a product is 0, and linear's output is its bias.
TEST(GemmKernels, EmptyInnerDimsGiveZerosAndTheBias) {
  Tensor x = Tensor::zeros({2, 3, 0}).set_requires_grad(true);
  Tensor w = Tensor::zeros({4, 0}).set_requires_grad(true);
  Tensor b = Tensor::from(std::vector<double>{1, 2, 3, 4}, {4}).set_requires_grad(true);
  const Tensor y = linear(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.to_f64(), (std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  y.backward(Tensor::ones(y.shape()));
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_EQ(b.grad().to_f64(), (std::vector<double>{6, 6, 6, 6}));
  EXPECT_EQ(matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3})).to_f64(), std::vector<double>(6, 0.0));
}

// ---- the family's kernels called directly -------------------------------------------------------

// Transposed operands, a C of another dtype than the operands', accumulation and a bias.
TEST(GemmKernels, TheCpuGemmKernelAccumulatesTransposesAndAddsTheBiasBeforeTheOneRounding) {
  Generator gen(7);
  const i64 m = 4, n = 3, k = 5, batch = 2;
  const Tensor a = random({batch, k, m}, gen, DType::f16);  // A^T stored
  const Tensor b = random({n, k}, gen, DType::bf16);        // B^T stored, shared
  const Tensor c0 = random({batch, m, n}, gen, DType::f32);
  const Tensor bias = random({n}, gen, DType::f32);
  Tensor c = c0.to(DType::bf16);
  GemmDesc d;
  d.trans_a = d.trans_b = true;
  d.m = m, d.n = n, d.k = k, d.batch = batch;
  d.a = view_of(a), d.b = view_of(b), d.c = view_of(c);
  d.a_batch = kernels::strided_batch(batch, 1);
  d.c_batch = kernels::strided_batch(batch, 1);
  d.accumulate = true;
  d.bias = view_of(bias);
  GemmKernels::cpu().gemm(d);

  const std::vector<float> av = floats(a), bv = floats(b), biasv = floats(bias);
  std::vector<float> want = floats(c0.to(DType::bf16));
  for (i64 i = 0; i < batch; ++i) gemm_definition(true, true, m, n, k, av.data() + i * m * k, bv.data(), want.data() + i * m * n, true);
  for (i64 e = 0; e < batch * m * n; ++e) want[static_cast<std::size_t>(e)] += biasv[static_cast<std::size_t>(e % n)];
  EXPECT_EQ(bytes_of(c), rounded(want, c.shape(), DType::bf16));
}

TEST(GemmKernels, TheCpuColumnSumAddsRowsInOrderAndRoundsOnce) {
  Generator gen(8);
  const Tensor g = random({7, 4}, gen, DType::f16);
  Tensor out = Tensor::empty({4}, DType::f16);
  GemmKernels::cpu().column_sum(view_of(g), view_of(out), DType::f16, "test");
  const std::vector<float> gv = floats(g);
  std::vector<float> want(4, 0.0f);
  for (i64 r = 0; r < 7; ++r)
    for (i64 j = 0; j < 4; ++j) want[static_cast<std::size_t>(j)] += gv[static_cast<std::size_t>(r * 4 + j)];
  EXPECT_EQ(bytes_of(out), rounded(want, {4}, DType::f16));
}

// ---- the shape copies against index loops -----------------------------------------------------

TEST(ShapeKernels, PermuteMovesEveryElementWhereItsIndexSays) {
  Generator gen(9);
  for (DType d : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor x = random({2, 3, 4, 5}, gen, d);
    const std::vector<i64> perm{3, 1, 0, 2};
    const Shape out_shape{5, 3, 2, 4};
    Tensor out = Tensor::empty(out_shape, d);
    ShapeKernels::cpu().permute(view_of(x), perm, view_of(out));
    const std::vector<double> xv = x.to_f64(), ov = out.to_f64();
    const i64 xs[4] = {60, 20, 5, 1};
    i64 at = 0;
    for (i64 i0 = 0; i0 < 5; ++i0)
      for (i64 i1 = 0; i1 < 3; ++i1)
        for (i64 i2 = 0; i2 < 2; ++i2)
          for (i64 i3 = 0; i3 < 4; ++i3) {
            const i64 src = i0 * xs[3] + i1 * xs[1] + i2 * xs[0] + i3 * xs[2];
            EXPECT_EQ(ov[static_cast<std::size_t>(at++)], xv[static_cast<std::size_t>(src)]);
          }
    EXPECT_EQ(bytes_of(permute(x, perm)), bytes_of(out)) << "the op is the kernel";
  }
}

TEST(ShapeKernels, CopyAlongMovesSlabsWithStepsOnBothSides) {
  Generator gen(10);
  const Tensor src = random({3, 7, 2}, gen, DType::f16);
  Tensor dst = Tensor::zeros({3, 9, 2}, DType::f16);
  // src indices 1, 3, 5 along dim 1 to dst indices 8, 6, 4
  ShapeKernels::cpu().copy_along(view_of(src), view_of(dst), CopyAlong{1, 3, 1, 2, 8, -2});
  const std::vector<double> s = src.to_f64(), t = dst.to_f64();
  for (i64 o = 0; o < 3; ++o)
    for (i64 j = 0; j < 9; ++j)
      for (i64 e = 0; e < 2; ++e) {
        const bool copied = j == 8 || j == 6 || j == 4;
        const double want = copied ? s[static_cast<std::size_t>((o * 7 + 1 + (8 - j)) * 2 + e)] : 0.0;
        EXPECT_EQ(t[static_cast<std::size_t>((o * 9 + j) * 2 + e)], want) << o << " " << j << " " << e;
      }
}

// ---- CUDA against the CPU -----------------------------------------------------------------------

double nmse(const Tensor& a, const Tensor& ref) {
  const std::vector<double> x = a.to_f64(), r = ref.to_f64();
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - r[i]) * (x[i] - r[i]);
    norm += r[i] * r[i];
  }
  return norm == 0 ? err : err / norm;
}

double tolerance(DType d) { return d == DType::f64 ? 1e-20 : d == DType::f32 ? 1e-10 : d == DType::f16 ? 1e-5 : 1e-3; }

TEST(GemmKernels, CudaMatmulAndItsGradientsMatchTheCpuAndNameTheirAlgorithm) {
  SKIP_WITHOUT_GPU();
  testing::NotesKept notes_kept;  // the notes named below are taken only while observed
  Generator gen(11);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (const MatmulCase& c : matmul_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(name(d)));
      Tensor a = random(c.a, gen, d).set_requires_grad(true);
      Tensor b = random(c.b, gen, d).set_requires_grad(true);
      const Tensor y = matmul(a, b);
      const Tensor g = random(y.shape(), gen, d);
      y.backward(g);
      Tensor ac = a.detach().to(Device::cuda).set_requires_grad(true);
      Tensor bc = b.detach().to(Device::cuda).set_requires_grad(true);
      (void)notes_kept.take();
      const Tensor yc = matmul(ac, bc);
      const std::string notes = notes_kept.take();
      EXPECT_NE(notes.find("cublasLt: "), std::string::npos) << notes;
      EXPECT_NE(notes.find(d == DType::f64 ? "compute 64F" : "compute 32F"), std::string::npos) << notes;
      yc.backward(g.to(Device::cuda));
      EXPECT_EQ(yc.device(), Device::cuda);
      EXPECT_EQ(yc.dtype(), d);
      EXPECT_LT(nmse(yc, y), tolerance(d));
      EXPECT_LT(nmse(ac.grad(), a.grad()), tolerance(d));
      EXPECT_LT(nmse(bc.grad(), b.grad()), tolerance(d));
    }
  }
}

TEST(GemmKernels, CudaLinearAndBmmMatchTheCpuWithMixedDtypes) {
  SKIP_WITHOUT_GPU();
  Generator gen(12);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(name(d));
    // the weight in f32 and the data in d: linear promotes, and cuBLASLt gets one dtype
    Tensor x = random({4, 3, 33}, gen, d).set_requires_grad(true);
    Tensor w = random({17, 33}, gen, DType::f32).set_requires_grad(true);
    Tensor bias = random({17}, gen, d).set_requires_grad(true);
    const Tensor y = linear(x, w, bias);
    const Tensor g = random(y.shape(), gen, y.dtype());
    y.backward(g);
    Tensor xc = x.detach().to(Device::cuda).set_requires_grad(true);
    Tensor wc = w.detach().to(Device::cuda).set_requires_grad(true);
    Tensor bc = bias.detach().to(Device::cuda).set_requires_grad(true);
    const Tensor yc = linear(xc, wc, bc);
    yc.backward(g.to(Device::cuda));
    EXPECT_EQ(yc.dtype(), y.dtype());
    EXPECT_LT(nmse(yc, y), tolerance(y.dtype()));
    EXPECT_LT(nmse(xc.grad(), x.grad()), tolerance(d));
    EXPECT_LT(nmse(wc.grad(), w.grad()), tolerance(DType::f32));
    EXPECT_LT(nmse(bc.grad(), bias.grad()), tolerance(d));

    Tensor p = random({5, 8, 16}, gen, d).set_requires_grad(true);
    Tensor q = random({5, 16, 8}, gen, d).set_requires_grad(true);
    const Tensor r = bmm(p, q);
    const Tensor gr = random(r.shape(), gen, d);
    r.backward(gr);
    Tensor pc = p.detach().to(Device::cuda).set_requires_grad(true);
    Tensor qc = q.detach().to(Device::cuda).set_requires_grad(true);
    const Tensor rc = bmm(pc, qc);
    rc.backward(gr.to(Device::cuda));
    EXPECT_LT(nmse(rc, r), tolerance(d));
    EXPECT_LT(nmse(pc.grad(), p.grad()), tolerance(d));
    EXPECT_LT(nmse(qc.grad(), q.grad()), tolerance(d));
  }
}

TEST(GemmKernels, CudaGemmKernelAccumulatesSharedOutputsAndAddsTheBias) {
  SKIP_WITHOUT_GPU();
  Generator gen(13);
  const i64 m = 6, n = 5, k = 7, batch = 4;
  for (bool trans_a : {false, true}) {
    SCOPED_TRACE(trans_a ? "A^T" : "A");
    const Tensor a = random({batch, trans_a ? k : m, trans_a ? m : k}, gen, DType::f16);
    const Tensor b = random({batch, k, n}, gen, DType::f16);
    const Tensor c0 = random({m, n}, gen, DType::f32);
    const Tensor bias = random({n}, gen, DType::bf16);
    auto run = [&](const GemmKernels& kern, Device device) {
      const Tensor ad = a.to(device), bd = b.to(device), biasd = bias.to(device);
      Tensor c = c0.to(DType::f16).to(device);
      GemmDesc d;
      d.trans_a = trans_a;
      d.m = m, d.n = n, d.k = k, d.batch = batch;
      d.a = view_of(ad), d.b = view_of(bd), d.c = view_of(c);
      d.a_batch = kernels::strided_batch(batch, 1);
      d.b_batch = kernels::strided_batch(batch, 1);
      d.c_batch = kernels::strided_batch(batch, 0);  // every batch sums into the one C
      d.accumulate = true;
      d.bias = view_of(biasd);
      kern.gemm(d);
      return c.to(Device::cpu);
    };
    EXPECT_LT(nmse(run(GemmKernels::cuda(), Device::cuda), run(GemmKernels::cpu(), Device::cpu)), 1e-5);
  }
}

TEST(ShapeKernels, CudaShapeCopiesAreTheCpusBitForBit) {
  SKIP_WITHOUT_GPU();
  Generator gen(14);
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(name(d));
    Tensor x = random({2, 3, 4, 5}, gen, d).set_requires_grad(true);
    Tensor z = random({2, 2, 4, 5}, gen, d).set_requires_grad(true);
    auto f = [](const Tensor& p, const Tensor& q) {
      const Tensor cat = concat({p, q}, 1);
      return slice(permute(cat, {3, 1, 0, 2}), 1, 1, 5, 2);
    };
    const Tensor y = f(x, z);
    const Tensor g = random(y.shape(), gen, d);
    y.backward(g);
    Tensor xc = x.detach().to(Device::cuda).set_requires_grad(true);
    Tensor zc = z.detach().to(Device::cuda).set_requires_grad(true);
    const Tensor yc = f(xc, zc);
    yc.backward(g.to(Device::cuda));
    EXPECT_EQ(bytes_of(yc), bytes_of(y));
    EXPECT_EQ(bytes_of(xc.grad()), bytes_of(x.grad()));
    EXPECT_EQ(bytes_of(zc.grad()), bytes_of(z.grad()));
  }
}

}  // namespace
}  // namespace ampcheck
