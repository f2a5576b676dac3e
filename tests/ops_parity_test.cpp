// The backend parity harness (engine/parity.h): its pieces against independent
// definitions (NMSE against the formula in long double, the NaN/Inf rules, a corrupted
// result, an out-of-bounds write into guard bytes), its cases (every op, every dtype,
// finite, the same values in every dtype), the CPU backend against itself (bit for bit:
// NMSE exactly 0), and CUDA against the CPU, one test per op family, which skip saying
// why where no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/parity.h"
#include "kernels/cuda/cuda.h"  // probe: is a GPU usable

namespace ampcheck {
namespace {

using parity::Direction;
using parity::Status;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int i = 0; i < kOpCount; ++i) ops.push_back(static_cast<Op>(i));
  return ops;
}

// The op families, as the op list groups them (engine/ops/op_list.h); one CUDA test each.
struct Family {
  const char* name;
  std::vector<Op> ops;
};
const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"gemm", {Op::matmul, Op::linear, Op::bmm, Op::fp8_linear}},
      {"attention", {Op::scaled_dot_product_attention}},
      {"recurrent", {Op::lstm, Op::gru, Op::rnn_tanh, Op::rnn_relu}},
      {"conv_pool", {Op::conv2d, Op::max_pool2d, Op::avg_pool2d, Op::adaptive_avg_pool2d}},
      {"norm", {Op::batch_norm, Op::layer_norm}},
      {"activation", {Op::relu, Op::gelu, Op::silu, Op::sigmoid, Op::tanh, Op::hardswish, Op::hardsigmoid}},
      {"arithmetic",
       {Op::add, Op::sub, Op::mul, Op::div, Op::add_scalar, Op::sub_scalar, Op::mul_scalar, Op::div_scalar, Op::neg,
        Op::abs, Op::square}},
      {"math", {Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::pow, Op::reciprocal, Op::erf, Op::clamp}},
      {"reduction", {Op::sum, Op::mean, Op::max, Op::softmax, Op::log_softmax}},
      {"loss", {Op::cross_entropy, Op::mse_loss}},
      {"layer", {Op::embedding, Op::dropout}},
      {"shape", {Op::reshape, Op::permute, Op::concat, Op::slice, Op::where, Op::masked_fill, Op::cast}},
  };
  return f;
}
const Family& family(const std::string& name) {
  for (const Family& f : families())
    if (name == f.name) return f;
  throw std::invalid_argument("no op family " + name);
}

// ---------------------------------------------------------------- NMSE and compare

// The definition, in long double, written out independently of the harness.
double nmse_reference(const std::vector<double>& x, const std::vector<double>& ref) {
  long double err = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double e = static_cast<long double>(x[i]) - static_cast<long double>(ref[i]);
    err += e * e;
    norm += static_cast<long double>(ref[i]) * static_cast<long double>(ref[i]);
  }
  return static_cast<double>(err / norm);
}

TEST(ParityHarness, NmseIsTheFormulaInLongDouble) {
  Generator gen(3);
  for (const std::size_t n : {1u, 7u, 91u, 4097u}) {
    const std::vector<double> ref = Tensor::uniform({static_cast<std::int64_t>(n)}, gen, -2, 2, DType::f64).to_f64();
    std::vector<double> x = ref;
    const std::vector<double> noise = Tensor::uniform({static_cast<std::int64_t>(n)}, gen, -1e-3, 1e-3, DType::f64).to_f64();
    for (std::size_t i = 0; i < n; ++i) x[i] += noise[i];
    const double expected = nmse_reference(x, ref);
    EXPECT_NEAR(parity::nmse(x, ref), expected, 1e-12 * expected) << n;
    EXPECT_EQ(parity::nmse(ref, ref), 0.0);
  }
  // A constant relative error e on every element gives e^2 whatever the values.
  const std::vector<double> ref = {1, -2, 3, -4};
  EXPECT_NEAR(parity::nmse({1.01, -2.02, 3.03, -4.04}, ref), 1e-4, 1e-16);
  EXPECT_EQ(parity::nmse({}, {}), 0.0);                  // nothing to compare
  EXPECT_EQ(parity::nmse({0, 0}, {0, 0}), 0.0);          // equal zeros
  EXPECT_EQ(parity::nmse({0, 1e-30}, {0, 0}), kInf);     // any error over a zero reference
  EXPECT_TRUE(std::isnan(parity::nmse({kNan}, {1.0})));  // a NaN at a finite reference
}

TEST(ParityHarness, CompareAppliesTheNanAndInfRules) {
  EXPECT_TRUE(parity::compare({1, 2}, {1, 2}, 0).ok);
  EXPECT_TRUE(parity::compare({kNan, 2}, {kNan, 2}, 0).ok) << "a NaN where the CPU has one is parity";
  EXPECT_TRUE(parity::compare({kInf, -kInf, 3}, {kInf, -kInf, 3}, 0).ok);

  const parity::Comparison nan = parity::compare({1, kNan}, {1, 2}, 1);
  EXPECT_FALSE(nan.ok);
  EXPECT_NE(nan.reason.find("NaN at element 1"), std::string::npos) << nan.reason;
  EXPECT_FALSE(parity::compare({1, 2}, {1, kNan}, 1).ok) << "the CPU's NaN must be the device's too";
  const parity::Comparison sign = parity::compare({-kInf}, {kInf}, 1);
  EXPECT_FALSE(sign.ok);
  EXPECT_NE(sign.reason.find("-inf"), std::string::npos) << sign.reason;
  EXPECT_FALSE(parity::compare({kInf, 1}, {1, kInf}, 1).ok) << "an Inf elsewhere";
  EXPECT_FALSE(parity::compare({1e300}, {kInf}, 1).ok) << "a finite value for the CPU's Inf";
  EXPECT_FALSE(parity::compare({1, 2, 3}, {1, 2}, 1).ok) << "another count";

  // The threshold is inclusive and NMSE is judged over the finite positions only.
  const std::vector<double> ref = {1, -2, kInf, 3};
  const std::vector<double> x = {1.001, -2.002, kInf, 3.003};
  const double e = parity::nmse(x, ref);
  EXPECT_NEAR(e, 1e-6, 1e-15);
  EXPECT_TRUE(parity::compare(x, ref, e).ok);
  const parity::Comparison above = parity::compare(x, ref, e / 2);
  EXPECT_FALSE(above.ok);
  EXPECT_NE(above.reason.find("NMSE"), std::string::npos) << above.reason;
  EXPECT_NE(above.reason.find("element 3"), std::string::npos) << "the largest difference: " << above.reason;
}

TEST(ParityHarness, ThresholdsGrowWithLooserReasonsAndNarrowerDtypes) {
  const std::vector<parity::Tolerance> classes = {parity::Tolerance::exact, parity::Tolerance::elementwise,
                                                  parity::Tolerance::transcendental, parity::Tolerance::reduction,
                                                  parity::Tolerance::gemm};
  for (DType d : kFloatDTypes) {
    EXPECT_EQ(parity::threshold(parity::Tolerance::exact, d), 0.0);
    for (std::size_t i = 1; i < classes.size(); ++i)
      EXPECT_LE(parity::threshold(classes[i - 1], d), parity::threshold(classes[i], d)) << name(d);
  }
  for (parity::Tolerance t : classes)
    for (std::size_t i = 1; i < kFloatDTypes.size(); ++i)
      EXPECT_LE(parity::threshold(t, kFloatDTypes[i - 1]), parity::threshold(t, kFloatDTypes[i]))
          << parity::tolerance_name(t);
  // A threshold never forgives an error of 1% on every element (NMSE 1e-4 of a wrong
  // formula) but in bf16 GEMMs, whose storage holds 2-3 decimal digits.
  for (parity::Tolerance t : classes)
    for (DType d : {DType::f64, DType::f32, DType::f16}) EXPECT_LT(parity::threshold(t, d), 1e-4);
}

// ---------------------------------------------------------------- the cases

TEST(ParityHarness, EveryOpHasCasesInEveryDtype) {
  for (Op op : all_ops())
    for (DType d : kFloatDTypes) {
      const std::vector<parity::Case> cs = parity::cases_for(op, d);
      EXPECT_GE(cs.size(), 3u) << op_name(op) << " " << name(d);
      for (const parity::Case& c : cs) {
        EXPECT_EQ(c.op, op);
        EXPECT_EQ(c.dtype, d);
        ASSERT_EQ(c.differentiable.size(), c.inputs.size()) << op_name(op) << " " << c.shapes();
        EXPECT_TRUE(std::any_of(c.differentiable.begin(), c.differentiable.end(), [](bool b) { return b; }))
            << op_name(op) << " " << c.shapes() << ": no input to take a gradient";
      }
    }
}

TEST(ParityHarness, FamiliesCoverEveryOpOnce) {
  std::multiset<Op> seen;
  for (const Family& f : families()) seen.insert(f.ops.begin(), f.ops.end());
  for (Op op : all_ops()) EXPECT_EQ(seen.count(op), 1u) << op_name(op);
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kOpCount));
}

// An empty tensor wherever the op takes one (the losses average: none), and a tensor of
// one element, for every op.
TEST(ParityHarness, CasesIncludeEmptyAndOneElementTensors) {
  const std::set<Op> refuse_empty = {Op::cross_entropy, Op::mse_loss};
  for (Op op : all_ops()) {
    bool empty = false, one = false;
    for (const parity::Case& c : parity::cases_for(op, DType::f32)) {
      for (const Tensor& t : c.inputs) {
        empty = empty || (t.defined() && t.numel() == 0);
        one = one || (t.defined() && is_floating(t.dtype()) && t.numel() == 1);
      }
    }
    EXPECT_EQ(empty, refuse_empty.count(op) == 0) << op_name(op);
    EXPECT_TRUE(one) << op_name(op);
  }
}

// Empty tensors go through both directions of every op that takes one and compare equal:
// the outputs and gradients are empty with the right shapes.
TEST(ParityHarness, EmptyShapesPass) {
  std::size_t seen = 0;
  for (const parity::Case& c : parity::cases({}, {DType::f32, DType::bf16})) {
    if (std::none_of(c.inputs.begin(), c.inputs.end(), [](const Tensor& t) { return t.defined() && t.numel() == 0; }))
      continue;
    ++seen;
    for (Direction d : {Direction::forward, Direction::backward}) {
      const parity::Result r = parity::run_case(c, d, Device::cpu);
      EXPECT_EQ(r.status, Status::pass) << op_name(c.op) << " " << c.shapes() << ": " << r.reason;
      EXPECT_TRUE(r.compared);
      const parity::Outcome o = parity::evaluate(c, d, Device::cpu);
      ASSERT_FALSE(o.empty());
      if (d == Direction::forward) {
        EXPECT_EQ(o[0].values.size(), static_cast<std::size_t>(numel(o[0].shape)));
      }
    }
  }
  EXPECT_GE(seen, static_cast<std::size_t>(2 * (kOpCount - 2)));  // the losses refuse empty tensors
}

// The same draws in every dtype: the f16 input is the f64 one rounded once to f16.
TEST(ParityHarness, InputsAreTheSameValuesInEveryDtype) {
  for (Op op : {Op::matmul, Op::gelu, Op::batch_norm, Op::where}) {
    const std::vector<parity::Case> wide = parity::cases_for(op, DType::f64);
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      const std::vector<parity::Case> narrow = parity::cases_for(op, d);
      ASSERT_GE(narrow.size(), wide.size() - 1);  // f64 has no mixed-dtype case
      for (std::size_t k = 0; k + 1 < wide.size(); ++k)
        for (std::size_t i = 0; i < wide[k].inputs.size(); ++i) {
          const Tensor& w = wide[k].inputs[i];
          if (!w.defined() || w.dtype() != DType::f64) continue;
          EXPECT_EQ(narrow[k].inputs[i].to_f64(), w.to(d).to_f64()) << op_name(op) << " case " << k << " input " << i;
        }
    }
  }
  // And the same values on every call.
  const parity::Case a = parity::cases_for(Op::conv2d, DType::bf16)[2];
  const parity::Case b = parity::cases_for(Op::conv2d, DType::bf16)[2];
  for (std::size_t i = 0; i < a.inputs.size(); ++i) EXPECT_EQ(a.inputs[i].to_f64(), b.inputs[i].to_f64());
}

// The input ranges keep every op finite: no case depends on NaN/Inf agreement by accident.
TEST(ParityHarness, ReferenceResultsAreFinite) {
  for (const parity::Case& c : parity::cases())
    for (Direction d : {Direction::forward, Direction::backward}) {
      const parity::Outcome o = parity::evaluate(c, d, Device::cpu);
      for (const parity::Value& v : o)
        for (double x : v.values)
          ASSERT_TRUE(std::isfinite(x)) << op_name(c.op) << " " << name(c.dtype) << " " << c.shapes() << " "
                                        << parity::direction_name(d) << ": " << v.what;
    }
}

// ---------------------------------------------------------------- judging

TEST(ParityHarness, ACorruptedResultFails) {
  const parity::Case c = parity::cases_for(Op::matmul, DType::f32)[0];
  for (Direction d : {Direction::forward, Direction::backward}) {
    const parity::Outcome ref = parity::evaluate(c, d, Device::cpu);
    parity::Outcome got = parity::evaluate(c, d, Device::cpu);
    const parity::Result same = parity::judge(c, d, Device::cpu, got, ref);
    EXPECT_EQ(same.status, Status::pass) << same.reason;
    EXPECT_EQ(same.nmse, 0.0);

    got[0].values[3] += 0.05;  // one element of 35 (or of a gradient) off by a little
    const parity::Result off = parity::judge(c, d, Device::cpu, got, ref);
    EXPECT_EQ(off.status, Status::fail);
    EXPECT_GT(off.nmse, off.threshold);
    EXPECT_NE(off.reason.find(ref[0].what), std::string::npos) << "names what differs: " << off.reason;
    EXPECT_NE(off.reason.find("element 3"), std::string::npos) << off.reason;

    got = parity::evaluate(c, d, Device::cpu);
    got.back().values.front() = kNan;
    EXPECT_EQ(parity::judge(c, d, Device::cpu, got, ref).status, Status::fail);

    got = parity::evaluate(c, d, Device::cpu);
    got[0].shape = {static_cast<std::int64_t>(got[0].values.size())};
    const parity::Result shape = parity::judge(c, d, Device::cpu, got, ref);
    EXPECT_EQ(shape.status, Status::fail);
    EXPECT_NE(shape.reason.find("shape"), std::string::npos) << shape.reason;

    got = parity::evaluate(c, d, Device::cpu);
    got.pop_back();
    EXPECT_EQ(parity::judge(c, d, Device::cpu, got, ref).status, Status::fail);
  }
  // An input the op must not change, changed: the forward compares the inputs as left.
  const parity::Outcome ref = parity::evaluate(c, Direction::forward, Device::cpu);
  parity::Outcome got = ref;
  got[1].values[0] = -got[1].values[0];
  const parity::Result r = parity::judge(c, Direction::forward, Device::cpu, got, ref);
  EXPECT_EQ(r.status, Status::fail);
  EXPECT_NE(r.reason.find("input 0 after the op"), std::string::npos) << r.reason;
}

TEST(ParityHarness, InPlaceUpdatesAreCompared) {
  const parity::Case c = parity::cases_for(Op::batch_norm, DType::f32)[0];  // training, with statistics
  ASSERT_TRUE(c.inputs[3].defined());
  const parity::Outcome o = parity::evaluate(c, Direction::forward, Device::cpu);
  ASSERT_EQ(o.size(), 6u);  // the output, then the five inputs as the op left them
  EXPECT_EQ(o[4].what, "input 3 after the op");
  EXPECT_NE(o[4].values, c.inputs[3].to_f64()) << "the running mean moved: that is what is compared";
  EXPECT_EQ(c.inputs[3].to_f64(), parity::cases_for(Op::batch_norm, DType::f32)[0].inputs[3].to_f64())
      << "the case's own inputs are untouched (each run gets copies)";
}

TEST(ParityHarness, GuardBytesCatchAnOutOfBoundsWrite) {
  // One byte past the end, one byte before the start: each storage counts once.
  EXPECT_EQ(parity::guard_violations_during([] {
              Tensor t = Tensor::empty({7, 13}, DType::f16);
              static_cast<unsigned char*>(t.raw())[t.nbytes()] ^= 0xff;
            }),
            1u);
  EXPECT_EQ(parity::guard_violations_during([] {
              Tensor t = Tensor::empty({3}, DType::f32);
              static_cast<unsigned char*>(t.raw())[-1] ^= 0xff;
            }),
            1u);
  // The last byte of the elements is the tensor's own.
  EXPECT_EQ(parity::guard_violations_during([] {
              Tensor t = Tensor::empty({3}, DType::f32);
              static_cast<unsigned char*>(t.raw())[t.nbytes() - 1] ^= 0xff;
            }),
            0u);
  // Real ops write inside their outputs; the guard bytes are off again afterwards.
  Generator gen(1);
  const Tensor x = Tensor::uniform({7, 13}, gen, -1, 1);
  EXPECT_EQ(parity::guard_violations_during([&] { (void)gelu(matmul(x, permute(x, {1, 0}))); }), 0u);
  EXPECT_EQ(parity::guard_violations_during([] {}), 0u);
}

TEST(ParityHarness, RunCaseReportsWhatItRan) {
  const parity::Case c = parity::cases_for(Op::softmax, DType::bf16)[1];
  const parity::Result r = parity::run_case(c, Direction::backward, Device::cpu);
  EXPECT_EQ(r.status, Status::pass) << r.reason;
  EXPECT_EQ(r.op, Op::softmax);
  EXPECT_EQ(r.dtype, DType::bf16);
  EXPECT_EQ(r.direction, Direction::backward);
  EXPECT_EQ(r.shapes, "[7, 13] dim=0");
  EXPECT_EQ(r.threshold, parity::threshold(parity::Tolerance::reduction, DType::bf16));
  // A case the CPU itself refuses is a failure quoting it (a broken case, not a skip).
  parity::Case bad = c;
  bad.params = DimParams{5};
  const parity::Result refused = parity::run_case(bad, Direction::forward, Device::cpu);
  EXPECT_EQ(refused.status, Status::fail);
  EXPECT_NE(refused.reason.find("the CPU reference threw"), std::string::npos) << refused.reason;
}

// ---------------------------------------------------------------- the backends

// Every case of a family on `device` against the CPU, forward and backward.
void expect_parity(Device device, const Family& f) {
  parity::Options options;
  options.device = device;
  options.ops = f.ops;
  const std::vector<parity::Result> results = parity::run(options);
  ASSERT_FALSE(results.empty());
  for (const parity::Result& r : results) {
    const std::string what = std::string(op_name(r.op)) + " " + std::string(name(r.dtype)) + " " +
                             std::string(parity::direction_name(r.direction)) + " " + r.shapes;
    if (device == Device::cpu) {
      // The CPU against itself: the same bits, so NMSE exactly 0, and nothing to skip.
      EXPECT_EQ(r.status, Status::pass) << what << ": " << r.reason;
      EXPECT_EQ(r.nmse, 0.0) << what;
    } else {
      EXPECT_NE(r.status, Status::fail) << what << ": NMSE " << r.nmse << ", threshold " << r.threshold << ": "
                                        << r.reason;
    }
  }
}

class ParityCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    const kernels::cuda::Probe& p = kernels::cuda::probe();
    if (p.device_count == 0) GTEST_SKIP() << "no GPU: " << p.why_none;
  }
};

#define AMPCHECK_PARITY_FAMILY(fam)                                              \
  TEST(ParityCpu, fam) { expect_parity(Device::cpu, family(#fam)); }             \
  TEST_F(ParityCuda, fam) { expect_parity(Device::cuda, family(#fam)); }
AMPCHECK_PARITY_FAMILY(gemm)
AMPCHECK_PARITY_FAMILY(attention)
AMPCHECK_PARITY_FAMILY(recurrent)
AMPCHECK_PARITY_FAMILY(conv_pool)
AMPCHECK_PARITY_FAMILY(norm)
AMPCHECK_PARITY_FAMILY(activation)
AMPCHECK_PARITY_FAMILY(arithmetic)
AMPCHECK_PARITY_FAMILY(math)
AMPCHECK_PARITY_FAMILY(reduction)
AMPCHECK_PARITY_FAMILY(loss)
AMPCHECK_PARITY_FAMILY(layer)
AMPCHECK_PARITY_FAMILY(shape)
#undef AMPCHECK_PARITY_FAMILY

}  // namespace
}  // namespace ampcheck
