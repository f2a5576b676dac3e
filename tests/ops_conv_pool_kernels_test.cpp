// The convolution and pooling family over Views (kernels/conv_pool_kernels.h): the tables,
// the shared window rules against brute force, the CPU kernels called directly against
// the ops, the CUDA pools' per-element arithmetic run on the host against the CPU kernels
// bit for bit, and, on a machine with a GPU, the CUDA table against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/ops.h"
#include "engine/tensor.h"
#include "kernels/conv_pool_kernels.h"
#include "kernels/cuda/cuda.h"  // probe
#include "kernels/element.h"    // store_element: the rounding the CUDA kernels apply
#include "tests/gpu_test_util.h"
#include "kernels/kernel_note.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

using kernels::ConvGeometry;
using kernels::ConvPoolKernels;
using kernels::PoolGeometry;
using kernels::View;
using i64 = std::int64_t;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor random(const Shape& shape, Generator& gen, DType dtype) { return Tensor::uniform(shape, gen, -2, 2, dtype); }

void expect_table_complete(const ConvPoolKernels& k) {
  EXPECT_NE(k.conv2d_forward, nullptr);
  EXPECT_NE(k.conv2d_backward_data, nullptr);
  EXPECT_NE(k.conv2d_backward_filter, nullptr);
  EXPECT_NE(k.conv2d_backward_bias, nullptr);
  EXPECT_NE(k.max_pool2d_forward, nullptr);
  EXPECT_NE(k.max_pool2d_indices, nullptr);
  EXPECT_NE(k.max_pool2d_backward, nullptr);
  EXPECT_NE(k.avg_pool2d_forward, nullptr);
  EXPECT_NE(k.avg_pool2d_backward, nullptr);
  EXPECT_NE(k.adaptive_avg_pool2d_forward, nullptr);
  EXPECT_NE(k.adaptive_avg_pool2d_backward, nullptr);
}

// ---- the tables ---------------------------------------------------------------------------

TEST(ConvPoolKernels, TheCpuTableHasEveryEntry) { expect_table_complete(ConvPoolKernels::cpu()); }

TEST(ConvPoolKernels, TheCudaTableIsCompleteOrSaysThereIsNoGpuBuild) {
  if (kernels::cuda::probe().built_with_cuda) {
    expect_table_complete(ConvPoolKernels::cuda());  // asking for the table touches no GPU
    return;
  }
  try {
    ConvPoolKernels::cuda();
    ADD_FAILURE() << "a build without CUDA handed out a CUDA table";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU implementation"), std::string::npos) << e.what();
  }
}

// ---- the shared window rules --------------------------------------------------------------

TEST(ConvPoolKernels, WindowsHoldingAreExactlyTheWindowsThatHoldTheElement) {
  for (i64 k = 1; k <= 5; ++k)
    for (i64 s = 1; s <= 4; ++s)
      for (i64 p = 0; 2 * p <= k; ++p)
        for (i64 in = std::max<i64>(1, k - 2 * p); in <= 11; ++in) {
          const i64 out = (in + 2 * p - k) / s + 1;
          for (i64 i = 0; i < in; ++i) {
            const kernels::WindowRange r = kernels::windows_holding(i, k, s, p, out);
            for (i64 o = 0; o < out; ++o) {
              const bool holds = o * s - p <= i && i < o * s - p + k;
              EXPECT_EQ(holds, o >= r.lo && o < r.hi)
                  << "k " << k << " s " << s << " p " << p << " in " << in << " i " << i << " o " << o;
            }
          }
        }
}

TEST(ConvPoolKernels, AdaptiveWindowsHoldingAreExactlyTheWindowsThatHoldTheElement) {
  for (i64 in = 1; in <= 17; ++in)
    for (i64 out = 1; out <= 17; ++out)
      for (i64 i = 0; i < in; ++i) {
        const kernels::WindowRange r = kernels::adaptive_windows_holding(i, in, out);
        for (i64 o = 0; o < out; ++o) {
          const bool holds = kernels::adaptive_start(o, in, out) <= i && i < kernels::adaptive_end(o, in, out);
          EXPECT_EQ(holds, o >= r.lo && o < r.hi) << "in " << in << " out " << out << " i " << i << " o " << o;
        }
      }
}

TEST(ConvPoolKernels, AdaptiveWindowsArePyTorchs) {
  // torch.nn.AdaptiveAvgPool1d(3) over 7 elements: [0, 3), [2, 5), [4, 7).
  EXPECT_EQ(kernels::adaptive_start(0, 7, 3), 0);
  EXPECT_EQ(kernels::adaptive_end(0, 7, 3), 3);
  EXPECT_EQ(kernels::adaptive_start(1, 7, 3), 2);
  EXPECT_EQ(kernels::adaptive_end(1, 7, 3), 5);
  EXPECT_EQ(kernels::adaptive_start(2, 7, 3), 4);
  EXPECT_EQ(kernels::adaptive_end(2, 7, 3), 7);
}

TEST(ConvPoolKernels, TheMaximumIsTheFirstLargestOrTheLastNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(kernels::max_pool_takes(2.0f, 1.0f));
  EXPECT_FALSE(kernels::max_pool_takes(1.0f, 1.0f));  // a tie keeps the first
  EXPECT_FALSE(kernels::max_pool_takes(1.0f, 2.0f));
  EXPECT_TRUE(kernels::max_pool_takes(nan, 2.0f));
  EXPECT_TRUE(kernels::max_pool_takes(nan, nan));     // the last NaN
  EXPECT_FALSE(kernels::max_pool_takes(5.0f, nan));  // nothing displaces a NaN
  EXPECT_FALSE(kernels::max_pool_takes(-0.0, 0.0));
}

// ---- the CPU kernels called directly agree with the ops -----------------------------------

ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  ConvGeometry g;
  g.n = x.size(0), g.c_in = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.c_out = w.size(0), g.kh = w.size(2), g.kw = w.size(3), g.groups = o.groups;
  g.sh = o.stride[0], g.sw = o.stride[1], g.ph = o.padding[0], g.pw = o.padding[1];
  g.dh = o.dilation[0], g.dw = o.dilation[1];
  g.oh = (g.h + 2 * g.ph - (g.dh * (g.kh - 1) + 1)) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - (g.dw * (g.kw - 1) + 1)) / g.sw + 1;
  return g;
}

TEST(ConvPoolKernels, TheCpuConvolutionKernelsAreTheOpsBitForBit) {
  Generator gen(11);
  Conv2dOptions o;
  o.stride = {2, 1};
  o.padding = {1, 2};
  o.dilation = {1, 2};
  o.groups = 2;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Tensor x = random({3, 4, 7, 6}, gen, d).set_requires_grad(true);
    Tensor w = random({6, 2, 3, 2}, gen, d).set_requires_grad(true);
    Tensor b = random({6}, gen, d).set_requires_grad(true);
    const Tensor y = conv2d(x, w, b, o);
    const Tensor gy = random(y.shape(), gen, d);
    y.backward(gy);
    const ConvGeometry g = conv_geometry(x, w, o);
    const ConvPoolKernels& k = ConvPoolKernels::cpu();
    Tensor y2 = Tensor::empty(y.shape(), d), gx = Tensor::empty(x.shape(), d), gw = Tensor::empty(w.shape(), d),
           gb = Tensor::empty(b.shape(), d);
    k.conv2d_forward(g, view_of(x), view_of(w), view_of(b), view_of(y2));
    k.conv2d_backward_data(g, view_of(gy), view_of(w), view_of(gx));
    k.conv2d_backward_filter(g, view_of(x), view_of(gy), view_of(gw));
    k.conv2d_backward_bias(g, view_of(gy), view_of(gb));
    EXPECT_EQ(bytes_of(y2), bytes_of(y)) << name(d);
    EXPECT_EQ(bytes_of(gx), bytes_of(x.grad())) << name(d);
    EXPECT_EQ(bytes_of(gw), bytes_of(w.grad())) << name(d);
    EXPECT_EQ(bytes_of(gb), bytes_of(b.grad())) << name(d);
  }
}

// ---- the CUDA pools' arithmetic, run on the host, is the CPU kernels' ----------------------

struct PoolCase {
  const char* name;
  Shape x;
  i64 kh, kw, sh, sw, ph, pw;  // kh == 0: adaptive to (sh, sw)
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {"2x2 stride 2", {2, 3, 6, 8}, 2, 2, 2, 2, 0, 0},
      {"3x3 stride 1 (overlapping)", {1, 2, 7, 5}, 3, 3, 1, 1, 0, 0},
      {"3x2 stride 2x1 padding 1x1", {2, 2, 9, 6}, 3, 2, 2, 1, 1, 1},
      {"5x5 stride 2 padding 2", {1, 3, 11, 10}, 5, 5, 2, 2, 2, 2},
      {"adaptive 3x4 of 7x9", {2, 3, 7, 9}, 0, 0, 3, 4, 0, 0},
      {"adaptive 5x5 of 3x4 (windows of one)", {1, 2, 3, 4}, 0, 0, 5, 5, 0, 0},
      {"adaptive 1x1 (global)", {2, 4, 5, 6}, 0, 0, 1, 1, 0, 0},
  };
  return cases;
}

PoolGeometry pool_geometry(const PoolCase& c) {
  PoolGeometry g;
  g.n = c.x[0], g.c = c.x[1], g.h = c.x[2], g.w = c.x[3];
  if (c.kh == 0) {
    g.oh = c.sh, g.ow = c.sw;
  } else {
    g.kh = c.kh, g.kw = c.kw, g.sh = c.sh, g.sw = c.sw, g.ph = c.ph, g.pw = c.pw;
    g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
    g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  }
  return g;
}

// What a CUDA kernel of pool.cu writes: each element from the per-element definition in
// the compute type, rounded once.
template <typename F>
Tensor per_element(const Shape& shape, DType dtype, F at) {
  Tensor out = Tensor::empty(shape, dtype);
  for (i64 i = 0; i < out.numel(); ++i)
    kernels::with_compute_type(dtype, [&](auto zero) {
      using T = decltype(zero);
      kernels::store_element(out.raw(), dtype, i, at(T{}, i));
    });
  return out;
}

// Inputs with ties (values from a small set) and a NaN, so the max rule is exercised.
Tensor pool_input(const Shape& shape, Generator& gen, DType dtype, bool with_nan = true) {
  std::vector<double> v = Tensor::uniform(shape, gen, -3, 3, DType::f64).to_f64();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::round(v[i] * 2) / 2;
  if (with_nan) v[v.size() / 3] = kNaN;
  return Tensor::from(v, shape, dtype);
}

TEST(ConvPoolKernels, TheCudaPoolArithmeticOnTheHostIsTheCpuKernelsBitForBit) {
  Generator gen(5);
  const ConvPoolKernels& k = ConvPoolKernels::cpu();
  for (const PoolCase& c : pool_cases()) {
    const PoolGeometry g = pool_geometry(c);
    const Shape out_shape{g.n, g.c, g.oh, g.ow};
    for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(name(d)));
      const Tensor x = pool_input(c.x, gen, d);
      const Tensor gy = random(out_shape, gen, d);
      const void* xp = x.raw();
      const void* gyp = gy.raw();
      Tensor y = Tensor::empty(out_shape, d), gx = Tensor::empty(c.x, d);
      if (c.kh == 0) {
        k.adaptive_avg_pool2d_forward(g, view_of(x), view_of(y));
        k.adaptive_avg_pool2d_backward(g, view_of(gy), view_of(gx));
        EXPECT_EQ(bytes_of(per_element(out_shape, d,
                                       [&](auto t, i64 o) { return kernels::adaptive_avg_at<decltype(t)>(g, xp, d, o); })),
                  bytes_of(y));
        EXPECT_EQ(bytes_of(per_element(c.x, d,
                                       [&](auto t, i64 i) {
                                         return kernels::adaptive_avg_grad_at<decltype(t)>(g, gyp, d, i);
                                       })),
                  bytes_of(gx));
        continue;
      }
      k.avg_pool2d_forward(g, view_of(x), view_of(y));
      k.avg_pool2d_backward(g, view_of(gy), view_of(gx));
      EXPECT_EQ(bytes_of(per_element(out_shape, d,
                                     [&](auto t, i64 o) { return kernels::avg_pool_at<decltype(t)>(g, xp, d, o); })),
                bytes_of(y));
      EXPECT_EQ(bytes_of(per_element(c.x, d,
                                     [&](auto t, i64 i) { return kernels::avg_pool_grad_at<decltype(t)>(g, gyp, d, i); })),
                bytes_of(gx));

      Tensor indices = Tensor::empty(out_shape, DType::i64), indices_again = Tensor::empty(out_shape, DType::i64);
      k.max_pool2d_forward(g, view_of(x), view_of(y), view_of(indices));
      k.max_pool2d_indices(g, view_of(x), view_of(indices_again));
      EXPECT_EQ(bytes_of(indices_again), bytes_of(indices));
      std::vector<std::int64_t> host_indices(static_cast<std::size_t>(indices.numel()));
      const Tensor host_y = per_element(out_shape, d, [&](auto t, i64 o) {
        const auto best = kernels::max_pool_at<decltype(t)>(g, xp, d, o);
        host_indices[static_cast<std::size_t>(o)] = best.index;
        return best.value;
      });
      EXPECT_EQ(bytes_of(host_y), bytes_of(y));
      EXPECT_EQ(host_indices, (std::vector<std::int64_t>(indices.data<std::int64_t>(),
                                                         indices.data<std::int64_t>() + indices.numel())));
      k.max_pool2d_backward(g, view_of(gy), view_of(indices), view_of(gx));
      const std::int64_t* ip = indices.data<std::int64_t>();
      EXPECT_EQ(bytes_of(per_element(c.x, d,
                                     [&](auto t, i64 i) {
                                       return kernels::max_pool_grad_at<decltype(t)>(g, gyp, d, ip, i);
                                     })),
                bytes_of(gx));
    }
  }
}

// ---- CUDA against the CPU -----------------------------------------------------------------

double nmse(const Tensor& a, const Tensor& ref) {
  const std::vector<double> x = a.to_f64(), r = ref.to_f64();
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - r[i]) * (x[i] - r[i]);
    norm += r[i] * r[i];
  }
  return norm == 0 ? err : err / norm;
}

TEST(ConvPoolKernels, CudaConvolutionMatchesTheCpuAndNamesItsCudnnAlgorithm) {
  SKIP_WITHOUT_GPU();
  testing::NotesKept notes_kept;  // the notes named below are taken only while observed
  Generator gen(21);
  Conv2dOptions o;
  o.stride = {2, 2};
  o.padding = {1, 1};
  o.groups = 2;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(name(d));
    Tensor x = random({4, 4, 9, 9}, gen, d).set_requires_grad(true);
    Tensor w = random({6, 2, 3, 3}, gen, d).set_requires_grad(true);
    Tensor b = random({6}, gen, d).set_requires_grad(true);
    const Tensor y = conv2d(x, w, b, o);
    const Tensor gy = random(y.shape(), gen, d);
    y.backward(gy);

    Tensor xc = x.detach().to(Device::cuda).set_requires_grad(true);
    Tensor wc = w.detach().to(Device::cuda).set_requires_grad(true);
    Tensor bc = b.detach().to(Device::cuda).set_requires_grad(true);
    (void)notes_kept.take();
    const Tensor yc = conv2d(xc, wc, bc, o);
    const std::string notes = notes_kept.take();
    EXPECT_NE(notes.find("cuDNN fwd: "), std::string::npos) << notes;
    EXPECT_NE(notes.find(d == DType::f64 ? "f64 compute" : "f32 compute"), std::string::npos) << notes;
    if (d == DType::f32) {
      EXPECT_NE(notes.find("no TF32"), std::string::npos) << notes;
    }
    yc.backward(gy.to(Device::cuda));
    const double tol = d == DType::f64 ? 1e-20 : d == DType::f32 ? 1e-10 : d == DType::f16 ? 1e-5 : 1e-3;
    EXPECT_LT(nmse(yc, y), tol);
    EXPECT_LT(nmse(xc.grad(), x.grad()), tol);
    EXPECT_LT(nmse(wc.grad(), w.grad()), tol);
    EXPECT_LT(nmse(bc.grad(), b.grad()), tol);
  }
}

// The gather backward sums in the CPU's order, so f32 results are the CPU's bits. (No NaN
// input here: a NaN produced by arithmetic has the device's own payload.)
TEST(ConvPoolKernels, CudaPoolsAreTheCpuBitForBitInF32AndRepeatTheirBits) {
  SKIP_WITHOUT_GPU();
  Generator gen(9);
  enum class Kind { max, avg, adaptive };
  for (const PoolCase& c : pool_cases()) {
    const Tensor x = pool_input(c.x, gen, DType::f32, /*with_nan=*/false);
    for (Kind kind : {Kind::max, Kind::avg, Kind::adaptive}) {
      if ((kind == Kind::adaptive) != (c.kh == 0)) continue;
      SCOPED_TRACE(std::string(c.name) + (kind == Kind::max ? " max" : " avg"));
      const auto run = [&](const Tensor& input) {
        Tensor in = input.detach().set_requires_grad(true);
        const Tensor y = kind == Kind::adaptive ? adaptive_avg_pool2d(in, {c.sh, c.sw})
                         : kind == Kind::avg    ? avg_pool2d(in, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw})
                                                : max_pool2d(in, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw});
        y.backward(Tensor::uniform(y.shape(), gen, -1, 1, DType::f32).to(input.device()));
        return std::vector<std::vector<std::uint8_t>>{bytes_of(y), bytes_of(in.grad())};
      };
      const Generator start = gen;
      const auto cpu = run(x);
      gen = start;
      const auto gpu = run(x.to(Device::cuda));
      EXPECT_EQ(gpu, cpu);
      gen = start;
      EXPECT_EQ(run(x.to(Device::cuda)), gpu);
    }
  }
}

}  // namespace
}  // namespace ampcheck
