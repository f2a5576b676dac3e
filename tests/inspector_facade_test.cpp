// The inspector as a training loop uses it: modes, and the truths of the acceptance
// known by construction (an fp32 output of 70000 is an fp16 overflow, gradients of 1e-9
// underflow fp16, histograms count every element, bf16 weights lose small updates).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/amp/decorate.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "inspector/inspector.h"

namespace ampcheck {
namespace {

using inspector::Inspector;
using inspector::InspectorOptions;
using inspector::Mode;

class Scale : public nn::Module {
 public:
  Scale() : Module("Scale") { w = register_parameter("w", Tensor::full({4}, 1e-9)); }
  Tensor forward(const Tensor& x) override { return x * 70000.0; }
  Tensor w;
};

InspectorOptions with_mode(Mode m) {
  InspectorOptions o;
  o.mode = m;
  return o;
}

TEST(Inspector, ModesAddTheirParts) {
  EXPECT_EQ(inspector::parse_mode("full"), Mode::full);
  EXPECT_FALSE(inspector::parse_mode("everything"));
  Inspector off(with_mode(Mode::off)), trace(with_mode(Mode::trace)), stats(with_mode(Mode::stats)),
      full(with_mode(Mode::full));
  EXPECT_EQ(off.trace(), nullptr);
  EXPECT_NE(trace.trace(), nullptr);
  EXPECT_EQ(trace.nan(), nullptr);
  EXPECT_NE(stats.nan(), nullptr);
  EXPECT_EQ(stats.numerics(), nullptr);
  EXPECT_NE(full.numerics(), nullptr);
  EXPECT_NE(full.shadow(), nullptr);
  full.attach();
  EXPECT_TRUE(observed());
  full.detach();
  EXPECT_FALSE(observed());
}

TEST(Inspector, FlagsOverflowUnderflowAndCountsEveryElement) {
  Scale model;
  optim::SGD opt(model.named_parameters(), 0.0);
  Inspector insp(with_mode(Mode::full));
  insp.attach();
  begin_step();
  const Tensor x = Tensor::ones({4});
  const Tensor y = model(x);           // 70000 in fp32: fits fp32, overflows fp16
  sum(y * 0.0 + model.w).backward();   // d loss / d w = 1 ...
  model.w.set_grad(Tensor::full({4}, 1e-9));  // ... replaced by gradients of 1e-9
  opt.step();
  end_step();
  insp.detach();

  const auto& stats = insp.numerics()->table().stats;
  const auto out = stats.find("/mul_scalar#0:out");
  ASSERT_NE(out, stats.end()) << "keys: " << stats.size();
  EXPECT_EQ(out->second.f16.overflow, 4);
  EXPECT_EQ(out->second.bf16.overflow, 0);
  const auto grad = stats.find("grad:w");
  ASSERT_NE(grad, stats.end());
  EXPECT_EQ(grad->second.f16.underflow, 4);  // 1e-9 < 2^-25: rounds to 0 in fp16
  EXPECT_EQ(grad->second.bf16.underflow, 0);
  for (const auto& [key, s] : stats) EXPECT_EQ(s.histogram.total(), s.count) << key;

  const auto rows = inspector::readiness_report(insp.numerics()->table(), 10);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().readiness.overflow_fraction_f16 + rows.front().readiness.underflow_fraction_f16, 1.0);
  const std::string text = insp.summary();
  EXPECT_NE(text.find("/mul_scalar#0:out"), std::string::npos) << text;
}

// bf16 weights of 1.0 updated by -1e-3 without a master: 1 - 1e-3 rounds back to 1.
TEST(Inspector, MeasuresUpdatesLostToRounding) {
  Generator gen(1);
  nn::Linear fc(4, 4, gen, false);
  fc.weight.fill(1.0);
  optim::SGD opt(fc.named_parameters(), 1e-3);
  amp::AmpOptions o;
  o.level = amp::Level::O3;
  o.dtype = DType::bf16;
  amp::decorate(fc, &opt, o);
  Inspector insp(with_mode(Mode::full));
  insp.attach();
  begin_step();
  fc.weight.set_grad(Tensor::ones({4, 4}, DType::bf16));
  opt.step();
  end_step();
  insp.detach();
  const auto& sw = insp.numerics()->swamping();
  ASSERT_EQ(sw.count("weight"), 1u);
  EXPECT_EQ(sw.at("weight").mean(), 1.0);
  EXPECT_EQ(fc.weight.to_f64()[0], 1.0);
}

}  // namespace
}  // namespace ampcheck
