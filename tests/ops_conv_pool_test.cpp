// conv2d, max_pool2d, avg_pool2d and adaptive_avg_pool2d: gradients against finite
// differences in f64, f32 against f64, f16/bf16 bit-exact against the rounded f32
// result (forward and every gradient), naive double-loop references, values derived by
// hand (what PyTorch prints for the same call), thread-count independence and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops/impl.h"
#include "engine/parallel.h"
#include "tests/op_check.h"

namespace ampcheck {
namespace {

using test::error_of;

using i64 = std::int64_t;
using Pair = std::array<i64, 2>;

std::size_t at(i64 i) { return static_cast<std::size_t>(i); }

Tensor arange_image(double sign = 1) {  // [[1, 2, 3], [4, 5, 6], [7, 8, 9]] as [1, 1, 3, 3]
  std::vector<double> v(9);
  for (std::size_t i = 0; i < 9; ++i) v[i] = sign * static_cast<double>(i + 1);
  return Tensor::from(v, {1, 1, 3, 3}, DType::f64);
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& expected,
                   double tol = 1e-12) {
  ASSERT_EQ(t.shape(), shape);
  const std::vector<double> v = t.to_f64();
  ASSERT_EQ(v.size(), expected.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "element " << i;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The gradient of an op with respect to input `which`, through the registry's forward and
// backward kernels directly (the precision checks run f with gradient recording off); the
// upstream gradient is the last input.
test::OpFn grad_of(Op op, Params params, std::size_t which) {
  return [op, params, which](const std::vector<Tensor>& in) {
    const std::vector<Tensor> inputs(in.begin(), in.end() - 1);
    Saved saved;
    const Tensor y = op_info(op).forward(ForwardArgs{inputs, params, saved});
    return op_info(op).backward(BackwardArgs{in.back(), inputs, y, params, saved})[which];
  };
}

// f32 within NMSE 1e-8 of f64 and f16/bf16 bit-exact to the rounded f32 result, for the
// output and for the gradient of every input.
void check_precision(const test::OpFn& f, Op op, const Params& params,
                     const std::vector<Tensor>& inputs, Generator& gen) {
  EXPECT_LT(test::nmse_f32_vs_f64(f, inputs), 1e-8) << "forward";
  for (DType d : {DType::f16, DType::bf16})
    EXPECT_EQ(test::low_precision_mismatches(f, inputs, d), 0) << "forward " << name(d);
  std::vector<Tensor> with_grad = inputs;
  with_grad.push_back(test::random(f(inputs).shape(), gen));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const test::OpFn g = grad_of(op, params, i);
    EXPECT_LT(test::nmse_f32_vs_f64(g, with_grad), 1e-8) << "gradient of input " << i;
    for (DType d : {DType::f16, DType::bf16})
      EXPECT_EQ(test::low_precision_mismatches(g, with_grad, d), 0)
          << "gradient of input " << i << " in " << name(d);
  }
}


void expect_error(const std::function<void()>& f, std::initializer_list<const char*> parts) {
  const std::string msg = error_of(f);
  ASSERT_FALSE(msg.empty()) << "no std::invalid_argument thrown";
  for (const char* part : parts)
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing from: " << msg;
}

// ---------------------------------------------------------------------------------
// conv2d

struct ConvCase {
  const char* name;
  Shape x, w;
  bool bias;
  Conv2dOptions opt;
};

Conv2dOptions conv_opt(Pair stride, Pair padding = {0, 0}, Pair dilation = {1, 1},
                       i64 groups = 1) {
  Conv2dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  return o;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {"plain 3x3 bias", {1, 2, 5, 6}, {3, 2, 3, 3}, true, {}},
      {"odd sizes non-square kernel batch 3", {3, 3, 7, 5}, {4, 3, 2, 3}, false, {}},
      {"stride 2 padding 1", {2, 2, 7, 7}, {3, 2, 3, 3}, true, conv_opt({2, 2}, {1, 1})},
      {"stride 1x2 padding 2x0", {1, 2, 6, 9}, {2, 2, 3, 2}, true, conv_opt({1, 2}, {2, 0})},
      {"dilation 2", {1, 2, 7, 8}, {2, 2, 3, 3}, false, conv_opt({1, 1}, {1, 2}, {2, 2})},
      {"dilation 2x1 stride 2", {3, 1, 9, 6}, {2, 1, 2, 3}, true, conv_opt({2, 2}, {0, 1}, {2, 1})},
      {"groups 2", {3, 4, 5, 5}, {6, 2, 3, 3}, true, conv_opt({1, 1}, {0, 0}, {1, 1}, 2)},
      {"depthwise", {2, 3, 6, 5}, {3, 1, 3, 3}, true, conv_opt({1, 1}, {1, 1}, {1, 1}, 3)},
      {"depthwise multiplier 2 stride 2", {1, 2, 5, 5}, {4, 1, 2, 2}, false,
       conv_opt({2, 2}, {0, 0}, {1, 1}, 2)},
      {"pointwise 1x1", {3, 4, 4, 3}, {5, 4, 1, 1}, true, {}},
      {"1x1 stride 2", {1, 3, 5, 5}, {2, 3, 1, 1}, false, conv_opt({2, 2})},
  };
  return cases;
}

test::OpFn conv_fn(const Conv2dOptions& opt) {
  return [opt](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor{}, opt);
  };
}

ConvParams conv_params(const Conv2dOptions& o) {
  ConvParams p;
  p.stride = o.stride;
  p.padding = o.padding;
  p.dilation = o.dilation;
  p.groups = o.groups;
  return p;
}

std::vector<Tensor> conv_inputs(const ConvCase& c, Generator& gen) {
  std::vector<Tensor> in{test::random(c.x, gen), test::random(c.w, gen)};
  if (c.bias) in.push_back(test::random({c.w[0]}, gen));
  return in;
}

// Direct convolution in double with plain loops: y, and for an upstream gradient gy the
// gradients of x, w and b.
struct ConvRef {
  Shape y_shape;
  std::vector<double> y, gx, gw, gb;
};
ConvRef naive_conv(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                   const Shape& ws, const std::vector<double>& b, const Conv2dOptions& o,
                   const std::vector<double>& gy = {}) {
  const i64 n = xs[0], ci = xs[1], h = xs[2], wd = xs[3];
  const i64 co = ws[0], cig = ws[1], kh = ws[2], kw = ws[3];
  const i64 cog = co / o.groups;
  const i64 oh = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const i64 ow = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  ConvRef r;
  r.y_shape = {n, co, oh, ow};
  r.y.assign(at(n * co * oh * ow), 0.0);
  r.gx.assign(x.size(), 0.0);
  r.gw.assign(w.size(), 0.0);
  r.gb.assign(at(co), 0.0);
  for (i64 s = 0; s < n; ++s)
    for (i64 c = 0; c < co; ++c)
      for (i64 oy = 0; oy < oh; ++oy)
        for (i64 ox = 0; ox < ow; ++ox) {
          const std::size_t yi = at(((s * co + c) * oh + oy) * ow + ox);
          const double g = gy.empty() ? 0.0 : gy[yi];
          double acc = b.empty() ? 0.0 : b[at(c)];
          r.gb[at(c)] += g;
          for (i64 k = 0; k < cig; ++k) {
            const i64 cin = (c / cog) * cig + k;
            for (i64 ky = 0; ky < kh; ++ky)
              for (i64 kx = 0; kx < kw; ++kx) {
                const i64 iy = oy * o.stride[0] - o.padding[0] + ky * o.dilation[0];
                const i64 ix = ox * o.stride[1] - o.padding[1] + kx * o.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const std::size_t xi = at(((s * ci + cin) * h + iy) * wd + ix);
                const std::size_t wi = at(((c * cig + k) * kh + ky) * kw + kx);
                acc += x[xi] * w[wi];
                r.gx[xi] += g * w[wi];
                r.gw[wi] += g * x[xi];
              }
          }
          r.y[yi] = acc;
        }
  return r;
}

TEST(Conv2dTest, GradcheckF64) {
  Generator gen(1);
  for (const ConvCase& c : conv_cases()) {
    const test::GradCheck r = test::gradcheck(conv_fn(c.opt), conv_inputs(c, gen));
    EXPECT_LT(r.max_rel_error, 1e-6) << c.name << "\n" << r.report;
  }
}

TEST(Conv2dTest, PrecisionF32F16Bf16) {
  Generator gen(2);
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    check_precision(conv_fn(c.opt), Op::conv2d, conv_params(c.opt), conv_inputs(c, gen), gen);
  }
}

TEST(Conv2dTest, MatchesNaiveDirectConvolution) {
  Generator gen(3);
  std::vector<ConvCase> cases = conv_cases();
  // 20 samples: several samples per weight-gradient slot.
  cases.push_back({"batch 20 groups 2 padding", {20, 4, 6, 5}, {4, 2, 3, 2}, true,
                   conv_opt({1, 2}, {1, 1}, {1, 1}, 2)});
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> in = conv_inputs(c, gen);
    for (Tensor& t : in) t.set_requires_grad(true);
    const Tensor y = conv_fn(c.opt)(in);
    const Tensor gy = test::random(y.shape(), gen);
    y.backward(gy);
    const ConvRef ref = naive_conv(in[0].to_f64(), c.x, in[1].to_f64(), c.w,
                                   c.bias ? in[2].to_f64() : std::vector<double>{}, c.opt,
                                   gy.to_f64());
    ASSERT_EQ(y.shape(), ref.y_shape);
    EXPECT_LT(max_abs_diff(y.to_f64(), ref.y), 1e-12) << "y";
    EXPECT_LT(max_abs_diff(in[0].grad().to_f64(), ref.gx), 1e-12) << "grad x";
    EXPECT_LT(max_abs_diff(in[1].grad().to_f64(), ref.gw), 1e-12) << "grad w";
    if (c.bias) {
      EXPECT_LT(max_abs_diff(in[2].grad().to_f64(), ref.gb), 1e-12) << "grad b";
    }
  }
}

TEST(Conv2dTest, HandDerivedValues) {
  // torch.nn.functional.conv2d(torch.arange(1., 10.).view(1, 1, 3, 3), torch.ones(1, 1, 2, 2))
  // is [[12, 16], [24, 28]]; with an upstream gradient of ones, x.grad counts the windows
  // holding each pixel and w.grad sums each window.
  Tensor x = arange_image();
  Tensor w = Tensor::ones({1, 1, 2, 2}, DType::f64);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor y = conv2d(x, w);
  expect_values(y, {1, 1, 2, 2}, {12, 16, 24, 28});
  y.backward(Tensor::ones(y.shape(), DType::f64));
  expect_values(x.grad(), {1, 1, 3, 3}, {1, 2, 1, 2, 4, 2, 1, 2, 1});
  expect_values(w.grad(), {1, 1, 2, 2}, {12, 16, 24, 28});

  // Padding 1 and bias 0.5: the corner window sees only 1 (its other three are zeros).
  const Tensor yp = conv2d(arange_image(), Tensor::ones({1, 1, 2, 2}, DType::f64),
                           Tensor::full({1}, 0.5, DType::f64), conv_opt({2, 2}, {1, 1}));
  expect_values(yp, {1, 1, 2, 2}, {1.5, 5.5, 11.5, 28.5});
}

TEST(Conv2dTest, GradientsKeepInputDtypesAndShapes) {
  Generator gen(4);
  for (DType d : {DType::f16, DType::bf16, DType::f32}) {
    Tensor x = test::random({2, 4, 5, 5}, gen, -1, 1, d);
    Tensor w = test::random({6, 2, 3, 3}, gen, -1, 1, d);
    Tensor b = test::random({6}, gen, -1, 1, d);
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    const Tensor y = conv2d(x, w, b, conv_opt({2, 1}, {1, 0}, {1, 1}, 2));
    EXPECT_EQ(y.dtype(), d);
    EXPECT_EQ(y.shape(), (Shape{2, 6, 3, 3}));
    y.backward(Tensor::ones(y.shape(), d));
    for (const Tensor* t : {&x, &w, &b}) {
      EXPECT_EQ(t->grad().dtype(), d);
      EXPECT_EQ(t->grad().shape(), t->shape());
    }
  }
}

TEST(Conv2dTest, EmptyBatch) {
  Generator gen(5);
  Tensor x = Tensor::zeros({0, 2, 5, 5}, DType::f32);
  Tensor w = test::random({3, 2, 3, 3}, gen, -1, 1, DType::f32);
  w.set_requires_grad(true);
  const Tensor y = conv2d(x, w);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 3, 3}));
  y.backward(Tensor::zeros(y.shape(), DType::f32));
  expect_values(w.grad(), w.shape(), std::vector<double>(54, 0.0));
}

TEST(Conv2dTest, Errors) {
  Generator gen(6);
  const Tensor x = test::random({1, 4, 5, 5}, gen);
  const Tensor w = test::random({2, 4, 3, 3}, gen);
  expect_error([&] { conv2d(test::random({4, 5, 5}, gen), w); }, {"conv2d", "[4, 5, 5]", "4 dims"});
  expect_error([&] { conv2d(x, test::random({2, 4, 3}, gen)); }, {"conv2d", "weight", "[2, 4, 3]"});
  expect_error([&] { conv2d(x, test::random({2, 3, 3, 3}, gen)); },
               {"conv2d", "[2, 3, 3, 3]", "C_in/groups = 4"});
  expect_error([&] { conv2d(x, test::random({3, 2, 3, 3}, gen), {}, conv_opt({1, 1}, {0, 0}, {1, 1}, 2)); },
               {"conv2d", "C_out = 3", "groups = 2"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({1, 1}, {0, 0}, {1, 1}, 3)); },
               {"conv2d", "C_in = 4", "groups = 3"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({1, 1}, {0, 0}, {1, 1}, 0)); }, {"conv2d", "groups = 0"});
  expect_error([&] { conv2d(x, w, test::random({3}, gen)); }, {"conv2d", "bias", "[3]", "[2]"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({0, 1})); }, {"conv2d", "stride {0, 1}", ">= 1"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({1, 1}, {-1, 0})); }, {"conv2d", "padding {-1, 0}"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({1, 1}, {0, 0}, {1, 0})); },
               {"conv2d", "dilation {1, 0}"});
  expect_error([&] { conv2d(x, test::random({2, 4, 6, 3}, gen)); },
               {"conv2d", "larger than the padded input", "6x3"});
  expect_error([&] { conv2d(x, w, {}, conv_opt({1, 1}, {0, 0}, {3, 1})); },
               {"conv2d", "dilated kernel 7x3"});
  expect_error([&] { conv2d(x.to(DType::f32), w.to(DType::f16)); },
               {"conv2d", "dtypes differ", "f32 [1, 4, 5, 5]", "f16 [2, 4, 3, 3]", "cast"});
  expect_error([&] { conv2d(x, w, test::random({2}, gen, -1, 1, DType::bf16)); },
               {"conv2d", "bias is bf16 [2]"});
  expect_error([&] { conv2d(Tensor::zeros({1, 4, 5, 5}, DType::i64), w); }, {"conv2d", "i64"});
  expect_error([&] { conv2d(Tensor{}, w); }, {"conv2d", "undefined"});
}

// ---------------------------------------------------------------------------------
// pooling

enum class Pool { max, avg, adaptive };

struct PoolCase {
  const char* name;
  Shape x;
  Pair kernel, stride, padding;  // adaptive: kernel is the output size
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {"2x2 default stride", {1, 1, 5, 5}, {2, 2}, {0, 0}, {0, 0}},
      {"3x2 stride 2x1 padding 1 batch 3", {3, 2, 7, 6}, {3, 2}, {2, 1}, {1, 1}},
      {"3x3 stride 2 padding 1x0", {2, 3, 6, 7}, {3, 3}, {2, 2}, {1, 0}},
      {"1x3 stride 1x3", {1, 2, 4, 9}, {1, 3}, {1, 3}, {0, 0}},
      {"overlapping 3x3 stride 1", {1, 2, 5, 6}, {3, 3}, {1, 1}, {0, 0}},
  };
  return cases;
}

const std::vector<PoolCase>& adaptive_cases() {
  static const std::vector<PoolCase> cases = {
      {"5x5 to 2x2", {1, 1, 5, 5}, {2, 2}, {}, {}},
      {"7x6 to 3x4 batch 3", {3, 2, 7, 6}, {3, 4}, {}, {}},
      {"global 1x1", {2, 3, 6, 7}, {1, 1}, {}, {}},
      {"upsampling 3x4 to 5x6", {1, 2, 3, 4}, {5, 6}, {}, {}},
      {"even 8x8 to 4x4", {2, 2, 8, 8}, {4, 4}, {}, {}},
  };
  return cases;
}

test::OpFn pool_fn(Pool kind, const PoolCase& c) {
  return [kind, c](const std::vector<Tensor>& in) {
    switch (kind) {
      case Pool::max: return max_pool2d(in[0], c.kernel, c.stride, c.padding);
      case Pool::avg: return avg_pool2d(in[0], c.kernel, c.stride, c.padding);
      case Pool::adaptive: break;
    }
    return adaptive_avg_pool2d(in[0], c.kernel);
  };
}

Op pool_op(Pool kind) {
  return kind == Pool::max ? Op::max_pool2d : kind == Pool::avg ? Op::avg_pool2d : Op::adaptive_avg_pool2d;
}

PoolParams pool_params(const PoolCase& c) {
  PoolParams p;
  p.kernel = c.kernel;
  p.stride = c.stride == Pair{0, 0} ? c.kernel : c.stride;
  p.padding = c.padding;
  return p;
}

// Pooling in double with plain loops; the adaptive windows from floating-point floor/ceil.
std::vector<double> naive_pool(Pool kind, const std::vector<double>& x, const Shape& xs,
                               const PoolCase& c, Shape& out_shape) {
  const i64 n = xs[0] * xs[1], h = xs[2], w = xs[3];
  const PoolParams p = pool_params(c);
  i64 oh = 0, ow = 0;
  if (kind == Pool::adaptive) {
    oh = c.kernel[0], ow = c.kernel[1];
  } else {
    oh = (h + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1;
    ow = (w + 2 * p.padding[1] - p.kernel[1]) / p.stride[1] + 1;
  }
  out_shape = {xs[0], xs[1], oh, ow};
  std::vector<double> y;
  for (i64 s = 0; s < n; ++s)
    for (i64 oy = 0; oy < oh; ++oy)
      for (i64 ox = 0; ox < ow; ++ox) {
        i64 y0 = 0, y1 = 0, x0 = 0, x1 = 0;
        if (kind == Pool::adaptive) {
          const auto dh = static_cast<double>(h), dw = static_cast<double>(w);
          y0 = static_cast<i64>(std::floor(static_cast<double>(oy) * dh / static_cast<double>(oh)));
          y1 = static_cast<i64>(std::ceil(static_cast<double>(oy + 1) * dh / static_cast<double>(oh)));
          x0 = static_cast<i64>(std::floor(static_cast<double>(ox) * dw / static_cast<double>(ow)));
          x1 = static_cast<i64>(std::ceil(static_cast<double>(ox + 1) * dw / static_cast<double>(ow)));
        } else {
          y0 = oy * p.stride[0] - p.padding[0], y1 = y0 + p.kernel[0];
          x0 = ox * p.stride[1] - p.padding[1], x1 = x0 + p.kernel[1];
        }
        double mx = -INFINITY, sum = 0;
        for (i64 iy = y0; iy < y1; ++iy)
          for (i64 ix = x0; ix < x1; ++ix) {
            const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
            const double v = inside ? x[at((s * h + iy) * w + ix)] : 0.0;
            if (inside) mx = std::max(mx, v);
            sum += v;
          }
        const auto count = static_cast<double>((y1 - y0) * (x1 - x0));
        y.push_back(kind == Pool::max ? mx : sum / count);
      }
  return y;
}

void pool_gradcheck(Pool kind, const std::vector<PoolCase>& cases) {
  Generator gen(10);
  for (const PoolCase& c : cases) {
    const test::GradCheck r = test::gradcheck(pool_fn(kind, c), {test::random(c.x, gen)});
    EXPECT_LT(r.max_rel_error, 1e-6) << c.name << "\n" << r.report;
  }
}

void pool_precision(Pool kind, const std::vector<PoolCase>& cases) {
  Generator gen(11);
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(c.name);
    check_precision(pool_fn(kind, c), pool_op(kind), pool_params(c), {test::random(c.x, gen)}, gen);
  }
}

void pool_reference(Pool kind, const std::vector<PoolCase>& cases) {
  Generator gen(12);
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = test::random(c.x, gen);
    const Tensor y = pool_fn(kind, c)({x});
    Shape shape;
    const std::vector<double> ref = naive_pool(kind, x.to_f64(), c.x, c, shape);
    ASSERT_EQ(y.shape(), shape);
    EXPECT_LT(max_abs_diff(y.to_f64(), ref), 1e-12);
  }
}

TEST(MaxPool2dTest, GradcheckF64) { pool_gradcheck(Pool::max, pool_cases()); }
TEST(MaxPool2dTest, PrecisionF32F16Bf16) { pool_precision(Pool::max, pool_cases()); }
TEST(MaxPool2dTest, MatchesNaiveReference) { pool_reference(Pool::max, pool_cases()); }
TEST(AvgPool2dTest, GradcheckF64) { pool_gradcheck(Pool::avg, pool_cases()); }
TEST(AvgPool2dTest, PrecisionF32F16Bf16) { pool_precision(Pool::avg, pool_cases()); }
TEST(AvgPool2dTest, MatchesNaiveReference) { pool_reference(Pool::avg, pool_cases()); }
TEST(AdaptiveAvgPool2dTest, GradcheckF64) { pool_gradcheck(Pool::adaptive, adaptive_cases()); }
TEST(AdaptiveAvgPool2dTest, PrecisionF32F16Bf16) { pool_precision(Pool::adaptive, adaptive_cases()); }
TEST(AdaptiveAvgPool2dTest, MatchesNaiveReference) { pool_reference(Pool::adaptive, adaptive_cases()); }

TEST(MaxPool2dTest, HandDerivedValues) {
  // F.max_pool2d(torch.arange(1., 10.).view(1, 1, 3, 3), 2, 1) is [[5, 6], [8, 9]]; the
  // gradient of ones lands on each window's maximum.
  Tensor x = arange_image();
  x.set_requires_grad(true);
  const Tensor y = max_pool2d(x, {2, 2}, {1, 1});
  expect_values(y, {1, 1, 2, 2}, {5, 6, 8, 9});
  y.backward(Tensor::ones(y.shape(), DType::f64));
  expect_values(x.grad(), {1, 1, 3, 3}, {0, 0, 0, 0, 1, 1, 0, 1, 1});
  // Padding is -inf, not 0: on negative values the maxima are real pixels.
  expect_values(max_pool2d(arange_image(-1), {3, 3}, {2, 2}, {1, 1}), {1, 1, 2, 2},
                {-1, -2, -4, -5});
  // Default stride = kernel: one 2x2 window of the 3x3 image (floor mode).
  expect_values(max_pool2d(arange_image(), {2, 2}), {1, 1, 1, 1}, {5});
}

TEST(MaxPool2dTest, BackwardWithoutSavedIndicesFindsTheMaximaAgain) {
  Generator gen(15);
  const PoolCase c{"", {2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}};
  const std::vector<Tensor> in{test::random(c.x, gen, -1, 1, DType::f32)};
  const Params params = pool_params(c);
  Saved saved, none;
  const Tensor y = impl::max_pool2d_forward(ForwardArgs{in, params, saved});
  ASSERT_EQ(saved.tensors.size(), 1u);
  const Tensor gy = test::random(y.shape(), gen, -1, 1, DType::f32);
  const Tensor with = impl::max_pool2d_backward(BackwardArgs{gy, in, y, params, saved})[0];
  const Tensor without = impl::max_pool2d_backward(BackwardArgs{gy, in, y, params, none})[0];
  EXPECT_EQ(with.to_f64(), without.to_f64());
}

TEST(MaxPool2dTest, NanPropagates) {
  const Tensor x = Tensor::from(std::vector<double>{1, NAN, 3, 4}, {1, 1, 2, 2}, DType::f32);
  EXPECT_TRUE(std::isnan(max_pool2d(x, {2, 2}).item()));
}

TEST(AvgPool2dTest, HandDerivedValues) {
  // F.avg_pool2d(torch.arange(1., 10.).view(1, 1, 3, 3), 2, 1) is [[3, 4], [6, 7]].
  Tensor x = arange_image();
  x.set_requires_grad(true);
  const Tensor y = avg_pool2d(x, {2, 2}, {1, 1});
  expect_values(y, {1, 1, 2, 2}, {3, 4, 6, 7});
  y.backward(Tensor::ones(y.shape(), DType::f64));
  expect_values(x.grad(), {1, 1, 3, 3},
                {0.25, 0.5, 0.25, 0.5, 1.0, 0.5, 0.25, 0.5, 0.25});
  // F.avg_pool2d(..., 3, 1, 1) with count_include_pad=True divides every window by 9:
  // [[12, 21, 16], [27, 45, 33], [24, 39, 28]] / 9.
  expect_values(avg_pool2d(arange_image(), {3, 3}, {1, 1}, {1, 1}), {1, 1, 3, 3},
                {12 / 9.0, 21 / 9.0, 16 / 9.0, 3, 5, 33 / 9.0, 24 / 9.0, 39 / 9.0, 28 / 9.0});
}

TEST(AdaptiveAvgPool2dTest, HandDerivedValues) {
  // F.adaptive_avg_pool2d(torch.arange(1., 10.).view(1, 1, 3, 3), 2): windows rows/cols
  // [0, 2) and [1, 3), so [[3, 4], [6, 7]].
  expect_values(adaptive_avg_pool2d(arange_image(), {2, 2}), {1, 1, 2, 2}, {3, 4, 6, 7});
  expect_values(adaptive_avg_pool2d(arange_image(), {1, 1}), {1, 1, 1, 1}, {5});
  // A row of 5 to 3: windows [0, 2), [1, 4), [3, 5) -> [1.5, 3, 4.5].
  Tensor row = Tensor::from(std::vector<double>{1, 2, 3, 4, 5}, {1, 1, 1, 5}, DType::f64);
  row.set_requires_grad(true);
  const Tensor y = adaptive_avg_pool2d(row, {1, 3});
  expect_values(y, {1, 1, 1, 3}, {1.5, 3, 4.5});
  // Each window spreads its gradient evenly: 1/2, 1/2 + 1/3, 1/3, 1/3 + 1/2, 1/2.
  y.backward(Tensor::ones(y.shape(), DType::f64));
  expect_values(row.grad(), {1, 1, 1, 5}, {0.5, 5 / 6.0, 1 / 3.0, 5 / 6.0, 0.5});
}

TEST(PoolTest, GradientsKeepInputDtypesAndShapes) {
  Generator gen(13);
  for (DType d : {DType::f16, DType::bf16, DType::f32}) {
    for (Pool kind : {Pool::max, Pool::avg, Pool::adaptive}) {
      Tensor x = test::random({2, 3, 7, 6}, gen, -1, 1, d);
      x.set_requires_grad(true);
      const Tensor y = pool_fn(kind, {"", {}, {3, 2}, {2, 2}, {1, 1}})({x});
      EXPECT_EQ(y.dtype(), d);
      EXPECT_EQ(y.shape(), kind == Pool::adaptive ? (Shape{2, 3, 3, 2}) : (Shape{2, 3, 4, 4}));
      y.backward(Tensor::ones(y.shape(), d));
      EXPECT_EQ(x.grad().dtype(), d);
      EXPECT_EQ(x.grad().shape(), x.shape());
    }
  }
}

TEST(PoolTest, Errors) {
  Generator gen(14);
  const Tensor x = test::random({1, 2, 5, 5}, gen);
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    SCOPED_TRACE(op);
    const auto pool = [op](const Tensor& t, Pair k, Pair s, Pair p) {
      return std::string(op) == "max_pool2d" ? max_pool2d(t, k, s, p) : avg_pool2d(t, k, s, p);
    };
    expect_error([&] { pool(test::random({2, 5, 5}, gen), {2, 2}, {0, 0}, {0, 0}); },
                 {op, "[2, 5, 5]", "4 dims"});
    expect_error([&] { pool(x, {0, 2}, {0, 0}, {0, 0}); }, {op, "kernel {0, 2}", ">= 1"});
    expect_error([&] { pool(x, {2, 2}, {-1, 1}, {0, 0}); }, {op, "stride {-1, 1}"});
    expect_error([&] { pool(x, {2, 2}, {1, 1}, {-1, 0}); }, {op, "padding {-1, 0}"});
    expect_error([&] { pool(x, {3, 3}, {1, 1}, {2, 1}); },
                 {op, "padding {2, 1}", "kernel {3, 3}", "kernel / 2"});
    expect_error([&] { pool(x, {6, 2}, {1, 1}, {0, 0}); }, {op, "kernel {6, 2}", "larger"});
    expect_error([&] { pool(Tensor::zeros({1, 2, 5, 5}, DType::i64), {2, 2}, {0, 0}, {0, 0}); },
                 {op, "i64"});
    expect_error([&] { pool(Tensor::zeros({1, 0, 5, 5}, DType::f32), {2, 2}, {0, 0}, {0, 0}); },
                 {op, "[1, 0, 5, 5]"});
  }
  expect_error([&] { adaptive_avg_pool2d(x, {0, 2}); }, {"adaptive_avg_pool2d", "output_size {0, 2}"});
  expect_error([&] { adaptive_avg_pool2d(test::random({5, 5}, gen), {2, 2}); },
               {"adaptive_avg_pool2d", "[5, 5]", "4 dims"});
  expect_error([&] { adaptive_avg_pool2d(Tensor::zeros({1, 2, 5, 5}, DType::i64), {2, 2}); },
               {"adaptive_avg_pool2d", "i64"});
}

// ---------------------------------------------------------------------------------
// determinism

TEST(ConvPoolTest, SameBitsForEveryThreadCount) {
  Generator gen(20);
  const Tensor x = test::random({9, 4, 11, 10}, gen, -1, 1, DType::f32);
  const Tensor w = test::random({6, 2, 3, 3}, gen, -1, 1, DType::f32);
  const Tensor b = test::random({6}, gen, -1, 1, DType::f32);
  const Tensor gy = test::random({9, 6, 11, 10}, gen, -1, 1, DType::f32);
  const Tensor gp = test::random({9, 6, 5, 5}, gen, -1, 1, DType::f32);
  const Tensor gq = test::random({9, 6, 6, 5}, gen, -1, 1, DType::f32);
  const Tensor gr = test::random({9, 6, 3, 4}, gen, -1, 1, DType::f32);
  // Every output and gradient of the four ops, as plain values.
  const auto run = [&] {
    std::vector<std::vector<double>> results;
    Tensor xs = x.clone(), ws = w.clone(), bs = b.clone();
    for (Tensor* t : {&xs, &ws, &bs}) t->set_requires_grad(true);
    const Tensor y = conv2d(xs, ws, bs, conv_opt({1, 1}, {1, 1}, {1, 1}, 2));
    y.backward(gy);
    const std::vector<std::pair<test::OpFn, Tensor>> pools = {
        {[](const std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 2}); }, gp},
        {[](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); }, gq},
        {[](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {3, 4}); }, gr}};
    for (const Tensor* t : {&y, &xs.grad(), &ws.grad(), &bs.grad()}) results.push_back(t->to_f64());
    for (const auto& [f, g] : pools) {
      Tensor in = y.detach();
      in.set_requires_grad(true);
      const Tensor out = f({in});
      out.backward(g);
      results.push_back(out.to_f64());
      results.push_back(in.grad().to_f64());
    }
    return results;
  };
  const int before = num_threads();
  set_num_threads(1);
  const auto one = run();
  for (int threads : {2, 3, 4}) {
    set_num_threads(threads);
    const auto many = run();
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(one[i], many[i]) << "result " << i << " with " << threads << " threads";
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace ampcheck
