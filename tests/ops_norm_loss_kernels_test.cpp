// The normalisation and loss family over Views (kernels/norm_loss_kernels.h) and the
// counter-based generator both devices share (kernels/random.h): the tables; the CPU
// kernels called directly against the ops, bit for bit; the conventions of absent
// operands and outputs; the generator against Random123's published answers and the
// engine's functions; the dropout rule and the scalar formulas' documented edge cases;
// and, on a machine with a GPU, the CUDA table against the CPU one (NMSE under a per-dtype
// threshold, and bit for bit where the CUDA kernel adds in the CPU's order or only
// copies and scales).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/dispatch.h"  // view_of
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"  // probe
#include "kernels/norm_loss_kernels.h"
#include "tests/gpu_test_util.h"
#include "kernels/random.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

using kernels::NormLossKernels;
using kernels::View;
using i64 = std::int64_t;
namespace nl = kernels::norm_loss;

constexpr DType kFloatDtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

Tensor rnd(const Shape& shape, Generator& gen, DType dtype, double scale = 1.0) {
  return Tensor::randn(shape, gen, DType::f64, 0.0, scale).to(dtype);
}

Tensor labels_of(const std::vector<i64>& v) { return Tensor::from(v, {static_cast<i64>(v.size())}); }

// ---- the tables ----------------------------------------------------------------------------

void expect_complete(const NormLossKernels& k) {
  EXPECT_NE(k.softmax, nullptr);
  EXPECT_NE(k.softmax_backward, nullptr);
  EXPECT_NE(k.layer_norm, nullptr);
  EXPECT_NE(k.layer_norm_backward, nullptr);
  EXPECT_NE(k.batch_norm, nullptr);
  EXPECT_NE(k.batch_norm_backward, nullptr);
  EXPECT_NE(k.cross_entropy, nullptr);
  EXPECT_NE(k.cross_entropy_backward, nullptr);
  EXPECT_NE(k.mse_loss, nullptr);
  EXPECT_NE(k.mse_loss_backward, nullptr);
  EXPECT_NE(k.embedding, nullptr);
  EXPECT_NE(k.embedding_backward, nullptr);
  EXPECT_NE(k.dropout, nullptr);
  EXPECT_NE(k.dropout_backward, nullptr);
}

TEST(NormLossKernels, TheCpuTableHasEveryEntry) { expect_complete(NormLossKernels::cpu()); }

TEST(NormLossKernels, TheCudaTableIsCompleteOrSaysThereIsNoGpuBuild) {
  if (kernels::cuda::probe().built_with_cuda) {
    expect_complete(NormLossKernels::cuda());  // asking for a table touches no GPU
    return;
  }
  try {
    NormLossKernels::cuda();
    ADD_FAILURE() << "a build without CUDA handed out a CUDA table";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU implementation"), std::string::npos) << e.what();
  }
}

// ---- the CPU kernels against the ops, bit for bit ------------------------------------------

TEST(NormLossKernels, CpuSoftmaxOverViewsIsTheOp) {
  Generator gen(1);
  for (DType dt : kFloatDtypes)
    for (bool log : {false, true}) {
      const Tensor x = rnd({4, 7, 5}, gen, dt, 3.0);
      Tensor y = Tensor::empty(x.shape(), dt);
      NormLossKernels::cpu().softmax(view_of(x), {4, 7, 5}, log, view_of(y));
      EXPECT_EQ(bytes_of(y), bytes_of(log ? log_softmax(x, 1) : softmax(x, 1))) << name(dt) << " log " << log;

      const Tensor g = rnd(x.shape(), gen, dt);
      Tensor dx = Tensor::empty(x.shape(), dt);
      NormLossKernels::cpu().softmax_backward(view_of(g), view_of(y), {4, 7, 5}, log, view_of(dx));
      Tensor xr = x.clone().set_requires_grad();
      (log ? log_softmax(xr, 1) : softmax(xr, 1)).backward(g);
      EXPECT_EQ(bytes_of(dx), bytes_of(xr.grad())) << name(dt) << " log " << log;
    }
}

TEST(NormLossKernels, CpuLayerNormOverViewsIsTheOpAndItsStatisticsAreInTheComputeDtype) {
  Generator gen(2);
  for (DType dt : kFloatDtypes) {
    const Tensor x = rnd({6, 3, 8}, gen, dt, 2.0), w = rnd({3, 8}, gen, dt), b = rnd({3, 8}, gen, dt);
    const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
    const kernels::LayerNormArgs a{6, 24, 1e-5, ct};
    Tensor y = Tensor::empty(x.shape(), dt), mean = Tensor::empty({6}, ct), invstd = Tensor::empty({6}, ct);
    NormLossKernels::cpu().layer_norm(view_of(x), view_of(w), view_of(b), a, view_of(y), view_of(mean),
                                      view_of(invstd));
    EXPECT_EQ(bytes_of(y), bytes_of(layer_norm(x, 2, w, b, 1e-5))) << name(dt);
    // Row 0's statistics from their definitions, in double.
    const std::vector<double> xv = x.to_f64();
    double mu = 0, var = 0;
    for (int j = 0; j < 24; ++j) mu += xv[j];
    mu /= 24;
    for (int j = 0; j < 24; ++j) var += (xv[j] - mu) * (xv[j] - mu);
    var /= 24;
    EXPECT_NEAR(mean.to_f64()[0], mu, 1e-5 * (1 + std::fabs(mu))) << name(dt);
    EXPECT_NEAR(invstd.to_f64()[0], 1 / std::sqrt(var + 1e-5), 1e-4) << name(dt);

    // The backward with every output, then with dx alone: dx is the same either way.
    const Tensor g = rnd(x.shape(), gen, dt);
    Tensor dx = Tensor::empty(x.shape(), dt), dw = Tensor::empty(w.shape(), dt), db = Tensor::empty(b.shape(), dt);
    NormLossKernels::cpu().layer_norm_backward(view_of(g), view_of(x), view_of(w), view_of(mean), view_of(invstd), a,
                                               view_of(dx), view_of(dw), view_of(db));
    Tensor xr = x.clone().set_requires_grad(), wr = w.clone().set_requires_grad(), br = b.clone().set_requires_grad();
    layer_norm(xr, 2, wr, br, 1e-5).backward(g);
    EXPECT_EQ(bytes_of(dx), bytes_of(xr.grad())) << name(dt);
    EXPECT_EQ(bytes_of(dw), bytes_of(wr.grad())) << name(dt);
    EXPECT_EQ(bytes_of(db), bytes_of(br.grad())) << name(dt);
    Tensor dx_alone = Tensor::empty(x.shape(), dt);
    NormLossKernels::cpu().layer_norm_backward(view_of(g), view_of(x), view_of(w), view_of(mean), view_of(invstd),
                                               a, view_of(dx_alone), View{}, View{});
    EXPECT_EQ(bytes_of(dx_alone), bytes_of(dx)) << name(dt);
  }
}

TEST(NormLossKernels, CpuBatchNormOverViewsIsTheOpIncludingTheRunningStatistics) {
  Generator gen(3);
  for (DType dt : kFloatDtypes) {
    const Tensor x = rnd({5, 3, 4, 2}, gen, dt, 2.0), w = rnd({3}, gen, DType::f32), b = rnd({3}, gen, DType::f32);
    const Tensor rm0 = rnd({3}, gen, DType::f32), rv0 = Tensor::full({3}, 1.5, DType::f32);
    const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
    const kernels::BatchNormArgs a{5, 3, 8, true, 0.1, 1e-5, ct};
    Tensor rm = rm0.clone(), rv = rv0.clone();
    Tensor y = Tensor::empty(x.shape(), dt), mean = Tensor::empty({3}, ct), invstd = Tensor::empty({3}, ct);
    NormLossKernels::cpu().batch_norm(view_of(x), view_of(w), view_of(b), view_of(rm), view_of(rv), a, view_of(y),
                                      view_of(mean), view_of(invstd));
    Tensor rm_op = rm0.clone(), rv_op = rv0.clone();
    EXPECT_EQ(bytes_of(y), bytes_of(batch_norm(x, w, b, rm_op, rv_op, true, 0.1, 1e-5))) << name(dt);
    EXPECT_EQ(bytes_of(rm), bytes_of(rm_op)) << name(dt);
    EXPECT_EQ(bytes_of(rv), bytes_of(rv_op)) << name(dt);
    EXPECT_NE(bytes_of(rm), bytes_of(rm0)) << "training moves the running mean";

    // Evaluation normalises with the running statistics and leaves them as they were.
    kernels::BatchNormArgs eval = a;
    eval.training = false;
    const std::vector<std::uint8_t> before = bytes_of(rm);
    NormLossKernels::cpu().batch_norm(view_of(x), View{}, View{}, view_of(rm), view_of(rv), eval, view_of(y),
                                      view_of(mean), view_of(invstd));
    EXPECT_EQ(bytes_of(rm), before) << name(dt);
    EXPECT_EQ(mean.to_f64(), rm.to(ct).to_f64()) << name(dt);
  }
}

TEST(NormLossKernels, CpuLossesOverViewsAreTheOps) {
  Generator gen(4);
  for (DType dt : kFloatDtypes) {
    const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
    for (double smoothing : {0.0, 0.2}) {
      const Tensor logits = rnd({9, 5}, gen, dt, 2.0);
      const Tensor labels = labels_of({0, 4, 2, 2, 1, 3, 0, 4, 1});
      Tensor lse = Tensor::empty({9}, ct), loss = Tensor::empty({}, dt);
      NormLossKernels::cpu().cross_entropy(view_of(logits), view_of(labels), smoothing, view_of(lse), view_of(loss));
      EXPECT_EQ(bytes_of(loss), bytes_of(cross_entropy(logits, labels, smoothing))) << name(dt);
      // lse of row 0 from its definition
      const std::vector<double> xv = logits.to_f64();
      double s = 0;
      for (int k = 0; k < 5; ++k) s += std::exp(xv[k]);
      EXPECT_NEAR(lse.to_f64()[0], std::log(s), 1e-5) << name(dt);

      const Tensor g = Tensor::full({}, 0.75, dt);
      Tensor dx = Tensor::empty(logits.shape(), dt);
      NormLossKernels::cpu().cross_entropy_backward(view_of(g), view_of(logits), view_of(labels), view_of(lse),
                                                    smoothing, view_of(dx));
      Tensor lr = logits.clone().set_requires_grad();
      cross_entropy(lr, labels, smoothing).backward(g);
      EXPECT_EQ(bytes_of(dx), bytes_of(lr.grad())) << name(dt);
    }

    // mse past one ordered-sum block (1024 elements)
    const Tensor in = rnd({40, 31}, gen, dt), target = rnd({40, 31}, gen, dt);
    Tensor loss = Tensor::empty({}, dt);
    NormLossKernels::cpu().mse_loss(view_of(in), view_of(target), view_of(loss));
    EXPECT_EQ(bytes_of(loss), bytes_of(mse_loss(in, target))) << name(dt);
    const Tensor g = Tensor::full({}, 1.25, dt);
    Tensor din = Tensor::empty(in.shape(), dt), dtarget = Tensor::empty(in.shape(), dt);
    NormLossKernels::cpu().mse_loss_backward(view_of(g), view_of(in), view_of(target), ct, view_of(din),
                                             view_of(dtarget));
    Tensor ir = in.clone().set_requires_grad(), tr = target.clone().set_requires_grad();
    mse_loss(ir, tr).backward(g);
    EXPECT_EQ(bytes_of(din), bytes_of(ir.grad())) << name(dt);
    EXPECT_EQ(bytes_of(dtarget), bytes_of(tr.grad())) << name(dt);
  }
}

// d weight: each row the sum of its grad rows in position order, in the compute type,
// rounded once; the reference adds them here in that order.
TEST(NormLossKernels, CpuEmbeddingCopiesRowsAndAddsGradientsInPositionOrder) {
  Generator gen(5);
  const std::vector<i64> idx = {3, 0, 3, 7, 3, 0, 2, 7, 3, 3};
  for (DType dt : kFloatDtypes) {
    const Tensor w = rnd({8, 5}, gen, dt), indices = Tensor::from(idx, {2, 5});
    Tensor out = Tensor::empty({2, 5, 5}, dt);
    NormLossKernels::cpu().embedding(view_of(indices), view_of(w), view_of(out));
    EXPECT_EQ(bytes_of(out), bytes_of(embedding(indices, w))) << name(dt);

    const Tensor g = rnd({2, 5, 5}, gen, dt, 100.0);
    Tensor dw = Tensor::empty(w.shape(), dt);
    NormLossKernels::cpu().embedding_backward(view_of(indices), view_of(g), view_of(dw));
    const std::vector<double> gv = g.to_f64();
    std::vector<double> want(40, 0.0);
    for (int j = 0; j < 5; ++j)
      for (int r = 0; r < 8; ++r) {
        if (dt == DType::f64) {
          double acc = 0;
          for (std::size_t i = 0; i < idx.size(); ++i)
            if (idx[i] == r) acc += gv[i * 5 + j];
          want[r * 5 + j] = acc;
        } else {
          float acc = 0;
          for (std::size_t i = 0; i < idx.size(); ++i)
            if (idx[i] == r) acc += static_cast<float>(gv[i * 5 + j]);
          want[r * 5 + j] = acc;
        }
      }
    EXPECT_EQ(bytes_of(dw), bytes_of(Tensor::from(want, {8, 5}, DType::f64).to(dt))) << name(dt);
    Tensor wr = w.clone().set_requires_grad();
    embedding(indices, wr).backward(g);
    EXPECT_EQ(bytes_of(dw), bytes_of(wr.grad())) << name(dt);
  }
}

TEST(NormLossKernels, CpuDropoutFollowsTheCounterRule) {
  Generator gen(6);
  const double p = 0.4;
  for (DType dt : kFloatDtypes) {
    const Tensor x = rnd({37, 11}, gen, dt);
    Tensor y = Tensor::empty(x.shape(), dt), mask = Tensor::empty(x.shape(), dt);
    NormLossKernels::cpu().dropout(view_of(x), p, 99, 1000, view_of(y), view_of(mask));
    const std::vector<double> xv = x.to_f64(), yv = y.to_f64(), mv = mask.to_f64();
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const bool dropped = uniform01(99, 1000 + i) < p;
      ASSERT_EQ(mv[i], dropped ? 0.0 : 1.0) << i;
      if (dropped) {
        ASSERT_EQ(yv[i], 0.0) << i;
      }
    }
    Generator g99(99);
    g99.set_state(99, 1000);
    EXPECT_EQ(bytes_of(y), bytes_of(dropout(x, p, true, g99))) << name(dt);

    const Tensor g = rnd(x.shape(), gen, dt);
    Tensor dx = Tensor::empty(x.shape(), dt);
    NormLossKernels::cpu().dropout_backward(view_of(g), view_of(mask), p, view_of(dx));
    const std::vector<double> dv = dx.to_f64();
    for (std::size_t i = 0; i < dv.size(); ++i) {
      if (mv[i] == 0) {
        ASSERT_EQ(dv[i], 0.0) << i;
      }
    }
  }
}

// ---- the generator both devices use ---------------------------------------------------------

TEST(NormLossKernels, PhiloxGivesRandom123sKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  const kernels::Philox4 zero = kernels::philox4x32_10(kernels::Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const kernels::Philox4 ones = kernels::philox4x32_10(
      kernels::Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const kernels::Philox4 pi = kernels::philox4x32_10(
      kernels::Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(NormLossKernels, TheEngineDrawsTheSharedGeneratorsValues) {
  for (std::uint64_t seed : {0ull, 42ull, 0x123456789abcdefull})
    for (std::uint64_t i : {0ull, 1ull, 77ull, (1ull << 32) + 5, ~0ull}) {
      const float u = kernels::uniform01(seed, i);
      EXPECT_EQ(u, uniform01(seed, i));
      EXPECT_GE(u, 0.0f);
      EXPECT_LT(u, 1.0f);
      const float scaled = u * 16777216.0f;  // 24 random bits: an integer below 2^24
      EXPECT_EQ(scaled, std::floor(scaled));
      const double n = kernels::normal01(seed, i);
      EXPECT_EQ(n, normal01(seed, i));
      EXPECT_TRUE(std::isfinite(n));
      const auto words = philox4x32({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 0, 0},
                                    {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
      const kernels::Philox4 r = kernels::random_draw(seed, i);
      for (int k = 0; k < 4; ++k) EXPECT_EQ(words[k], r.v[k]);
    }
}

// ---- the scalar formulas' documented edge cases ---------------------------------------------

TEST(NormLossKernels, DropoutKeepsExactlyWhereTheUniformIsAtLeastP) {
  for (double p : {0.0, 0.1, 0.5, 0.9})
    for (std::uint64_t i = 0; i < 200; ++i)
      EXPECT_EQ(nl::dropout_keeps(7, i, p), !(static_cast<double>(uniform01(7, i)) < p)) << p << " " << i;
}

TEST(NormLossKernels, CrossEntropyWithoutSmoothingIgnoresTheOtherClasses) {
  const float inf = std::numeric_limits<float>::infinity();
  // A -Inf logit elsewhere makes sum_shifted -Inf: unused without smoothing, so the loss
  // is finite; with smoothing it is the documented average over every class: Inf.
  const float plain = nl::cross_entropy_row(2.0f, 2.0f, std::log(1.5f), -inf, 3.0f, false, 1.0f, 0.0f);
  EXPECT_FLOAT_EQ(plain, std::log(1.5f));
  const float smoothed = nl::cross_entropy_row(2.0f, 2.0f, std::log(1.5f), -inf, 3.0f, true, 0.9f, 0.1f / 3);
  EXPECT_EQ(smoothed, inf);
}

TEST(NormLossKernels, SoftmaxFormulasAreTheirDefinitions) {
  EXPECT_DOUBLE_EQ(nl::softmax_value(1.0, 3.0, 2.0), std::exp(-2.0) / 2.0);
  EXPECT_DOUBLE_EQ(nl::log_softmax_value(1.0, 3.0, std::log(2.0)), -2.0 - std::log(2.0));
  EXPECT_DOUBLE_EQ(nl::softmax_backward_value(0.5, 0.25, 0.125, false), 0.25 * (0.5 - 0.125));
  EXPECT_DOUBLE_EQ(nl::softmax_backward_value(0.5, std::log(0.25), 2.0, true), 0.5 - 0.25 * 2.0);
  EXPECT_DOUBLE_EQ(nl::softmax_backward_term(0.5, 0.25, false), 0.125);
  EXPECT_DOUBLE_EQ(nl::softmax_backward_term(0.5, 0.25, true), 0.5);
  EXPECT_DOUBLE_EQ(nl::inverse_std(3.0, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(nl::running_update(1.0, 3.0, 0.25), 1.5);
}

// ---- CUDA against the CPU --------------------------------------------------------------------

// Normalised mean squared error of got against want; NaN/Inf must sit at the same places.
double nmse(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_f64(), w = want.to_f64();
  if (g.size() != w.size()) return std::numeric_limits<double>::infinity();
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(w[i])) {
      if (!(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])) return std::numeric_limits<double>::infinity();
      continue;
    }
    err += (g[i] - w[i]) * (g[i] - w[i]);
    ref += w[i] * w[i];
  }
  return ref == 0 ? err : err / ref;
}

double nmse_threshold(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-20;
    case DType::f32: return 1e-9;
    case DType::f16: return 1e-5;
    default: return 1e-4;
  }
}

// A case computes its outputs with a table on a device from CPU inputs it captured
// (moved to the device with on()).
using Outputs = std::vector<Tensor>;
using Case = std::function<Outputs(const NormLossKernels&, Device)>;
Tensor on(Device d, const Tensor& t) { return t.defined() ? t.to(d) : Tensor{}; }

// bits: which outputs must be equal bit for bit (the others by NMSE).
void expect_cuda_matches_cpu(const std::string& what, DType dt, const Case& f, const std::vector<bool>& bits = {}) {
  const Outputs cpu = f(NormLossKernels::cpu(), Device::cpu);
  const Outputs gpu = f(NormLossKernels::cuda(), Device::cuda);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].device(), Device::cuda) << what << " output " << i;
    if (i < bits.size() && bits[i])
      EXPECT_EQ(bytes_of(gpu[i]), bytes_of(cpu[i])) << what << " " << name(dt) << " output " << i;
    else
      EXPECT_LE(nmse(gpu[i], cpu[i]), nmse_threshold(dt)) << what << " " << name(dt) << " output " << i;
  }
}

TEST(NormLossKernelsCuda, SoftmaxMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator gen(11);
  // Long contiguous lines (a block per line), short lines and strided lines (a thread per line).
  const std::vector<std::pair<Shape, kernels::SoftmaxLines>> shapes = {
      {{8, 1000}, {8, 1000, 1}}, {{50, 7}, {50, 7, 1}}, {{2, 30, 20000}, {2, 30, 20000}}, {{3, 64, 5}, {3, 64, 5}}};
  for (DType dt : kFloatDtypes)
    for (const auto& [shape, lines] : shapes)
      for (bool log : {false, true}) {
        const Tensor x = rnd(shape, gen, dt, 4.0), g = rnd(shape, gen, dt);
        expect_cuda_matches_cpu("softmax " + to_string(shape) + (log ? " log" : ""), dt,
                                [&, shape = shape, lines = lines](const NormLossKernels& k, Device d) {
                                  const Tensor xd = on(d, x), gd = on(d, g);
                                  Tensor y = Tensor::empty(shape, dt, d), dx = Tensor::empty(shape, dt, d);
                                  k.softmax(view_of(xd), lines, log, view_of(y));
                                  k.softmax_backward(view_of(gd), view_of(y), lines, log, view_of(dx));
                                  return Outputs{y, dx};
                                });
      }
}

TEST(NormLossKernelsCuda, LayerNormMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator gen(12);
  for (DType dt : kFloatDtypes)
    for (const auto& [rows, len] : std::vector<std::pair<i64, i64>>{{7, 33}, {300, 768}, {5000, 16}})
      for (bool affine : {true, false}) {
        const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
        const Tensor x = rnd({rows, len}, gen, dt, 3.0), g = rnd({rows, len}, gen, dt);
        const Tensor w = affine ? rnd({len}, gen, dt) : Tensor{}, b = affine ? rnd({len}, gen, dt) : Tensor{};
        const kernels::LayerNormArgs a{rows, len, 1e-5, ct};
        expect_cuda_matches_cpu("layer_norm " + std::to_string(rows) + "x" + std::to_string(len), dt,
                                [&, rows = rows, len = len](const NormLossKernels& k, Device d) {
                                  const Tensor xd = on(d, x), gd = on(d, g), wd = on(d, w), bd = on(d, b);
                                  Tensor y = Tensor::empty({rows, len}, dt, d);
                                  Tensor mean = Tensor::empty({rows}, ct, d), invstd = Tensor::empty({rows}, ct, d);
                                  k.layer_norm(view_of(xd), view_of(wd), view_of(bd), a, view_of(y), view_of(mean),
                                               view_of(invstd));
                                  Tensor dx = Tensor::empty({rows, len}, dt, d);
                                  Tensor dw = Tensor::empty({len}, dt, d), db = Tensor::empty({len}, dt, d);
                                  k.layer_norm_backward(view_of(gd), view_of(xd), view_of(wd), view_of(mean),
                                                        view_of(invstd), a, view_of(dx), view_of(dw), view_of(db));
                                  return Outputs{y, mean, invstd, dx, dw, db};
                                });
      }
}

TEST(NormLossKernelsCuda, BatchNormMatchesTheCpuIncludingTheRunningStatistics) {
  SKIP_WITHOUT_GPU();
  Generator gen(13);
  for (DType dt : kFloatDtypes)
    for (const Shape& shape : {Shape{16, 8, 7, 7}, Shape{256, 32}})
      for (bool training : {true, false}) {
        const i64 n = shape[0], c = shape[1], s = shape.size() > 2 ? shape[2] * shape[3] : 1;
        const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
        const Tensor x = rnd(shape, gen, dt, 2.0), g = rnd(shape, gen, dt);
        const Tensor w = rnd({c}, gen, DType::f32), b = rnd({c}, gen, DType::f32);
        const Tensor rm = rnd({c}, gen, DType::f32), rv = Tensor::full({c}, 1.5, DType::f32);
        const kernels::BatchNormArgs a{n, c, s, training, 0.1, 1e-5, ct};
        expect_cuda_matches_cpu(std::string("batch_norm ") + to_string(shape) + (training ? " training" : " eval"),
                                dt, [&](const NormLossKernels& k, Device d) {
                                  const Tensor xd = on(d, x), gd = on(d, g), wd = on(d, w), bd = on(d, b);
                                  Tensor rmd = rm.clone().to(d), rvd = rv.clone().to(d);
                                  Tensor y = Tensor::empty(shape, dt, d);
                                  Tensor mean = Tensor::empty({c}, ct, d), invstd = Tensor::empty({c}, ct, d);
                                  k.batch_norm(view_of(xd), view_of(wd), view_of(bd), view_of(rmd), view_of(rvd), a,
                                               view_of(y), view_of(mean), view_of(invstd));
                                  Tensor dx = Tensor::empty(shape, dt, d);
                                  Tensor dw = Tensor::empty({c}, DType::f32, d), db = Tensor::empty({c}, DType::f32, d);
                                  k.batch_norm_backward(view_of(gd), view_of(xd), view_of(wd), view_of(mean),
                                                        view_of(invstd), a, view_of(dx), view_of(dw), view_of(db));
                                  return Outputs{y, mean, invstd, rmd, rvd, dx, dw, db};
                                });
      }
}

TEST(NormLossKernelsCuda, LossesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator gen(14);
  for (DType dt : kFloatDtypes) {
    const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
    for (const auto& [n, c] : std::vector<std::pair<i64, i64>>{{9, 5}, {3000, 10}, {4, 5000}})
      for (double smoothing : {0.0, 0.1}) {
        const Tensor logits = rnd({n, c}, gen, dt, 3.0);
        std::vector<i64> y(static_cast<std::size_t>(n));
        for (i64 i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (i * 7 + 3) % c;
        const Tensor labels = labels_of(y), g = Tensor::full({}, 0.5, dt);
        expect_cuda_matches_cpu("cross_entropy " + std::to_string(n) + "x" + std::to_string(c), dt,
                                [&, n = n, c = c](const NormLossKernels& k, Device d) {
                                  const Tensor ld = on(d, logits), yd = on(d, labels), gd = on(d, g);
                                  Tensor lse = Tensor::empty({n}, ct, d), loss = Tensor::empty({}, dt, d);
                                  k.cross_entropy(view_of(ld), view_of(yd), smoothing, view_of(lse), view_of(loss));
                                  Tensor dx = Tensor::empty({n, c}, dt, d);
                                  k.cross_entropy_backward(view_of(gd), view_of(ld), view_of(yd), view_of(lse),
                                                           smoothing, view_of(dx));
                                  return Outputs{lse, loss, dx};
                                });
      }
    for (i64 numel : {1, 1000, 300000}) {
      const Tensor in = rnd({numel}, gen, dt), target = rnd({numel}, gen, dt), g = Tensor::full({}, 1.5, dt);
      expect_cuda_matches_cpu("mse_loss " + std::to_string(numel), dt, [&](const NormLossKernels& k, Device d) {
        const Tensor id = on(d, in), td = on(d, target), gd = on(d, g);
        Tensor loss = Tensor::empty({}, dt, d);
        k.mse_loss(view_of(id), view_of(td), view_of(loss));
        Tensor din = Tensor::empty({numel}, dt, d), dtarget = Tensor::empty({numel}, dt, d);
        k.mse_loss_backward(view_of(gd), view_of(id), view_of(td), ct, view_of(din), view_of(dtarget));
        return Outputs{loss, din, dtarget};
      });
    }
  }
}

// The CUDA embedding copies rows and adds each row's gradients in position order, as the
// CPU does, and dropout draws the same counters: the same bits in every dtype.
TEST(NormLossKernelsCuda, EmbeddingAndDropoutAreTheCpusBits) {
  SKIP_WITHOUT_GPU();
  Generator gen(15);
  std::vector<i64> idx(5000);
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<i64>((i * i + 3 * i) % 997) % 300;
  idx[17] = 299;  // the last row
  for (DType dt : kFloatDtypes) {
    const Tensor w = rnd({300, 24}, gen, dt), indices = Tensor::from(idx, {50, 100});
    const Tensor g = rnd({50, 100, 24}, gen, dt);
    expect_cuda_matches_cpu(
        "embedding", dt,
        [&](const NormLossKernels& k, Device d) {
          const Tensor wd = on(d, w), id = on(d, indices), gd = on(d, g);
          Tensor out = Tensor::empty({50, 100, 24}, dt, d), dw = Tensor::empty({300, 24}, dt, d);
          k.embedding(view_of(id), view_of(wd), view_of(out));
          k.embedding_backward(view_of(id), view_of(gd), view_of(dw));
          return Outputs{out, dw};
        },
        {true, true});
    const Tensor x = rnd({1000, 33}, gen, dt), gx = rnd({1000, 33}, gen, dt);
    expect_cuda_matches_cpu(
        "dropout", dt,
        [&](const NormLossKernels& k, Device d) {
          const Tensor xd = on(d, x), gd = on(d, gx);
          Tensor y = Tensor::empty(x.shape(), dt, d), mask = Tensor::empty(x.shape(), dt, d);
          k.dropout(view_of(xd), 0.3, 1234, 5678, view_of(y), view_of(mask));
          Tensor dx = Tensor::empty(x.shape(), dt, d);
          k.dropout_backward(view_of(gd), view_of(mask), 0.3, view_of(dx));
          return Outputs{y, mask, dx};
        },
        {true, true, true});
  }
}

// Through the ops: CUDA operands give CUDA results and gradients near the CPU's.
TEST(NormLossKernelsCuda, TheOpsRunWhereTheirOperandsLive) {
  SKIP_WITHOUT_GPU();
  Generator gen(16);
  const Tensor x = rnd({6, 10}, gen, DType::f32), w = rnd({10}, gen, DType::f32), b = rnd({10}, gen, DType::f32);
  const Tensor labels = labels_of({0, 1, 2, 3, 4, 5});
  const auto run = [&](Device d) {
    Tensor xd = x.to(d).set_requires_grad();
    const Tensor h = layer_norm(xd, 1, w.to(d), b.to(d), 1e-5);
    const Tensor loss = cross_entropy(log_softmax(h, 1), labels.to(d), 0.1);
    loss.backward();
    return Outputs{loss, xd.grad()};
  };
  const Outputs cpu = run(Device::cpu), gpu = run(Device::cuda);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].device(), Device::cuda) << i;
    EXPECT_LE(nmse(gpu[i], cpu[i]), 1e-9) << i;
  }
}

}  // namespace
}  // namespace ampcheck
