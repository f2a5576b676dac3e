// The CUDA conversions equal the CPU scalar definition on every f32 pattern and every
// 16-bit pattern. Skips, saying why, where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "kernels/fp_bits.h"

namespace ampcheck {
namespace {

namespace cuda = kernels::cuda;

class GpuConvert : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::Probe& p = cuda::probe();
    if (p.device_count == 0) GTEST_SKIP() << "no usable GPU: " << p.why_none;
  }
};

TEST_F(GpuConvert, NarrowingEqualsCpuOnEveryF32Pattern) {
  constexpr std::uint64_t kChunk = 1ull << 26;
  std::vector<std::uint32_t> in(kChunk);
  std::vector<std::uint16_t> f16(kChunk), bf16(kChunk);
  std::uint64_t bad_f16 = 0, bad_bf16 = 0;
  for (std::uint64_t base = 0; base < (1ull << 32); base += kChunk) {
    for (std::uint64_t i = 0; i < kChunk; ++i) in[i] = static_cast<std::uint32_t>(base + i);
    const auto* src = reinterpret_cast<const float*>(in.data());
    cuda::f32_to_f16(src, f16.data(), kChunk);
    cuda::f32_to_bf16(src, bf16.data(), kChunk);
    for (std::uint64_t i = 0; i < kChunk; ++i) {
      bad_f16 += f16[i] != kernels::f32_to_f16_bits(in[i]);
      bad_bf16 += bf16[i] != kernels::f32_to_bf16_bits(in[i]);
    }
  }
  EXPECT_EQ(bad_f16, 0u);
  EXPECT_EQ(bad_bf16, 0u);
}

TEST_F(GpuConvert, WideningAndF64EqualCpuOnEvery16BitPattern) {
  std::vector<std::uint16_t> in(1u << 16);
  for (std::uint32_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i);
  std::vector<float> out(in.size());
  for (bool bf : {false, true}) {
    (bf ? cuda::bf16_to_f32 : cuda::f16_to_f32)(in.data(), out.data(), in.size());
    for (std::uint32_t i = 0; i < in.size(); ++i) {
      const std::uint32_t want = bf ? kernels::bf16_bits_to_f32_bits(in[i]) : kernels::f16_bits_to_f32_bits(in[i]);
      ASSERT_EQ(kernels::bits_of(out[i]), want) << (bf ? "bf16 " : "f16 ") << i;
    }
  }
  std::vector<double> values;
  for (int e = -30; e <= 20; ++e)
    for (int m = 0; m < 64; ++m) values.push_back(std::ldexp(1.0 + m / 64.0 + 1e-12, e));
  std::vector<std::uint16_t> g(values.size());
  cuda::f64_to_f16(values.data(), g.data(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(g[i], kernels::f64_to_f16_bits(kernels::bits_of(values[i]))) << values[i];
  cuda::f64_to_bf16(values.data(), g.data(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(g[i], kernels::f64_to_bf16_bits(kernels::bits_of(values[i]))) << values[i];
}

}  // namespace
}  // namespace ampcheck
