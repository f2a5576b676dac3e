// The direct grouped/depthwise convolution kernels (kernels/cpu/conv_direct.cpp) against
// im2col + GEMM (kernels/cpu/conv_pool.cpp), whose fma chains define a convolution's
// bits: forward, input gradient and weight gradient, bit for bit, on random geometries
// (groups from dense to depthwise with multipliers, kernels 1x1 to 5x5, strides 1-3,
// paddings beyond half the kernel, dilations, planes wider than one block of rows,
// batches whose weight-gradient slots hold several samples), in f32, f16, bf16 and f64,
// on every vector path this CPU runs and at several thread counts. Values include signed
// zeros, and a separate case Inf and NaN (Inf * a padding zero is NaN in both paths).
// The values themselves are checked elsewhere: tests/ops_conv_pool_test.cpp holds conv2d
// to f64 arithmetic and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/dispatch.h"  // view_of
#include "engine/dtype/dtype.h"
#include "engine/tensor.h"
#include "kernels/conv_pool_kernels.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/gemm.h"      // GemmIsa, gemm_isa_supported
#include "kernels/cpu/parallel.h"  // set_num_threads

namespace ampcheck {
namespace {

namespace kc = kernels::cpu;
using kernels::ConvGeometry;
using i64 = std::int64_t;

ConvGeometry geometry(i64 n, i64 c_in, i64 h, i64 w, i64 c_out, i64 kh, i64 kw, i64 groups, i64 sh, i64 sw, i64 ph,
                      i64 pw, i64 dh, i64 dw) {
  ConvGeometry g;
  g.n = n, g.c_in = c_in, g.h = h, g.w = w, g.c_out = c_out, g.kh = kh, g.kw = kw, g.groups = groups;
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw;
  g.oh = (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1;
  g.ow = (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1;
  return g;
}

std::string describe(const ConvGeometry& g) {
  std::ostringstream s;
  s << "x [" << g.n << ", " << g.c_in << ", " << g.h << ", " << g.w << "] w [" << g.c_out << ", " << g.cin_g() << ", "
    << g.kh << ", " << g.kw << "] groups " << g.groups << " stride " << g.sh << "x" << g.sw << " pad " << g.ph << "x"
    << g.pw << " dilation " << g.dh << "x" << g.dw << " -> " << g.oh << "x" << g.ow;
  return s.str();
}

// Values in [-2, 2], a tenth of them +0 or -0; with `specials`, a few Inf, -Inf and NaN.
Tensor values(const Shape& shape, std::mt19937& gen, DType dtype, bool specials = false) {
  i64 n = 1;
  for (i64 d : shape) n *= d;
  std::uniform_real_distribution<double> unit(-2, 2);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) {
    const int r = pick(gen);
    x = r < 5 ? 0.0 : r < 10 ? -0.0 : unit(gen);
    if (specials && r == 99) x = std::numeric_limits<double>::infinity();
    if (specials && r == 98) x = -std::numeric_limits<double>::infinity();
    if (specials && r == 97) x = std::numeric_limits<double>::quiet_NaN();
  }
  return Tensor::from(v, shape, dtype);
}

// Equal bits, except that two NaNs are equal whatever their payloads (a vector and a
// scalar NaN may differ there; vectorize.h).
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  const std::size_t size = element_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  const std::vector<double> va = a.to_f64(), vb = b.to_f64();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::memcmp(pa + i * size, pb + i * size, size) == 0) continue;
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    std::ostringstream s;
    s << "element " << i << " of " << va.size() << ": " << std::hexfloat << va[i] << " vs " << vb[i];
    return ::testing::AssertionFailure() << s.str();
  }
  return ::testing::AssertionSuccess();
}

std::vector<kc::GemmIsa> paths() {
  std::vector<kc::GemmIsa> out;
  for (kc::GemmIsa isa : {kc::GemmIsa::scalar, kc::GemmIsa::avx2, kc::GemmIsa::avx512})
    if (kc::gemm_isa_supported(isa)) out.push_back(isa);
  return out;
}

// One geometry in one dtype: im2col + GEMM once, then the direct kernels on every path.
void expect_direct_is_im2col(const ConvGeometry& g, DType dtype, std::mt19937& gen, bool specials = false,
                             bool with_bias = true) {
  const Tensor x = values({g.n, g.c_in, g.h, g.w}, gen, dtype, specials);
  const Tensor w = values({g.c_out, g.cin_g(), g.kh, g.kw}, gen, dtype, specials);
  const Tensor b = with_bias ? values({g.c_out}, gen, dtype, specials) : Tensor();
  const Tensor gy = values({g.n, g.c_out, g.oh, g.ow}, gen, dtype, specials);
  const kernels::View none;
  auto bias_view = [&] { return with_bias ? view_of(b) : none; };

  Tensor y = Tensor::empty(gy.shape(), dtype), gx = Tensor::empty(x.shape(), dtype),
         gw = Tensor::empty(w.shape(), dtype);
  kc::im2col_conv_forward(g, view_of(x), view_of(w), bias_view(), view_of(y));
  kc::im2col_conv_backward_data(g, view_of(gy), view_of(w), view_of(gx));
  kc::im2col_conv_backward_filter(g, view_of(x), view_of(gy), view_of(gw));

  for (kc::GemmIsa isa : paths()) {
    const std::string where = describe(g) + ", " + std::string(name(dtype)) + ", " + std::string(kc::gemm_isa_name(isa));
    Tensor y2 = Tensor::empty(gy.shape(), dtype), gx2 = Tensor::empty(x.shape(), dtype),
           gw2 = Tensor::empty(w.shape(), dtype);
    kc::direct_conv_forward(g, view_of(x), view_of(w), bias_view(), view_of(y2), isa);
    kc::direct_conv_backward_data(g, view_of(gy), view_of(w), view_of(gx2), isa);
    kc::direct_conv_backward_filter(g, view_of(x), view_of(gy), view_of(gw2), isa);
    EXPECT_TRUE(same_bits(y2, y)) << "forward, " << where;
    EXPECT_TRUE(same_bits(gx2, gx)) << "input gradient, " << where;
    EXPECT_TRUE(same_bits(gw2, gw)) << "weight gradient, " << where;
  }
}

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

TEST(ConvDirect, DepthwiseAndGroupedLayersOfRealModelsAreIm2colBitForBit) {
  std::mt19937 gen(1);
  const std::vector<ConvGeometry> cases = {
      geometry(3, 8, 16, 16, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1),      // depthwise 3x3 (MobileNet)
      geometry(2, 6, 17, 15, 6, 3, 3, 6, 2, 2, 1, 1, 1, 1),      // depthwise 3x3 stride 2, odd sizes
      geometry(2, 5, 12, 12, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1),      // depthwise 5x5 (EfficientNet)
      geometry(2, 5, 13, 11, 5, 5, 5, 5, 2, 2, 2, 2, 1, 1),      // depthwise 5x5 stride 2
      geometry(2, 20, 2, 2, 20, 5, 5, 20, 1, 1, 2, 2, 1, 1),     // a 2x2 plane, 20 channels (two lane blocks)
      geometry(2, 4, 9, 9, 12, 3, 3, 4, 1, 1, 1, 1, 1, 1),       // depthwise, multiplier 3
      geometry(2, 8, 10, 10, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1),      // grouped 3x3, 4 channels per group (ResNeXt)
      geometry(2, 12, 8, 9, 18, 3, 3, 3, 2, 2, 1, 1, 1, 1),      // grouped, stride 2, c_out != c_in
      geometry(2, 6, 9, 8, 6, 1, 1, 3, 1, 1, 0, 0, 1, 1),        // grouped 1x1 (ShuffleNet v1): no col2im
      geometry(1, 4, 11, 10, 4, 3, 3, 4, 1, 1, 2, 2, 2, 2),      // depthwise, dilation 2
      geometry(1, 3, 70, 45, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1),      // wider than one block of rows
      geometry(37, 2, 5, 5, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1),       // 37 samples: slots of 2 and 3 samples
      geometry(3, 4, 7, 6, 6, 3, 2, 2, 2, 1, 1, 2, 1, 2),        // the kernel test's mixed geometry
      geometry(2, 3, 8, 8, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1),        // dense (groups 1) too: any geometry
  };
  for (const ConvGeometry& g : cases)
    for (DType d : kDtypes) expect_direct_is_im2col(g, d, gen);
  expect_direct_is_im2col(cases[0], DType::f32, gen, false, /*with_bias=*/false);
}

TEST(ConvDirect, RandomGeometriesAreIm2colBitForBit) {
  std::mt19937 gen(7);
  auto in = [&](i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(gen); };
  for (int trial = 0; trial < 120; ++trial) {
    const i64 groups = in(1, 4) == 1 ? 1 : in(2, 6), cin_g = in(1, 3) == 1 ? 1 : in(1, 4), cout_g = in(1, 4);
    const i64 kh = in(1, 5), kw = in(1, 5), sh = in(1, 3), sw = in(1, 3), dh = in(1, 2), dw = in(1, 2);
    const i64 ph = in(0, kh), pw = in(0, kw);
    const i64 eff_h = dh * (kh - 1) + 1, eff_w = dw * (kw - 1) + 1;
    const i64 h = std::max<i64>(1, eff_h - 2 * ph) + in(0, 9), w = std::max<i64>(1, eff_w - 2 * pw) + in(0, 9);
    const ConvGeometry g = geometry(in(1, 4), groups * cin_g, h, w, groups * cout_g, kh, kw, groups, sh, sw, ph, pw, dh, dw);
    expect_direct_is_im2col(g, kDtypes[trial % 4], gen, false, trial % 3 != 0);
  }
}

TEST(ConvDirect, InfAndNanMeetPaddingZerosAsInIm2col) {
  std::mt19937 gen(3);
  for (DType d : kDtypes) {
    expect_direct_is_im2col(geometry(2, 6, 9, 9, 6, 3, 3, 6, 1, 1, 1, 1, 1, 1), d, gen, /*specials=*/true);
    expect_direct_is_im2col(geometry(2, 4, 8, 7, 8, 5, 5, 4, 2, 2, 2, 2, 1, 1), d, gen, /*specials=*/true);
    expect_direct_is_im2col(geometry(2, 8, 6, 6, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1), d, gen, /*specials=*/true);
  }
}

TEST(ConvDirect, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937 gen(5);
  const ConvGeometry g = geometry(20, 24, 12, 12, 48, 3, 3, 24, 1, 1, 1, 1, 1, 1);
  const Tensor x = values({g.n, g.c_in, g.h, g.w}, gen, DType::f32);
  const Tensor w = values({g.c_out, g.cin_g(), g.kh, g.kw}, gen, DType::f32);
  const Tensor b = values({g.c_out}, gen, DType::f32);
  const Tensor gy = values({g.n, g.c_out, g.oh, g.ow}, gen, DType::f32);
  const kc::GemmIsa isa = kc::active_gemm_isa();
  std::vector<Tensor> runs;
  const int before = kc::num_threads();
  for (int threads : {1, 2, 3}) {
    kc::set_num_threads(threads);
    Tensor y = Tensor::empty(gy.shape()), gx = Tensor::empty(x.shape()), gw = Tensor::empty(w.shape());
    kc::direct_conv_forward(g, view_of(x), view_of(w), view_of(b), view_of(y), isa);
    kc::direct_conv_backward_data(g, view_of(gy), view_of(w), view_of(gx), isa);
    kc::direct_conv_backward_filter(g, view_of(x), view_of(gy), view_of(gw), isa);
    runs.insert(runs.end(), {y, gx, gw});
  }
  kc::set_num_threads(before);
  for (std::size_t i = 3; i < runs.size(); ++i) EXPECT_TRUE(same_bits(runs[i], runs[i % 3])) << "output " << i % 3;
}

TEST(ConvDirect, TheCpuTableRunsDepthwiseConvolutionsDirectly) {
  EXPECT_TRUE(kc::direct_conv_takes(geometry(1, 8, 8, 8, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1)));    // depthwise
  EXPECT_TRUE(kc::direct_conv_takes(geometry(1, 8, 8, 8, 16, 3, 3, 8, 1, 1, 1, 1, 1, 1)));   // depthwise, multiplier 2
  EXPECT_FALSE(kc::direct_conv_takes(geometry(1, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1)));   // dense
  EXPECT_FALSE(kc::direct_conv_takes(geometry(1, 32, 8, 8, 32, 3, 3, 8, 1, 1, 1, 1, 1, 1))); // 4 channels per group
}

}  // namespace
}  // namespace ampcheck
