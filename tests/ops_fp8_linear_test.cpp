// fp8_linear (engine/ops/fp8_linear.cpp), TransformerEngine's Linear in fp8, against a
// reference written here from its definition: each operand cast with its scale by the
// scalar casts of kernels/fp_bits.h (checked against ml_dtypes on every binary32 input),
// the products of the codes summed in binary64, times the binary32 product of the inverse
// scales; the op's binary32 sums must lie within their rounding bound of it. The amaxes
// each cast writes into the module's meta, the f64 form (linear itself), the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "kernels/fp_bits.h"

namespace ampcheck {
namespace {

using kernels::Fp8Format;
using i64 = std::int64_t;

double cast(double x, float scale, Fp8Format f) {
  const std::uint32_t y = kernels::bits_of(static_cast<float>(x) * scale);
  const std::uint8_t c = f == Fp8Format::e4m3 ? kernels::f32_to_e4m3_bits(y, kernels::Fp8Overflow::saturate)
                                              : kernels::f32_to_e5m2_bits(y, kernels::Fp8Overflow::saturate);
  return kernels::float_of(f == Fp8Format::e4m3 ? kernels::e4m3_bits_to_f32_bits(c) : kernels::e5m2_bits_to_f32_bits(c));
}

struct Case {
  i64 rows = 6, in = 40, out = 24;
  std::vector<double> x, w, b, g;
  std::shared_ptr<Fp8LinearMeta> meta = std::make_shared<Fp8LinearMeta>();
};

Case make_case(std::uint64_t seed, i64 rows = 6, i64 in = 40, i64 out = 24) {
  Case c;
  c.rows = rows;
  c.in = in;
  c.out = out;
  Generator gen(seed);
  c.x = Tensor::uniform({c.rows, c.in}, gen, -1.0, 1.0, DType::f64).to_f64();
  c.w = Tensor::uniform({c.out, c.in}, gen, -0.5, 0.5, DType::f64).to_f64();
  c.b = Tensor::uniform({c.out}, gen, -1.0, 1.0, DType::f64).to_f64();
  c.g = Tensor::uniform({c.rows, c.out}, gen, -0.01, 0.01, DType::f64).to_f64();
  // f32 values (the tensors are f32): the reference reads the same numbers.
  for (auto* v : {&c.x, &c.w, &c.b, &c.g})
    for (double& e : *v) e = static_cast<float>(e);
  c.meta->input_scale = 256.0f;
  c.meta->weight_scale = 600.0f;  // not a power of two: the inverse is rounded
  c.meta->grad_scale = 16384.0f;
  return c;
}

// sum_k a[i, k] b[k, j] over casts, as the fp8 GEMM defines it, with the bound of its
// binary32 fma chain: each of k additions rounds by at most 2^-24 of the running sum, so
// by at most k 2^-24 sum |products|; then the scale product and the result round once.
struct Ref {
  double value, bound;
};
Ref fp8_dot(const std::vector<double>& a8, const std::vector<double>& b8, i64 k, float a_scale, float b_scale,
            double add) {
  double s = 0, mag = 0;
  for (i64 p = 0; p < k; ++p) {
    s += a8[static_cast<std::size_t>(p)] * b8[static_cast<std::size_t>(p)];
    mag += std::fabs(a8[static_cast<std::size_t>(p)] * b8[static_cast<std::size_t>(p)]);
  }
  const double scale = static_cast<float>(1.0f / a_scale) * static_cast<float>(1.0f / b_scale);
  const double v = scale * s + add;
  return {v, std::ldexp(static_cast<double>(k + 2) * mag * scale + 2 * std::fabs(v), -24)};
}

// y, dx, dW and db of a call against the reference, the operands cast with the scales in m.
void expect_the_fp8_gemms(const Case& c, const Fp8LinearMeta& m, const Tensor& y, const Tensor& x, const Tensor& w,
                          const Tensor& b) {
  // The casts of every operand, by the scalar definition.
  auto casts = [](const std::vector<double>& v, float s, Fp8Format f) {
    std::vector<double> r;
    for (double e : v) r.push_back(cast(e, s, f));
    return r;
  };
  const auto x8 = casts(c.x, m.input_scale, m.input_format), w8 = casts(c.w, m.weight_scale, m.weight_format);
  const auto g8 = casts(c.g, m.grad_scale, m.grad_format);
  auto row = [](const std::vector<double>& v, i64 r, i64 n) {
    return std::vector<double>(v.begin() + r * n, v.begin() + (r + 1) * n);
  };
  auto column = [](const std::vector<double>& v, i64 col, i64 rows, i64 n) {
    std::vector<double> r;
    for (i64 i = 0; i < rows; ++i) r.push_back(v[static_cast<std::size_t>(i * n + col)]);
    return r;
  };
  const std::vector<double> got_y = y.to_f64(), got_dx = x.grad().to_f64(), got_dw = w.grad().to_f64();
  const std::vector<double> got_db = b.grad().to_f64();
  for (i64 i = 0; i < c.rows; ++i)
    for (i64 j = 0; j < c.out; ++j) {
      const Ref r = fp8_dot(row(x8, i, c.in), row(w8, j, c.in), c.in, m.input_scale, m.weight_scale,
                            c.b[static_cast<std::size_t>(j)]);
      EXPECT_NEAR(got_y[static_cast<std::size_t>(i * c.out + j)], r.value, r.bound) << "y " << i << "," << j;
    }
  for (i64 i = 0; i < c.rows; ++i)
    for (i64 j = 0; j < c.in; ++j) {
      const Ref r = fp8_dot(row(g8, i, c.out), column(w8, j, c.out, c.in), c.out, m.grad_scale, m.weight_scale, 0);
      EXPECT_NEAR(got_dx[static_cast<std::size_t>(i * c.in + j)], r.value, r.bound) << "dx " << i << "," << j;
    }
  for (i64 o = 0; o < c.out; ++o)
    for (i64 j = 0; j < c.in; ++j) {
      const Ref r = fp8_dot(column(g8, o, c.rows, c.out), column(x8, j, c.rows, c.in), c.rows, m.grad_scale,
                            m.input_scale, 0);
      EXPECT_NEAR(got_dw[static_cast<std::size_t>(o * c.in + j)], r.value, r.bound) << "dW " << o << "," << j;
    }
  for (i64 o = 0; o < c.out; ++o) {  // the unquantized gradient's column sums
    double s = 0, mag = 0;
    for (i64 i = 0; i < c.rows; ++i) {
      s += c.g[static_cast<std::size_t>(i * c.out + o)];
      mag += std::fabs(c.g[static_cast<std::size_t>(i * c.out + o)]);
    }
    EXPECT_NEAR(got_db[static_cast<std::size_t>(o)], s, std::ldexp(mag * static_cast<double>(c.rows), -24));
  }
}

TEST(Fp8Linear, ForwardAndBackwardAreTheFp8GemmsOfTheScaledCastsAndTheAmaxesAreWritten) {
  for (const bool hybrid : {true, false}) {
    Case c = make_case(hybrid ? 7 : 8);
    c.meta->grad_format = hybrid ? Fp8Format::e5m2 : Fp8Format::e4m3;
    if (!hybrid) c.meta->grad_scale = 8192.0f;
    const Fp8LinearMeta m = *c.meta;
    Tensor x = Tensor::from(c.x, {c.rows, c.in}).set_requires_grad(true);
    Tensor w = Tensor::from(c.w, {c.out, c.in}).set_requires_grad(true);
    Tensor b = Tensor::from(c.b, {c.out}).set_requires_grad(true);
    const Tensor y = fp8_linear(x, w, b, c.meta);
    ASSERT_EQ(y.dtype(), DType::f32);
    y.backward(Tensor::from(c.g, {c.rows, c.out}));

    expect_the_fp8_gemms(c, m, y, x, w, b);
    const std::vector<double> got_y = y.to_f64();
    // The quantization is visible: the fp8 result is not the exact one.
    double off = 0;
    for (i64 j = 0; j < c.out; ++j) {
      double exact = c.b[static_cast<std::size_t>(j)];
      for (i64 p = 0; p < c.in; ++p) exact += c.x[static_cast<std::size_t>(p)] * c.w[static_cast<std::size_t>(j * c.in + p)];
      off = std::max(off, std::fabs(exact - got_y[static_cast<std::size_t>(j)]));
    }
    EXPECT_GT(off, 1e-4);

    // The amaxes of the step's casts: max |value| of each operand.
    auto amax = [](const std::vector<double>& v) {
      double a = 0;
      for (double e : v) a = std::max(a, std::fabs(e));
      return a;
    };
    EXPECT_EQ(static_cast<double>(c.meta->input_amax), amax(c.x));
    EXPECT_EQ(static_cast<double>(c.meta->weight_amax), amax(c.w));
    EXPECT_EQ(static_cast<double>(c.meta->grad_amax), amax(c.g));
  }
}

// Float8CurrentScaling: each operand is cast with the scale of its own amax, by TE's
// compute_scale_from_amax (recipe_common.cuh) transcribed here: fp8_max / amax in one
// binary32 division (the amaxes here are normal numbers), the mantissa cleared for
// power-of-2 scales; the meta shows the scales the call used.
float te_scale_from_amax(double amax, Fp8Format f, bool pow2) {
  float scale = (f == Fp8Format::e4m3 ? 448.0f : 57344.0f) / static_cast<float>(amax);
  if (pow2) scale = kernels::float_of(kernels::bits_of(scale) & 0xFF800000u);
  return scale;
}

TEST(Fp8Linear, UnderCurrentScalingEachCastTakesTheScaleOfItsOwnAmax) {
  for (const bool pow2 : {false, true}) {
    Case c = make_case(pow2 ? 11 : 12);
    c.meta->current = Fp8LinearMeta::Current{pow2, 0.0f};
    c.meta->input_scale = c.meta->weight_scale = c.meta->grad_scale = 1.0f;  // not used: each cast makes its own
    Tensor x = Tensor::from(c.x, {c.rows, c.in}).set_requires_grad(true);
    Tensor w = Tensor::from(c.w, {c.out, c.in}).set_requires_grad(true);
    Tensor b = Tensor::from(c.b, {c.out}).set_requires_grad(true);
    const Tensor y = fp8_linear(x, w, b, c.meta);
    y.backward(Tensor::from(c.g, {c.rows, c.out}));
    auto amax = [](const std::vector<double>& v) {
      double a = 0;
      for (double e : v) a = std::max(a, std::fabs(e));
      return a;
    };
    Fp8LinearMeta m = *c.meta;
    m.input_scale = te_scale_from_amax(amax(c.x), m.input_format, pow2);
    m.weight_scale = te_scale_from_amax(amax(c.w), m.weight_format, pow2);
    m.grad_scale = te_scale_from_amax(amax(c.g), m.grad_format, pow2);
    EXPECT_EQ(c.meta->input_scale, m.input_scale);
    EXPECT_EQ(c.meta->weight_scale, m.weight_scale);
    EXPECT_EQ(c.meta->grad_scale, m.grad_scale);
    if (pow2) {
      EXPECT_EQ(m.input_scale, std::exp2(std::floor(std::log2(m.input_scale))));
    }
    expect_the_fp8_gemms(c, m, y, x, w, b);
  }
}

// MXFP8BlockScaling: each block of 32 values along a GEMM's k takes the power of two at or
// above its amax / fp8_max (the quotient in binary32, as TE divides), and its values are cast
// times that power's reciprocal by the scalar casts, then read back times it: rowwise
// blocks (along `in`) for the forward, blocks along `out` for dgrad (G's rows, W's
// columns), blocks along the rows for wgrad (the columns of G and x), as TE's MXFP8 Linear
// makes its rowwise and columnwise copies. Written here from that definition; the sizes
// leave a short last block in every direction.
double mx_scale(double amax, Fp8Format f) {
  const float q = static_cast<float>(amax) / (f == Fp8Format::e4m3 ? 448.0f : 57344.0f);
  return q == 0.0f ? std::ldexp(1.0, -127) : std::exp2(std::ceil(std::log2(static_cast<double>(q))));
}
// v [rows, cols], cast in blocks along each row or (down_columns) down each column.
std::vector<double> mx_casts(const std::vector<double>& v, i64 rows, i64 cols, bool down_columns, Fp8Format f) {
  std::vector<double> r(v.size());
  const i64 lines = down_columns ? cols : rows, length = down_columns ? rows : cols;
  auto at = [&](i64 line, i64 p) { return static_cast<std::size_t>(down_columns ? p * cols + line : line * cols + p); };
  for (i64 l = 0; l < lines; ++l)
    for (i64 first = 0; first < length; first += 32) {
      const i64 end = std::min(length, first + 32);
      double amax = 0;
      for (i64 p = first; p < end; ++p) amax = std::max(amax, std::fabs(v[at(l, p)]));
      const double s = mx_scale(amax, f);
      for (i64 p = first; p < end; ++p) r[at(l, p)] = cast(v[at(l, p)], static_cast<float>(1.0 / s), f) * s;
    }
  return r;
}

TEST(Fp8Linear, UnderBlockScalingEachBlockOf32AlongTheGemmsKTakesTheScaleOfItsOwnAmax) {
  for (const bool hybrid : {false, true}) {
    Case c = make_case(hybrid ? 31 : 32, 40, 48, 40);
    // Outliers that push the rest of their blocks into E4M3's subnormals (and some of it to
    // zero): the blocks of a row and of a column then give different values.
    c.x[5] = 16384.0;                                       // row 0, column 5
    c.g[static_cast<std::size_t>(3 * c.out + 7)] = 1000.0;  // row 3, column 7
    c.meta->block_scaling = true;
    c.meta->input_format = c.meta->weight_format = Fp8Format::e4m3;
    c.meta->grad_format = hybrid ? Fp8Format::e5m2 : Fp8Format::e4m3;
    c.meta->input_scale = c.meta->weight_scale = c.meta->grad_scale = 1.0f;
    const Fp8LinearMeta m = *c.meta;
    Tensor x = Tensor::from(c.x, {c.rows, c.in}).set_requires_grad(true);
    Tensor w = Tensor::from(c.w, {c.out, c.in}).set_requires_grad(true);
    Tensor b = Tensor::from(c.b, {c.out}).set_requires_grad(true);
    const Tensor y = fp8_linear(x, w, b, c.meta);
    y.backward(Tensor::from(c.g, {c.rows, c.out}));

    const auto x_rows = mx_casts(c.x, c.rows, c.in, false, m.input_format);
    const auto w_rows = mx_casts(c.w, c.out, c.in, false, m.weight_format);
    const auto g_rows = mx_casts(c.g, c.rows, c.out, false, m.grad_format);
    const auto w_columns = mx_casts(c.w, c.out, c.in, true, m.weight_format);
    const auto g_columns = mx_casts(c.g, c.rows, c.out, true, m.grad_format);
    const auto x_columns = mx_casts(c.x, c.rows, c.in, true, m.input_format);
    auto line = [](const std::vector<double>& v, i64 index, i64 count, i64 stride, i64 step) {
      std::vector<double> r;
      for (i64 p = 0; p < count; ++p) r.push_back(v[static_cast<std::size_t>(index * stride + p * step)]);
      return r;
    };
    const std::vector<double> got_y = y.to_f64(), got_dx = x.grad().to_f64(), got_dw = w.grad().to_f64();
    for (i64 i = 0; i < c.rows; ++i)
      for (i64 j = 0; j < c.out; ++j) {
        const Ref r = fp8_dot(line(x_rows, i, c.in, c.in, 1), line(w_rows, j, c.in, c.in, 1), c.in, 1.0f, 1.0f,
                              c.b[static_cast<std::size_t>(j)]);
        EXPECT_NEAR(got_y[static_cast<std::size_t>(i * c.out + j)], r.value, r.bound) << "y " << i << "," << j;
      }
    for (i64 i = 0; i < c.rows; ++i)
      for (i64 j = 0; j < c.in; ++j) {
        const Ref r = fp8_dot(line(g_rows, i, c.out, c.out, 1), line(w_columns, j, c.out, 1, c.in), c.out, 1.0f, 1.0f, 0);
        EXPECT_NEAR(got_dx[static_cast<std::size_t>(i * c.in + j)], r.value, r.bound) << "dx " << i << "," << j;
      }
    int rowwise_would_differ = 0;  // the test tells the orientations apart
    for (i64 o = 0; o < c.out; ++o)
      for (i64 j = 0; j < c.in; ++j) {
        const Ref r = fp8_dot(line(g_columns, o, c.rows, 1, c.out), line(x_columns, j, c.rows, 1, c.in), c.rows, 1.0f,
                              1.0f, 0);
        const double got = got_dw[static_cast<std::size_t>(o * c.in + j)];
        EXPECT_NEAR(got, r.value, r.bound) << "dW " << o << "," << j;
        const Ref wrong = fp8_dot(line(g_rows, o, c.rows, 1, c.out), line(x_rows, j, c.rows, 1, c.in), c.rows, 1.0f,
                                  1.0f, 0);
        if (std::fabs(got - wrong.value) > wrong.bound) ++rowwise_would_differ;
      }
    EXPECT_GT(rowwise_would_differ, 0);
    auto amax = [](const std::vector<double>& v) {
      double a = 0;
      for (double e : v) a = std::max(a, std::fabs(e));
      return a;
    };
    EXPECT_EQ(static_cast<double>(c.meta->input_amax), 16384.0);
    EXPECT_EQ(static_cast<double>(c.meta->weight_amax), amax(c.w));
    EXPECT_EQ(static_cast<double>(c.meta->grad_amax), 1000.0);
    EXPECT_EQ(c.meta->input_scale, 1.0f);  // no per-tensor scale
  }
}

// A batch of no rows under block scaling: empty outputs and gradients (the columnwise
// copies of an empty operand are empty), zero weight gradient.
TEST(Fp8Linear, UnderBlockScalingAnEmptyBatchGivesEmptyResults) {
  auto meta = std::make_shared<Fp8LinearMeta>();
  meta->block_scaling = true;
  meta->grad_format = Fp8Format::e4m3;
  Tensor x = Tensor::zeros({0, 32}).set_requires_grad(true);
  Tensor w = Tensor::ones({16, 32}).set_requires_grad(true);
  const Tensor y = fp8_linear(x, w, {}, meta);
  EXPECT_EQ(y.shape(), (Shape{0, 16}));
  y.backward(Tensor::zeros({0, 16}));
  EXPECT_EQ(x.grad().shape(), (Shape{0, 32}));
  for (const double v : w.grad().to_f64()) EXPECT_EQ(v, 0.0);
}

// A second call in the same step keeps the larger amax (one GEMM called twice: TE's
// casts write into the same slot with max).
TEST(Fp8Linear, TheAmaxesOfTwoCallsInAStepAreTheirMaximum) {
  auto meta = std::make_shared<Fp8LinearMeta>();
  const Tensor w = Tensor::from(std::vector<double>{0.5, -0.25}, {1, 2});
  fp8_linear(Tensor::from(std::vector<double>{3, -1}, {1, 2}), w, {}, meta);
  fp8_linear(Tensor::from(std::vector<double>{1, -2}, {1, 2}), w, {}, meta);
  EXPECT_EQ(meta->input_amax, 3.0f);
  EXPECT_EQ(meta->weight_amax, 0.5f);
  EXPECT_EQ(meta->grad_amax, 0.0f);  // no backward yet
}

// In f64 the op is the exact linear it approximates, forward and backward, and writes no
// amax: the shadow's reference.
TEST(Fp8Linear, InF64ItIsLinearItselfAndWritesNoAmax) {
  Case c = make_case(9);
  auto run = [&](bool fp8) {
    Tensor x = Tensor::from(c.x, {c.rows, c.in}, DType::f64).set_requires_grad(true);
    Tensor w = Tensor::from(c.w, {c.out, c.in}, DType::f64).set_requires_grad(true);
    Tensor b = Tensor::from(c.b, {c.out}, DType::f64).set_requires_grad(true);
    const Tensor y = fp8 ? fp8_linear(x, w, b, c.meta) : linear(x, w, b);
    y.backward(Tensor::from(c.g, {c.rows, c.out}, DType::f64));
    return std::vector<std::vector<double>>{y.to_f64(), x.grad().to_f64(), w.grad().to_f64(), b.grad().to_f64()};
  };
  EXPECT_EQ(run(true), run(false));
  EXPECT_EQ(c.meta->input_amax, 0.0f);
  EXPECT_EQ(c.meta->weight_amax, 0.0f);
  EXPECT_EQ(c.meta->grad_amax, 0.0f);
}

TEST(Fp8Linear, RefusesWhatNoFp8GemmRunsNamingTheOp) {
  const Tensor x = Tensor::ones({2, 16}), w = Tensor::ones({16, 16});
  auto message = [&](const std::shared_ptr<Fp8LinearMeta>& meta) {
    try {
      fp8_linear(x, w, {}, meta);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(nullptr).find("fp8_linear: no scaling state"), std::string::npos) << message(nullptr);
  auto both_e5m2 = std::make_shared<Fp8LinearMeta>();
  both_e5m2->input_format = both_e5m2->weight_format = Fp8Format::e5m2;
  EXPECT_NE(message(both_e5m2).find("both in E5M2 have no fp8 GEMM"), std::string::npos) << message(both_e5m2);
  try {
    fp8_linear(Tensor::ones({2, 15}), w, {}, std::make_shared<Fp8LinearMeta>());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_linear: x [2, 15] and weight [16, 16]"), std::string::npos) << e.what();
  }
}


// ---- the module: TE's delayed scaling around the op ------------------------------------

// The scales of each step's casts come from the amaxes of the steps before: the input's
// scale at step t is 448 / max(amax of the input over steps t-L .. t-1) (margin 0, history
// L = 4, "max"), 1 before any amax, where the amaxes are those of the batches this test
// feeds (worked out here from the data, not read back from the layer). The weight's scale
// follows its own amaxes the same way, and the gradient's E5M2 scale 57344 / amax.
TEST(Fp8LinearModule, EachStepsScalesComeFromTheAmaxHistoryOfTheStepsBefore) {
  Generator gen(3);
  amp::DelayedScaling recipe;
  recipe.amax_history_len = 4;
  nn::Fp8Linear layer(16, 16, gen, recipe);
  const std::vector<double> input_amax = {1, 8, 0.5, 0.5, 0.5, 0.5, 2, 0.25};
  std::vector<float> seen_input, seen_weight, seen_grad;
  for (std::size_t t = 0; t < input_amax.size(); ++t) {
    // The batch: values below input_amax[t], one of them exactly it.
    std::vector<double> x = Tensor::uniform({4, 16}, gen, -0.5, 0.5, DType::f64).to_f64();
    for (double& v : x) v *= input_amax[t];
    x[5] = -input_amax[t];
    const std::vector<double> w = layer.weight.to_f64();
    double w_amax = 0;
    for (double v : w) w_amax = std::max(w_amax, std::fabs(static_cast<double>(static_cast<float>(v))));
    const std::vector<double> g = Tensor::uniform({4, 16}, gen, -0.01, 0.01, DType::f64).to_f64();
    double g_amax = 0;
    for (double v : g) g_amax = std::max(g_amax, std::fabs(static_cast<double>(static_cast<float>(v))));

    // The scales this step's casts use.
    auto expected = [&](const std::vector<float>& history, float fp8_max) {
      float m = 0;
      for (std::size_t k = history.size() > 4 ? history.size() - 4 : 0; k < history.size(); ++k) m = std::max(m, history[k]);
      return m > 0 ? fp8_max / m : 1.0f;
    };
    EXPECT_EQ(layer.fp8_meta().input_scale, expected(seen_input, 448.0f)) << "step " << t;
    EXPECT_EQ(layer.fp8_meta().weight_scale, expected(seen_weight, 448.0f)) << "step " << t;
    EXPECT_EQ(layer.fp8_meta().grad_scale, expected(seen_grad, 57344.0f)) << "step " << t;

    const Tensor y = layer.forward(Tensor::from(x, {4, 16}));
    y.backward(Tensor::from(g, {4, 16}));
    seen_input.push_back(static_cast<float>(input_amax[t]));
    seen_weight.push_back(static_cast<float>(w_amax));
    seen_grad.push_back(static_cast<float>(g_amax));
    EXPECT_EQ(layer.step_amaxes()[0], seen_input.back());
    const auto done = layer.update_scales();
    EXPECT_EQ(done[0].step_amax, seen_input.back());
    EXPECT_EQ(layer.step_amaxes()[0], 0.0f);  // the next step starts a new slot
    for (Tensor& p : layer.parameters()) p.zero_grad();
  }
}

// A regression trained with fp8 layers ends near where the same model in fp32 does (E4M3's
// rounding leaves a slightly higher floor), and the fp8 run is not the fp32 one.
TEST(Fp8LinearModule, ARegressionTrainsToTheFp32ModelsLoss) {
  auto train = [](bool fp8) {
    Generator gen(11);
    amp::DelayedScaling recipe;
    recipe.amax_history_len = 16;
    std::shared_ptr<nn::Linear> a = fp8 ? std::make_shared<nn::Fp8Linear>(32, 32, gen, recipe)
                                        : std::make_shared<nn::Linear>(32, 32, gen);
    std::shared_ptr<nn::Linear> b = fp8 ? std::make_shared<nn::Fp8Linear>(32, 16, gen, recipe)
                                        : std::make_shared<nn::Linear>(32, 16, gen);
    std::vector<std::pair<std::string, Tensor>> params;
    for (const auto& p : a->named_parameters()) params.emplace_back("a." + p.first, p.second);
    for (const auto& p : b->named_parameters()) params.emplace_back("b." + p.first, p.second);
    optim::SGD opt(params, 0.5);
    Generator data(5);
    const Tensor target_w = Tensor::uniform({16, 32}, data, -0.3, 0.3);
    std::vector<double> losses;
    for (int step = 0; step < 300; ++step) {
      const Tensor x = Tensor::uniform({16, 32}, data, -1, 1);
      const Tensor target = linear(x, target_w);
      const Tensor loss = mse_loss(b->forward(relu(a->forward(x))), target);
      losses.push_back(loss.to_f64()[0]);
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (fp8) {
        static_cast<nn::Fp8Linear&>(*a).update_scales();
        static_cast<nn::Fp8Linear&>(*b).update_scales();
      }
    }
    return losses;
  };
  const std::vector<double> f32 = train(false), f8 = train(true);
  const double last32 = f32.back(), last8 = f8.back();
  EXPECT_LT(last32, 0.05 * f32.front());
  EXPECT_LT(last8, 0.05 * f8.front());
  // E4M3 keeps 3 mantissa bits: a noise floor of a few percent of each operand; measured
  // 0.0122 against fp32's 0.0108 after 300 steps (from 0.33).
  EXPECT_LT(last8, 1.25 * last32);
  EXPECT_NE(f8, f32);
}

}  // namespace
}  // namespace ampcheck
