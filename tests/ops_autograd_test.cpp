// Tensors, the counter-based generator, autograd mechanics and thread-count determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/parallel.h"
#include "tests/op_check.h"

namespace ampcheck {
namespace {

TEST(Tensor, FactoriesAndViews) {
  const Tensor z = Tensor::zeros({2, 3}, DType::bf16);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.nbytes(), 12u);
  EXPECT_EQ(Tensor::arange(4).to_f64(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::f16).to_f64()[0], 0.0999755859375);  // fp16(0.1)
  const Tensor a = Tensor::arange(6, DType::f64);
  const Tensor v = a.view({2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_TRUE(v.shares_storage(a));
  const Tensor r = v.rows(1, 1);
  EXPECT_EQ(r.to_f64(), (std::vector<double>{3, 4, 5}));
  EXPECT_THROW(a.view({4, -1}), std::invalid_argument);
  EXPECT_THROW(Tensor::from(std::vector<double>{1.5}, {1}, DType::i64), std::invalid_argument);
  EXPECT_EQ(Tensor::from(std::vector<std::int64_t>{7, -2}, {2}).to_i64(), (std::vector<std::int64_t>{7, -2}));
}

TEST(Tensor, PhiloxMatchesThePublishedKnownAnswer) {
  // Random123's kat_vectors: philox4x32_10 with counter and key all ones (0xffffffff).
  const auto r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
  const auto z = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(z[0], 0x6627e8d5u);
  EXPECT_EQ(z[1], 0xe169c58du);
  EXPECT_EQ(z[2], 0xbc57ac4cu);
  EXPECT_EQ(z[3], 0x9b00dbd8u);
}

TEST(Tensor, RandomDrawsAreSeededAndStatisticallySane) {
  Generator g1(5), g2(5);
  const Tensor a = Tensor::randn({1000}, g1), b = Tensor::randn({1000}, g2);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  const Tensor c = Tensor::randn({1000}, g1);  // the generator moved on
  EXPECT_NE(std::memcmp(a.raw(), c.raw(), a.nbytes()), 0);
  Generator g(7);
  const std::vector<double> v = Tensor::randn({100000}, g, DType::f64).to_f64();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / static_cast<double>(v.size()));
  EXPECT_NEAR(m, 0, 0.02);
  EXPECT_NEAR(s, 1, 0.02);
  const std::vector<double> u = Tensor::uniform({100000}, g, 2, 4, DType::f64).to_f64();
  for (double x : u) ASSERT_TRUE(x >= 2 && x < 4);
}

TEST(Autograd, AccumulatesIntoLeavesAcrossUsesAndCalls) {
  Tensor x = Tensor::from(std::vector<double>{1, 2}, {2}, DType::f64).set_requires_grad();
  sum(x * x + x).backward();  // d/dx = 2x + 1
  EXPECT_EQ(x.grad().to_f64(), (std::vector<double>{3, 5}));
  sum(x * 3.0).backward();  // accumulates
  EXPECT_EQ(x.grad().to_f64(), (std::vector<double>{6, 8}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor x = Tensor::ones({2}).set_requires_grad();
  Tensor y;
  {
    NoGradGuard guard;
    y = x * 2.0;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(grad_enabled());
  EXPECT_THROW(y.backward(Tensor::ones({2})), std::logic_error);
}

TEST(Autograd, SecondBackwardOnAFreedGraphSaysWhatToDo) {
  Tensor x = Tensor::ones({2}).set_requires_grad();
  Tensor loss = sum(exp(x));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
  Tensor loss2 = sum(exp(x));
  loss2.backward({}, true);
  loss2.backward();  // allowed once more after retain_graph
  EXPECT_NEAR(x.grad().to_f64()[0], 3 * std::exp(1.0), 1e-5);
}

TEST(Autograd, NonScalarOutputNeedsAGradient) {
  Tensor x = Tensor::ones({2}).set_requires_grad();
  EXPECT_THROW((x * 2.0).backward(), std::invalid_argument);
  EXPECT_THROW((x * 2.0).set_requires_grad(false), std::logic_error);
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = Tensor::from(std::vector<double>{0.5}, {1}, DType::f64).set_requires_grad();
  Tensor y = sum(exp(x) * square(x) + exp(x));  // d = e^x x^2 + 2x e^x + e^x
  y.backward();
  const double e = std::exp(0.5);
  EXPECT_NEAR(x.grad().item(), e * 0.25 + 2 * 0.5 * e + e, 1e-14);
}

// Same seed, same inputs: bit-identical forward and gradients for 1 and 2 threads.
TEST(Determinism, ThreadCountDoesNotChangeResults) {
  auto run = [](int threads) {
    set_num_threads(threads);
    Generator gen(3);
    Tensor w = Tensor::randn({64, 300}, gen).set_requires_grad();
    const Tensor x = Tensor::randn({20000, 300}, gen, DType::bf16);
    Tensor y = sum(gelu(linear(x, w)) * 0.5 + 1.0, {0});
    Tensor loss = mean(square(y));
    loss.backward();
    return std::make_pair(loss.item(), w.grad().to_f64());
  };
  const int before = num_threads();
  const auto one = run(1);
  const auto two = run(2);
  set_num_threads(before);
  EXPECT_EQ(one.first, two.first);
  EXPECT_EQ(one.second, two.second);
}

}  // namespace
}  // namespace ampcheck
