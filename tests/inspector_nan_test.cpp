// NanWatch (inspector/nan_source.h): the producer of the first NaN/Inf and the ops that only
// pass it on, allowed -Inf attention masks, gradient overflow a dynamic scaler absorbs
// versus real failures, and the scale-floor and skipped-fraction thresholds. Every
// expectation follows from how the test builds its values, not from a recorded run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/amp/decorate.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "inspector/nan_source.h"
#include "samples/data.h"
#include "samples/models.h"

namespace ampcheck::inspector {
namespace {

// Attaches an observer for one scope.
class Attach {
 public:
  explicit Attach(Observer& o) : o_(o) { add_observer(&o_); }
  ~Attach() { remove_observer(&o_); }
  Attach(const Attach&) = delete;
  Attach& operator=(const Attach&) = delete;

 private:
  Observer& o_;
};

// x * k, then f(...), then * 2 and a sum: f is the only op that can create a non-finite
// value from finite inputs.
class Unstable : public nn::Module {
 public:
  explicit Unstable(bool use_log) : nn::Module("Unstable"), log_(use_log) {}
  Tensor forward(const Tensor& x) override {
    const Tensor scaled = x * Tensor::full(x.shape(), 100.0);
    const Tensor y = log_ ? log(scaled) : exp(scaled);
    return sum(y * Tensor::full(x.shape(), 2.0));
  }

 private:
  bool log_;
};

class Net : public nn::Module {
 public:
  explicit Net(bool use_log) : nn::Module("Net") {
    block = register_module("block", std::make_shared<Unstable>(use_log));
  }
  Tensor forward(const Tensor& x) override { return (*block)(x); }
  std::shared_ptr<Unstable> block;
};

const TensorRange* input_range(const NanEvent& e, const std::string& role) {
  for (const TensorRange& r : e.inputs)
    if (r.role == role) return &r;
  return nullptr;
}

bool has_failure(const NanReport& r, FailureKind k) {
  return std::any_of(r.failures.begin(), r.failures.end(), [&](const Failure& f) { return f.kind == k; });
}

TEST(InspectorNan, ExpOverflowIsTheProducerAndLaterOpsArePropagators) {
  Net net(false);
  NanWatch watch;
  {
    Attach on(watch);
    // x * 100 = [100, 200, -100]: finite. exp(100) and exp(200) exceed f32's max
    // (exp(88.8) > 3.4e38), exp(-100) does not: two +Inf.
    net(Tensor::from(std::vector<double>{1, 2, -1}, {3}));
  }
  const NanReport r = watch.report();
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(op_name(r.producer->op), "exp");
  EXPECT_EQ(r.producer->module, "block");
  EXPECT_EQ(r.producer->phase, Phase::forward);
  EXPECT_EQ(r.producer->output.pos_inf, 2);
  EXPECT_EQ(r.producer->output.nan, 0);
  const TensorRange* in = input_range(*r.producer, "input 0");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->min, -100);
  EXPECT_EQ(in->max, 200);
  EXPECT_EQ(in->absmax, 200);
  EXPECT_FALSE(in->non_finite.any());
  // The mul after exp and the sum pass the Inf on; the mul before it is not blamed.
  EXPECT_EQ(r.propagators.events, 2);
  const std::vector<std::pair<std::string, std::int64_t>> expected{{"mul", 1}, {"sum", 1}};
  EXPECT_EQ(r.propagators.by_op, expected);
  for (const NanEvent& p : r.propagators.first) EXPECT_GT(p.sequence, r.producer->sequence);
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite));
  EXPECT_EQ(describe(r).rfind("producer: exp", 0), 0u) << describe(r);
}

TEST(InspectorNan, LogOfANegativeNumberIsTheNaNProducer) {
  Net net(true);
  NanWatch watch;
  {
    Attach on(watch);
    net(Tensor::from(std::vector<double>{1, -2, 4}, {3}));  // log(-200) is NaN
  }
  const NanReport r = watch.report();
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(op_name(r.producer->op), "log");
  EXPECT_EQ(r.producer->module, "block");
  EXPECT_EQ(r.producer->output.nan, 1);
  EXPECT_EQ(r.producer->output.total(), 1);
  EXPECT_EQ(r.propagators.events, 2);
}

TEST(InspectorNan, ModuleAllowListMatchesWholePathComponents) {
  Net net(false);
  NanWatchOptions partial;
  partial.allowed_modules = {"bloc"};  // a prefix of "block" as text, not as a path
  NanWatch watch(partial);
  NanWatchOptions whole;
  whole.allowed_modules = {"block"};
  NanWatch allowed(whole);
  {
    Attach a(watch), b(allowed);
    net(Tensor::from(std::vector<double>{1, 2, -1}, {3}));
  }
  EXPECT_TRUE(watch.report().producer.has_value());
  const NanReport r = allowed.report();
  EXPECT_FALSE(r.producer.has_value());
  EXPECT_EQ(r.propagators.events, 0);
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(r.allowed_events, 3);  // exp, then the mul and sum that carry its Inf
}

// Self-attention with a causal mask, the attention's ops under the path "attn".
class MaskedAttention : public nn::Module {
 public:
  MaskedAttention(std::int64_t dim, std::int64_t heads, Generator& gen) : nn::Module("MaskedAttention") {
    attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(dim, heads, gen));
  }
  Tensor forward(const Tensor& x) override {
    const std::int64_t t = x.size(1);
    std::vector<double> mask(static_cast<std::size_t>(t * t), 0.0);
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = i + 1; j < t; ++j) mask[static_cast<std::size_t>(i * t + j)] = 1.0;
    const ModuleScope scope(attn->path());
    return attn->forward(x, x, x, Tensor::from(mask, {t, t}));
  }
  std::shared_ptr<nn::MultiHeadAttention> attn;
};

NanReport attention_report(const NanWatchOptions& options) {
  Generator gen(3);
  MaskedAttention model(8, 2, gen);
  const Tensor x = Tensor::randn({2, 4, 8}, gen);
  NanWatch watch(options);
  {
    Attach on(watch);
    sum(model(x)).backward();
  }
  return watch.report();
}

TEST(InspectorNan, AllowedAttentionMaskIsNotReported) {
  NanWatchOptions by_op;
  by_op.allowed_ops = {"masked_fill"};
  NanWatchOptions by_module;
  by_module.allowed_modules = {"attn"};
  for (const NanWatchOptions& o : {by_op, by_module}) {
    const NanReport r = attention_report(o);
    EXPECT_FALSE(r.producer.has_value()) << describe(r);
    EXPECT_EQ(r.propagators.events, 0);
    EXPECT_FALSE(r.failed()) << describe(r);
    EXPECT_GE(r.allowed_events, 1);
  }
}

TEST(InspectorNan, UnallowedAttentionMaskIsTheProducer) {
  const NanReport r = attention_report({});
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(op_name(r.producer->op), "masked_fill");
  EXPECT_EQ(r.producer->module, "attn");
  // Batch 2, 2 heads, 4 x 4 scores with the 6 entries above the diagonal masked.
  EXPECT_EQ(r.producer->output.neg_inf, 2 * 2 * 6);
  EXPECT_EQ(r.producer->output.total(), 2 * 2 * 6);
  // softmax turns the -Inf into zeros: nothing downstream holds a non-finite value.
  EXPECT_EQ(r.propagators.events, 0);
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite));
}

struct TrainingRun {
  NanReport report;
  std::vector<amp::ScalerEvent> history;
};

// fp16 O2 training of an Mlp with PyTorch scaling from `init_scale`; `exp_loss` makes
// the loss exp(100 * cross_entropy), which overflows f32 in forward.
TrainingRun train_fp16(double init_scale, int steps, bool exp_loss, const NanWatchOptions& options) {
  const samples::Dataset data = samples::spiral(32, 3, 0.2, 7);
  Generator gen(11);
  samples::Mlp model(2, 16, 3, gen);
  optim::SGD opt(model.named_parameters(), 0.05);
  amp::AmpOptions o;
  o.level = amp::Level::O2;
  o.dtype = DType::f16;
  amp::decorate(model, &opt, o);
  const amp::Policy policy(o);
  amp::TorchScaling scaling;
  scaling.init_scale = init_scale;
  amp::GradScaler scaler(scaling);
  NanWatch watch(options);
  {
    Attach on(watch);
    for (int s = 0; s < steps; ++s) {
      begin_step();
      opt.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast(&policy);
        loss = cross_entropy(model(data.x), data.y);
        if (exp_loss) loss = exp(loss * 100.0);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      end_step();
    }
  }
  return {watch.report(), scaler.history()};
}

TEST(InspectorNan, GradientOverflowTheDynamicScalerAbsorbsIsProbingNotFailure) {
  NanWatchOptions options;
  options.max_skipped_fraction = 1.0;  // the thresholds have their own test
  options.scale_floor = 0;
  options.max_listed = 64;
  // 2^40 times a logit gradient of order 1/96 is far beyond fp16's 65504: the first
  // backward overflows. Halving 40 times reaches 1, where nothing can overflow.
  const TrainingRun run = train_fp16(std::ldexp(1.0, 40), 40, false, options);
  const NanReport& r = run.report;
  EXPECT_FALSE(r.failed()) << describe(r);
  EXPECT_FALSE(r.producer.has_value());
  EXPECT_EQ(r.propagators.events, 0);
  ASSERT_EQ(r.updates(), 40);
  ASSERT_EQ(run.history.size(), 40u);
  const ScaleRecord& first = r.scale_history.front();
  EXPECT_TRUE(first.event.found_inf);
  EXPECT_TRUE(first.event.skipped);
  EXPECT_EQ(first.event.scale_before, std::ldexp(1.0, 40));
  EXPECT_EQ(first.event.scale_after, std::ldexp(1.0, 39));
  EXPECT_TRUE(first.absorbed);
  ASSERT_TRUE(first.backward_producer.has_value());
  EXPECT_EQ(first.backward_producer->phase, Phase::backward);
  // Attribution in execution order: backward meets head before fc2 before fc1.
  std::vector<std::string> modules;
  for (const NanEvent& e : first.attribution) {
    EXPECT_EQ(e.phase, Phase::backward);
    EXPECT_FALSE(e.bad_grads.empty());
    if (std::find(modules.begin(), modules.end(), e.module) == modules.end()) modules.push_back(e.module);
  }
  const auto pos = [&](const std::string& m) { return std::find(modules.begin(), modules.end(), m) - modules.begin(); };
  ASSERT_LT(pos("head"), static_cast<std::ptrdiff_t>(modules.size())) << describe(r);
  if (pos("fc2") < static_cast<std::ptrdiff_t>(modules.size())) {
    EXPECT_LT(pos("head"), pos("fc2"));
  }
  std::int64_t skipped = 0;
  for (std::size_t i = 0; i < run.history.size(); ++i) {
    EXPECT_EQ(r.scale_history[i].event.scale_after, run.history[i].scale_after);
    if (run.history[i].skipped) {
      ++skipped;
      EXPECT_TRUE(r.scale_history[i].absorbed) << "update " << i + 1;
      EXPECT_FALSE(r.scale_history[i].attribution.empty()) << "update " << i + 1;
    }
  }
  EXPECT_GE(skipped, 1);
  EXPECT_FALSE(run.history.back().skipped) << "the scale should have come down far enough";
  EXPECT_EQ(r.absorbed(), skipped);
}

TEST(InspectorNan, NonFiniteForwardLossIsARealFailureEvenWhenTheScalerSkips) {
  NanWatchOptions options;
  options.max_skipped_fraction = 1.0;
  // cross_entropy of 3 classes is about ln 3 > 0.88, so exp(100 * loss) > exp(88.7): +Inf.
  const TrainingRun run = train_fp16(1024.0, 1, true, options);
  const NanReport& r = run.report;
  EXPECT_TRUE(r.failed());
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite));
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(op_name(r.producer->op), "exp");
  EXPECT_EQ(r.producer->phase, Phase::forward);
  EXPECT_EQ(r.producer->output.pos_inf, 1);
}

// The scaler's state machine alone (update(found_inf) emits the same event).
NanReport scaler_report(amp::ScalingOptions scaling, int bad, int clean, const NanWatchOptions& options) {
  amp::GradScaler scaler(std::move(scaling));
  NanWatch watch(options);
  Attach on(watch);
  for (int i = 0; i < bad; ++i) scaler.update(true);
  for (int i = 0; i < clean; ++i) scaler.update(false);
  return watch.report();
}

TEST(InspectorNan, ScaleFloorAndSkippedFractionTriggerAsConfigured) {
  amp::TorchScaling torch;
  torch.init_scale = 4;  // three backoffs: 2, 1, 0.5
  NanWatchOptions o;
  o.scale_floor = 1.0;
  o.max_skipped_fraction = 0.05;
  // 3 skipped of 59 > 0.05; of 60 it is exactly 0.05, not above.
  const NanReport over = scaler_report(torch, 3, 56, o);
  const NanReport at = scaler_report(torch, 3, 57, o);
  EXPECT_TRUE(has_failure(over, FailureKind::skipped_fraction));
  EXPECT_FALSE(has_failure(at, FailureKind::skipped_fraction));
  EXPECT_EQ(at.skipped(), 3);
  EXPECT_EQ(at.absorbed(), 3);
  // Only 0.5 is below the floor of 1; the scale stays there over the clean steps (growth
  // needs 2000 of them), one collapse reported once.
  const auto below = std::count_if(at.failures.begin(), at.failures.end(),
                                   [](const Failure& f) { return f.kind == FailureKind::scale_below_floor; });
  EXPECT_EQ(below, 1);
  ASSERT_FALSE(at.failures.empty());
  EXPECT_EQ(at.failures.front().kind, FailureKind::scale_below_floor);
  EXPECT_EQ(at.failures.front().step, 3);

  NanWatchOptions low = o;
  low.scale_floor = 0.5;
  EXPECT_FALSE(has_failure(scaler_report(torch, 3, 57, low), FailureKind::scale_below_floor));
}

TEST(InspectorNan, SkipWithoutBackoffIsNotAbsorbed) {
  NanWatchOptions o;
  o.max_skipped_fraction = 1.0;
  // A static scale skips the step but can never get out of the overflow.
  const NanReport fixed = scaler_report(amp::StaticScaling{8.0}, 1, 0, o);
  ASSERT_EQ(fixed.updates(), 1);
  EXPECT_TRUE(fixed.scale_history[0].event.skipped);
  EXPECT_FALSE(fixed.scale_history[0].absorbed);
  EXPECT_TRUE(has_failure(fixed, FailureKind::gradient_not_absorbed));
  // Paddle backs off on the second consecutive bad step: the first is already absorbed.
  amp::PaddleScaling paddle;
  paddle.decr_every_n_nan_or_inf = 2;
  const NanReport counted = scaler_report(paddle, 1, 0, o);
  EXPECT_EQ(counted.scale_history[0].event.scale_after, counted.scale_history[0].event.scale_before);
  EXPECT_TRUE(counted.scale_history[0].absorbed);
  EXPECT_FALSE(counted.failed()) << describe(counted);
}

TEST(InspectorNan, NothingIsRecordedWithoutTheObserverAttached) {
  Net net(false);
  NanWatch watch;
  net(Tensor::from(std::vector<double>{1, 2, -1}, {3}));
  amp::GradScaler scaler;
  scaler.update(true);
  const NanReport r = watch.report();
  EXPECT_EQ(r.events_checked, 0);
  EXPECT_FALSE(r.producer.has_value());
  EXPECT_EQ(r.updates(), 0);
  EXPECT_FALSE(r.failed());
}

}  // namespace
}  // namespace ampcheck::inspector
