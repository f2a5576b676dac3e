// The fp8 watch (inspector/fp8_watch.h) on fp8 layers training: the planted failures are
// named at their step with the share worked out here from the data fed (not read back),
// and a healthy run is not failed.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/hooks.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "inspector/fp8_watch.h"

namespace ampcheck {
namespace {

using inspector::Fp8FindingKind;
using inspector::Fp8Tensor;
using inspector::Fp8Watch;

struct Attach {
  explicit Attach(Observer& o) : o_(o) { add_observer(&o_); }
  ~Attach() { remove_observer(&o_); }
  Observer& o_;
};

std::vector<inspector::Fp8Finding> of_kind(const std::vector<inspector::Fp8Finding>& all, Fp8FindingKind k,
                                           Fp8Tensor t) {
  std::vector<inspector::Fp8Finding> r;
  for (const auto& f : all)
    if (f.kind == k && f.tensor == t) r.push_back(f);
  return r;
}

// Batches whose amax is 1 (one element exactly 1), then at step 6 a batch 100 times
// larger: the delayed scale, 448 / 1 from the history, clamps every value above
// 464 / 448 (the tie at 464 stays 448). Named at step 6 as a failure, with that share.
TEST(Fp8Watch, AnAmaxJumpSaturatesAtItsStepAndIsNamedWithItsShare) {
  Fp8Watch watch;
  Attach attach(watch);
  Generator gen(4);
  amp::DelayedScaling recipe;
  recipe.amax_history_len = 8;
  auto layer = std::make_shared<nn::Fp8Linear>(32, 16, gen, recipe);
  nn::Sequential net;
  net.add(layer, "fc");
  double expected_share = 0;
  for (int step = 1; step <= 8; ++step) {
    begin_step(step);
    std::vector<double> x = Tensor::uniform({8, 32}, gen, -1, 1, DType::f64).to_f64();
    x[3] = 1.0;
    const double jump = step == 6 ? 100.0 : 1.0;
    for (double& v : x) v = static_cast<float>(v * jump);
    if (step == 6) {
      int clamped = 0;
      for (double v : x) clamped += std::fabs(static_cast<double>(static_cast<float>(v) * 448.0f)) > 464.0;
      expected_share = clamped / static_cast<double>(x.size());
    }
    sum(net(Tensor::from(x, {8, 32}))).backward();
    layer->update_scales();
    for (Tensor& p : layer->parameters()) p.zero_grad();
  }
  const auto sat = of_kind(watch.findings(), Fp8FindingKind::saturation, Fp8Tensor::input);
  ASSERT_EQ(sat.size(), 1u);
  EXPECT_EQ(sat[0].step, 6);
  EXPECT_EQ(sat[0].layer, "fc");
  EXPECT_TRUE(sat[0].failure);
  EXPECT_DOUBLE_EQ(sat[0].share, expected_share);
  EXPECT_GT(expected_share, 0.9);
  EXPECT_EQ(sat[0].scale, 448.0f);
  EXPECT_NE(sat[0].text.find("'fc' input"), std::string::npos) << sat[0].text;
  EXPECT_NE(sat[0].text.find("at step 6"), std::string::npos) << sat[0].text;
  EXPECT_NE(sat[0].text.find("amax_history_len"), std::string::npos) << sat[0].text;
  EXPECT_TRUE(of_kind(watch.findings(), Fp8FindingKind::saturation, Fp8Tensor::weight).empty());
}

// A scale computed as 448 / amax from an amax of 0 (a recipe of one's own, not TE's):
// infinite; named as the failure it is, at its step, not as NaN from nowhere.
TEST(Fp8Watch, AnInfiniteScaleFromAZeroAmaxIsANamedFailure) {
  Fp8Watch watch;
  Attach attach(watch);
  auto meta = std::make_shared<Fp8LinearMeta>();
  const Tensor w = Tensor::full({16, 16}, 0.25);
  begin_step(1);
  fp8_linear(Tensor::full({2, 16}, 0.5), w, {}, meta);
  begin_step(2);
  meta->input_scale = 448.0f / 0.0f;
  const Tensor y = fp8_linear(Tensor::zeros({2, 16}), w, {}, meta);
  const auto f = watch.findings();
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, Fp8FindingKind::zero_amax_infinite_scale);
  EXPECT_TRUE(f[0].failure);
  EXPECT_EQ(f[0].step, 2);
  EXPECT_EQ(f[0].tensor, Fp8Tensor::input);
  EXPECT_NE(f[0].text.find("Keep the previous scale when the amax is 0"), std::string::npos) << f[0].text;
  // What it did: 0 x Inf in every cast of the zero input.
  EXPECT_TRUE(std::isnan(y.to_f64()[0]));
}

// A gradient with one large value and the rest 12 decades below: the delayed E5M2 scale
// 57344 / 1 puts the rest under half the smallest subnormal (2^-17): every one of them
// flushes, the layer's signal is lost (a failure), from the second step on (the first
// step's scale is 1, which flushes them too).
TEST(Fp8Watch, E5m2GradientsBelowTheFormatAreALayerLosingItsSignal) {
  Fp8Watch watch;
  Attach attach(watch);
  Generator gen(6);
  amp::DelayedScaling recipe;  // HYBRID: gradients in E5M2
  auto layer = std::make_shared<nn::Fp8Linear>(16, 16, gen, recipe);
  nn::Sequential net;
  net.add(layer, "head");
  for (int step = 1; step <= 4; ++step) {
    begin_step(step);
    std::vector<double> g(32, 1e-12);
    g[0] = 1.0;
    const Tensor y = net(Tensor::uniform({2, 16}, gen, -1, 1));
    y.backward(Tensor::from(g, {2, 16}));
    layer->update_scales();
    for (Tensor& p : layer->parameters()) p.zero_grad();
  }
  const auto u = of_kind(watch.findings(), Fp8FindingKind::underflow, Fp8Tensor::grad_output);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].step, 1);
  EXPECT_EQ(u[0].steps, 4);
  EXPECT_TRUE(u[0].failure);
  EXPECT_DOUBLE_EQ(u[0].worst_share, 31.0 / 32.0);  // all but the one large value
  EXPECT_NE(u[0].text.find("E5M2"), std::string::npos) << u[0].text;
  EXPECT_NE(u[0].text.find("signal is lost"), std::string::npos) << u[0].text;
}

// Gradients of 1e-9 everywhere: the first backward casts them with the initial scale 1,
// before any amax was recorded, and every one flushes; from step 2 the delayed scale,
// 57344 / 1e-9, holds them. Delayed scaling starting up: a warning that says so, not a
// failure.
TEST(Fp8Watch, WhatTheFirstCastLosesWithTheInitialScaleIsAWarningOnly) {
  Fp8Watch watch;
  Attach attach(watch);
  Generator gen(8);
  amp::DelayedScaling recipe;
  auto layer = std::make_shared<nn::Fp8Linear>(16, 16, gen, recipe);
  nn::Sequential net;
  net.add(layer, "fc");
  for (int step = 1; step <= 3; ++step) {
    begin_step(step);
    const Tensor y = net(Tensor::uniform({2, 16}, gen, -1, 1));
    y.backward(Tensor::full({2, 16}, 1e-9));
    layer->update_scales();
    for (Tensor& p : layer->parameters()) p.zero_grad();
  }
  const auto u = of_kind(watch.findings(), Fp8FindingKind::underflow, Fp8Tensor::grad_output);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].step, 1);
  EXPECT_EQ(u[0].steps, 1);
  EXPECT_DOUBLE_EQ(u[0].share, 1.0);
  EXPECT_FALSE(u[0].failure);
  EXPECT_NE(u[0].text.find("its first cast, with the initial scale 1 before any amax was recorded"), std::string::npos)
      << u[0].text;
}

// A regression trained in fp8 with delayed scaling: nothing failed, and the histories hold
// one cast per tensor per step.
TEST(Fp8Watch, AHealthyFp8RunIsNotFailed) {
  Fp8Watch watch;
  Attach attach(watch);
  Generator gen(11);
  amp::DelayedScaling recipe;
  recipe.amax_history_len = 16;
  auto a = std::make_shared<nn::Fp8Linear>(32, 32, gen, recipe);
  auto b = std::make_shared<nn::Fp8Linear>(32, 16, gen, recipe);
  nn::Sequential net;
  net.add(a, "a");
  net.add(b, "b");
  std::vector<std::pair<std::string, Tensor>> params;
  for (const auto& p : a->named_parameters()) params.emplace_back("a." + p.first, p.second);
  for (const auto& p : b->named_parameters()) params.emplace_back("b." + p.first, p.second);
  optim::SGD opt(params, 0.5);
  Generator data(5);
  const Tensor target_w = Tensor::uniform({16, 32}, data, -0.3, 0.3);
  for (int step = 1; step <= 100; ++step) {
    begin_step(step);
    const Tensor x = Tensor::uniform({16, 32}, data, -1, 1);
    const Tensor loss = mse_loss((*b)(relu((*a)(x))), linear(x, target_w));
    opt.zero_grad();
    loss.backward();
    opt.step();
    a->update_scales();
    b->update_scales();
  }
  for (const auto& f : watch.findings()) EXPECT_FALSE(f.failure) << f.text;
  ASSERT_EQ(watch.histories().size(), 6u);  // a, b x input, weight, grad_output
  for (const auto& h : watch.histories()) EXPECT_EQ(h.steps.size(), 100u) << h.layer;
}

}  // namespace
}  // namespace ampcheck
