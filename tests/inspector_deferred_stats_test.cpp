// Full mode's statistics deferred to the step's end (inspector/numerics.h PendingStats,
// kernels::SummarySlots): what a step merges at its end is, bit for bit, what merging each
// tensor's compute_stats at once gives, in the same order, and nothing is merged before.
// The reference is an observer of its own that merges compute_stats at each event.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/dispatch.h"  // view_of
#include "engine/hooks.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "inspector/inspector.h"
#include "kernels/memory_kernels.h"
#include "kernels/numerics_kernels.h"
#include "models/data.h"
#include "samples/models.h"
#include "tests/gpu_test_util.h"

namespace ampcheck {
namespace {

using inspector::Inspector;
using inspector::InspectorOptions;
using inspector::Mode;
using inspector::NumericsTable;
using inspector::TensorStats;
using StatsMap = std::map<std::string, TensorStats>;

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

void expect_same(const TensorStats& got, const TensorStats& want, const std::string& key) {
  EXPECT_EQ(got.count, want.count) << key;
  EXPECT_EQ(got.tensors, want.tensors) << key;
  EXPECT_EQ(got.histogram, want.histogram) << key;
  EXPECT_EQ(got.f16, want.f16) << key;
  EXPECT_EQ(got.bf16, want.bf16) << key;
  for (const double TensorStats::*f : {&TensorStats::sum, &TensorStats::sum_squares, &TensorStats::min,
                                       &TensorStats::max, &TensorStats::absmax, &TensorStats::min_nonzero_abs,
                                       &TensorStats::mean, &TensorStats::rms, &TensorStats::dynamic_range_log2})
    EXPECT_TRUE(same_bits(got.*f, want.*f)) << key << ": " << got.*f << " vs " << want.*f;
}

void expect_same(const StatsMap& got, const StatsMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (auto g = got.begin(), w = want.begin(); g != got.end(); ++g, ++w) {
    ASSERT_EQ(g->first, w->first);
    expect_same(g->second, w->second, g->first);
  }
}

// Every tensor full mode's numerics take (inspector/inspector.h lists the keys), its
// compute_stats merged at the event itself.
class Immediate : public Observer {
 public:
  void on_step_begin(std::int64_t) override { occurrences_.reset(); }
  void on_op_end(const OpEvent& e) override {
    if (e.inserted_cast) return;
    const std::string key = e.module + "/" + std::string(op_name(e.op)) + "#" + std::to_string(occurrences_.of(e));
    if (e.phase == Phase::forward && e.output && e.output->defined() && is_floating(e.output->dtype())) {
      add(key + ":out", *e.output);
    } else if (e.phase == Phase::backward && e.grad_inputs) {
      for (std::size_t i = 0; i < e.grad_inputs->size(); ++i) {
        const Tensor& g = (*e.grad_inputs)[i];
        if (g.defined() && is_floating(g.dtype())) add(key + ":grad" + std::to_string(i), g);
      }
    }
  }
  void on_param_update(const ParamUpdate& u) override {
    const std::string name(u.name);
    if (u.after) add("param:" + name, *u.after);
    if (u.grad) add("grad:" + name, *u.grad);
    if (u.state)
      for (const auto& [buf, t] : *u.state) add("state:" + name + "." + buf, t);
  }

  StatsMap stats;
  std::size_t added = 0;

 private:
  void add(const std::string& key, const Tensor& t) {
    merge(stats[key], inspector::compute_stats(t));
    ++added;
  }
  inspector::Occurrences occurrences_;
};

InspectorOptions full_mode() {
  InspectorOptions o;
  o.mode = Mode::full;
  return o;
}

// A small MLP on the spiral with momentum SGD (optimizer state too), on `device`.
struct Training {
  explicit Training(Device device) : data(models::spiral(32, 3, 0.2, 5)), gen(3), model(2, 16, 3, gen) {
    model.to(device);
    data.x = data.x.to(device);
    data.y = data.y.to(device);
    opt = std::make_unique<optim::SGD>(model.named_parameters(), 0.05, optim::SGD::Options{0.9});
  }
  void step() {
    opt->zero_grad();
    cross_entropy(model(data.x), data.y).backward();
    opt->step();
  }
  models::Dataset data;
  Generator gen;
  samples::Mlp model;
  std::unique_ptr<optim::SGD> opt;
};

struct Runs {
  StatsMap deferred, immediate;
};

// `steps` steps under full mode with the reference attached after the inspector; with
// end_steps false the loop never calls end_step.
Runs train(int steps, bool end_steps, Device device = Device::cpu) {
  Training t(device);
  Inspector insp(full_mode());
  Immediate ref;
  insp.attach();
  add_observer(&ref);
  for (int s = 0; s < steps; ++s) {
    begin_step(s);
    t.step();
    if (end_steps) end_step();
  }
  remove_observer(&ref);
  insp.detach();
  return {insp.numerics()->table().stats, ref.stats};
}

TEST(DeferredStats, StepsMergeAtTheirEndWhatMergingEachTensorAtOnceGives) {
  const Runs r = train(3, true);
  EXPECT_GT(r.immediate.size(), 10u);
  EXPECT_TRUE(r.immediate.count("grad:fc1.weight") && r.immediate.count("state:fc1.weight.momentum_buffer"));
  expect_same(r.deferred, r.immediate);
}

TEST(DeferredStats, NothingIsMergedBeforeTheStepEnds) {
  Training t(Device::cpu);
  Inspector insp(full_mode());
  Immediate ref;
  insp.attach();
  add_observer(&ref);
  begin_step(0);
  t.step();
  EXPECT_EQ(insp.numerics()->pending(), ref.added);
  end_step();
  EXPECT_EQ(insp.numerics()->pending(), 0u);
  remove_observer(&ref);
  insp.detach();
  expect_same(insp.numerics()->table().stats, ref.stats);
}

// A reader mid-step (a report, the summary) and a loop without end_step see every tensor
// so far: table() merges what is queued, and a step's begin merges the step before.
TEST(DeferredStats, ReadersMidStepAndLoopsWithoutAStepEndSeeEveryTensor) {
  {
    Training t(Device::cpu);
    Inspector insp(full_mode());
    insp.attach();
    begin_step(0);
    t.step();
    ASSERT_GT(insp.numerics()->pending(), 0u);
    EXPECT_TRUE(insp.numerics()->table().stats.count("param:fc1.weight"));
    EXPECT_EQ(insp.numerics()->pending(), 0u);
    begin_step(1);
    t.step();
    ASSERT_GT(insp.numerics()->pending(), 0u);
    begin_step(2);
    EXPECT_EQ(insp.numerics()->pending(), 0u);
    insp.detach();
  }
  const Runs r = train(3, false);
  expect_same(r.deferred, r.immediate);
}

// The determinism rule: the same bits for any thread count.
TEST(DeferredStats, AreTheSameBitsForAnyThreadCount) {
  const int threads = num_threads();
  set_num_threads(1);
  const Runs one = train(2, true);
  set_num_threads(3);
  const Runs three = train(2, true);
  set_num_threads(threads);
  expect_same(one.deferred, three.deferred);
}

// Sums whose order shows: (1e16 - 1e16) + 1 = 1, but (1 - 1e16) + 1e16 = 0 (1 - 1e16
// rounds to -1e16) and (1e16 + 1) - 1e16 = 0.
TEST(DeferredStats, TheTableMergesInTheOrderQueuedAndAddMergesTheQueueFirst) {
  const Tensor big = Tensor::from(std::vector<double>{1e16}, {1}, DType::f64);
  const Tensor minus_big = Tensor::from(std::vector<double>{-1e16}, {1}, DType::f64);
  const Tensor one = Tensor::from(std::vector<double>{1.0}, {1}, DType::f64);

  NumericsTable at_once;
  for (const Tensor* t : {&big, &minus_big, &one}) at_once.add("x", *t, 0);
  EXPECT_EQ(at_once.stats.at("x").sum, 1.0);

  NumericsTable deferred;
  EXPECT_TRUE(deferred.queue("x", big, 0));
  EXPECT_TRUE(deferred.queue("x", minus_big, 0));
  EXPECT_TRUE(deferred.queue("x", one, 0));
  EXPECT_TRUE(deferred.stats.empty());
  EXPECT_EQ(deferred.pending.size(), 3u);
  deferred.flush();
  EXPECT_EQ(deferred.pending.size(), 0u);
  expect_same(deferred.stats, at_once.stats);

  NumericsTable mixed;
  EXPECT_TRUE(mixed.queue("x", big, 0));
  EXPECT_TRUE(mixed.queue("x", minus_big, 0));
  mixed.add("x", one, 0);
  EXPECT_EQ(mixed.pending.size(), 0u);
  expect_same(mixed.stats, at_once.stats);

  NumericsTable sampled;
  sampled.sampler = inspector::Sampler(2);
  EXPECT_FALSE(sampled.queue("x", big, 1));
  EXPECT_EQ(sampled.pending.size(), 0u);
  EXPECT_THROW(sampled.queue("x", Tensor::from(std::vector<std::int64_t>{1}, {1}), 0), std::invalid_argument);
  EXPECT_EQ(sampled.pending.size(), 0u);
}

// More tensors than the first block holds: the blocks grow within a round, each read
// gives the summaries in the order taken, and the next round's slots are in one block.
void expect_slots_read_what_stats_computes(Device device) {
  const auto& numerics = kernels_on<kernels::NumericsKernels>(device);
  kernels::SummarySlots slots(numerics, kernels_on<kernels::MemoryKernels>(device));
  Generator gen(7);
  std::vector<Tensor> tensors;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  for (std::int64_t i = 0; i < 150; ++i)
    tensors.push_back(
        (Tensor::randn({i * 37 % 300}, gen, DType::f32) * static_cast<double>(i % 7) * 1e3).to(dtypes[i % 4]).to(device));
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(slots.add(view_of(tensors[i])), i);
    EXPECT_EQ(slots.taken(), tensors.size());
    const std::vector<kernels::NumericsSummary> read = slots.read();
    EXPECT_EQ(slots.taken(), 0u);
    ASSERT_EQ(read.size(), tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const kernels::NumericsSummary want = numerics.stats(view_of(tensors[i]));
      EXPECT_EQ(std::memcmp(&read[i], &want, sizeof want), 0) << "round " << round << ", tensor " << i;
    }
  }
}

TEST(SummarySlots, ReadWhatStatsComputesInTheOrderTaken) { expect_slots_read_what_stats_computes(Device::cpu); }

TEST(SummarySlotsGpu, ReadWhatStatsComputesAndTheDeferredStepsMatchTheImmediateOnes) {
  if (!testing::has_gpu()) GTEST_SKIP() << kernels::cuda::probe().why_none;
  expect_slots_read_what_stats_computes(Device::cuda);
  const Runs r = train(3, true, Device::cuda);
  expect_same(r.deferred, r.immediate);
}

}  // namespace
}  // namespace ampcheck
