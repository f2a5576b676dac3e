// NanWatch (inspector/nan_source.h): the producer of the first NaN/Inf and the ops that only
// pass it on, allowed -Inf attention masks, gradient overflow a dynamic scaler absorbs
// versus real failures, and the scale-floor and skipped-fraction thresholds. Every
// expectation follows from how the test builds its values, not from a recorded run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
#include "models/data.h"
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

TEST(InspectorNan, CausalMaskSoftmaxMapsToZeroIsIntendedByDefault) {
  const NanReport r = attention_report({});
  EXPECT_FALSE(r.producer.has_value()) << describe(r);
  EXPECT_TRUE(r.producers.empty());
  EXPECT_EQ(r.propagators.events, 0);
  EXPECT_FALSE(r.failed()) << describe(r);
  EXPECT_EQ(r.allowed_events, 0);  // nothing was on an allow list
  ASSERT_EQ(r.intended.size(), 1u) << describe(r);
  const IntendedInf& i = r.intended.front();
  EXPECT_EQ(i.op, Op::masked_fill);
  EXPECT_EQ(i.module, "attn");
  EXPECT_EQ(i.events, 1);
  // Batch 2, 2 heads, 4 x 4 scores with the 6 entries above the diagonal masked.
  EXPECT_EQ(i.values, 2 * 2 * 6);
  EXPECT_EQ(i.readers, std::vector<Op>{Op::softmax});
  EXPECT_EQ(i.reason(), "-inf mask: softmax maps it to 0");
}

TEST(InspectorNan, AMaskScaledDotProductAttentionReadsIsIntended) {
  // The mask input of scaled_dot_product_attention (its softmax reads it, as PyTorch's
  // F.scaled_dot_product_attention's attn_mask) is where a -Inf mask is meant to go; the
  // same -Inf given to it as the query is not.
  auto report = [](bool as_mask) {
    NanWatch watch;
    Attach on(watch);
    const ModuleScope scope("attn");
    Generator gen(3);
    const Tensor q = Tensor::uniform({1, 2, 4, 4}, gen, -1, 1), k = Tensor::uniform({1, 2, 4, 4}, gen, -1, 1),
                 v = Tensor::uniform({1, 2, 4, 4}, gen, -1, 1);
    std::vector<double> above(16, 0.0);
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) above[static_cast<std::size_t>(i * 4 + j)] = 1;
    const Tensor mask = masked_fill(Tensor::zeros({4, 4}), Tensor::from(above, {4, 4}),
                                    -std::numeric_limits<double>::infinity());
    if (as_mask) sum(scaled_dot_product_attention(q, k, v, mask));
    else sum(scaled_dot_product_attention(add(q, reshape(mask, {1, 1, 4, 4})), k, v));
    return watch.report();
  };
  const NanReport intended = report(true);
  EXPECT_FALSE(intended.failed()) << describe(intended);
  ASSERT_EQ(intended.intended.size(), 1u) << describe(intended);
  EXPECT_EQ(intended.intended.front().readers, std::vector<Op>{Op::scaled_dot_product_attention});
  EXPECT_EQ(intended.intended.front().reason(), "-inf mask: the attention's softmax maps it to 0");
  EXPECT_TRUE(report(false).failed());
}

TEST(InspectorNan, MaskWithIntendedMasksOffIsTheProducer) {
  NanWatchOptions off;
  off.intended_masks = false;
  const NanReport r = attention_report(off);
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(op_name(r.producer->op), "masked_fill");
  EXPECT_EQ(r.producer->module, "attn");
  EXPECT_EQ(r.producer->output.neg_inf, 2 * 2 * 6);
  EXPECT_EQ(r.producer->output.total(), 2 * 2 * 6);
  // softmax turns the -Inf into zeros: nothing downstream holds a non-finite value.
  EXPECT_EQ(r.propagators.events, 0);
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite));
  EXPECT_TRUE(r.intended.empty());
}

// Scores [1, t, t] masked by `mask` (1: masked), softmax over the last dim, at O1 in
// float16 when `fp16` (the mask fill then follows fp16 scores and the softmax, fp32 by
// policy, reads it through an inserted cast).
NanReport masked_softmax_report(const std::vector<double>& mask, std::int64_t t, bool fp16,
                                const NanWatchOptions& options = {}) {
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  o.dtype = DType::f16;
  const amp::Policy policy(o);
  std::vector<double> scores(static_cast<std::size_t>(t * t));
  for (std::size_t k = 0; k < scores.size(); ++k) scores[k] = 0.25 * static_cast<double>(k % 5);
  NanWatch watch(options);
  {
    Attach on(watch);
    amp::Autocast autocast(fp16 ? &policy : nullptr);
    const Tensor x = Tensor::from(scores, {1, t, t}).to(fp16 ? DType::f16 : DType::f32);
    const ModuleScope scope("attn");
    sum(softmax(masked_fill(x, Tensor::from(mask, {t, t}), -std::numeric_limits<double>::infinity()), -1));
  }
  return watch.report();
}

TEST(InspectorNan, AConstantMaskThePolicyCastsIsIntendedAtO2) {
  // An exported mask the model holds (a constant of 0 and -inf, as a boolean attn_mask
  // becomes): at O2 the add runs in float16 and the policy's cast of the constant is the
  // first op to hold its -inf. It writes the mask, as an add of the constant does at O0.
  amp::AmpOptions o;
  o.level = amp::Level::O2;
  o.dtype = DType::f16;
  const amp::Policy policy(o);
  const double inf = std::numeric_limits<double>::infinity();
  NanWatch watch;
  {
    Attach on(watch);
    amp::Autocast autocast(&policy);
    const ModuleScope scope("attn");
    const Tensor x = Tensor::from(std::vector<double>{0.5, 1, 2, 0.25, 1, 3}, {2, 3});
    const Tensor mask = Tensor::from(std::vector<double>{0, 0, -inf, 0, -inf, -inf}, {2, 3});
    sum(softmax(add(x, mask), -1));
  }
  const NanReport r = watch.report();
  EXPECT_FALSE(r.failed()) << describe(r);
  ASSERT_EQ(r.intended.size(), 1u) << describe(r);
  EXPECT_EQ(r.intended.front().op, Op::cast);
  EXPECT_EQ(r.intended.front().values, 3);
  EXPECT_EQ(r.intended.front().readers, std::vector<Op>{Op::softmax});
}

TEST(InspectorNan, MaskCarriedThroughAnInsertedCastIsIntendedAtO1) {
  // Causal: rows keep their first entry, so every softmax row has a finite value.
  const std::vector<double> causal{0, 1, 1, 0, 0, 1, 0, 0, 0};
  for (const bool fp16 : {false, true}) {
    const NanReport r = masked_softmax_report(causal, 3, fp16);
    EXPECT_FALSE(r.failed()) << describe(r);
    ASSERT_EQ(r.intended.size(), 1u) << describe(r);
    EXPECT_EQ(r.intended.front().values, 3);
    EXPECT_EQ(r.intended.front().readers, std::vector<Op>{Op::softmax}) << "fp16 " << fp16;
  }
}

TEST(InspectorNan, AFullyMaskedRowIsStillAFailure) {
  // Row 1 is masked whole: softmax over three -Inf is 0/0, NaN in that row.
  const std::vector<double> mask{0, 1, 1, 1, 1, 1, 0, 0, 0};
  const NanReport r = masked_softmax_report(mask, 3, false);
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite)) << describe(r);
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(r.producer->op, Op::masked_fill);
  EXPECT_EQ(r.producer->output.neg_inf, 5);
  EXPECT_TRUE(r.intended.empty());
  ASSERT_FALSE(r.propagators.by_op.empty());
  EXPECT_EQ(r.propagators.by_op.front().first, "softmax");
  const auto f = std::find_if(r.failures.begin(), r.failures.end(),
                              [](const Failure& x) { return x.kind == FailureKind::forward_non_finite; });
  EXPECT_NE(f->detail.find("its -Inf reached softmax in module 'attn', which made 3 NaN of it"), std::string::npos)
      << f->detail;
}

TEST(InspectorNan, AMaskAnotherOpReadsIsAFailureUnlessAllowed) {
  // exp(-Inf) is 0, finite, but whether a masked exp is meant only the user can say.
  auto report = [](const NanWatchOptions& options) {
    NanWatch watch(options);
    Attach on(watch);
    const ModuleScope scope("gate");
    const Tensor x = Tensor::from(std::vector<double>{1, 2, 3, 4}, {2, 2});
    sum(exp(masked_fill(x, Tensor::from(std::vector<double>{0, 1, 0, 0}, {2, 2}),
                        -std::numeric_limits<double>::infinity())));
    return watch.report();
  };
  const NanReport r = report({});
  ASSERT_TRUE(r.producer.has_value()) << describe(r);
  EXPECT_EQ(r.producer->op, Op::masked_fill);
  EXPECT_TRUE(r.intended.empty());
  const auto f = std::find_if(r.failures.begin(), r.failures.end(),
                              [](const Failure& x) { return x.kind == FailureKind::forward_non_finite; });
  ASSERT_NE(f, r.failures.end());
  EXPECT_NE(f->detail.find("its -Inf reached exp in module 'gate', which is not a softmax"), std::string::npos)
      << f->detail;
  NanWatchOptions allowed;
  allowed.allowed_ops = {"masked_fill"};
  EXPECT_FALSE(report(allowed).failed());
}

TEST(InspectorNan, AnAdditiveMaskConstantHoldingMinusInfIsIntended) {
  const double inf = std::numeric_limits<double>::infinity();
  NanWatch watch;
  {
    Attach on(watch);
    const ModuleScope scope("attn");
    const Tensor scores = Tensor::from(std::vector<double>{1, 2, 3, 4}, {2, 2});
    const Tensor additive = Tensor::from(std::vector<double>{0, -inf, 0, 0}, {2, 2});  // a constant
    sum(softmax(scores + additive, -1));
  }
  const NanReport r = watch.report();
  EXPECT_FALSE(r.failed()) << describe(r);
  ASSERT_EQ(r.intended.size(), 1u);
  EXPECT_EQ(r.intended.front().op, Op::add);
  EXPECT_EQ(r.intended.front().values, 1);
  EXPECT_EQ(r.intended.front().readers, std::vector<Op>{Op::softmax});
}

// An exported Hugging Face mask: (1 - mask) * torch.finfo(float32).min, built from the
// data (no gradient), stored in fp16 where -3.4e38 rounds to -Inf (as .half() makes it),
// added to scores that carry a gradient. Only softmax reads it: intended, in fp16 and
// bf16 alike. The same mask that a max reads is a failure, with its reader named.
TEST(InspectorNan, AFinfoMinMaskBuiltFromDataIsIntendedInFp16AndBf16) {
  const double fmin = -static_cast<double>(std::numeric_limits<float>::max());
  for (const DType dt : {DType::f16, DType::bf16}) {
    for (const bool misread : {false, true}) {
      NanWatch watch;
      {
        Attach on(watch);
        const ModuleScope scope("attn");
        Tensor scores = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).to(dt);
        scores.set_requires_grad();
        const Tensor keep = Tensor::from(std::vector<double>{1, 1, 0, 1, 0, 0}, {2, 3}).to(dt);  // the data's mask
        const Tensor additive = (-keep + 1.0) * fmin;  // mul_scalar: -Inf where keep is 0
        const Tensor masked = scores + additive;
        const Tensor out = misread ? max(masked, {1}) : softmax(masked, -1);
        sum(cast(out, DType::f32)).backward();
      }
      const NanReport r = watch.report();
      if (!misread) {
        EXPECT_FALSE(r.failed()) << name(dt) << ": " << describe(r);
        ASSERT_EQ(r.intended.size(), 1u) << describe(r);
        EXPECT_EQ(r.intended.front().op, Op::mul_scalar);
        EXPECT_EQ(r.intended.front().values, 3);
        EXPECT_TRUE(r.mask_failures.empty());
      } else {
        EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite)) << name(dt) << ": " << describe(r);
        ASSERT_EQ(r.mask_failures.size(), 1u) << describe(r);
        EXPECT_EQ(r.mask_failures.front().writer.op, Op::mul_scalar);
        EXPECT_EQ(r.mask_failures.front().reader, Op::max);
        ASSERT_TRUE(r.producer.has_value());
        EXPECT_EQ(r.producer->op, Op::mul_scalar);
      }
    }
  }
  // An overflow of values that carry a gradient is no mask, whatever reads it.
  NanWatch watch;
  {
    Attach on(watch);
    Tensor scores = Tensor::from(std::vector<double>{1, 2, -3e38, 4}, {2, 2});
    scores.set_requires_grad();
    sum(cast(softmax(cast(scores, DType::f16), -1), DType::f32)).backward();
  }
  const NanReport r = watch.report();
  EXPECT_TRUE(has_failure(r, FailureKind::forward_non_finite)) << describe(r);
  EXPECT_TRUE(r.intended.empty()) << describe(r);
}

// Two branches that overflow fp16 independently: a * 30000 ("branch_a", mul_scalar) and
// the row sums of squares as a matmul with a ones column ("branch_b"); their sum carries
// both on.
class TwoSites : public nn::Module {
 public:
  TwoSites() : nn::Module("TwoSites") {
    a = register_module("branch_a", std::make_shared<Scaled>());
    b = register_module("branch_b", std::make_shared<SumOfSquares>());
  }
  Tensor forward(const Tensor& x) override {
    const Tensor first = (*a)(x);  // a before b: the order they run in
    return sum(first + (*b)(x));
  }

  struct Scaled : nn::Module {
    Scaled() : nn::Module("Scaled") {}
    Tensor forward(const Tensor& x) override { return x * 30000.0; }
  };
  struct SumOfSquares : nn::Module {
    SumOfSquares() : nn::Module("SumOfSquares") {}
    Tensor forward(const Tensor& x) override {
      return matmul(square(x), Tensor::full({x.size(1), 1}, 1.0).to(DType::f16));
    }
  };
  std::shared_ptr<Scaled> a;
  std::shared_ptr<SumOfSquares> b;
};

TEST(InspectorNan, EveryIndependentProducerIsListedInOrderWithWhatItLost) {
  TwoSites net;
  // Row 0: 3 * 30000 = 90000 > 65504 overflows branch a (1 and 2 stay below 65520 / 30000
  // = 2.184); squares 9 + 1 = 10 are fine. Row 1: 200^2 + 200^2 = 80000 overflows the
  // fp16 matmul output, each square (40000) fits, and 200 * 30000 overflows a too.
  const Tensor x = Tensor::from(std::vector<double>{3, 1, 200, 200}, {2, 2}).to(DType::f16);
  NanWatch watch;
  {
    Attach on(watch);
    net(x);
    net(x);  // the same sites again: first occurrences only
  }
  const NanReport r = watch.report();
  ASSERT_EQ(r.producers.size(), 2u) << describe(r);
  EXPECT_EQ(r.producers[0].op, Op::mul_scalar);
  EXPECT_EQ(r.producers[0].module, "branch_a");
  EXPECT_EQ(r.producers[0].output.pos_inf, 3);  // 3, 200, 200
  EXPECT_EQ(r.producers[1].op, Op::matmul);
  EXPECT_EQ(r.producers[1].module, "branch_b");
  EXPECT_EQ(r.producers[1].output.pos_inf, 1);
  EXPECT_LT(r.producers[0].sequence, r.producers[1].sequence);
  ASSERT_TRUE(r.producer.has_value());
  EXPECT_EQ(r.producer->sequence, r.producers[0].sequence);
  // Each overflowed its own fp16 output where fp32 holds the result: the first element
  // lost is the first that overflowed.
  ASSERT_EQ(r.producers[0].lost.size(), 1u);
  const LostValue& la = r.producers[0].lost.front();
  EXPECT_EQ(la.input, "");
  EXPECT_EQ(la.kind, RangeLossKind::overflow);
  EXPECT_EQ(la.dtype, DType::f16);
  EXPECT_EQ(la.value, 90000.0);
  EXPECT_EQ(la.count, 3);
  EXPECT_EQ(la.limit, 65504.0);
  ASSERT_EQ(r.producers[1].lost.size(), 1u);
  EXPECT_EQ(r.producers[1].lost.front().value, 80000.0);
  EXPECT_EQ(r.producers[1].lost.front().count, 1);
  // The add that joins them has non-finite inputs: it is carried on, never blamed.
  EXPECT_EQ(r.propagators.by_op.front().first, "add");
  const std::string text = describe(r);
  EXPECT_NE(text.find("also produced by: matmul in module 'branch_b'"), std::string::npos) << text;
}

// A gate computed in fp16 (sigmoid follows its fp16 input) and a log, fp32 by policy at
// O1, that reads it through an inserted cast.
class Gated : public nn::Module {
 public:
  Gated() : nn::Module("Gated") {
    gate = register_module("gate", std::make_shared<Gate>());
    head = register_module("head", std::make_shared<Head>());
  }
  Tensor forward(const Tensor& z) override { return (*head)((*gate)(z)); }
  struct Gate : nn::Module {
    Gate() : nn::Module("Gate") {}
    Tensor forward(const Tensor& z) override { return sigmoid(z); }
  };
  struct Head : nn::Module {
    Head() : nn::Module("Head") {}
    Tensor forward(const Tensor& g) override { return sum(log(g)); }
  };
  std::shared_ptr<Gate> gate;
  std::shared_ptr<Head> head;
};

TEST(InspectorNan, LogOfAnUnderflowedSigmoidPointsBackToTheSigmoid) {
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  o.dtype = DType::f16;
  const amp::Policy policy(o);
  Gated net;
  // sigmoid(-20) = 2.06e-9 and sigmoid(-30) = 9.4e-14: both above fp32's smallest
  // subnormal (1.4e-45), both at most half of fp16's (2^-25): fp16 stores 0.
  const Tensor z = Tensor::from(std::vector<double>{-20, 0, 2, -30}, {4}).to(DType::f16);
  NanWatch watch;
  {
    Attach on(watch);
    amp::Autocast autocast(&policy);
    net(z);
  }
  const NanReport r = watch.report();
  ASSERT_TRUE(r.producer.has_value()) << describe(r);
  EXPECT_EQ(r.producer->op, Op::log);
  EXPECT_EQ(r.producer->module, "head");
  EXPECT_EQ(r.producer->output.neg_inf, 2);
  ASSERT_EQ(r.producer->lost.size(), 1u) << describe(r);
  const LostValue& l = r.producer->lost.front();
  EXPECT_EQ(l.input, "input 0");
  EXPECT_EQ(l.op, Op::sigmoid);
  EXPECT_EQ(l.module, "gate");
  EXPECT_EQ(l.kind, RangeLossKind::underflow);
  EXPECT_EQ(l.dtype, DType::f16);
  EXPECT_EQ(l.count, 2);
  EXPECT_EQ(l.limit, std::ldexp(1.0, -24));
  // Element 0 is the first -Inf: its exact gate.
  EXPECT_NEAR(l.value, 1.0 / (1.0 + std::exp(20.0)), 1e-12 * 1.0 / (1.0 + std::exp(20.0)));
  const std::string text = lost_text(*r.producer, l);
  EXPECT_EQ(text.rfind("log in 'head' produced -Inf <- its input 0 came from sigmoid in 'gate', which flushed "
                       "2.06e-09 to 0 in float16 (smallest subnormal 5.96e-08; 2 values, step ",
                       0),
            0u)
      << text;
  EXPECT_NE(describe(r).find("\n  " + text + "\n"), std::string::npos) << describe(r);
}

TEST(InspectorNan, ADivisionByAnEpsilonFp16CannotHoldPointsBackToTheAdd) {
  // v = x^2 + 1e-8 in fp16: 1e-8 is below half of fp16's smallest subnormal (2^-25 =
  // 2.98e-8), so where x is 0 the sum rounds to 0 and x / v is 0 / 0.
  const Tensor x = Tensor::from(std::vector<double>{0, 0.5, 0, -2}, {4}).to(DType::f16);
  NanWatch watch;
  {
    Attach on(watch);
    const ModuleScope scope("norm");
    sum(x / (square(x) + 1e-8));
  }
  const NanReport r = watch.report();
  ASSERT_TRUE(r.producer.has_value()) << describe(r);
  EXPECT_EQ(r.producer->op, Op::div);
  EXPECT_EQ(r.producer->output.nan, 2);
  ASSERT_EQ(r.producer->lost.size(), 1u) << describe(r);
  const LostValue& l = r.producer->lost.front();
  EXPECT_EQ(l.input, "input 1");
  EXPECT_EQ(l.op, Op::add_scalar);
  EXPECT_EQ(l.module, "norm");
  EXPECT_EQ(l.value, 1e-8);  // 0 + 1e-8, exact in f64
  EXPECT_EQ(l.count, 2);
}

struct TrainingRun {
  NanReport report;
  std::vector<amp::ScalerEvent> history;
};

// fp16 O2 training of an Mlp with PyTorch scaling from `init_scale`; `exp_loss` makes
// the loss exp(100 * cross_entropy), which overflows f32 in forward.
TrainingRun train_fp16(double init_scale, int steps, bool exp_loss, const NanWatchOptions& options) {
  const models::Dataset data = models::spiral(32, 3, 0.2, 7);
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

// The scaler's state machine alone (update(found_inf) emits the same event): `first`
// clean updates, then `bad`, then `clean` (skips after a clean start are no probing).
NanReport scaler_report(amp::ScalingOptions scaling, int bad, int clean, const NanWatchOptions& options,
                        int first = 0) {
  amp::GradScaler scaler(std::move(scaling));
  NanWatch watch(options);
  Attach on(watch);
  for (int i = 0; i < first; ++i) scaler.update(false);
  for (int i = 0; i < bad; ++i) scaler.update(true);
  for (int i = 0; i < clean; ++i) scaler.update(false);
  return watch.report();
}

TEST(InspectorNan, ScaleFloorAndSkippedFractionTriggerAsConfigured) {
  NanWatchOptions o;
  o.scale_floor = 1.0;
  o.max_skipped_fraction = 0.05;
  // Skips a scaler absorbs at a scale that had trained, to no new low, count toward the
  // fraction: Paddle's backoff counter advances (decr_every_n_nan_or_inf not reached), the
  // scale stays. After one clean update: 3 counted of 59 > 0.05; of 60 it is exactly
  // 0.05, not above.
  amp::PaddleScaling paddle;
  paddle.init_loss_scaling = 4;
  paddle.decr_every_n_nan_or_inf = 1000;
  const NanReport over = scaler_report(paddle, 3, 55, o, 1);
  const NanReport at = scaler_report(paddle, 3, 56, o, 1);
  EXPECT_TRUE(has_failure(over, FailureKind::skipped_fraction)) << describe(over);
  EXPECT_FALSE(has_failure(at, FailureKind::skipped_fraction)) << describe(at);
  EXPECT_EQ(at.skipped(), 3);
  EXPECT_EQ(at.absorbed(), 3);
  EXPECT_EQ(at.probing_skips(), 0);

  // PyTorch's scaler halves at once: after one clean update, three backoffs from 4 (2, 1,
  // 0.5) each take the scale to a new low: probing, not counted, however many of 59.
  amp::TorchScaling torch;
  torch.init_scale = 4;
  const NanReport lower = scaler_report(torch, 3, 55, o, 1);
  EXPECT_FALSE(has_failure(lower, FailureKind::skipped_fraction)) << describe(lower);
  EXPECT_EQ(lower.probing_skips(), 3);
  // Only 0.5 is below the floor of 1; the scale stays there over the clean steps (growth
  // needs 2000 of them), one collapse reported once.
  const auto below = std::count_if(lower.failures.begin(), lower.failures.end(),
                                   [](const Failure& f) { return f.kind == FailureKind::scale_below_floor; });
  EXPECT_EQ(below, 1);
  ASSERT_FALSE(lower.failures.empty());
  EXPECT_EQ(lower.failures.front().kind, FailureKind::scale_below_floor);
  EXPECT_EQ(lower.failures.front().step, 4);

  NanWatchOptions low = o;
  low.scale_floor = 0.5;
  EXPECT_FALSE(has_failure(scaler_report(torch, 3, 56, low, 1), FailureKind::scale_below_floor));

  // The same fall as the probing from the start, then clean training: the gradients need
  // a scale under 1, which is no collapse.
  const NanReport probed = scaler_report(torch, 3, 57, o);
  ASSERT_TRUE(probed.probing.has_value());
  EXPECT_EQ(probed.probing->scale_to, 0.5);
  EXPECT_FALSE(probed.failed()) << describe(probed);
}

// The reading of each skipped update (nan_source.h, SkipReading), against the rule written
// out by hand for a scaler history: probing while no update has stepped, at a new low of
// the scale, or after the scale grew past the last that stepped; counted otherwise.
TEST(InspectorNan, EverySkippedUpdateIsReadByOneRule) {
  amp::TorchScaling torch;
  torch.init_scale = 1024;
  torch.growth_interval = 3;
  amp::GradScaler scaler(torch);
  NanWatch watch;
  {
    Attach on(watch);
    // 1024 skip -> 512 skip -> 256 | 3 clean at 256 (the third grows it to 512) |
    // skip at 512 -> 256 (after growth) | skip at 256 -> 128 (a new low) |
    // 3 clean at 128 (-> 256) | skip at 256 -> 128 (after growth) | skip at 128 -> 64 (new low)
    for (const bool bad : {true, true, false, false, false, true, true, false, false, false, true, true})
      scaler.update(bad);
  }
  const NanReport r = watch.report();
  std::vector<SkipReading> got;
  for (const ScaleRecord& rec : r.scale_history)
    if (rec.event.skipped) got.push_back(rec.reading);
  const std::vector<SkipReading> want = {SkipReading::initial,      SkipReading::initial, SkipReading::after_growth,
                                         SkipReading::lower,        SkipReading::after_growth, SkipReading::lower};
  EXPECT_EQ(got, want) << describe(r);
  EXPECT_EQ(r.probing_skips(), 6);
  EXPECT_FALSE(r.failed()) << describe(r);  // 6 of 12 skipped, every one probing

  // Paddle backs off on the second bad step in a row: the first of each pair is absorbed
  // at a scale that trained and brings no new low (counted), the second halves it.
  amp::PaddleScaling paddle;
  paddle.init_loss_scaling = 1024;
  amp::GradScaler p(paddle);
  NanWatch pw;
  {
    Attach on(pw);
    for (int i = 0; i < 5; ++i)
      for (const bool bad : {false, true, true}) p.update(bad);
  }
  const NanReport pr = pw.report();
  std::vector<SkipReading> readings;
  for (const ScaleRecord& rec : pr.scale_history)
    if (rec.event.skipped) readings.push_back(rec.reading);
  ASSERT_EQ(readings.size(), 10u);
  for (std::size_t i = 0; i < readings.size(); ++i)
    EXPECT_EQ(readings[i], i % 2 == 0 ? SkipReading::counted : SkipReading::lower) << i;
  // 5 counted of 15 updates: the run fails for them, naming the first.
  ASSERT_TRUE(has_failure(pr, FailureKind::skipped_fraction)) << describe(pr);
  for (const Failure& f : pr.failures) {
    if (f.kind == FailureKind::skipped_fraction) {
      EXPECT_NE(f.detail.find("5 of 15 updates skipped outside the scaler's probing"), std::string::npos) << f.detail;
    }
  }
}

// `skips` updates in a row, each after one backward exp in 'act' that made +Inf from
// finite values, with PyTorch's halving scale from 2^16, then one clean update. The
// event's saved input stays 12 (the overflow does not depend on the scale: exp of a saved
// activation in a custom backward); its grad_output holds 1e-3 times the scale when
// `follows`, else a constant 1e-3.
NanReport backward_overflows(int skips, bool follows) {
  NanWatch watch;
  const Params none{};
  double scale = 65536;
  const double inf = std::numeric_limits<double>::infinity();
  for (int s = 1; s <= skips + 1; ++s) {
    watch.on_step_begin(s);
    const bool bad = s <= skips;
    if (bad) {
      const std::vector<Tensor> saved{Tensor::from(std::vector<double>{12.0, 3.0}, {2}, DType::f16)};
      const Tensor g = Tensor::from(std::vector<double>{follows ? 1e-3 * scale : 1e-3, 0.0}, {2}, DType::f16);
      const std::vector<Tensor> grads{Tensor::from(std::vector<double>{inf, 1.0}, {2}, DType::f16)};
      OpEvent e;
      e.step = s;
      e.phase = Phase::backward;
      e.op = Op::exp;
      e.module = "act";
      e.inputs = &saved;
      e.params = &none;
      e.grad_output = &g;
      e.grad_inputs = &grads;
      watch.on_op_end(e);
    }
    amp::ScalerEvent u;
    u.step = s;
    u.scale_before = scale;
    u.scale_after = bad ? scale / 2 : scale;
    u.found_inf = bad;
    u.skipped = bad;
    watch.on_scaler_update(u);
    watch.on_step_end(s);
    scale = u.scale_after;
  }
  return watch.report();
}

// The persistent reading (nan_source.h, SkipReading::persistent): skips with one op as
// their cause whose inputs did not shrink with the scale read persistent from the third,
// count toward skipped_fraction, and the failure says no scale absorbs it; the same
// history with a gradient that halves with the scale is the scaler probing, and two such
// skips are too few to tell.
TEST(InspectorNan, AnOverflowThatDoesNotFollowTheScaleIsPersistentNotProbing) {
  const NanReport persistent = backward_overflows(5, false);
  std::vector<SkipReading> readings;
  for (const ScaleRecord& rec : persistent.scale_history)
    if (rec.event.skipped) readings.push_back(rec.reading);
  EXPECT_EQ(readings, std::vector<SkipReading>(5, SkipReading::persistent)) << describe(persistent);
  EXPECT_EQ(persistent.probing_skips(), 0);
  ASSERT_TRUE(has_failure(persistent, FailureKind::skipped_fraction)) << describe(persistent);
  for (const Failure& f : persistent.failures)
    if (f.kind == FailureKind::skipped_fraction) {
      EXPECT_NE(f.detail.find("exp_grad in 'act'"), std::string::npos) << f.detail;
      EXPECT_NE(f.detail.find("at every loss scale from 2^16 down to 2^12 (5 updates in a row)"), std::string::npos)
          << f.detail;
      EXPECT_NE(f.detail.find("no loss scale absorbs this overflow"), std::string::npos) << f.detail;
    }

  const NanReport probing = backward_overflows(5, true);
  EXPECT_EQ(probing.probing_skips(), 5) << describe(probing);
  EXPECT_FALSE(probing.failed()) << describe(probing);

  const NanReport short_run = backward_overflows(2, false);
  EXPECT_EQ(short_run.probing_skips(), 2) << describe(short_run);
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

TEST(InspectorNan, LeadingSkipsWhileTheScaleComesDownAreProbingNotAFailure) {
  amp::TorchScaling torch;
  torch.init_scale = std::ldexp(1.0, 24);
  // 11 skips halve 2^24 to 2^13; 11 of 200 = 5.5% is above the 5% a run may skip.
  const NanReport r = scaler_report(torch, 11, 189, {});
  EXPECT_FALSE(has_failure(r, FailureKind::skipped_fraction)) << describe(r);
  EXPECT_FALSE(r.failed()) << describe(r);
  ASSERT_TRUE(r.probing.has_value());
  EXPECT_EQ(r.probing->first_update, 1);
  EXPECT_EQ(r.probing->last_update, 11);
  EXPECT_EQ(r.probing->skipped, 11);
  EXPECT_EQ(r.probing->scale_from, std::ldexp(1.0, 24));
  EXPECT_EQ(r.probing->scale_to, std::ldexp(1.0, 13));
  EXPECT_EQ(r.probing->suggested_scale, std::ldexp(1.0, 13));  // no skip after it
  EXPECT_TRUE(r.probing->excused);

  // Paddle backs off on every second bad step: 22 skips for the same 11 halvings.
  amp::PaddleScaling paddle;
  paddle.init_loss_scaling = std::ldexp(1.0, 24);
  const NanReport p = scaler_report(paddle, 22, 378, {});
  EXPECT_FALSE(p.failed()) << describe(p);
  ASSERT_TRUE(p.probing.has_value());
  EXPECT_EQ(p.probing->skipped, 22);
  EXPECT_EQ(p.probing->scale_to, std::ldexp(1.0, 13));
}

TEST(InspectorNan, ProbingFromTheStartIsRecordedAndLaterNewLowsAreProbingToo) {
  amp::TorchScaling torch;
  torch.init_scale = std::ldexp(1.0, 24);
  amp::GradScaler scaler(torch);
  NanWatch watch;
  {
    Attach on(watch);
    for (int i = 0; i < 11; ++i) scaler.update(true);
    for (int i = 0; i < 100; ++i) scaler.update(false);
    for (int i = 0; i < 10; ++i) scaler.update(true);  // gradients that grew: ten new lows
    for (int i = 0; i < 79; ++i) scaler.update(false);
  }
  const NanReport r = watch.report();
  ASSERT_TRUE(r.probing.has_value());
  EXPECT_EQ(r.probing->skipped, 11);
  EXPECT_EQ(r.probing->scale_to, std::ldexp(1.0, 13));
  EXPECT_EQ(r.probing->suggested_scale, std::ldexp(1.0, 3));  // ten more halvings
  // 21 of 200 skipped, all probing: counting them would have failed the run.
  EXPECT_TRUE(r.probing->excused);
  EXPECT_EQ(r.probing_skips(), 21);
  EXPECT_FALSE(has_failure(r, FailureKind::skipped_fraction)) << describe(r);
  for (const ScaleRecord& rec : r.scale_history) {
    if (rec.event.step > 111 && rec.event.skipped) {
      EXPECT_EQ(rec.reading, SkipReading::lower) << rec.event.step;
    }
  }
  // A scaler that never stops skipping is probing all the way down: nothing trained
  // after it, so no ScalerProbing, and the scale's fall below the floor is the failure.
  const NanReport stuck = scaler_report(torch, 40, 0, {});
  EXPECT_FALSE(stuck.probing.has_value());
  EXPECT_TRUE(has_failure(stuck, FailureKind::scale_below_floor)) << describe(stuck);
}

TEST(InspectorNan, SkipsAfterANonFiniteForwardValueAreNotProbing) {
  // exp(100 * loss) is +Inf in forward: every step's gradients are NaN whatever the scale,
  // so the leading skips are that value's doing.
  NanWatchOptions options;
  options.scale_floor = 0;
  const TrainingRun run = train_fp16(1024.0, 3, true, options);
  ASSERT_TRUE(run.history.front().skipped);
  EXPECT_FALSE(run.report.probing.has_value()) << describe(run.report);
  EXPECT_TRUE(run.report.scale_history.front().forward_non_finite);
}

TEST(InspectorNan, TrainingFromTooHighAScaleIsProbingThatMatchesTheScalersHistory) {
  NanWatchOptions options;
  options.scale_floor = 0;
  const TrainingRun run = train_fp16(std::ldexp(1.0, 40), 40, false, options);
  const NanReport& r = run.report;
  std::size_t lead = 0;
  while (lead < run.history.size() && run.history[lead].skipped) ++lead;
  ASSERT_GT(lead, 0u);
  ASSERT_LT(lead, run.history.size());
  ASSERT_TRUE(r.probing.has_value()) << describe(r);
  EXPECT_EQ(r.probing->skipped, static_cast<std::int64_t>(lead));
  EXPECT_EQ(r.probing->scale_from, std::ldexp(1.0, 40));
  EXPECT_EQ(r.probing->scale_to, run.history[lead - 1].scale_after);
  EXPECT_EQ(r.probing->scale_to, std::ldexp(1.0, 40 - static_cast<int>(lead)));  // one halving per skip
  EXPECT_FALSE(r.failed()) << describe(r);
}

struct WeightedRun {
  NanReport report;
  std::vector<double> first_grads;  // every parameter gradient of the first step, unscaled
};

// The grad_underflow model's class: an Mlp whose cross-entropy is weighted by 1e-6, at O1
// in float16 (or with autocast off), with `scaling` (static 1: loss scaling off).
WeightedRun train_weighted(bool fp16, amp::ScalingOptions scaling, int steps) {
  const models::Dataset data = models::spiral(20, 3, 0.2, 5);
  Generator gen(4);
  samples::Mlp model(2, 16, 3, gen);
  optim::Adam opt(model.named_parameters(), 0.01);
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  o.dtype = DType::f16;
  const amp::Policy policy(o);
  amp::GradScaler scaler(std::move(scaling));
  NanWatch watch;
  WeightedRun run;
  {
    Attach on(watch);
    for (int s = 1; s <= steps; ++s) {
      begin_step(s);
      opt.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast(fp16 ? &policy : nullptr);
        loss = cross_entropy(model(data.x), data.y);
      }
      loss = loss * 1e-6;
      scaler.scale(loss).backward();
      scaler.unscale_(opt);
      if (s == 1)
        for (std::size_t i = 0; i < model.named_parameters().size(); ++i)
          for (const double g : opt.gradient(i).to_f64()) run.first_grads.push_back(g);
      scaler.step(opt);
      scaler.update();
      end_step();
    }
  }
  run.report = watch.report();
  return run;
}

TEST(InspectorNan, EveryGradientZeroInFp16IsGradientUnderflow) {
  const int steps = 5;
  const WeightedRun run = train_weighted(true, amp::StaticScaling{1.0}, steps);
  const NanReport& r = run.report;
  for (const double g : run.first_grads) ASSERT_EQ(g, 0.0);
  EXPECT_TRUE(has_failure(r, FailureKind::gradient_underflow)) << describe(r);
  EXPECT_FALSE(r.producer.has_value());
  ASSERT_TRUE(r.zero_gradients.has_value());
  EXPECT_EQ(r.zero_gradients->first_step, 1);
  EXPECT_EQ(r.zero_gradients->steps, steps);
  EXPECT_EQ(r.zero_gradients->stepped, steps);
  EXPECT_EQ(r.zero_gradients->dtype, DType::f16);
  // The logits' gradient, 1e-6 (p - y) / N with N = 60 and |p - y| < 1, reaches the
  // inserted cast back into fp16 below half its smallest subnormal: all of it is lost.
  ASSERT_TRUE(r.zero_gradients->evidence.has_value()) << describe(r);
  const LostValue& e = *r.zero_gradients->evidence;
  EXPECT_EQ(e.op, Op::cast);
  EXPECT_TRUE(e.inserted_cast);
  EXPECT_EQ(e.phase, Phase::backward);
  EXPECT_EQ(e.count, 60 * 3);
  EXPECT_GT(std::fabs(e.value), 0.0);
  EXPECT_LT(std::fabs(e.value), 1e-6 / 60);
  EXPECT_LE(std::fabs(e.value), std::ldexp(1.0, -25));
  // The scale named is the least power of two that lifts it to fp16's smallest normal.
  const double s = r.zero_gradients->scale_needed;
  EXPECT_EQ(std::exp2(std::round(std::log2(s))), s);
  EXPECT_GE(s * std::fabs(e.value), std::ldexp(1.0, -14));
  EXPECT_LT(s / 2 * std::fabs(e.value), std::ldexp(1.0, -14));
}

// A static scale below 1 (Paddle's init_loss_scaling without dynamic scaling) makes the
// gradients smaller still: the scale named is the whole scale needed, the one in effect
// times the factor the gradient lacked, not that factor alone.
TEST(InspectorNan, TheScaleNeededCountsTheScaleInEffect) {
  const double in_effect = std::ldexp(1.0, -10);
  const WeightedRun run = train_weighted(true, amp::StaticScaling{in_effect}, 4);
  const NanReport& r = run.report;
  ASSERT_TRUE(r.zero_gradients.has_value()) << describe(r);
  ASSERT_TRUE(r.zero_gradients->evidence.has_value()) << describe(r);
  const double lost = std::fabs(r.zero_gradients->evidence->value);  // a gradient of the scaled loss
  const double s = r.zero_gradients->scale_needed;
  EXPECT_EQ(std::exp2(std::round(std::log2(s))), s);
  // At scale s the same gradient is lost / in_effect * s: at least fp16's smallest normal,
  // and half of s would not reach it.
  EXPECT_GE(lost / in_effect * s, std::ldexp(1.0, -14));
  EXPECT_LT(lost / in_effect * s / 2, std::ldexp(1.0, -14));
  // The same model at scale 1 needs the same scale.
  const WeightedRun at_one = train_weighted(true, amp::StaticScaling{1.0}, 4);
  ASSERT_TRUE(at_one.report.zero_gradients.has_value());
  EXPECT_EQ(at_one.report.zero_gradients->scale_needed, s);
}

TEST(InspectorNan, TheSameModelWithDynamicScalingOrInFp32HasGradients) {
  const WeightedRun scaled = train_weighted(true, amp::TorchScaling{}, 3);
  EXPECT_FALSE(has_failure(scaled.report, FailureKind::gradient_underflow)) << describe(scaled.report);
  const WeightedRun fp32 = train_weighted(false, amp::StaticScaling{1.0}, 3);
  EXPECT_FALSE(fp32.report.failed()) << describe(fp32.report);
  EXPECT_TRUE(std::any_of(fp32.first_grads.begin(), fp32.first_grads.end(), [](double g) { return g != 0; }));
}

// Steps fed to the watch by hand: the scaler's multiply of `loss`, one fp16 forward op,
// and one parameter update whose gradient is 0 or not.
NanReport fed_steps(const std::vector<std::pair<double, bool>>& steps) {
  NanWatch watch;
  const std::vector<Tensor> activations{Tensor::from(std::vector<double>{1, 2}, {2}, DType::f16)};
  const Tensor out = Tensor::from(std::vector<double>{1, 2}, {2}, DType::f16);
  const Params none{};
  std::int64_t step = 0;
  for (const auto& [loss, zero] : steps) {
    watch.on_step_begin(++step);
    OpEvent fwd;
    fwd.step = step;
    fwd.op = Op::relu;
    fwd.inputs = &activations;
    fwd.params = &none;
    fwd.output = &out;
    watch.on_op_end(fwd);
    const std::vector<Tensor> loss_in{Tensor::from(std::vector<double>{loss}, {1})};
    const Tensor scaled = Tensor::from(std::vector<double>{loss}, {1});
    OpEvent scale;
    scale.step = step;
    scale.phase = Phase::optimizer;
    scale.op = Op::mul_scalar;
    scale.inputs = &loss_in;
    scale.params = &none;
    scale.output = &scaled;
    watch.on_op_end(scale);
    const Tensor g = Tensor::from(std::vector<double>{zero ? 0.0 : 1e-3, 0}, {2});
    ParamUpdate u;
    u.name = "w";
    u.step = step;
    u.grad = &g;
    watch.on_param_update(u);
    watch.on_step_end(step);
  }
  return watch.report();
}

TEST(InspectorNan, ZeroGradientsAfterTheLossConvergedAreNoUnderflow) {
  // Trained from 1.0 down to 0.01 (under a tenth), then every gradient is 0: converged.
  const NanReport converged = fed_steps({{1.0, false}, {0.3, false}, {0.01, true}, {0.01, true}, {0.01, true}});
  EXPECT_FALSE(converged.failed()) << describe(converged);
  EXPECT_FALSE(converged.zero_gradients.has_value());
  // Stuck at 0.5 (above a tenth of 1.0) with every gradient 0: underflow.
  const NanReport stuck = fed_steps({{1.0, false}, {0.5, true}, {0.5, true}, {0.5, true}, {0.5, false}});
  EXPECT_TRUE(has_failure(stuck, FailureKind::gradient_underflow)) << describe(stuck);
  ASSERT_TRUE(stuck.zero_gradients.has_value());
  EXPECT_EQ(stuck.zero_gradients->first_step, 2);
  EXPECT_EQ(stuck.zero_gradients->steps, 3);
  EXPECT_EQ(stuck.zero_gradients->stepped, 5);
  EXPECT_EQ(stuck.zero_gradients->loss, 0.5);
  EXPECT_EQ(stuck.zero_gradients->initial_loss, 1.0);
  // Two zero steps in a row are fewer than the 3 it takes.
  EXPECT_FALSE(fed_steps({{1.0, false}, {0.9, true}, {0.9, true}, {0.8, false}}).failed());
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
