// batch_norm, layer_norm, softmax, log_softmax, cross_entropy, mse_loss, embedding and
// dropout: gradients against finite differences in f64, f32 against f64, f16/bf16
// against the f32 result rounded once, and values against plain-loop references in
// double written here from PyTorch's documented formulas (never from the kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/ops/ops.h"    // the public API under test
#include "engine/parallel.h"   // set_num_threads (determinism across thread counts)
#include "engine/random.h"     // uniform01 (dropout's documented mask rule)
#include "tests/op_check.h"    // gradcheck, nmse_f32_vs_f64, low_precision_mismatches

namespace ampcheck {
namespace {

using test::error_of;

using test::gradcheck;
using test::low_precision_mismatches;
using test::nmse_f32_vs_f64;
using test::OpFn;
using test::random;

constexpr double kGradTol = 1e-6;
constexpr double kNmseTol = 1e-8;

#define EXPECT_ERROR_MENTIONS(statement, ...)                                   \
  do {                                                                          \
    const std::string msg_ = error_of([&] { (void)(statement); });              \
    EXPECT_FALSE(msg_.empty()) << #statement " threw no std::invalid_argument"; \
    for (const char* part_ : {__VA_ARGS__})                                     \
      EXPECT_NE(msg_.find(part_), std::string::npos)                            \
          << "'" << part_ << "' not in: " << msg_;                              \
  } while (0)

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

// Runs f with 1 and then 3 threads; the outputs must agree bit for bit.
void expect_thread_count_invariant(const std::function<Tensor()>& f) {
  const int before = num_threads();
  set_num_threads(1);
  const std::vector<double> one = f().to_f64();
  set_num_threads(3);
  const std::vector<double> three = f().to_f64();
  set_num_threads(before);
  ASSERT_EQ(one.size(), three.size());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], three[i]) << "element " << i;
}

// ================================================================ softmax, log_softmax

// softmax / log_softmax of x along `dim`, plain loops in double.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape,
                                std::int64_t dim, bool log) {
  const auto d = static_cast<std::size_t>(dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < d; ++i) outer *= shape[i];
  for (std::size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  const std::int64_t n = shape[d];
  std::vector<double> y(x.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) {
        return static_cast<std::size_t>((o * n + k) * inner + i);
      };
      double mx = -INFINITY, s = 0;
      for (std::int64_t k = 0; k < n; ++k) mx = std::max(mx, x[at(k)]);
      for (std::int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - mx);
      for (std::int64_t k = 0; k < n; ++k)
        y[at(k)] = log ? x[at(k)] - mx - std::log(s) : std::exp(x[at(k)] - mx) / s;
    }
  return y;
}

TEST(SoftmaxTest, GradcheckEveryDim) {
  Generator gen(1);
  const Tensor x = random({3, 4, 5}, gen, -2, 2);
  for (std::int64_t dim : {0, 1, -1}) {
    const auto sm = gradcheck([dim](const auto& in) { return softmax(in[0], dim); }, {x});
    EXPECT_LT(sm.max_rel_error, kGradTol) << "softmax dim " << dim << "\n" << sm.report;
    const auto lsm = gradcheck([dim](const auto& in) { return log_softmax(in[0], dim); }, {x});
    EXPECT_LT(lsm.max_rel_error, kGradTol) << "log_softmax dim " << dim << "\n" << lsm.report;
  }
}

TEST(SoftmaxTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(2);
  const Tensor x = random({8, 33, 6}, gen, -6, 6);
  for (std::int64_t dim : {0, 1, 2}) {
    const OpFn sm = [dim](const auto& in) { return softmax(in[0], dim); };
    const OpFn lsm = [dim](const auto& in) { return log_softmax(in[0], dim); };
    for (const OpFn& f : {sm, lsm}) {
      EXPECT_LT(nmse_f32_vs_f64(f, {x}), kNmseTol) << "dim " << dim;
      EXPECT_EQ(low_precision_mismatches(f, {x}, DType::f16), 0) << "dim " << dim;
      EXPECT_EQ(low_precision_mismatches(f, {x}, DType::bf16), 0) << "dim " << dim;
    }
  }
}

TEST(SoftmaxTest, MatchesReferenceAndStaysFiniteForLargeLogits) {
  Generator gen(3);
  // Offsets of +-1000 overflow a naive exp; the max subtraction must absorb them.
  Tensor x = random({4, 7, 3}, gen, -3, 3);
  std::vector<double> xv = x.to_f64();
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] += (i % 2 ? 1000.0 : -1000.0);
  x = Tensor::from(xv, x.shape(), DType::f64);
  for (std::int64_t dim : {0, 1, 2}) {
    expect_close(softmax(x, dim).to_f64(), ref_softmax(xv, x.shape(), dim, false), 1e-14);
    expect_close(log_softmax(x, dim).to_f64(), ref_softmax(xv, x.shape(), dim, true), 1e-14);
  }
  const Tensor big = Tensor::from(std::vector<double>{1e4, 0, -1e4}, {3}, DType::f32);
  const std::vector<double> y = softmax(big).to_f64();
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 0.0);
}

TEST(SoftmaxTest, HandValues) {
  // Equal logits: every probability is 1/n, every log-probability -log(n).
  const Tensor z = Tensor::zeros({2, 5}, DType::f64);
  for (double v : softmax(z, 1).to_f64()) EXPECT_DOUBLE_EQ(v, 0.2);
  for (double v : log_softmax(z, 1).to_f64()) EXPECT_DOUBLE_EQ(v, -std::log(5.0));
  // [0, log 3]: probabilities 1/4 and 3/4.
  const Tensor t = Tensor::from(std::vector<double>{0, std::log(3.0)}, {2}, DType::f64);
  const std::vector<double> p = softmax(t, 0).to_f64();
  EXPECT_NEAR(p[0], 0.25, 1e-15);
  EXPECT_NEAR(p[1], 0.75, 1e-15);
  EXPECT_EQ(softmax(Tensor::ones({3}, DType::f16)).dtype(), DType::f16);
}

TEST(SoftmaxTest, BadInputs) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(softmax(x, 2), std::invalid_argument);
  EXPECT_THROW(log_softmax(x, -3), std::invalid_argument);
  EXPECT_ERROR_MENTIONS(softmax(Tensor::from(std::vector<std::int64_t>{1, 2}, {2}), 0),
                        "softmax");
  EXPECT_ERROR_MENTIONS(log_softmax(Tensor{}, 0), "log_softmax", "undefined");
}

// ================================================================ layer_norm

// layer_norm over the trailing `len` elements of each row: biased variance, eps inside
// the sqrt; w and b empty for absent.
std::vector<double> ref_layer_norm(const std::vector<double>& x, std::size_t len,
                                   const std::vector<double>& w, const std::vector<double>& b,
                                   double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / len; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < len; ++j) mean += x[r * len + j];
    mean /= static_cast<double>(len);
    for (std::size_t j = 0; j < len; ++j) {
      const double d = x[r * len + j] - mean;
      var += d * d;
    }
    var /= static_cast<double>(len);
    for (std::size_t j = 0; j < len; ++j) {
      double v = (x[r * len + j] - mean) / std::sqrt(var + eps);
      if (!w.empty()) v *= w[j];
      if (!b.empty()) v += b[j];
      y[r * len + j] = v;
    }
  }
  return y;
}

TEST(LayerNormTest, GradcheckOneAndTwoDims) {
  Generator gen(10);
  const Tensor x = random({3, 4, 5}, gen, -2, 2);
  for (std::int64_t k : {1, 2}) {
    const Shape ns = k == 1 ? Shape{5} : Shape{4, 5};
    const Tensor w = random(ns, gen, 0.5, 1.5), b = random(ns, gen);
    const auto full = gradcheck(
        [k](const auto& in) { return layer_norm(in[0], k, in[1], in[2]); }, {x, w, b});
    EXPECT_LT(full.max_rel_error, kGradTol) << "dims " << k << "\n" << full.report;
    const auto weight_only =
        gradcheck([k](const auto& in) { return layer_norm(in[0], k, in[1]); }, {x, w});
    EXPECT_LT(weight_only.max_rel_error, kGradTol) << "dims " << k << "\n" << weight_only.report;
    const auto bias_only = gradcheck(
        [k](const auto& in) { return layer_norm(in[0], k, Tensor{}, in[1]); }, {x, b});
    EXPECT_LT(bias_only.max_rel_error, kGradTol) << "dims " << k << "\n" << bias_only.report;
    const auto bare = gradcheck([k](const auto& in) { return layer_norm(in[0], k); }, {x});
    EXPECT_LT(bare.max_rel_error, kGradTol) << "dims " << k << "\n" << bare.report;
  }
}

TEST(LayerNormTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(11);
  const Tensor x = random({16, 3, 40}, gen, -4, 4);
  for (std::int64_t k : {1, 2}) {
    const Shape ns = k == 1 ? Shape{40} : Shape{3, 40};
    const Tensor w = random(ns, gen, 0.5, 1.5), b = random(ns, gen);
    const OpFn f = [k](const auto& in) { return layer_norm(in[0], k, in[1], in[2]); };
    EXPECT_LT(nmse_f32_vs_f64(f, {x, w, b}), kNmseTol);
    EXPECT_EQ(low_precision_mismatches(f, {x, w, b}, DType::f16), 0);
    EXPECT_EQ(low_precision_mismatches(f, {x, w, b}, DType::bf16), 0);
  }
}

TEST(LayerNormTest, MatchesReference) {
  Generator gen(12);
  // A large common offset: a one-pass E[x^2] - E[x]^2 would lose the variance.
  const Tensor x = random({5, 2, 6}, gen, 1000, 1001);
  const Tensor w = random({2, 6}, gen, 0.5, 1.5), b = random({2, 6}, gen);
  const std::vector<double> y = layer_norm(x, 2, w, b, 1e-3).to_f64();
  expect_close(y, ref_layer_norm(x.to_f64(), 12, w.to_f64(), b.to_f64(), 1e-3), 1e-9);
  const std::vector<double> y1 = layer_norm(x, 1).to_f64();
  expect_close(y1, ref_layer_norm(x.to_f64(), 6, {}, {}, 1e-5), 1e-9);
  const std::vector<double> y32 = layer_norm(x.to(DType::f32), 1).to_f64();
  expect_close(y32, ref_layer_norm(x.to(DType::f32).to_f64(), 6, {}, {}, 1e-5), 5e-3);
}

TEST(LayerNormTest, HandValues) {
  // [1, 2, 3]: mean 2, biased variance 2/3, so y = [-sqrt(3/2), 0, sqrt(3/2)] with eps 0.
  const Tensor x = Tensor::from(std::vector<double>{1, 2, 3}, {1, 3}, DType::f64);
  const std::vector<double> y = layer_norm(x, 1, {}, {}, 0.0).to_f64();
  EXPECT_NEAR(y[0], -std::sqrt(1.5), 1e-15);
  EXPECT_NEAR(y[1], 0.0, 1e-15);
  EXPECT_NEAR(y[2], std::sqrt(1.5), 1e-15);
}

TEST(LayerNormTest, BadInputs) {
  const Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_ERROR_MENTIONS(layer_norm(x, 0), "layer_norm", "normalized_dims = 0");
  EXPECT_ERROR_MENTIONS(layer_norm(x, 4), "layer_norm", "normalized_dims = 4");
  EXPECT_ERROR_MENTIONS(layer_norm(x, 1, Tensor::ones({3})), "layer_norm", "weight", "[3]",
                        "[4]");
  EXPECT_ERROR_MENTIONS(layer_norm(x, 2, {}, Tensor::ones({4})), "layer_norm", "bias", "[3, 4]");
  EXPECT_ERROR_MENTIONS(layer_norm(x, 1, {}, {}, -1.0), "layer_norm", "eps = -1");
}

// ================================================================ batch_norm

struct RefBatchNorm {
  std::vector<double> y, running_mean, running_var;
};
// PyTorch's documented batch_norm on x [N, C, S]: training normalises with the batch
// mean and biased variance and updates running = (1 - momentum) running + momentum stat
// with the unbiased variance; eval normalises with the running statistics.
RefBatchNorm ref_batch_norm(const std::vector<double>& x, const Shape& shape,
                            const std::vector<double>& w, const std::vector<double>& b,
                            std::vector<double> rm, std::vector<double> rv, bool training,
                            double momentum, double eps) {
  const auto n = static_cast<std::size_t>(shape[0]), c = static_cast<std::size_t>(shape[1]);
  const std::size_t s = x.size() / (n * c), m = n * s;
  RefBatchNorm out{std::vector<double>(x.size()), rm, rv};
  for (std::size_t ch = 0; ch < c; ++ch) {
    double mean = rm[ch], var = rv[ch];
    if (training) {
      mean = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < s; ++j) mean += x[(i * c + ch) * s + j];
      mean /= static_cast<double>(m);
      double sq = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < s; ++j) {
          const double d = x[(i * c + ch) * s + j] - mean;
          sq += d * d;
        }
      var = sq / static_cast<double>(m);
      out.running_mean[ch] = (1 - momentum) * rm[ch] + momentum * mean;
      out.running_var[ch] = (1 - momentum) * rv[ch] + momentum * sq / static_cast<double>(m - 1);
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < s; ++j) {
        const std::size_t k = (i * c + ch) * s + j;
        out.y[k] = (x[k] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[ch]) +
                   (b.empty() ? 0.0 : b[ch]);
      }
  }
  return out;
}

TEST(BatchNormTest, GradcheckTraining2dAnd4d) {
  Generator gen(20);
  for (const Shape& shape : {Shape{6, 3}, Shape{4, 3, 2, 3}}) {
    const Tensor x = random(shape, gen, -2, 2);
    const Tensor w = random({3}, gen, 0.5, 1.5), b = random({3}, gen);
    // Running statistics are captured, not inputs: the forward updates them in place.
    const Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
    const auto full = gradcheck(
        [&](const auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true); },
        {x, w, b});
    EXPECT_LT(full.max_rel_error, kGradTol) << to_string(shape) << "\n" << full.report;
    const auto bare = gradcheck(
        [](const auto& in) { return batch_norm(in[0], {}, {}, {}, {}, true); }, {x});
    EXPECT_LT(bare.max_rel_error, kGradTol) << to_string(shape) << "\n" << bare.report;
    const auto weight_only = gradcheck(
        [](const auto& in) { return batch_norm(in[0], in[1], {}, {}, {}, true); }, {x, w});
    EXPECT_LT(weight_only.max_rel_error, kGradTol) << to_string(shape) << "\n"
                                                   << weight_only.report;
  }
}

TEST(BatchNormTest, GradcheckEval) {
  Generator gen(21);
  for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 3, 2}}) {
    const Tensor x = random(shape, gen, -2, 2);
    const Tensor w = random({3}, gen, 0.5, 1.5), b = random({3}, gen);
    const Tensor rm = random({3}, gen), rv = random({3}, gen, 0.5, 2);
    const OpFn f = [](const auto& in) {
      return batch_norm(in[0], in[1], in[2], in[3], in[4], false);
    };
    const auto r = gradcheck(f, {x, w, b, rm, rv}, {true, true, true, false, false});
    EXPECT_LT(r.max_rel_error, kGradTol) << to_string(shape) << "\n" << r.report;
  }
}

TEST(BatchNormTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(22);
  const Tensor x = random({8, 4, 5, 5}, gen, -3, 3);
  const Tensor w = random({4}, gen, 0.5, 1.5), b = random({4}, gen);
  const Tensor rm = random({4}, gen), rv = random({4}, gen, 0.5, 2);
  const OpFn train = [](const auto& in) {
    Tensor m = Tensor::zeros({4}, in[0].dtype()), v = Tensor::ones({4}, in[0].dtype());
    return batch_norm(in[0], in[1], in[2], m, v, true);
  };
  const OpFn eval = [](const auto& in) {
    return batch_norm(in[0], in[1], in[2], in[3], in[4], false);
  };
  for (const OpFn& f : {train, eval}) {
    EXPECT_LT(nmse_f32_vs_f64(f, {x, w, b, rm, rv}), kNmseTol);
    EXPECT_EQ(low_precision_mismatches(f, {x, w, b, rm, rv}, DType::f16), 0);
    EXPECT_EQ(low_precision_mismatches(f, {x, w, b, rm, rv}, DType::bf16), 0);
  }
}

TEST(BatchNormTest, MatchesReferenceIncludingRunningStats) {
  Generator gen(23);
  const Shape shape{4, 3, 2, 5};
  // A large common offset: the variance must survive it (two-pass statistics).
  const Tensor x = random(shape, gen, 500, 502);
  const Tensor w = random({3}, gen, 0.5, 1.5), b = random({3}, gen);
  const std::vector<double> rm0{0.1, -0.2, 0.3}, rv0{1.5, 0.7, 1.1};
  Tensor rm = Tensor::from(rm0, {3}, DType::f64), rv = Tensor::from(rv0, {3}, DType::f64);
  const double momentum = 0.3, eps = 1e-3;

  const RefBatchNorm want = ref_batch_norm(x.to_f64(), shape, w.to_f64(), b.to_f64(), rm0, rv0,
                                           true, momentum, eps);
  const Tensor y = batch_norm(x, w, b, rm, rv, true, momentum, eps);
  expect_close(y.to_f64(), want.y, 1e-9);
  expect_close(rm.to_f64(), want.running_mean, 1e-12);
  expect_close(rv.to_f64(), want.running_var, 1e-12);

  // Eval with the updated statistics.
  const RefBatchNorm want_eval = ref_batch_norm(x.to_f64(), shape, w.to_f64(), b.to_f64(),
                                                rm.to_f64(), rv.to_f64(), false, momentum, eps);
  expect_close(batch_norm(x, w, b, rm, rv, false, momentum, eps).to_f64(), want_eval.y, 1e-12);
  expect_close(rm.to_f64(), want.running_mean, 0);  // eval leaves them alone
}

TEST(BatchNormTest, HandValues) {
  // One channel holding [1, 3] (N = 2): mean 2, biased variance 1, unbiased 2.
  const Tensor x = Tensor::from(std::vector<double>{1, 3}, {2, 1}, DType::f64);
  Tensor rm = Tensor::zeros({1}, DType::f64), rv = Tensor::ones({1}, DType::f64);
  const std::vector<double> y = batch_norm(x, {}, {}, rm, rv, true, 0.1, 0.0).to_f64();
  EXPECT_DOUBLE_EQ(y[0], -1.0);
  EXPECT_DOUBLE_EQ(y[1], 1.0);
  EXPECT_DOUBLE_EQ(rm.item(), 0.2);        // 0.9 * 0 + 0.1 * 2
  EXPECT_DOUBLE_EQ(rv.item(), 0.9 + 0.2);  // 0.9 * 1 + 0.1 * 2
}

TEST(BatchNormTest, HalfInputWithFloatParamsKeepsEachDtype) {
  // O2 keeps normalisation parameters in f32 while activations are f16.
  Generator gen(24);
  const Tensor x = random({6, 3, 2}, gen, -2, 2, DType::f16).set_requires_grad();
  Tensor w = random({3}, gen, 0.5, 1.5, DType::f32).set_requires_grad();
  Tensor b = random({3}, gen, -1, 1, DType::f32).set_requires_grad();
  Tensor rm = Tensor::zeros({3}, DType::f32), rv = Tensor::ones({3}, DType::f32);
  const Tensor y = batch_norm(x, w, b, rm, rv, true);
  EXPECT_EQ(y.dtype(), DType::f16);
  y.backward(Tensor::ones(y.shape(), DType::f16));
  EXPECT_EQ(x.grad().dtype(), DType::f16);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  EXPECT_EQ(rm.dtype(), DType::f32);
  // d bias = sum of the incoming gradient over N*S = 12 ones.
  for (double v : b.grad().to_f64()) EXPECT_EQ(v, 12.0);
  // The f16 forward is the f32 computation on the same values, rounded once.
  Tensor rm32 = Tensor::zeros({3}, DType::f32), rv32 = Tensor::ones({3}, DType::f32);
  const Tensor y32 = batch_norm(x.to(DType::f32), w, b, rm32, rv32, true).to(DType::f16);
  EXPECT_EQ(y.to_f64(), y32.to_f64());
  EXPECT_EQ(rm.to_f64(), rm32.to_f64());
}

TEST(BatchNormTest, SameBitsForAnyThreadCount) {
  Generator gen(25);
  const Tensor x = random({16, 7, 9, 9}, gen, -3, 3, DType::f32);
  expect_thread_count_invariant([&] {
    Tensor rm = Tensor::zeros({7}), rv = Tensor::ones({7});
    return batch_norm(x, {}, {}, rm, rv, true);
  });
}

TEST(BatchNormTest, BadInputs) {
  const Tensor x = Tensor::zeros({4, 3, 2});
  const Tensor c3 = Tensor::ones({3});
  EXPECT_ERROR_MENTIONS(batch_norm(Tensor::zeros({3}), {}, {}, {}, {}, true), "batch_norm",
                        "[3]", "rank >= 2");
  EXPECT_ERROR_MENTIONS(batch_norm(x, Tensor::ones({4}), {}, {}, {}, true), "batch_norm",
                        "weight", "[4]", "[3]");
  EXPECT_ERROR_MENTIONS(batch_norm(x, {}, {}, c3, Tensor::ones({2}), true), "running_var",
                        "[2]");
  EXPECT_ERROR_MENTIONS(batch_norm(x, {}, {}, c3, {}, true), "batch_norm", "running_var",
                        "both or neither");
  EXPECT_ERROR_MENTIONS(batch_norm(x, {}, {}, {}, {}, false), "batch_norm", "evaluation");
  EXPECT_ERROR_MENTIONS(batch_norm(Tensor::zeros({1, 3}), {}, {}, {}, {}, true), "batch_norm",
                        "more than 1");
  EXPECT_ERROR_MENTIONS(batch_norm(x, {}, {}, {}, {}, true, 0.1, -1e-5), "eps");
}

// ================================================================ cross_entropy

// PyTorch's cross_entropy with mean reduction and label smoothing:
// q = (1 - ls) onehot(y) + ls / C, loss = mean_n -sum_c q_c log_softmax(x_n)_c.
double ref_cross_entropy(const std::vector<double>& x, std::size_t n, std::size_t c,
                         const std::vector<std::int64_t>& y, double ls) {
  double total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    double mx = -INFINITY, s = 0;
    for (std::size_t k = 0; k < c; ++k) mx = std::max(mx, x[r * c + k]);
    for (std::size_t k = 0; k < c; ++k) s += std::exp(x[r * c + k] - mx);
    for (std::size_t k = 0; k < c; ++k) {
      const double hit = static_cast<std::int64_t>(k) == y[r] ? 1 - ls : 0;
      const double q = hit + ls / static_cast<double>(c);
      total -= q * (x[r * c + k] - mx - std::log(s));
    }
  }
  return total / static_cast<double>(n);
}

TEST(CrossEntropyTest, GradcheckWithAndWithoutSmoothing) {
  Generator gen(30);
  const Tensor x = random({5, 4}, gen, -3, 3);
  const Tensor labels = Tensor::from(std::vector<std::int64_t>{0, 3, 1, 3, 2}, {5});
  for (double ls : {0.0, 0.1, 1.0}) {
    const auto r = gradcheck(
        [ls](const auto& in) { return cross_entropy(in[0], in[1], ls); }, {x, labels});
    EXPECT_LT(r.max_rel_error, kGradTol) << "label_smoothing " << ls << "\n" << r.report;
  }
}

TEST(CrossEntropyTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(31);
  const Tensor x = random({64, 10}, gen, -8, 8);
  std::vector<std::int64_t> y(64);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>((i * 7) % 10);
  const Tensor labels = Tensor::from(y, {64});
  for (double ls : {0.0, 0.2}) {
    const OpFn f = [ls](const auto& in) { return cross_entropy(in[0], in[1], ls); };
    EXPECT_LT(nmse_f32_vs_f64(f, {x, labels}), kNmseTol);
    EXPECT_EQ(low_precision_mismatches(f, {x, labels}, DType::f16), 0);
    EXPECT_EQ(low_precision_mismatches(f, {x, labels}, DType::bf16), 0);
  }
}

TEST(CrossEntropyTest, MatchesReference) {
  Generator gen(32);
  const Tensor x = random({7, 5}, gen, -20, 20);
  const std::vector<std::int64_t> y{4, 0, 2, 2, 1, 3, 0};
  const Tensor labels = Tensor::from(y, {7});
  for (double ls : {0.0, 0.05, 0.5}) {
    const Tensor loss = cross_entropy(x, labels, ls);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_EQ(loss.dtype(), DType::f64);
    EXPECT_NEAR(loss.item(), ref_cross_entropy(x.to_f64(), 7, 5, y, ls), 1e-13);
  }
  const Tensor loss16 = cross_entropy(x.to(DType::f16), labels, 0.1);
  EXPECT_EQ(loss16.dtype(), DType::f16);
  EXPECT_NEAR(loss16.item(), ref_cross_entropy(x.to(DType::f16).to_f64(), 7, 5, y, 0.1),
              2e-3 * std::fabs(loss16.item()));
}

TEST(CrossEntropyTest, HandValues) {
  // Zero logits: every class has probability 1/C, so the loss is log(C) for any smoothing.
  const Tensor labels = Tensor::from(std::vector<std::int64_t>{0, 5, 2}, {3});
  for (double ls : {0.0, 0.3, 1.0})
    EXPECT_NEAR(cross_entropy(Tensor::zeros({3, 6}, DType::f64), labels, ls).item(),
                std::log(6.0), 4e-15);
  // Gradient of zero logits: (1/N)(1/C - onehot).
  Tensor z = Tensor::zeros({3, 6}, DType::f64).set_requires_grad();
  cross_entropy(z, labels).backward();
  const std::vector<double> g = z.grad().to_f64();
  EXPECT_NEAR(g[0], (1.0 / 6 - 1) / 3, 1e-15);
  EXPECT_NEAR(g[1], (1.0 / 6) / 3, 1e-15);
  EXPECT_NEAR(g[6 + 5], (1.0 / 6 - 1) / 3, 1e-15);
}

TEST(CrossEntropyTest, SameBitsForAnyThreadCount) {
  Generator gen(33);
  const Tensor x = random({3000, 10}, gen, -5, 5, DType::f32);
  std::vector<std::int64_t> y(3000);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 10);
  const Tensor labels = Tensor::from(y, {3000});
  expect_thread_count_invariant([&] { return cross_entropy(x, labels, 0.1); });
}

TEST(CrossEntropyTest, BadInputs) {
  const Tensor x = Tensor::zeros({3, 4});
  EXPECT_ERROR_MENTIONS(
      cross_entropy(x, Tensor::from(std::vector<std::int64_t>{0, 1, 4}, {3})),
      "cross_entropy", "label 4", "position 2", "[0, 4)");
  EXPECT_ERROR_MENTIONS(
      cross_entropy(x, Tensor::from(std::vector<std::int64_t>{-1, 1, 0}, {3})), "label -1",
      "position 0");
  EXPECT_ERROR_MENTIONS(cross_entropy(x, Tensor::zeros({3}, DType::f32)), "cross_entropy",
                        "labels", "i64");
  EXPECT_ERROR_MENTIONS(cross_entropy(x, Tensor::from(std::vector<std::int64_t>{0, 1}, {2})),
                        "labels", "[2]", "[3]");
  EXPECT_ERROR_MENTIONS(
      cross_entropy(Tensor::zeros({3}), Tensor::from(std::vector<std::int64_t>{0}, {1})),
      "logits", "[N, C]");
  EXPECT_ERROR_MENTIONS(
      cross_entropy(x, Tensor::from(std::vector<std::int64_t>{0, 1, 2}, {3}), 1.5),
      "label_smoothing = 1.5");
}

// ================================================================ mse_loss

TEST(MseLossTest, GradcheckBothInputs) {
  Generator gen(40);
  for (const Shape& shape : {Shape{7}, Shape{3, 4, 2}}) {
    const Tensor a = random(shape, gen), b = random(shape, gen);
    const auto r = gradcheck([](const auto& in) { return mse_loss(in[0], in[1]); }, {a, b});
    EXPECT_LT(r.max_rel_error, kGradTol) << to_string(shape) << "\n" << r.report;
  }
}

TEST(MseLossTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(41);
  const Tensor a = random({50, 60}, gen, -4, 4), b = random({50, 60}, gen, -4, 4);
  const OpFn f = [](const auto& in) { return mse_loss(in[0], in[1]); };
  EXPECT_LT(nmse_f32_vs_f64(f, {a, b}), kNmseTol);
  EXPECT_EQ(low_precision_mismatches(f, {a, b}, DType::f16), 0);
  EXPECT_EQ(low_precision_mismatches(f, {a, b}, DType::bf16), 0);
}

TEST(MseLossTest, MatchesReferenceAndHandValues) {
  Generator gen(42);
  const Tensor a = random({9, 11}, gen), b = random({9, 11}, gen);
  const std::vector<double> av = a.to_f64(), bv = b.to_f64();
  double want = 0;
  for (std::size_t i = 0; i < av.size(); ++i) want += (av[i] - bv[i]) * (av[i] - bv[i]);
  want /= static_cast<double>(av.size());
  EXPECT_NEAR(mse_loss(a, b).item(), want, 1e-15);
  // ((1 - 3)^2 + 0^2) / 2 = 2
  const Tensor x = Tensor::from(std::vector<double>{1, 2}, {2}, DType::f64);
  const Tensor t = Tensor::from(std::vector<double>{3, 2}, {2}, DType::f64);
  EXPECT_EQ(mse_loss(x, t).item(), 2.0);
}

TEST(MseLossTest, MixedDtypesPromoteAndGradsKeepTheirDtype) {
  Generator gen(43);
  Tensor a = random({4, 5}, gen, -1, 1, DType::f16).set_requires_grad();
  Tensor b = random({4, 5}, gen, -1, 1, DType::f32).set_requires_grad();
  const Tensor loss = mse_loss(a, b);
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(a.grad().dtype(), DType::f16);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  const std::vector<double> av = a.to_f64(), bv = b.to_f64(), gb = b.grad().to_f64();
  for (std::size_t i = 0; i < av.size(); ++i)
    EXPECT_NEAR(gb[i], -2 * (av[i] - bv[i]) / 20, 1e-7);
}

TEST(MseLossTest, SameBitsForAnyThreadCount) {
  Generator gen(44);
  const Tensor a = random({300, 100}, gen, -1, 1, DType::f32);
  const Tensor b = random({300, 100}, gen, -1, 1, DType::f32);
  expect_thread_count_invariant([&] { return mse_loss(a, b); });
}

TEST(MseLossTest, BadInputs) {
  EXPECT_ERROR_MENTIONS(mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), "mse_loss",
                        "[2, 3]", "[3, 2]", "same shape");
  EXPECT_ERROR_MENTIONS(mse_loss(Tensor::zeros({0}), Tensor::zeros({0})), "mse_loss",
                        "no elements");
  EXPECT_THROW(mse_loss(Tensor::from(std::vector<std::int64_t>{1}, {1}), Tensor::zeros({1})),
               std::invalid_argument);
}

// ================================================================ embedding

TEST(EmbeddingTest, GradcheckWithRepeatedIndices) {
  Generator gen(50);
  const Tensor w = random({6, 4}, gen);
  const Tensor idx = Tensor::from(std::vector<std::int64_t>{1, 5, 1, 0, 1, 3}, {2, 3});
  const auto r = gradcheck([](const auto& in) { return embedding(in[0], in[1]); }, {idx, w});
  EXPECT_LT(r.max_rel_error, kGradTol) << r.report;
}

TEST(EmbeddingTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(51);
  const Tensor w = random({20, 8}, gen, -3, 3);
  const Tensor idx = Tensor::from(std::vector<std::int64_t>{19, 0, 7, 7, 3}, {5});
  const OpFn f = [](const auto& in) { return embedding(in[0], in[1]); };
  EXPECT_LT(nmse_f32_vs_f64(f, {idx, w}), kNmseTol);
  EXPECT_EQ(low_precision_mismatches(f, {idx, w}, DType::f16), 0);
  EXPECT_EQ(low_precision_mismatches(f, {idx, w}, DType::bf16), 0);
}

TEST(EmbeddingTest, LooksUpRowsAndScatterAddsGradients) {
  Generator gen(52);
  const std::vector<std::int64_t> iv{2, 0, 2, 4, 2, 1};
  const Tensor idx = Tensor::from(iv, {3, 2});
  Tensor w = random({5, 3}, gen, -1, 1, DType::bf16).set_requires_grad();
  const Tensor out = embedding(idx, w);
  ASSERT_EQ(out.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(out.dtype(), DType::bf16);
  const std::vector<double> wv = w.to_f64(), ov = out.to_f64();
  for (std::size_t p = 0; p < iv.size(); ++p)
    for (std::size_t j = 0; j < 3; ++j)
      EXPECT_EQ(ov[p * 3 + j], wv[static_cast<std::size_t>(iv[p]) * 3 + j]);

  const Tensor g = random({3, 2, 3}, gen, -1, 1, DType::f64);
  out.backward(g.to(DType::bf16));
  // Reference scatter-add of the bf16 gradient rows, rounded once to bf16 (sums of three
  // bf16 values in [-1, 1] are exact in f32 and in f64 alike).
  const std::vector<double> gv = g.to(DType::bf16).to_f64();
  std::vector<double> want(15, 0);
  for (std::size_t p = 0; p < iv.size(); ++p)
    for (std::size_t j = 0; j < 3; ++j)
      want[static_cast<std::size_t>(iv[p]) * 3 + j] += gv[p * 3 + j];
  const std::vector<double> want_bf16 = Tensor::from(want, {5, 3}, DType::bf16).to_f64();
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  EXPECT_EQ(w.grad().to_f64(), want_bf16);
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(w.grad().to_f64()[9 + j], 0.0);  // row 3 unused
}

TEST(EmbeddingTest, BadInputs) {
  const Tensor w = Tensor::zeros({4, 2});
  EXPECT_ERROR_MENTIONS(embedding(Tensor::from(std::vector<std::int64_t>{0, 4}, {2}), w),
                        "embedding", "index 4", "position 1", "[0, 4)");
  EXPECT_ERROR_MENTIONS(embedding(Tensor::from(std::vector<std::int64_t>{-2}, {1}), w),
                        "index -2", "position 0");
  EXPECT_ERROR_MENTIONS(embedding(Tensor::zeros({2}), w), "embedding", "indices", "i64");
  EXPECT_ERROR_MENTIONS(embedding(Tensor::from(std::vector<std::int64_t>{0}, {1}),
                                  Tensor::zeros({4})),
                        "weight", "[4]", "[V, D]");
}

// ================================================================ dropout

TEST(DropoutTest, GradcheckWithFixedGeneratorState) {
  Generator gen(60);
  const Tensor x = random({4, 25}, gen);
  // A fresh generator in the same state on every evaluation: the same mask each time.
  const auto r = gradcheck(
      [](const auto& in) {
        Generator g(77);
        g.set_state(77, 1000);
        return dropout(in[0], 0.3, true, g);
      },
      {x});
  EXPECT_LT(r.max_rel_error, kGradTol) << r.report;
}

TEST(DropoutTest, F32AgainstF64AndLowPrecisionExact) {
  Generator gen(61);
  const Tensor x = random({64, 70}, gen, -5, 5);
  for (double p : {0.1, 0.5}) {
    const OpFn f = [p](const auto& in) {
      Generator g(5);
      return dropout(in[0], p, true, g);
    };
    EXPECT_LT(nmse_f32_vs_f64(f, {x}), kNmseTol);
    EXPECT_EQ(low_precision_mismatches(f, {x}, DType::f16), 0);
    EXPECT_EQ(low_precision_mismatches(f, {x}, DType::bf16), 0);
  }
}

TEST(DropoutTest, MaskFollowsTheCounterRuleAndScalesKeptValues) {
  Generator gen(62);
  const Tensor x = random({1000}, gen, 1, 2);  // nonzero: a zero output means dropped
  Generator g(9);
  g.set_state(9, 123);
  const double p = 0.25;
  const std::vector<double> y = dropout(x, p, true, g).to_f64(), xv = x.to_f64();
  EXPECT_EQ(g.offset(), 123u + 1000u);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const bool dropped = uniform01(9, 123 + i) < p;
    EXPECT_EQ(y[i], dropped ? 0.0 : xv[i] * (1 / (1 - p))) << "element " << i;
  }
}

TEST(DropoutTest, SameSeedSameMaskAndNewOffsetNewMask) {
  const Tensor x = Tensor::ones({4096});
  Generator a(3), b(3);
  const std::vector<double> ya = dropout(x, 0.5, true, a).to_f64();
  const std::vector<double> yb = dropout(x, 0.5, true, b).to_f64();
  EXPECT_EQ(ya, yb);
  const std::vector<double> later = dropout(x, 0.5, true, a).to_f64();  // offset moved on
  EXPECT_NE(ya, later);
}

TEST(DropoutTest, KeptFractionNearOneMinusP) {
  const Tensor x = Tensor::ones({100000});
  Generator g(2024);
  for (double p : {0.1, 0.5, 0.9}) {
    const std::vector<double> y = dropout(x, p, true, g).to_f64();
    double kept = 0;
    for (double v : y) kept += v != 0;
    // Binomial standard deviation sqrt(p(1-p)/n) <= 0.0016: 0.01 is over six of them.
    EXPECT_NEAR(kept / 1e5, 1 - p, 0.01) << "p " << p;
  }
}

TEST(DropoutTest, BackwardUsesTheForwardMask) {
  Generator gen(63);
  Tensor x = random({500}, gen, 1, 2, DType::f32).set_requires_grad();
  Generator g(4);
  const Tensor y = dropout(x, 0.4, true, g);
  y.backward(Tensor::ones({500}));
  const std::vector<double> yv = y.to_f64(), gv = x.grad().to_f64();
  const double scale = static_cast<float>(1 / 0.6);
  for (std::size_t i = 0; i < yv.size(); ++i)
    EXPECT_EQ(gv[i], yv[i] == 0 ? 0.0 : scale) << "element " << i;
}

TEST(DropoutTest, EvalAndZeroPAreIdentity) {
  Generator gen(64);
  Tensor x = random({3, 7}, gen, -1, 1, DType::f16).set_requires_grad();
  Generator g(1);
  const Tensor eval = dropout(x, 0.5, false, g);
  EXPECT_EQ(g.offset(), 0u);  // eval draws nothing
  EXPECT_EQ(eval.dtype(), DType::f16);
  EXPECT_EQ(eval.to_f64(), x.to_f64());
  EXPECT_FALSE(eval.shares_storage(x));  // a copy
  EXPECT_EQ(dropout(x, 0.0, true, g).to_f64(), x.to_f64());
  eval.backward(Tensor::ones({3, 7}, DType::f16));
  for (double v : x.grad().to_f64()) EXPECT_EQ(v, 1.0);
}

TEST(DropoutTest, BadInputs) {
  Generator g(1);
  const Tensor x = Tensor::zeros({4});
  EXPECT_ERROR_MENTIONS(dropout(x, 1.0, true, g), "dropout", "p = 1", "[0, 1)");
  EXPECT_ERROR_MENTIONS(dropout(x, -0.1, true, g), "dropout", "p = -0.1");
  EXPECT_ERROR_MENTIONS(dropout(x, NAN, false, g), "dropout", "p = nan");
  EXPECT_EQ(g.offset(), 0u);  // rejected calls draw nothing
  EXPECT_THROW(dropout(Tensor::from(std::vector<std::int64_t>{1}, {1}), 0.5, true, g),
               std::invalid_argument);
}

}  // namespace
}  // namespace ampcheck
