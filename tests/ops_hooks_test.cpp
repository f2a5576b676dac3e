// The engine's observer interface: what an observer hears for a known computation.
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
#include "engine/optim/optimizer.h"

namespace ampcheck {
namespace {

struct Heard {
  Op op;
  Phase phase;
  std::string module;
  amp::Reason reason;
  bool inserted;
  std::vector<CastRecord> casts;
  DType out;
  std::int64_t step;
};

class Recorder : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    ops.push_back({e.op, e.phase, e.module, e.reason, e.inserted_cast, e.casts, e.out_dtype, e.step});
    EXPECT_FALSE(e.kernel.empty());
    EXPECT_GE(e.seconds, 0.0);
  }
  void on_param_update(const ParamUpdate& u) override { params.push_back(std::string(u.name)); }
  void on_scaler_update(const amp::ScalerEvent& e) override { scales.push_back(e.scale_after); }
  std::vector<Heard> ops;
  std::vector<std::string> params;
  std::vector<double> scales;
};

class Net : public nn::Module {
 public:
  explicit Net(Generator& gen) : Module("Net") { fc = register_module("fc", std::make_shared<nn::Linear>(3, 4, gen)); }
  Tensor forward(const Tensor& x) override { return softmax((*fc)(x), -1); }
  std::shared_ptr<nn::Linear> fc;
};

TEST(Hooks, AnO1StepIsHeardOpByOp) {
  Generator gen(1);
  Net net(gen);
  optim::SGD opt(net.named_parameters(), 0.1);
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  const amp::Policy policy(o);
  amp::GradScaler scaler(amp::TorchScaling{1024.0, 2.0, 0.5, 2000});
  Recorder rec;
  add_observer(&rec);
  begin_step();
  const std::int64_t step = current_step();
  const Tensor x = Tensor::randn({2, 3}, gen);
  Tensor loss;
  {
    amp::Autocast on(&policy);
    loss = sum(net(x));
  }
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  end_step();
  remove_observer(&rec);

  // forward: the policy's casts of x, W and b (inserted), linear in f16, a cast up,
  // softmax in f32, then sum; the scaler's multiply is its own, in the optimizer phase.
  std::vector<Heard> fwd, scaling;
  for (const Heard& h : rec.ops) {
    if (h.phase == Phase::forward) fwd.push_back(h);
    if (h.phase == Phase::optimizer) scaling.push_back(h);
  }
  ASSERT_EQ(fwd.size(), 7u);
  ASSERT_EQ(scaling.size(), 1u);
  EXPECT_EQ(scaling.front().op, Op::mul_scalar);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(fwd[i].op, Op::cast) << i;
    EXPECT_TRUE(fwd[i].inserted) << i;
    EXPECT_EQ(fwd[i].module, "fc") << i;
    EXPECT_EQ(fwd[i].out, DType::f16) << i;
  }
  const Heard& lin = fwd[3];
  EXPECT_EQ(lin.op, Op::linear);
  EXPECT_EQ(lin.reason, amp::Reason::white);
  EXPECT_EQ(lin.module, "fc");
  EXPECT_EQ(lin.out, DType::f16);
  ASSERT_EQ(lin.casts.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lin.casts[i].input, i);
    EXPECT_EQ(lin.casts[i].from, DType::f32);
    EXPECT_EQ(lin.casts[i].to, DType::f16);
  }
  EXPECT_EQ(fwd[4].op, Op::cast);
  EXPECT_TRUE(fwd[4].inserted);
  EXPECT_EQ(fwd[4].module, "");  // softmax runs in Net's own forward, outside fc
  EXPECT_EQ(fwd[5].op, Op::softmax);
  EXPECT_EQ(fwd[5].reason, amp::Reason::black);
  EXPECT_EQ(fwd[5].out, DType::f32);
  EXPECT_FALSE(fwd[6].inserted);  // sum: black, its input already f32
  for (const Heard& h : rec.ops) EXPECT_EQ(h.step, step);

  // backward: one event per recorded node, newest first
  std::vector<Op> bwd;
  for (const Heard& h : rec.ops)
    if (h.phase == Phase::backward) bwd.push_back(h.op);
  ASSERT_FALSE(bwd.empty());
  EXPECT_EQ(bwd.front(), Op::mul_scalar);  // the loss scaling, last forward op
  EXPECT_NE(std::find(bwd.begin(), bwd.end(), Op::linear), bwd.end());
  EXPECT_EQ(rec.params, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(rec.scales, (std::vector<double>{1024.0}));
}

// Issue 15, item 5, on a model: an O2 float16 step under PyTorch's loss scale 65536 where
// only the gradient of the input batch overflows (dX = G W = 8 * 4096 * 8 > 65504, while
// dW = G^T X = 81.92 and db = 8192 fit). PyTorch never computes dX, since the batch does not
// require grad; neither does ampcheck, so no backward event an observer judges carries an
// Inf, and the scaler steps. The control makes the batch require grad and hears the Inf.
class FirstLayer : public nn::Module {
 public:
  explicit FirstLayer(Generator& gen) : Module("FirstLayer") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 8, gen));
  }
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
  std::shared_ptr<nn::Linear> fc;
};

class GradWatch : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    if (e.phase != Phase::backward || e.grad_inputs == nullptr) return;
    for (std::size_t i = 0; i < e.grad_inputs->size(); ++i) {
      const Tensor& g = (*e.grad_inputs)[i];
      if (e.op == Op::linear) linear_given.push_back(g.defined());
      if (!g.defined()) continue;
      for (const double v : g.to_f64())
        if (!std::isfinite(v)) non_finite.push_back(std::string(op_name(e.op)) + " grad_input " + std::to_string(i));
    }
  }
  std::vector<bool> linear_given;
  std::vector<std::string> non_finite;
};

struct StepHeard {
  std::vector<bool> linear_given;
  std::vector<std::string> non_finite;
  bool stepped = false;
  double scale_after = 0;
};

StepHeard o2_step_on_a_small_batch(bool batch_requires_grad) {
  Generator gen(5);
  FirstLayer net(gen);
  net.fc->weight.fill(8.0);
  net.fc->bias.fill(0.0);
  optim::SGD opt(net.named_parameters(), 0.1);
  amp::AmpOptions o;
  o.level = amp::Level::O2;
  o.dtype = DType::f16;
  amp::decorate(net, &opt, o);
  const amp::Policy policy(o);
  amp::GradScaler scaler(amp::TorchScaling{65536.0, 2.0, 0.5, 2000});
  Tensor x = Tensor::full({2, 4}, 0.01);
  if (batch_requires_grad) x.set_requires_grad(true);
  GradWatch watch;
  add_observer(&watch);
  begin_step();
  opt.zero_grad();
  Tensor loss;
  {
    amp::Autocast on(&policy);
    loss = mean(net(x));  // G = 65536 / 16 = 4096 at the linear's output
  }
  scaler.scale(loss).backward();
  StepHeard h;
  h.stepped = scaler.step(opt);
  scaler.update();
  end_step();
  remove_observer(&watch);
  h.linear_given = watch.linear_given;
  h.non_finite = watch.non_finite;
  h.scale_after = scaler.scale();
  return h;
}

TEST(Hooks, AnInfOnlyInTheBatchGradientIsNeverComputedNorHeard) {
  const StepHeard h = o2_step_on_a_small_batch(false);
  EXPECT_EQ(h.linear_given, (std::vector<bool>{false, true, true}));  // no dX; dW, db
  EXPECT_TRUE(h.non_finite.empty()) << h.non_finite.front();
  EXPECT_TRUE(h.stepped);
  EXPECT_EQ(h.scale_after, 65536.0);

  const StepHeard control = o2_step_on_a_small_batch(true);
  EXPECT_EQ(control.linear_given, (std::vector<bool>{true, true, true}));
  ASSERT_FALSE(control.non_finite.empty());
  EXPECT_EQ(control.non_finite.front(), "linear grad_input 0");
  EXPECT_TRUE(control.stepped);  // the batch is no parameter: the scaler never saw the Inf
}

TEST(Hooks, NothingIsHeardWithoutAnObserver) {
  Recorder rec;
  add_observer(&rec);
  remove_observer(&rec);
  EXPECT_FALSE(observed());
  exp(Tensor::ones({2}));
  EXPECT_TRUE(rec.ops.empty());
}

}  // namespace
}  // namespace ampcheck
