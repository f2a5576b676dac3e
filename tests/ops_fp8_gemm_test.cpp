// The fp8 GEMM (kernels/fp8_gemm_kernels.h):
//   - exact: fp8 operands holding small integers (every product and partial sum an
//     integer binary32 holds exactly), power-of-two scales: C equals the exact sum computed
//     in binary64, rounded once to C's dtype by the scalar definitions, for every
//     transpose, with bias and accumulation;
//   - definition: random codes and scales that are not powers of two: every element is one
//     fma chain over k in ascending order of the widened codes, then one product with
//     a_scale_inv * b_scale_inv (the plainest loop that says so), and it is within the
//     chain's rounding bound of the binary64 sum;
//   - refusals: E5M2 x E5M2, a C of the wrong dtype or size;
//   - on a machine with a GPU (sm_89 and later), cuBLASLt against the CPU: bit-exact on the
//     exact case, within stated tolerances (split accumulator 2^-18, fast accumulation
//     2^-10 of the sum of |products|) on random data. Skips, saying why, without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"
#include "kernels/fp8_gemm_kernels.h"
#include "kernels/fp8_kernels.h"
#include "kernels/fp_bits.h"
#include "tests/gpu_test_util.h"

namespace ampcheck {
namespace {


using kernels::Fp8Format;
using kernels::Fp8GemmDesc;
using kernels::Fp8GemmKernels;
using i64 = std::int64_t;

float value(std::uint8_t code, Fp8Format f) {
  return kernels::float_of(f == Fp8Format::e4m3 ? kernels::e4m3_bits_to_f32_bits(code)
                                                : kernels::e5m2_bits_to_f32_bits(code));
}
std::uint8_t code_of(float x, Fp8Format f) {
  return f == Fp8Format::e4m3 ? kernels::f32_to_e4m3_bits(kernels::bits_of(x), kernels::Fp8Overflow::saturate)
                              : kernels::f32_to_e5m2_bits(kernels::bits_of(x), kernels::Fp8Overflow::saturate);
}

// op(A)[i, p] and op(B)[p, j] of packed row-major storage.
struct Problem {
  bool ta = false, tb = false;
  i64 m = 0, n = 0, k = 0;
  Fp8Format fa = Fp8Format::e4m3, fb = Fp8Format::e4m3;
  std::vector<std::uint8_t> a, b;
  float sa = 1.0f, sb = 1.0f;
  float opa(i64 i, i64 p) const { return value(ta ? a[static_cast<std::size_t>(p * m + i)] : a[static_cast<std::size_t>(i * k + p)], fa); }
  float opb(i64 p, i64 j) const { return value(tb ? b[static_cast<std::size_t>(j * k + p)] : b[static_cast<std::size_t>(p * n + j)], fb); }
};

Problem make(bool ta, bool tb, i64 m, i64 n, i64 k, Fp8Format fa, Fp8Format fb, std::mt19937& rng, bool small_integers) {
  Problem p{ta, tb, m, n, k, fa, fb, {}, {}, 1.0f, 1.0f};
  std::uniform_int_distribution<int> small(-12, 12);
  std::uniform_real_distribution<float> real(-300.0f, 300.0f);
  auto draw = [&](Fp8Format f) { return code_of(small_integers ? static_cast<float>(small(rng)) : real(rng) * (f == Fp8Format::e5m2 ? 10.0f : 1.0f), f); };
  p.a.resize(static_cast<std::size_t>(m * k));
  p.b.resize(static_cast<std::size_t>(k * n));
  for (auto& c : p.a) c = draw(fa);
  for (auto& c : p.b) c = draw(fb);
  return p;
}

// The problem's shape, formats and scales, with its operands at a and b.
Fp8GemmDesc desc_of(const Problem& p, const std::uint8_t* a, const std::uint8_t* b) {
  Fp8GemmDesc d;
  d.trans_a = p.ta;
  d.trans_b = p.tb;
  d.m = p.m;
  d.n = p.n;
  d.k = p.k;
  d.a = a;
  d.b = b;
  d.a_format = p.fa;
  d.b_format = p.fb;
  d.a_scale_inv = p.sa;
  d.b_scale_inv = p.sb;
  return d;
}

std::vector<float> run_cpu(const Problem& p, DType out, const std::vector<float>& c0, const std::vector<float>* bias) {
  const i64 count = p.m * p.n;
  std::vector<std::uint16_t> c16(static_cast<std::size_t>(count));
  std::vector<float> c32(c0);
  for (i64 i = 0; i < count; ++i)
    c16[static_cast<std::size_t>(i)] = out == DType::f16 ? kernels::f32_to_f16(c0[static_cast<std::size_t>(i)])
                                                         : kernels::f32_to_bf16(c0[static_cast<std::size_t>(i)]);
  Fp8GemmDesc d = desc_of(p, p.a.data(), p.b.data());
  d.c = kernels::View{out == DType::f32 ? static_cast<void*>(c32.data()) : static_cast<void*>(c16.data()), out, {p.m, p.n}};
  d.accumulate = !c0.empty() && c0[0] != 0.0f;
  std::vector<float> b32;
  if (bias) {
    b32 = *bias;
    d.bias = kernels::View{b32.data(), DType::f32, {p.n}};
  }
  Fp8GemmKernels::cpu().gemm(d);
  if (out == DType::f32) return c32;
  std::vector<float> r(static_cast<std::size_t>(count));
  for (i64 i = 0; i < count; ++i)
    r[static_cast<std::size_t>(i)] = out == DType::f16 ? kernels::f16_to_f32(c16[static_cast<std::size_t>(i)])
                                                       : kernels::bf16_to_f32(c16[static_cast<std::size_t>(i)]);
  return r;
}

TEST(Fp8Gemm, SmallIntegerOperandsGiveTheExactSumRoundedOnce) {
  std::mt19937 rng(33);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const auto& [fa, fb] : {std::pair{Fp8Format::e4m3, Fp8Format::e4m3}, std::pair{Fp8Format::e5m2, Fp8Format::e4m3},
                                   std::pair{Fp8Format::e4m3, Fp8Format::e5m2}})
        for (const DType out : {DType::f32, DType::bf16, DType::f16}) {
          Problem p = make(ta, tb, 5, 7, 19, fa, fb, rng, true);
          p.sa = 0.25f;
          p.sb = 8.0f;
          std::vector<float> c0(35), bias(7);
          for (std::size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(static_cast<int>(i) - 17);
          for (std::size_t j = 0; j < bias.size(); ++j) bias[j] = 0.5f * static_cast<float>(j);
          const std::vector<float> got = run_cpu(p, out, c0, &bias);
          for (i64 i = 0; i < p.m; ++i)
            for (i64 j = 0; j < p.n; ++j) {
              double exact = 0.0;
              for (i64 q = 0; q < p.k; ++q) exact += static_cast<double>(p.opa(i, q)) * p.opb(q, j);
              // C's old value as C held it (rounded to its dtype), then the bias.
              const std::size_t at = static_cast<std::size_t>(i * p.n + j);
              const double old = out == DType::f32 ? c0[at]
                                 : out == DType::f16 ? kernels::f16_to_f32(kernels::f32_to_f16(c0[at]))
                                                     : kernels::bf16_to_f32(kernels::f32_to_bf16(c0[at]));
              const double want64 = exact * 2.0 + old + bias[static_cast<std::size_t>(j)];
              const auto want32 = static_cast<float>(want64);
              ASSERT_EQ(static_cast<double>(want32), want64) << "the test's data must keep every value exact";
              const float want = out == DType::f32 ? want32
                                 : out == DType::f16 ? kernels::f16_to_f32(kernels::f32_to_f16(want32))
                                                     : kernels::bf16_to_f32(kernels::f32_to_bf16(want32));
              ASSERT_EQ(kernels::bits_of(got[at]), kernels::bits_of(want))
                  << "ta " << ta << " tb " << tb << " out " << static_cast<int>(out) << " at " << i << "," << j;
            }
        }
}

TEST(Fp8Gemm, EachElementIsOneFmaChainThenOneScale) {
  std::mt19937 rng(34);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      Problem p = make(ta, tb, 9, 13, 300, Fp8Format::e4m3, Fp8Format::e5m2, rng, false);
      p.sa = 1.0f / 3.0f;
      p.sb = 0.07f;
      const std::vector<float> got = run_cpu(p, DType::f32, std::vector<float>(static_cast<std::size_t>(p.m * p.n), 0.0f), nullptr);
      const float scale = p.sa * p.sb;
      for (i64 i = 0; i < p.m; ++i)
        for (i64 j = 0; j < p.n; ++j) {
          float chain = 0.0f;
          double exact = 0.0, magnitude = 0.0;
          for (i64 q = 0; q < p.k; ++q) {
            chain = std::fmaf(p.opa(i, q), p.opb(q, j), chain);
            exact += static_cast<double>(p.opa(i, q)) * p.opb(q, j);
            magnitude += std::fabs(static_cast<double>(p.opa(i, q)) * p.opb(q, j));
          }
          const float want = scale * chain;
          const float g = got[static_cast<std::size_t>(i * p.n + j)];
          ASSERT_EQ(kernels::bits_of(g), kernels::bits_of(want)) << i << "," << j;
          // k roundings of sums, one of the scale's product, one of the scaling.
          const double bound = (static_cast<double>(p.k) + 2.0) * std::ldexp(1.0, -24) * magnitude * std::fabs(scale);
          ASSERT_LE(std::fabs(static_cast<double>(g) - exact * static_cast<double>(scale)), bound) << i << "," << j;
        }
    }
}

// MXFP8: random codes with random E8M0 block scales (a block of 32 along k, k = 300 ends
// in a short one): every element is the fma chain over k of (code value x its block's
// power of two), the plainest loop that says so, with no per-tensor scale.
TEST(Fp8Gemm, BlockScaledOperandsMultiplyEachCodeByItsBlocksScale) {
  std::mt19937 rng(35);
  Problem p = make(false, true, 7, 11, 300, Fp8Format::e4m3, Fp8Format::e5m2, rng, false);
  const i64 blocks = (p.k + 31) / 32;
  std::uniform_int_distribution<int> exponent(127 - 12, 127 + 12);
  std::vector<std::uint8_t> sa(static_cast<std::size_t>(p.m * blocks)), sb(static_cast<std::size_t>(p.n * blocks));
  for (auto& e : sa) e = static_cast<std::uint8_t>(exponent(rng));
  for (auto& e : sb) e = static_cast<std::uint8_t>(exponent(rng));
  std::vector<float> got(static_cast<std::size_t>(p.m * p.n));
  Fp8GemmDesc d = desc_of(p, p.a.data(), p.b.data());
  d.a_block_scales = sa.data();
  d.b_block_scales = sb.data();
  d.c = kernels::View{got.data(), DType::f32, {p.m, p.n}};
  Fp8GemmKernels::cpu().gemm(d);
  for (i64 i = 0; i < p.m; ++i)
    for (i64 j = 0; j < p.n; ++j) {
      float chain = 0.0f;
      for (i64 q = 0; q < p.k; ++q) {
        const float a = std::ldexp(p.opa(i, q), sa[static_cast<std::size_t>(i * blocks + q / 32)] - 127);
        const float b = std::ldexp(p.opb(q, j), sb[static_cast<std::size_t>(j * blocks + q / 32)] - 127);
        chain = std::fmaf(a, b, chain);
      }
      ASSERT_EQ(kernels::bits_of(got[static_cast<std::size_t>(i * p.n + j)]), kernels::bits_of(chain)) << i << "," << j;
    }
  // Block scales for one operand, or operands not k-contiguous: refused.
  d.b_block_scales = nullptr;
  EXPECT_THROW(Fp8GemmKernels::cpu().gemm(d), std::invalid_argument);
  d.b_block_scales = sb.data();
  d.trans_b = false;
  EXPECT_THROW(Fp8GemmKernels::cpu().gemm(d), std::invalid_argument);
  d.trans_b = true;
  d.a_scale_inv = 0.5f;
  EXPECT_THROW(Fp8GemmKernels::cpu().gemm(d), std::invalid_argument);
}

TEST(Fp8Gemm, WhatNoDeviceRunsIsRefusedNamingTheOp) {
  std::vector<std::uint8_t> a(4), b(4);
  std::vector<float> c(4);
  Fp8GemmDesc d;
  d.op = "fp8 linear 'fc1'";
  d.m = d.n = d.k = 2;
  d.a = a.data();
  d.b = b.data();
  d.c = kernels::View{c.data(), DType::f32, {2, 2}};
  d.a_format = d.b_format = Fp8Format::e5m2;
  try {
    Fp8GemmKernels::cpu().gemm(d);
    FAIL() << "E5M2 x E5M2 ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8 linear 'fc1': E5M2 x E5M2"), std::string::npos) << e.what();
  }
  d.b_format = Fp8Format::e4m3;
  d.c = kernels::View{c.data(), DType::f64, {2, 2}};
  EXPECT_THROW(Fp8GemmKernels::cpu().gemm(d), std::invalid_argument);
  d.c = kernels::View{c.data(), DType::f32, {3}};
  EXPECT_THROW(Fp8GemmKernels::cpu().gemm(d), std::invalid_argument);
}

// ---- the GPU against the CPU --------------------------------------------------------------

Tensor device_bytes(const std::vector<std::uint8_t>& codes) {
  Tensor h = Tensor::zeros({static_cast<i64>((codes.size() + 3) / 4)}, DType::f32);
  std::memcpy(h.raw(), codes.data(), codes.size());
  return h.to(Device::cuda);
}

std::vector<float> run_gpu(const Problem& p, bool split) {
  const Tensor a = device_bytes(p.a), b = device_bytes(p.b);
  Tensor c = Tensor::zeros({p.m, p.n}, DType::f32, Device::cuda);
  Fp8GemmDesc d = desc_of(p, static_cast<const std::uint8_t*>(a.raw()), static_cast<const std::uint8_t*>(b.raw()));
  d.c = kernels::View{c.raw(), DType::f32, {p.m, p.n}};
  d.split_accumulator = split;
  Fp8GemmKernels::cuda().gemm(d);
  const std::vector<double> v = c.to(Device::cpu).to_f64();
  return std::vector<float>(v.begin(), v.end());
}

class Fp8GemmCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::has_gpu()) GTEST_SKIP() << "no usable GPU: " << kernels::cuda::probe().why_none;
    const auto& gpus = kernels::cuda::cuda_info().gpus;
    if (gpus.empty() || gpus[0].cc_major * 10 + gpus[0].cc_minor < 89)
      GTEST_SKIP() << "cuBLASLt's fp8 GEMM needs compute capability 8.9 or later";
  }
};

TEST_F(Fp8GemmCuda, CuBlasLtEqualsTheCpuExactlyOnExactSumsAndWithinToleranceOtherwise) {
  std::mt19937 rng(35);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const bool split : {true, false}) {
        Problem exact = make(ta, tb, 32, 48, 64, Fp8Format::e4m3, Fp8Format::e4m3, rng, true);
        exact.sa = 0.5f;
        const std::vector<float> zeros(static_cast<std::size_t>(exact.m * exact.n), 0.0f);
        const std::vector<float> want = run_cpu(exact, DType::f32, zeros, nullptr);
        const std::vector<float> got = run_gpu(exact, split);
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(kernels::bits_of(got[i]), kernels::bits_of(want[i])) << "ta " << ta << " tb " << tb << " at " << i;

        Problem p = make(ta, tb, 64, 32, 256, Fp8Format::e5m2, Fp8Format::e4m3, rng, false);
        p.sa = 0.013f;
        p.sb = 0.37f;
        const std::vector<float> cpu = run_cpu(p, DType::f32, std::vector<float>(static_cast<std::size_t>(p.m * p.n), 0.0f), nullptr);
        const std::vector<float> gpu = run_gpu(p, split);
        const double tol = split ? std::ldexp(1.0, -18) : std::ldexp(1.0, -10);
        for (i64 i = 0; i < p.m; ++i)
          for (i64 j = 0; j < p.n; ++j) {
            double magnitude = 0.0;
            for (i64 q = 0; q < p.k; ++q) magnitude += std::fabs(static_cast<double>(p.opa(i, q)) * p.opb(q, j));
            const std::size_t at = static_cast<std::size_t>(i * p.n + j);
            ASSERT_LE(std::fabs(static_cast<double>(gpu[at]) - cpu[at]), tol * magnitude * p.sa * p.sb)
                << "ta " << ta << " tb " << tb << " split " << split << " at " << i << "," << j;
          }
      }
}


// The casts before the GEMM: the GPU's codes, amax and cast statistics are the CPU's, bit
// for bit (elementwise with the shared rules; integer counts and a max), in f32 and bf16
// inputs, over values from far below E5M2's subnormals to beyond E4M3's range.
class Fp8CastsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::has_gpu()) GTEST_SKIP() << "no usable GPU: " << kernels::cuda::probe().why_none;
  }
};

TEST_F(Fp8CastsCuda, TheCodesAmaxAndStatisticsAreTheCpus) {
  std::mt19937 rng(33);
  std::uniform_real_distribution<double> exponent(-30.0, 20.0);
  std::vector<float> x(100003);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((rng() % 2 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
  x[5] = 0.0f;
  x[77] = -INFINITY;
  x[1000] = std::nanf("");
  const i64 n = static_cast<i64>(x.size());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor host = Tensor::from(x, {n}).to(dtype);
    const Tensor device = host.to(Device::cuda);
    for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (const float scale : {1.0f, 1.0f / 448.0f, 4096.0f}) {
        std::vector<std::uint8_t> cpu_codes(x.size());
        kernels::Fp8QuantizeDesc d;
        d.x = kernels::View{const_cast<void*>(host.raw()), dtype, {n}};
        d.codes = cpu_codes.data();
        d.format = f;
        d.scale = scale;
        const float cpu_amax = kernels::Fp8Kernels::cpu().quantize(d);
        Tensor gpu_codes = Tensor::zeros({(n + 3) / 4}, DType::f32, Device::cuda);
        d.x = kernels::View{const_cast<void*>(device.raw()), dtype, {n}};
        d.codes = static_cast<std::uint8_t*>(gpu_codes.raw());
        const float gpu_amax = kernels::Fp8Kernels::cuda().quantize(d);
        EXPECT_EQ(kernels::bits_of(gpu_amax), kernels::bits_of(cpu_amax));
        const Tensor back = gpu_codes.to(Device::cpu);
        EXPECT_EQ(std::memcmp(back.raw(), cpu_codes.data(), cpu_codes.size()), 0) << "scale " << scale;

        const kernels::Fp8CastStats c = kernels::Fp8Kernels::cpu().cast_stats(kernels::View{const_cast<void*>(host.raw()), dtype, {n}}, scale, f);
        const kernels::Fp8CastStats g = kernels::Fp8Kernels::cuda().cast_stats(kernels::View{const_cast<void*>(device.raw()), dtype, {n}}, scale, f);
        EXPECT_EQ(g.count, c.count);
        EXPECT_EQ(g.nan, c.nan);
        EXPECT_EQ(g.inf, c.inf);
        EXPECT_EQ(g.zero, c.zero);
        EXPECT_EQ(g.saturated, c.saturated);
        EXPECT_EQ(g.flushed, c.flushed);
        EXPECT_EQ(g.binade, c.binade);
        EXPECT_EQ(kernels::bits_of(g.amax), kernels::bits_of(c.amax));
        EXPECT_GT(c.saturated + c.flushed, 0);
      }
  }
}

}  // namespace
}  // namespace ampcheck
