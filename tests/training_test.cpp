// End-to-end training smoke tests on the sample models and data sets: each model learns
// its task to the accuracy the samples issue asks for, training is bit-reproducible
// (same seed, and 1 vs 2 threads), and a few steps with f16 storage still lower the loss.
//
// Every run trains until the threshold is reached or a step budget runs out, so the
// same configuration is quick in a Release build and still affordable under ASan/UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/amp/decorate.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel.h"
#include "models/data.h"
#include "samples/models.h"

namespace ampcheck {
namespace {

using models::Dataset;

// Fraction of rows whose largest logit is at the label, with the model in eval mode
// (BatchNorm uses its running statistics) and no graph recorded.
double accuracy(nn::Module& model, const Dataset& data) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.eval();
  const Tensor logits = model(data.x);
  model.train(was_training);
  const std::vector<double> l = logits.to_f64();
  const std::vector<std::int64_t> y = data.y.to_i64();
  const auto classes = static_cast<std::size_t>(logits.size(1));
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    std::size_t best = 0;
    for (std::size_t c = 1; c < classes; ++c)
      if (l[i * classes + c] > l[i * classes + best]) best = c;
    correct += static_cast<std::int64_t>(best) == y[i];
  }
  return static_cast<double>(correct) / static_cast<double>(y.size());
}

// One optimizer step on one mini-batch; returns the loss.
double train_step(nn::Module& model, optim::Optimizer& opt, const Dataset& b) {
  opt.zero_grad();
  const Tensor loss = cross_entropy(model(b.x), b.y);
  loss.backward();
  opt.step();
  return loss.item();
}

// Epochs of mini-batches in row order until the training accuracy (checked every
// `check_every` epochs) reaches `target` or `max_epochs` have run; returns the last
// accuracy measured.
double train_until(nn::Module& model, optim::Optimizer& opt, const Dataset& data,
                   std::int64_t batch_size, int max_epochs, int check_every, double target) {
  double acc = 0;
  for (int epoch = 1; epoch <= max_epochs; ++epoch) {
    for (std::int64_t start = 0; start < data.size(); start += batch_size)
      train_step(model, opt, models::batch(data, start, batch_size));
    if (epoch % check_every == 0 || epoch == max_epochs) {
      acc = accuracy(model, data);
      if (acc >= target) break;
    }
  }
  return acc;
}

TEST(Training, MlpLearnsSpiralWithAdam) {
  const Dataset data = models::spiral(100, 3, 0.2, /*seed=*/1);
  Generator gen(2);
  samples::Mlp model(2, 64, 3, gen);
  optim::Adam opt(model.named_parameters(), 0.01);
  EXPECT_GE(train_until(model, opt, data, data.size(), 400, 10, 0.95), 0.95);
}

TEST(Training, MlpLearnsSpiralWithSgdMomentum) {
  const Dataset data = models::spiral(100, 3, 0.2, /*seed=*/1);
  Generator gen(2);
  samples::Mlp model(2, 64, 3, gen, nn::Activation::gelu);
  optim::SGD opt(model.named_parameters(), 0.1, {.momentum = 0.9});
  EXPECT_GE(train_until(model, opt, data, data.size(), 1000, 10, 0.95), 0.95);
}

TEST(Training, SmallCnnWithBatchNormLearnsImages) {
  const Dataset data = models::images(512, 4, 3, 16, /*seed=*/1);
  Generator gen(2);
  samples::SmallCnn model(3, 4, gen, /*width=*/8, /*num_blocks=*/2);
  optim::Adam opt(model.named_parameters(), 0.01);
  EXPECT_GE(train_until(model, opt, data, 64, 15, 1, 0.90), 0.90);
  // The evaluation above ran on the running statistics: training must have moved them.
  EXPECT_NE(model.stem_bn->running_mean.to_f64(), std::vector<double>(8, 0.0));
}

TEST(Training, TinyTransformerLearnsSequences) {
  const Dataset data = models::sequences(2048, /*length=*/8, /*vocab=*/8, /*seed=*/1);
  Generator gen(2);
  samples::TinyTransformer model(8, 8, /*dim=*/32, /*heads=*/2, /*ffn=*/64, 2, gen);
  optim::Adam opt(model.named_parameters(), 3e-3);
  EXPECT_GE(train_until(model, opt, data, 64, 30, 2, 0.90), 0.90);
}

// ---- determinism ----

// The bits of every loss and every parameter after a few steps.
struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
};

void expect_bit_identical(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  ASSERT_EQ(a.params.size(), b.params.size());
  // memcmp: bit patterns, so -0.0 vs 0.0 or NaN payloads would count as differences.
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(double)), 0);
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i].size(), b.params[i].size());
    EXPECT_EQ(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * sizeof(double)), 0)
        << "parameter " << i;
  }
}

// Runs `steps` mini-batch steps of a freshly built model with `threads` threads.
Trace trace_run(const std::function<std::unique_ptr<nn::Module>(Generator&)>& build,
                const Dataset& data, std::int64_t batch_size, int steps, int threads) {
  const int previous = num_threads();
  set_num_threads(threads);
  Generator gen(7);
  std::unique_ptr<nn::Module> model = build(gen);
  optim::Adam opt(model->named_parameters(), 0.01);
  Trace t;
  for (int s = 0; s < steps; ++s) {
    const std::int64_t start = (s * batch_size) % data.size();
    t.losses.push_back(train_step(*model, opt, models::batch(data, start, batch_size)));
  }
  for (const Tensor& p : model->parameters()) t.params.push_back(p.to_f64());
  set_num_threads(previous);
  return t;
}

std::unique_ptr<nn::Module> build_mlp(Generator& gen) {
  return std::make_unique<samples::Mlp>(2, 128, 3, gen);
}

TEST(Determinism, MlpSameSeedSameBits) {
  const Dataset data = models::spiral(200, 3, 0.2, /*seed=*/3);
  expect_bit_identical(trace_run(build_mlp, data, 200, 6, 2), trace_run(build_mlp, data, 200, 6, 2));
}

TEST(Determinism, MlpOneAndTwoThreadsSameBits) {
  const Dataset data = models::spiral(200, 3, 0.2, /*seed=*/3);
  expect_bit_identical(trace_run(build_mlp, data, 200, 6, 1), trace_run(build_mlp, data, 200, 6, 2));
}

TEST(Determinism, CnnAndTransformerOneAndTwoThreadsSameBits) {
  const Dataset images = models::images(64, 4, 3, 16, /*seed=*/3);
  auto cnn = [](Generator& gen) { return std::make_unique<samples::SmallCnn>(3, 4, gen, 8, 2); };
  expect_bit_identical(trace_run(cnn, images, 32, 3, 1), trace_run(cnn, images, 32, 3, 2));
  const Dataset seqs = models::sequences(128, 8, 8, /*seed=*/3);
  auto transformer = [](Generator& gen) {
    return std::make_unique<samples::TinyTransformer>(8, 8, 32, 2, 64, 2, gen);
  };
  expect_bit_identical(trace_run(transformer, seqs, 64, 3, 1), trace_run(transformer, seqs, 64, 3, 2));
}

// ---- f16 storage (AMP O2: f16 parameters but the norms', f32 masters) ----

// A few full-batch O2 steps with dynamic loss scaling: the loss stays finite and ends
// lower than it started; the parameters are f16 (norm layers f32), the masters f32.
void expect_f16_steps_lower_loss(nn::Module& model, Dataset data, double lr) {
  amp::AmpOptions o;
  o.level = amp::Level::O2;
  o.dtype = DType::f16;
  optim::Adam opt(model.named_parameters(), lr);
  amp::decorate(model, &opt, o);
  const amp::Policy policy(o);
  amp::GradScaler scaler;
  std::vector<double> losses;
  for (int s = 0; s < 10; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast on(&policy);
      const Tensor logits = model(data.x);
      ASSERT_EQ(logits.dtype(), DType::f16);
      loss = cross_entropy(logits, data.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item());
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << s;
  }
  std::vector<std::string> norm_paths;
  for (const auto& [path, m] : model.named_modules())
    if (amp::is_norm_layer(*m)) norm_paths.push_back(path + ".");
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string& param = name;  // C++20 lambdas cannot capture a structured binding (clang 14 holds to it)
    const bool norm = std::any_of(norm_paths.begin(), norm_paths.end(),
                                  [&](const std::string& prefix) { return param.rfind(prefix, 0) == 0; });
    EXPECT_EQ(p.dtype(), norm ? DType::f32 : DType::f16) << name;
  }
  ASSERT_TRUE(opt.has_master_weights());
  EXPECT_LT(losses.back(), losses.front());
}

TEST(F16Storage, MlpStepsLowerTheLoss) {
  Generator gen(2);
  samples::Mlp model(2, 64, 3, gen);
  expect_f16_steps_lower_loss(model, models::spiral(100, 3, 0.2, 1), 0.01);
}

TEST(F16Storage, SmallCnnStepsLowerTheLoss) {
  Generator gen(2);
  samples::SmallCnn model(3, 4, gen, 8, 2);
  expect_f16_steps_lower_loss(model, models::images(128, 4, 3, 16, 1), 0.01);
}

TEST(F16Storage, TinyTransformerStepsLowerTheLoss) {
  Generator gen(2);
  samples::TinyTransformer model(8, 8, 32, 2, 64, 2, gen);
  expect_f16_steps_lower_loss(model, models::sequences(256, 8, 8, 1), 3e-3);
}

// ---- the data sets and the models' structure ----

TEST(SampleData, SameSeedSameDataAndShapes) {
  const Dataset a = models::images(16, 4, 3, 12, 5), b = models::images(16, 4, 3, 12, 5);
  EXPECT_EQ(a.x.shape(), (Shape{16, 3, 12, 12}));
  EXPECT_EQ(a.x.to_f64(), b.x.to_f64());
  EXPECT_NE(a.x.to_f64(), models::images(16, 4, 3, 12, 6).x.to_f64());
  const Dataset s = models::spiral(10, 3, 0.2, 5);
  EXPECT_EQ(s.x.shape(), (Shape{30, 2}));
  EXPECT_EQ(s.y.dtype(), DType::i64);
  const Dataset part = models::batch(s, 25, 10);  // clipped at the end, a view
  EXPECT_EQ(part.size(), 5);
  EXPECT_TRUE(part.x.shares_storage(s.x));
}

TEST(SampleData, SequenceLabelsFollowTheRule) {
  const Dataset d = models::sequences(200, 8, 8, 9);
  const std::vector<std::int64_t> x = d.x.to_i64(), y = d.y.to_i64();
  std::int64_t ones = 0;
  for (std::size_t r = 0; r < y.size(); ++r) {
    std::int64_t repeats = 0;
    for (std::size_t t = 1; t < 8; ++t) {
      ASSERT_GE(x[r * 8 + t], 0);
      ASSERT_LT(x[r * 8 + t], 8);
      repeats += x[r * 8 + t] == x[r * 8];
    }
    EXPECT_EQ(repeats, y[r]) << "row " << r;
    ones += y[r];
  }
  EXPECT_EQ(ones, 100);
}

TEST(SampleModels, HierarchicalParameterNames) {
  Generator gen(0);
  samples::SmallCnn cnn(3, 4, gen, 8, 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : cnn.named_parameters()) names.push_back(name);
  EXPECT_NE(std::find(names.begin(), names.end(), "block2.shortcut.0.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "block1.bn2.bias"), names.end());
  samples::TinyTransformer tf(8, 8, 32, 2, 64, 2, gen);
  names.clear();
  for (const auto& [name, t] : tf.named_parameters()) names.push_back(name);
  EXPECT_NE(std::find(names.begin(), names.end(), "encoder.attn.q.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "pos_embed.weight"), names.end());
}

}  // namespace
}  // namespace ampcheck
