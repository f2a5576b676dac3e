// Elementwise, reduction, GEMM and shape ops against the two anchors: gradients in f64
// against central finite differences, f32 against f64, and f16/bf16 outputs equal to the
// f32 result rounded once. Independent references (plain loops in double) check values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "engine/random.h"
#include "tests/op_check.h"

namespace ampcheck {
namespace {

using test::OpFn;

struct Case {
  std::string name;
  OpFn f;
  std::vector<Shape> shapes;  // one per input, f64 uniform in [lo, hi)
  double lo = -1, hi = 1;
  bool elementwise = true;    // f16/bf16 output must equal the rounded f32 result
};

std::vector<Tensor> inputs_for(const Case& c, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> in;
  for (const Shape& s : c.shapes) in.push_back(test::random(s, gen, c.lo, c.hi));
  return in;
}

std::vector<Case> unary_cases() {
  auto u = [](std::string name, std::function<Tensor(const Tensor&)> fn, double lo = -2, double hi = 2) {
    return Case{name, [fn](const std::vector<Tensor>& x) { return fn(x[0]); }, {{3, 5}}, lo, hi};
  };
  return {
      u("relu", [](const Tensor& x) { return relu(x); }),
      u("gelu_erf", [](const Tensor& x) { return gelu(x); }),
      u("gelu_tanh", [](const Tensor& x) { return gelu(x, true); }),
      u("silu", [](const Tensor& x) { return silu(x); }),
      u("sigmoid", [](const Tensor& x) { return sigmoid(x); }),
      u("tanh", [](const Tensor& x) { return tanh(x); }),
      u("hardswish", [](const Tensor& x) { return hardswish(x); }, -5, 5),
      u("hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }, -5, 5),
      u("neg", [](const Tensor& x) { return neg(x); }),
      u("abs", [](const Tensor& x) { return abs(x); }),
      u("square", [](const Tensor& x) { return square(x); }),
      u("exp", [](const Tensor& x) { return exp(x); }),
      u("log", [](const Tensor& x) { return log(x); }, 0.1, 3),
      u("sqrt", [](const Tensor& x) { return sqrt(x); }, 0.1, 3),
      u("rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.1, 3),
      u("pow_2.5", [](const Tensor& x) { return pow(x, 2.5); }, 0.1, 3),
      u("pow_-1.5", [](const Tensor& x) { return pow(x, -1.5); }, 0.1, 3),
      u("reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.2, 3),
      u("erf", [](const Tensor& x) { return erf(x); }, -3, 3),
      u("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }),
      u("add_scalar", [](const Tensor& x) { return x + 0.3; }),
      u("sub_scalar", [](const Tensor& x) { return x - 0.3; }),
      u("mul_scalar", [](const Tensor& x) { return x * 3.0; }),
      u("div_scalar", [](const Tensor& x) { return x / 3.0; }),
      u("cast_f32", [](const Tensor& x) { return cast(x, DType::f32); }),
  };
}

std::vector<Case> binary_cases() {
  std::vector<Case> cases;
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 3}, {4, 3}}, {{4, 3}, {3}}, {{2, 1, 3}, {4, 1}}, {{5}, {}}, {{1, 3}, {2, 1}}};
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
  };
  for (const auto& [name, fn] : ops)
    for (const auto& [sa, sb] : shapes)
      cases.push_back({name + to_string(sa) + to_string(sb),
                       [fn = fn](const std::vector<Tensor>& x) { return fn(x[0], x[1]); },
                       {sa, sb}, 0.5, 2.0});
  return cases;
}

std::vector<Case> other_cases() {
  auto c = [](std::string name, OpFn f, std::vector<Shape> shapes, bool elementwise) {
    return Case{std::move(name), std::move(f), std::move(shapes), -1, 1, elementwise};
  };
  return {
      c("sum_all", [](auto& x) { return sum(x[0]); }, {{3, 4}}, false),
      c("sum_dim1", [](auto& x) { return sum(x[0], {1}); }, {{3, 4, 2}}, false),
      c("sum_dims02_keep", [](auto& x) { return sum(x[0], {0, 2}, true); }, {{3, 4, 2}}, false),
      c("mean_dim-1", [](auto& x) { return mean(x[0], {-1}); }, {{3, 5}}, false),
      c("mean_all", [](auto& x) { return mean(x[0]); }, {{2, 3, 2}}, false),
      c("max_dim0", [](auto& x) { return max(x[0], {0}); }, {{4, 3}}, false),
      c("max_all", [](auto& x) { return max(x[0]); }, {{4, 3}}, false),
      c("matmul_2d", [](auto& x) { return matmul(x[0], x[1]); }, {{3, 4}, {4, 5}}, false),
      c("matmul_vec_mat", [](auto& x) { return matmul(x[0], x[1]); }, {{4}, {4, 2}}, false),
      c("matmul_mat_vec", [](auto& x) { return matmul(x[0], x[1]); }, {{3, 4}, {4}}, false),
      c("matmul_batched_shared_rhs", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 5}}, false),
      c("matmul_batched_broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 1, 3, 4}, {3, 4, 2}}, false),
      c("bmm", [](auto& x) { return bmm(x[0], x[1]); }, {{2, 3, 4}, {2, 4, 3}}, false),
      c("linear_bias", [](auto& x) { return linear(x[0], x[1], x[2]); }, {{2, 3, 4}, {5, 4}, {5}}, false),
      c("linear_nobias", [](auto& x) { return linear(x[0], x[1]); }, {{3, 4}, {2, 4}}, false),
      c("reshape", [](auto& x) { return reshape(x[0], {4, -1}); }, {{2, 3, 2}}, true),
      c("flatten", [](auto& x) { return flatten(x[0], 1); }, {{2, 3, 2}}, true),
      c("permute", [](auto& x) { return permute(x[0], {2, 0, 1}); }, {{2, 3, 4}}, true),
      c("transpose", [](auto& x) { return transpose(x[0], 0, 1); }, {{3, 5}}, true),
      c("concat_dim1", [](auto& x) { return concat({x[0], x[1]}, 1); }, {{2, 3}, {2, 2}}, true),
      c("slice_step2", [](auto& x) { return slice(x[0], 1, 1, 6, 2); }, {{3, 7}}, true),
      c("slice_negative", [](auto& x) { return slice(x[0], 0, -2, 100); }, {{4, 2}}, true),
      c("slice_rows_view", [](auto& x) { return slice(x[0], 0, 1, 3); }, {{4, 3}}, true),
      c("where", [](auto& x) { return where(x[0], x[1], x[2]); }, {{3, 4}, {3, 4}, {4}}, true),
      c("masked_fill", [](auto& x) { return masked_fill(x[0], x[1], -2.5); }, {{3, 4}, {4}}, true),
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all = unary_cases();
  for (auto& v : {binary_cases(), other_cases()}) all.insert(all.end(), v.begin(), v.end());
  return all;
}

// where's condition and masked_fill's mask take no gradient.
std::vector<bool> wrt_of(const Case& c) {
  std::vector<bool> w(c.shapes.size(), true);
  if (c.name == "where") w[0] = false;
  if (c.name == "masked_fill") w[1] = false;
  return w;
}

// Conditions and masks: half the elements set.
std::vector<Tensor> prepared(const Case& c, std::uint64_t seed) {
  std::vector<Tensor> in = inputs_for(c, seed);
  auto binarize = [](const Tensor& t) {
    std::vector<double> v = t.to_f64();
    for (double& x : v) x = x > 0 ? 1 : 0;
    return Tensor::from(v, t.shape(), DType::f64);
  };
  if (c.name == "where") in[0] = binarize(in[0]);
  if (c.name == "masked_fill") in[1] = binarize(in[1]);
  return in;
}

TEST(OpsCore, GradientsMatchFiniteDifferences) {
  for (const Case& c : all_cases()) {
    if (c.name.rfind("cast", 0) == 0) continue;  // a rounding step: see CastPassesGradientsThrough
    for (std::uint64_t seed : {1u, 2u}) {
      const auto r = test::gradcheck(c.f, prepared(c, seed), wrt_of(c));
      EXPECT_LT(r.max_rel_error, 1e-6) << c.name << " seed " << seed << "\n" << r.report;
    }
  }
}

TEST(OpsCore, F32AgreesWithF64) {
  for (const Case& c : all_cases()) {
    const double nmse = test::nmse_f32_vs_f64(c.f, prepared(c, 3));
    EXPECT_LT(nmse, c.elementwise ? 1e-10 : 1e-8) << c.name;
  }
}

TEST(OpsCore, LowPrecisionElementwiseIsTheRoundedF32Result) {
  for (const Case& c : all_cases()) {
    if (!c.elementwise || c.name.rfind("cast", 0) == 0) continue;
    for (DType d : {DType::f16, DType::bf16})
      EXPECT_EQ(test::low_precision_mismatches(c.f, prepared(c, 4), d), 0) << c.name << " " << name(d);
  }
}

// Binary ops on large broadcast inputs go through the chunked, threaded path.
TEST(OpsCore, LowPrecisionBinaryOpsOnLargeInputs) {
  for (const Case& c : binary_cases()) {
    Case big = c;
    big.shapes[0].insert(big.shapes[0].begin(), 1500);
    for (DType d : {DType::f16, DType::bf16})
      EXPECT_EQ(test::low_precision_mismatches(big.f, prepared(big, 5), d), 0) << c.name << " " << name(d);
  }
}

// cast rounds (a step function, no finite differences): its gradient is the incoming
// gradient converted back to the input's dtype.
TEST(OpsCore, CastPassesGradientsThrough) {
  Generator gen(11);
  Tensor x = test::random({4, 3}, gen).set_requires_grad();
  const Tensor r = test::random({4, 3}, gen, -1, 1, DType::f32);
  cast(x, DType::f32).backward(r);
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_f64(), r.to_f64());
  Tensor h = Tensor::ones({3}, DType::f16).set_requires_grad();
  sum(cast(h, DType::f32) * 3.0).backward();
  EXPECT_EQ(h.grad().dtype(), DType::f16);
  EXPECT_EQ(h.grad().to_f64(), (std::vector<double>{3, 3, 3}));
}

// ---- independent values ----
TEST(OpsCore, MatmulMatchesPlainLoops) {
  Generator gen(9);
  const Tensor a = test::random({2, 3, 5}, gen), b = test::random({5, 4}, gen);
  const std::vector<double> av = a.to_f64(), bv = b.to_f64(), cv = matmul(a, b).to_f64();
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int k = 0; k < 5; ++k) s += av[static_cast<std::size_t>((n * 3 + i) * 5 + k)] * bv[static_cast<std::size_t>(k * 4 + j)];
        EXPECT_NEAR(cv[static_cast<std::size_t>((n * 3 + i) * 4 + j)], s, 1e-14);
      }
}

TEST(OpsCore, Fp16MatmulAccumulatesInF32) {
  // 4096 ones of 1.0 and a 1/4096 step: an fp16 accumulator would stall at 2048 + ...;
  // f32 accumulation gives the exact 4096, representable in fp16.
  const Tensor a = Tensor::ones({1, 4096}, DType::f16), b = Tensor::ones({4096, 1}, DType::f16);
  EXPECT_EQ(matmul(a, b).item(), 4096.0);
  // 2049 in fp16 is not representable: the f32 result 2049 rounds to even 2048 once.
  const Tensor c = Tensor::ones({1, 2049}, DType::f16), d = Tensor::ones({2049, 1}, DType::f16);
  EXPECT_EQ(matmul(c, d).item(), 2048.0);
}

TEST(OpsCore, KnownValues) {
  const Tensor x = Tensor::from(std::vector<double>{-1, 0, 2}, {3}, DType::f64);
  EXPECT_EQ(relu(x).to_f64(), (std::vector<double>{0, 0, 2}));
  EXPECT_NEAR(gelu(x).to_f64()[0], -0.15865525393145707, 1e-15);  // -Phi(-1)
  EXPECT_NEAR(gelu(x, true).to_f64()[2], 1.954597694087775, 1e-14);
  EXPECT_EQ(hardswish(x).to_f64(), (std::vector<double>{-1.0 / 3.0, 0, 5.0 / 3.0}));
  EXPECT_EQ(sum(x).item(), 1.0);
  EXPECT_TRUE(std::isnan(max(Tensor::from(std::vector<double>{1, NAN, 3}, {3}, DType::f64)).item()));
  const Tensor m = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  EXPECT_EQ(transpose(m, 0, 1).to_f64(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(slice(m, 1, 0, 3, 2).to_f64(), (std::vector<double>{1, 3, 4, 6}));
  EXPECT_EQ(concat({m, m}, 0).shape(), (Shape{4, 3}));
  EXPECT_TRUE(slice(m, 0, 1, 2).shares_storage(m));  // leading rows: a view
  EXPECT_EQ(slice(m, 0, 1, 2).to_f64(), (std::vector<double>{4, 5, 6}));
  EXPECT_TRUE(reshape(m, {3, 2}).shares_storage(m));
  EXPECT_EQ(sum(m, {0}).to_f64(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(mean(m, {1}, true).to_f64(), (std::vector<double>{2, 5}));
  EXPECT_EQ(mean(m, {1}, true).shape(), (Shape{2, 1}));
}

// erf against the tables (Abramowitz & Stegun 7.1) and std::erf in double, on several
// shapes; its gradient against 2/sqrt(pi) exp(-x^2) written here and against finite
// differences; the dtype it keeps and the error it gives for integers.
TEST(OpsCore, ErfIsTheGaussErrorFunction) {
  const Tensor known = Tensor::from(std::vector<double>{0, 1, -0.5, 2, 0.1, 3}, {6}, DType::f64);
  const std::vector<double> table = {0, 0.8427007929497149, -0.5204998778130465,
                                     0.9953222650189527, 0.1124629160182849, 0.9999779095030014};
  const std::vector<double> got = erf(known).to_f64();
  for (std::size_t i = 0; i < table.size(); ++i) EXPECT_NEAR(got[i], table[i], 1e-15) << i;

  const double two_over_sqrt_pi = 2 / std::sqrt(3.14159265358979323846);
  Generator gen(21);
  for (const Shape& s : std::vector<Shape>{{7, 13}, {2, 3, 4}, {1}, {}, {0, 5}}) {
    Tensor x = test::random(s, gen, -3, 3).set_requires_grad();
    const Tensor r = test::random(s, gen);
    const Tensor y = erf(x);
    ASSERT_EQ(y.shape(), s);
    const std::vector<double> xv = x.to_f64(), yv = y.to_f64(), rv = r.to_f64();
    for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], std::erf(xv[i]), 1e-15) << to_string(s) << " " << i;
    sum(y * r).backward();
    const std::vector<double> gv = x.grad().to_f64();
    ASSERT_EQ(gv.size(), xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double want = rv[i] * two_over_sqrt_pi * std::exp(-xv[i] * xv[i]);
      EXPECT_NEAR(gv[i], want, 1e-14 * std::max(1.0, std::fabs(want))) << to_string(s) << " " << i;
    }
    if (numel(s) == 0) continue;
    const auto check = test::gradcheck([](const std::vector<Tensor>& v) { return erf(v[0]); },
                                       {test::random(s, gen, -3, 3)});
    EXPECT_LT(check.max_rel_error, 1e-6) << to_string(s) << "\n" << check.report;
  }

  for (DType d : {DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(erf(Tensor::ones({2}, d)).dtype(), d);
  EXPECT_NE(test::error_of([] { erf(Tensor::from(std::vector<std::int64_t>{1}, {1})); })
                .find("erf: expects a floating-point tensor"),
            std::string::npos);
}

TEST(OpsCore, PromotesMixedDtypes) {
  const Tensor h = Tensor::ones({2}, DType::f16), b = Tensor::ones({2}, DType::bf16),
               f = Tensor::ones({2}, DType::f32), d = Tensor::ones({2}, DType::f64);
  EXPECT_EQ((h + b).dtype(), DType::f32);
  EXPECT_EQ((h + f).dtype(), DType::f32);
  EXPECT_EQ((f * d).dtype(), DType::f64);
  EXPECT_EQ((h * 2.0).dtype(), DType::f16);
  // gradients come back in each operand's own dtype
  Tensor x = Tensor::ones({2}, DType::f16).set_requires_grad();
  Tensor y = Tensor::ones({2}, DType::f32).set_requires_grad();
  sum(x * y).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f16);
  EXPECT_EQ(y.grad().dtype(), DType::f32);
}

TEST(OpsCore, BadInputsNameTheOpAndTheShapes) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  auto message = [](const std::function<void()>& fn) { return test::error_of(fn); };
  EXPECT_NE(message([&] { add(a, b); }).find("add: shapes [2, 3] and [4, 5] do not broadcast"), std::string::npos);
  EXPECT_NE(message([&] { matmul(a, b); }).find("matmul: shapes [2, 3] and [4, 5] cannot be multiplied"), std::string::npos);
  EXPECT_NE(message([&] { reshape(a, {4, 2}); }).find("[4, 2]"), std::string::npos);
  EXPECT_NE(message([&] { sum(a, {2}); }).find("sum: dim 2 out of range"), std::string::npos);
  EXPECT_NE(message([&] { exp(Tensor::from(std::vector<std::int64_t>{1}, {1})); }).find("exp: expects a floating-point tensor"), std::string::npos);
  EXPECT_NE(message([&] { permute(a, {0, 0}); }).find("appears twice"), std::string::npos);
  EXPECT_NE(message([&] { clamp(a, 1, 0); }).find("clamp: lo"), std::string::npos);
  EXPECT_NE(message([&] { call(Op::add, {a}); }).find("add takes 2 tensor inputs, got 1"), std::string::npos);
}

// The factories fill element i with the i-th value of the stream, rounded once to the
// dtype, across the chunks they fill in (16384 elements each): the reference is the
// stream itself and the compiler's float rounding.
TEST(OpsCore, FactoriesFillEveryElementAcrossChunks) {
  const std::int64_t n = 3 * 16384 + 7;
  Generator gen(42);
  gen.advance(5);  // a generator part-way through its stream
  const Tensor r64 = Tensor::randn({n}, gen, DType::f64, 0.5, 2.0);
  const Tensor u32 = Tensor::uniform({n}, gen, -3.0, 1.0, DType::f32);
  const std::vector<double> r = r64.to_f64(), u = u32.to_f64();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::uint64_t>(i);
    ASSERT_EQ(r[k], 0.5 + 2.0 * normal01(42, 5 + k)) << i;
    ASSERT_EQ(u[k], static_cast<double>(static_cast<float>(-3.0 + 4.0 * static_cast<double>(uniform01(42, 5 + k + n)))))
        << i;
  }
  EXPECT_EQ(gen.offset(), 5u + 2u * static_cast<std::uint64_t>(n));
  const std::vector<double> a = Tensor::arange(n, DType::f32).to_f64();
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(a[static_cast<std::size_t>(i)], static_cast<double>(i)) << i;
  for (double v : Tensor::full({n}, 0.1, DType::f32).to_f64()) ASSERT_EQ(v, static_cast<double>(0.1f));
}

// A tensor no machine can hold is refused before malloc, naming its size and the
// machine's memory; a size beyond 64 bits too (its byte count would wrap).
TEST(OpsCore, ATensorTooLargeForMemoryNamesItsSize) {
  const auto refusal = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const OutOfMemory& e) {
      return e.what();
    }
    return "(no OutOfMemory)";
  };
  const std::string big = refusal([] { Tensor::empty({3000000000000000, 2}); });
  // 3e15 * 2 * 4 bytes = 2.4e16 bytes = 21.3 PiB.
  EXPECT_NE(big.find("a float32 tensor of shape [3000000000000000, 2] needs 21.3 PiB, and this machine has "),
            std::string::npos)
      << big;
  EXPECT_NE(big.find(" in all)"), std::string::npos) << big;
  EXPECT_THROW(Tensor::empty({3000000000000000, 2}), OutOfMemory);
  EXPECT_THROW(Tensor::empty({3000000000000000, 2}), std::bad_alloc);
  const std::string wrap = refusal([] { Tensor::zeros({std::int64_t{1} << 40, std::int64_t{1} << 30}, DType::f16); });
  EXPECT_NE(wrap.find("a float16 tensor of shape [1099511627776, 1073741824] needs more than"), std::string::npos)
      << wrap;
  EXPECT_EQ(Tensor::empty({0, 5}).numel(), 0);  // nothing to allocate is no error
}

TEST(OpsCore, RegistryNamesAndSuggestions) {
  EXPECT_EQ(op_name(Op::log_softmax), "log_softmax");
  EXPECT_EQ(op_from_name("conv2d"), Op::conv2d);
  EXPECT_FALSE(op_from_name("sofmax"));
  EXPECT_EQ(closest_op_name("sofmax"), "softmax");
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    EXPECT_EQ(static_cast<int>(info.op), i);
    EXPECT_EQ(op_from_name(info.name), info.op);
  }
}

}  // namespace
}  // namespace ampcheck
