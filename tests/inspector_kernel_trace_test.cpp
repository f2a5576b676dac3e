// The CUPTI record handling (inspector/kernel_trace.h) on synthetic activity records, and
// the tracer (inspector/cupti_tracer.h) where there is no GPU. Every expectation comes
// from how the records were built: which op instance launched which kernel is decided
// here, then the records are handed over shuffled, split into buffers, late, dropped or
// without their correlation, and the join must find the construction again. The kernel
// names are real ones, from ../shared/data/cuda-kernel-names.tsv (public profiler output).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "engine/hooks.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "inspector/cupti_activity.h"
#include "inspector/cupti_tracer.h"
#include "inspector/kernel_trace.h"
#include "kernels/cuda/cuda.h"

#if AMPCHECK_HAVE_CUDA
#include <cupti.h>  // CUPTI's own record structs, for the translation test
#endif

namespace ampcheck::inspector {
namespace {

// From the shared list: cuBLAS, cuDNN and CUTLASS GEMMs and convolutions of several
// generations, a demangled cuDNN template, and the layout kernels around a convolution.
const std::vector<std::string> kNames = {
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
    "cutlass_80_tensorop_f16_s16816gemm_relu_f16_128x128_32x4_tn_align8",
    "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_relu_f2f_stages_64x6_tn",
    "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1",
    "turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_filter1x1_stg8_interior_nchw_nn_v1",
    "volta_fp16_scudnn_fp16_128x128_stridedB_splitK_small_nn_v1",
    "void cudnn::detail::implicit_convolveNd_sgemm<__half, int=3, int=1024, int=5, int=5, int=3, int=3, "
    "int=3, int=1, bool=1, bool=0, bool=1>(int, int, int, __half const *, int, "
    "cudnn::detail::implicit_convolveNd_sgemm<__half, int=3, int=1024, int=5, int=5, int=3, int=3, int=3, "
    "int=1, bool=1, bool=0, bool=1>*, __half const *, kernel_convNd_params, int, float, float, int, __half "
    "const *, __half const *)",
    "nchwToNhwcKernel",
    "nhwcToNchwKernel",
    "cask_cudnn::computeOffsetsKernel",
    "cudnn::gemm::computeOffsetsKernel",
    "batch_norm_transform_input_kernel",
};

OpInstance op(std::uint64_t sequence, std::int64_t step, Phase phase, Op o, std::string module) {
  OpInstance i;
  i.sequence = sequence;
  i.step = step;
  i.phase = phase;
  i.op = o;
  i.module = std::move(module);
  return i;
}

KernelRecord kernel(const std::string& name, std::uint64_t start, std::uint64_t end,
                    std::uint32_t correlation, std::uint32_t stream = 7) {
  KernelRecord k;
  k.name = name;
  k.start_ns = start;
  k.end_ns = end;
  k.stream = stream;
  k.grid = {132, 1, 1};
  k.block = {128, 1, 1};
  k.correlation = correlation;
  return k;
}

using Item = std::variant<KernelRecord, MemcpyRecord, MemsetRecord, CorrelationRecord>;

void put(ActivityBatch& b, const Item& item) {
  if (const auto* k = std::get_if<KernelRecord>(&item)) b.kernels.push_back(*k);
  else if (const auto* c = std::get_if<MemcpyRecord>(&item)) b.memcpys.push_back(*c);
  else if (const auto* s = std::get_if<MemsetRecord>(&item)) b.memsets.push_back(*s);
  else b.correlations.push_back(std::get<CorrelationRecord>(item));
}

ActivityBatch batch_of(const std::vector<Item>& items) {
  ActivityBatch b;
  for (const Item& i : items) put(b, i);
  return b;
}

// Hands `items` over as CUPTI would: in shuffled order, in buffers of 1 to 7 records.
void deliver(KernelCorrelator& c, std::vector<Item> items, std::mt19937& rng) {
  std::shuffle(items.begin(), items.end(), rng);
  std::size_t i = 0;
  while (i < items.size()) {
    const std::size_t n = std::min<std::size_t>(items.size() - i, 1 + rng() % 7);
    ActivityBatch b;
    for (std::size_t j = 0; j < n; ++j) put(b, items[i + j]);
    c.add(std::move(b));
    i += n;
  }
}

std::vector<std::string> names_of(const std::vector<KernelRecord>& ks) {
  std::vector<std::string> out;
  for (const KernelRecord& k : ks) out.push_back(k.name);
  return out;
}

template <class R>
bool by_start(const std::vector<R>& rs) {
  return std::is_sorted(rs.begin(), rs.end(), [](const R& a, const R& b) { return a.start_ns < b.start_ns; });
}

// --- the join on a small model: a conv, a matmul forward and its backward ------------

TEST(KernelCorrelator, PutsEachKernelOnTheOpInstanceThatLaunchedIt) {
  KernelCorrelator c;
  const auto conv = c.begin_op(op(11, 1, Phase::forward, Op::conv2d, "features.0"));
  const auto mm = c.begin_op(op(12, 1, Phase::forward, Op::matmul, "classifier"));
  const auto mm_grad = c.begin_op(op(13, 1, Phase::backward, Op::matmul, "classifier"));
  EXPECT_EQ(conv, 1u);  // ids from 1, in begin order
  EXPECT_EQ(mm, 2u);
  EXPECT_EQ(mm_grad, 3u);

  // conv2d: layout transform, the implicit GEMM, the transform back (API calls 100..102);
  // matmul: one GEMM (103); its backward: two GEMMs (104, 105).
  c.add(batch_of({CorrelationRecord{conv, 100}, CorrelationRecord{conv, 101}, CorrelationRecord{conv, 102},
                  CorrelationRecord{mm, 103}, CorrelationRecord{mm_grad, 104},
                  CorrelationRecord{mm_grad, 105},
                  kernel(kNames[8], 1000, 1100, 100), kernel(kNames[1], 1100, 1900, 101),
                  kernel(kNames[9], 1900, 2000, 102), kernel(kNames[0], 2000, 2600, 103),
                  kernel(kNames[2], 2600, 3000, 104), kernel(kNames[3], 3000, 3300, 105)}));
  const KernelFlush f = c.flush(1);

  EXPECT_EQ(f.step, 1);
  ASSERT_EQ(f.ops.size(), 3u);
  EXPECT_EQ(f.ops[0].op, op(11, 1, Phase::forward, Op::conv2d, "features.0"));
  EXPECT_EQ(names_of(f.ops[0].kernels), (std::vector<std::string>{kNames[8], kNames[1], kNames[9]}));
  EXPECT_EQ(f.ops[1].op, op(12, 1, Phase::forward, Op::matmul, "classifier"));
  EXPECT_EQ(names_of(f.ops[1].kernels), (std::vector<std::string>{kNames[0]}));
  EXPECT_EQ(f.ops[2].op, op(13, 1, Phase::backward, Op::matmul, "classifier"));
  EXPECT_EQ(names_of(f.ops[2].kernels), (std::vector<std::string>{kNames[2], kNames[3]}));
  EXPECT_EQ(f.ops[1].kernels[0], kernel(kNames[0], 2000, 2600, 103));  // every field kept
  EXPECT_EQ(f.ops[1].kernels[0].duration_ns(), 600u);
  EXPECT_TRUE(f.unattributed.empty());
  EXPECT_EQ(c.stats().attributed, 6u);
  EXPECT_EQ(c.stats().unattributed(), 0u);
  EXPECT_EQ(c.waiting(), 0u);
}

TEST(KernelCorrelator, TakesTheOpInstanceFromTheEngineEvent) {
  OpEvent e;
  e.sequence = 42;
  e.step = 3;
  e.phase = Phase::backward;
  e.op = Op::linear;
  e.module = "encoder.layers.2.attn";
  e.inserted_cast = false;
  EXPECT_EQ(OpInstance::of(e), op(42, 3, Phase::backward, Op::linear, "encoder.layers.2.attn"));
  KernelCorrelator c;
  const auto id = c.begin_op(e);
  c.add(batch_of({CorrelationRecord{id, 5}, kernel(kNames[4], 10, 20, 5)}));
  const KernelFlush f = c.flush(3);
  ASSERT_EQ(f.ops.size(), 1u);
  EXPECT_EQ(f.ops[0].op.module, "encoder.layers.2.attn");
  EXPECT_EQ(f.ops[0].op.sequence, 42u);
}

TEST(KernelCorrelator, KeepsKernelsInStartOrderAcrossStreamsAndWithCopiesAndMemsets) {
  KernelCorrelator c;
  const auto id = c.begin_op(op(1, 1, Phase::forward, Op::conv2d, "conv"));
  // Handed over latest first, on two streams; a copy in and a memset of the workspace.
  const MemcpyRecord copy{MemcpyKind::host_to_device, 4096, 50, 90, 0, 7, 20};
  const MemsetRecord zero{MemoryKind::device, 1 << 20, 0, 95, 99, 0, 9, 21};
  c.add(batch_of({kernel(kNames[10], 700, 720, 24, 9), kernel(kNames[7], 300, 650, 23, 7),
                  kernel(kNames[11], 100, 120, 22, 9), copy, zero}));
  c.add(batch_of({CorrelationRecord{id, 20}, CorrelationRecord{id, 21}, CorrelationRecord{id, 22},
                  CorrelationRecord{id, 23}, CorrelationRecord{id, 24}}));
  const KernelFlush f = c.flush(1);
  ASSERT_EQ(f.ops.size(), 1u);
  EXPECT_EQ(names_of(f.ops[0].kernels), (std::vector<std::string>{kNames[11], kNames[7], kNames[10]}));
  EXPECT_EQ(f.ops[0].memcpys, std::vector<MemcpyRecord>{copy});
  EXPECT_EQ(f.ops[0].memsets, std::vector<MemsetRecord>{zero});
  EXPECT_EQ(c.stats().attributed, 5u);
  EXPECT_EQ(memcpy_kind_name(MemcpyKind::host_to_device), "HtoD");
  EXPECT_EQ(memory_kind_name(MemoryKind::device), "device");
}

// --- arrival order ----------------------------------------------------------------------

TEST(KernelCorrelator, JoinsAKernelThatArrivesBeforeItsCorrelationRecord) {
  KernelCorrelator c;
  const auto id = c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc"));
  c.add(batch_of({kernel(kNames[0], 10, 20, 7)}));  // the device buffer completes first
  EXPECT_EQ(c.waiting(), 1u);
  c.add(batch_of({CorrelationRecord{id, 7}}));
  const KernelFlush f = c.flush(1);
  ASSERT_EQ(f.ops.size(), 1u);
  EXPECT_EQ(f.ops[0].kernels.size(), 1u);
  EXPECT_EQ(c.waiting(), 0u);
}

TEST(KernelCorrelator, WaitsAFlushForACorrelationRecordThatComesLate) {
  KernelCorrelator c;  // grace_flushes = 1
  const auto id = c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc"));
  c.add(batch_of({kernel(kNames[0], 10, 20, 7)}));
  const KernelFlush first = c.flush(1);
  EXPECT_TRUE(first.empty());  // not joined, not given up on either
  EXPECT_EQ(c.waiting(), 1u);
  c.add(batch_of({CorrelationRecord{id, 7}}));
  const KernelFlush second = c.flush(2);
  ASSERT_EQ(second.ops.size(), 1u);
  EXPECT_EQ(second.step, 2);
  EXPECT_EQ(second.ops[0].op.step, 1);  // the instance keeps its own step
  EXPECT_EQ(c.stats().no_correlation, 0u);
}

TEST(KernelCorrelator, JoinsBuffersOfAStepThatArriveAfterTheStepEnded) {
  KernelCorrelator c;  // late_flushes = 2
  const auto a = c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc1"));
  const auto b = c.begin_op(op(2, 1, Phase::forward, Op::matmul, "fc2"));
  c.add(batch_of({CorrelationRecord{a, 1}, CorrelationRecord{b, 2}, kernel(kNames[0], 10, 20, 1)}));
  const KernelFlush step1 = c.flush(1);
  ASSERT_EQ(step1.ops.size(), 1u);
  EXPECT_EQ(step1.ops[0].op.sequence, 1u);

  // Step 2 runs an op; fc2's kernel of step 1 and fc1's second one finish only now.
  const auto d = c.begin_op(op(3, 2, Phase::forward, Op::relu, "act"));
  c.add(batch_of({CorrelationRecord{d, 3}, kernel(kNames[12], 50, 60, 3), kernel(kNames[3], 30, 40, 2),
                  kernel(kNames[2], 21, 29, 1)}));
  const KernelFlush step2 = c.flush(2);
  ASSERT_EQ(step2.ops.size(), 3u);  // each op instance with what is new for it
  EXPECT_EQ(step2.ops[0].op.sequence, 1u);
  EXPECT_EQ(names_of(step2.ops[0].kernels), std::vector<std::string>{kNames[2]});
  EXPECT_EQ(step2.ops[1].op, op(2, 1, Phase::forward, Op::matmul, "fc2"));
  EXPECT_EQ(names_of(step2.ops[1].kernels), std::vector<std::string>{kNames[3]});
  EXPECT_EQ(step2.ops[2].op.step, 2);
  EXPECT_EQ(c.stats().attributed, 4u);
}

TEST(KernelCorrelator, LetsGoOfAnOpInstanceAfterItsLateWindow) {
  KernelCorrelator c;  // late_flushes = 2: kept through the two flushes after its own
  const auto a = c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc"));
  c.add(batch_of({CorrelationRecord{a, 1}}));
  (void)c.flush(1);
  (void)c.flush(2);
  c.add(batch_of({kernel(kNames[0], 10, 20, 1)}));  // two flushes late: still its own
  const KernelFlush third = c.flush(3);
  ASSERT_EQ(third.ops.size(), 1u);
  EXPECT_EQ(c.live_instances(), 0u);
  c.add(batch_of({CorrelationRecord{a, 2}, kernel(kNames[2], 30, 40, 2)}));  // three: too late
  const KernelFlush fourth = c.flush(4);
  EXPECT_TRUE(fourth.ops.empty());
  EXPECT_EQ(names_of(fourth.unattributed.kernels), std::vector<std::string>{kNames[2]});
  EXPECT_EQ(c.stats().unknown_op, 1u);
}

// --- what cannot be joined ------------------------------------------------------------------

TEST(KernelCorrelator, ReportsKernelsOfUnknownCorrelationAsUnattributed) {
  KernelCorrelator c;
  const auto id = c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc"));
  c.add(batch_of({CorrelationRecord{id, 1}, kernel(kNames[0], 10, 20, 1),
                  // launched outside any op (no correlation record at all)
                  kernel(kNames[9], 5, 8, 50), MemsetRecord{MemoryKind::device, 64, 0, 1, 2, 0, 7, 51},
                  // correlated with an external id nobody handed out (another tool's push)
                  CorrelationRecord{9999, 60}, kernel(kNames[10], 30, 40, 60)}));
  const KernelFlush first = c.flush(1);
  ASSERT_EQ(first.ops.size(), 1u);
  EXPECT_EQ(names_of(first.unattributed.kernels), std::vector<std::string>{kNames[10]});  // at once
  EXPECT_EQ(c.stats().unknown_op, 1u);
  EXPECT_EQ(c.waiting(), 2u);  // the two without correlation get their grace flush

  const KernelFlush second = c.flush(2);
  EXPECT_EQ(names_of(second.unattributed.kernels), std::vector<std::string>{kNames[9]});
  EXPECT_EQ(second.unattributed.memsets.size(), 1u);
  EXPECT_EQ(c.stats().no_correlation, 2u);
  EXPECT_EQ(c.stats().unattributed(), 3u);
  EXPECT_EQ(c.stats().attributed, 1u);
  EXPECT_EQ(c.waiting(), 0u);
}

TEST(KernelCorrelator, FinishGivesUpOnEverythingStillWaiting) {
  KernelCorrelator c;
  (void)c.begin_op(op(1, 1, Phase::forward, Op::matmul, "fc"));
  c.add(batch_of({kernel(kNames[0], 10, 20, 1),
                  MemcpyRecord{MemcpyKind::device_to_host, 4, 30, 31, 0, 7, 2}}));
  EXPECT_TRUE(c.flush(1).empty());
  const KernelFlush last = c.finish();
  EXPECT_EQ(last.step, 1);
  EXPECT_EQ(last.unattributed.kernels.size(), 1u);
  EXPECT_EQ(last.unattributed.memcpys.size(), 1u);
  EXPECT_EQ(c.waiting(), 0u);
  EXPECT_EQ(c.live_instances(), 0u);
  EXPECT_EQ(c.stats().no_correlation, 2u);
}

TEST(KernelCorrelator, CountsDroppedAndUnreadableRecordsPerFlush) {
  KernelCorrelator c;
  ActivityBatch a;
  a.dropped = 3;  // CUPTI had no buffer for three records
  ActivityBatch b;
  b.dropped = 4;
  b.invalid = 1;
  c.add(a);
  c.add(b);
  const KernelFlush first = c.flush(1);
  EXPECT_FALSE(first.empty());  // nothing joined, but a report must say records were lost
  EXPECT_EQ(first.dropped, 7u);
  EXPECT_EQ(first.invalid, 1u);
  const KernelFlush second = c.flush(2);
  EXPECT_EQ(second.dropped, 0u);  // per flush
  EXPECT_TRUE(second.empty());
  EXPECT_EQ(c.stats().dropped, 7u);  // over the run
  EXPECT_EQ(c.stats().invalid, 1u);
}

TEST(KernelCorrelator, KeepsTheLaterBegunOpWhenTwoRecordsClaimOneCall) {
  for (const bool later_first : {false, true}) {
    KernelCorrelator c;
    const auto outer = c.begin_op(op(1, 1, Phase::forward, Op::linear, "fc"));
    const auto inner = c.begin_op(op(2, 1, Phase::forward, Op::matmul, "fc"));
    const CorrelationRecord x{outer, 9}, y{inner, 9};
    c.add(batch_of({later_first ? y : x}));
    c.add(batch_of({later_first ? x : y, kernel(kNames[0], 10, 20, 9)}));
    const KernelFlush f = c.flush(1);
    ASSERT_EQ(f.ops.size(), 1u);
    EXPECT_EQ(f.ops[0].op.sequence, 2u);
    EXPECT_EQ(c.stats().conflicts, 1u);
  }
}

TEST(KernelCorrelator, AnEmptyFlushIsEmpty) {
  KernelCorrelator c;
  const KernelFlush none = c.flush(1);
  EXPECT_TRUE(none.empty());
  KernelFlush nothing;
  nothing.step = 1;
  EXPECT_EQ(none, nothing);
  (void)c.begin_op(op(1, 2, Phase::forward, Op::relu, "act"));  // an op that launched nothing
  c.add(ActivityBatch{});
  EXPECT_TRUE(c.flush(2).empty());
  EXPECT_TRUE(c.finish().empty());
  KernelTraceStats expected;
  expected.op_instances = 1;
  EXPECT_EQ(c.stats(), expected);
}

// --- many op instances, interleaved, shuffled, late ---------------------------------------

// A run of `steps` steps of `ops_per_step` op instances each: every op launches 1 to 4
// kernels on two streams (and some a copy or a memset), each through its own API call;
// between ops the allocator launches a memset outside any op. What each op launched is
// known here; `late` of a step's records finish only after its flush.
struct SyntheticRun {
  std::vector<std::vector<OpInstance>> ops;      // per step, in begin order
  std::map<std::uint64_t, OpActivity> expected;  // by sequence, records in start order
  Unattributed expected_unattributed;
  std::vector<std::vector<Item>> on_time, late;  // per step
};

// External ids are planned as the correlator hands them out: from 1, in begin order.
SyntheticRun make_run(int steps, int ops_per_step, std::uint32_t seed) {
  std::mt19937 rng(seed);
  SyntheticRun run;
  std::uint64_t sequence = 100, clock = 1'000;
  std::uint32_t correlation = 1;
  std::uint64_t external = 0;
  const Op kinds[] = {Op::conv2d, Op::matmul, Op::linear, Op::relu, Op::add, Op::batch_norm};
  for (int s = 1; s <= steps; ++s) {
    std::vector<Item> on_time, late;
    std::vector<OpInstance> begun;
    auto send = [&](Item item) { (rng() % 5 == 0 ? late : on_time).push_back(std::move(item)); };
    for (int i = 0; i < ops_per_step; ++i) {
      const Phase phase = i < ops_per_step / 2 ? Phase::forward : Phase::backward;
      const OpInstance inst = op(++sequence, s, phase, kinds[rng() % std::size(kinds)],
                                 "layers." + std::to_string(i % (ops_per_step / 2)));
      begun.push_back(inst);
      ++external;
      OpActivity& want = run.expected[inst.sequence];
      want.op = inst;
      const int launches = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < launches; ++k) {
        const std::uint32_t corr = correlation++;
        send(CorrelationRecord{external, corr});
        const std::uint64_t start = clock += 10 + rng() % 50;
        KernelRecord rec = kernel(kNames[rng() % kNames.size()], start, start + 5 + rng() % 500, corr,
                                  7 + static_cast<std::uint32_t>(rng() % 2));
        want.kernels.push_back(rec);
        send(rec);
      }
      if (rng() % 3 == 0) {
        const std::uint32_t corr = correlation++;
        send(CorrelationRecord{external, corr});
        const std::uint64_t start = clock += 10;
        const MemcpyRecord copy{MemcpyKind::device_to_device, 256u * (1 + rng() % 64), start, start + 3,
                                0, 7, corr};
        want.memcpys.push_back(copy);
        send(copy);
      }
      if (i % 10 == 9) {  // the allocator, between ops: no correlation record
        const std::uint64_t start = clock += 10;
        const MemsetRecord zero{MemoryKind::device, 1024, 0, start, start + 2, 0, 7, correlation++};
        run.expected_unattributed.memsets.push_back(zero);
        send(zero);
      }
    }
    run.ops.push_back(std::move(begun));
    run.on_time.push_back(std::move(on_time));
    run.late.push_back(std::move(late));
  }
  return run;
}

// Runs `run`: each step begins its ops, gets its on-time records and the previous step's
// late ones, and flushes; then finishes. Returns every flush.
std::vector<KernelFlush> replay(KernelCorrelator& c, const SyntheticRun& run, std::uint32_t delivery_seed) {
  std::mt19937 rng(delivery_seed);
  std::vector<KernelFlush> out;
  const auto steps = static_cast<std::int64_t>(run.on_time.size());
  std::uint64_t planned = 0;
  for (std::int64_t s = 1; s <= steps + 1; ++s) {
    if (s <= steps) {
      for (const OpInstance& i : run.ops[static_cast<std::size_t>(s - 1)])
        EXPECT_EQ(c.begin_op(i), ++planned);
    }
    std::vector<Item> items;
    if (s <= steps) items = run.on_time[static_cast<std::size_t>(s - 1)];
    if (s > 1) {
      const auto& late = run.late[static_cast<std::size_t>(s - 2)];
      items.insert(items.end(), late.begin(), late.end());
    }
    deliver(c, items, rng);
    out.push_back(c.flush(s));
  }
  out.push_back(c.finish());
  return out;
}

TEST(KernelCorrelator, FindsTheConstructionOfManyInterleavedOpInstances) {
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    KernelCorrelator c;
    const SyntheticRun run = make_run(3, 60, seed);
    const std::vector<KernelFlush> flushes = replay(c, run, seed * 7919u);

    std::map<std::uint64_t, OpActivity> got;
    Unattributed unattributed;
    std::uint64_t appearances = 0;  // op instances over all flushes
    for (const KernelFlush& f : flushes) {
      for (const OpActivity& a : f.ops) {
        EXPECT_TRUE(by_start(a.kernels) && by_start(a.memcpys));
        OpActivity& g = got[a.op.sequence];
        g.op = a.op;
        g.kernels.insert(g.kernels.end(), a.kernels.begin(), a.kernels.end());
        g.memcpys.insert(g.memcpys.end(), a.memcpys.begin(), a.memcpys.end());
      }
      for (std::size_t i = 1; i < f.ops.size(); ++i)
        EXPECT_LT(f.ops[i - 1].op.sequence, f.ops[i].op.sequence);
      EXPECT_TRUE(by_start(f.unattributed.memsets));
      unattributed.memsets.insert(unattributed.memsets.end(), f.unattributed.memsets.begin(),
                                  f.unattributed.memsets.end());
      appearances += f.ops.size();
    }
    // A late record splits an instance over two flushes; put each back in start order.
    for (auto& [sequence, a] : got) {
      std::sort(a.kernels.begin(), a.kernels.end(), [](auto& x, auto& y) { return x.start_ns < y.start_ns; });
      std::sort(a.memcpys.begin(), a.memcpys.end(), [](auto& x, auto& y) { return x.start_ns < y.start_ns; });
    }
    std::sort(unattributed.memsets.begin(), unattributed.memsets.end(),
              [](auto& x, auto& y) { return x.start_ns < y.start_ns; });
    EXPECT_EQ(got, run.expected) << "seed " << seed;
    EXPECT_EQ(unattributed, run.expected_unattributed) << "seed " << seed;
    EXPECT_GT(appearances, got.size()) << "some instance's records came over two flushes";
    EXPECT_EQ(c.stats().unattributed(), run.expected_unattributed.memsets.size());
    EXPECT_EQ(c.stats().op_instances, 180u);
    EXPECT_EQ(c.waiting(), 0u);
  }
}

TEST(KernelCorrelator, GivesTheSameFlushesWhateverTheArrivalOrder) {
  std::vector<KernelFlush> reference;
  for (const std::uint32_t delivery : {11u, 12u, 13u, 14u, 15u, 16u, 17u, 18u}) {
    KernelCorrelator c;
    const SyntheticRun run = make_run(3, 40, 5);  // the same run, handed over differently
    const std::vector<KernelFlush> flushes = replay(c, run, delivery);
    if (reference.empty()) reference = flushes;
    else EXPECT_EQ(flushes, reference) << "delivery order " << delivery;
  }
  ASSERT_FALSE(reference.empty());
  EXPECT_FALSE(reference.front().ops.empty());
}

// --- names ------------------------------------------------------------------------------------

TEST(KernelNames, DemanglesCppKernelsAndLeavesLibraryNamesAlone) {
  // The reference is c++filt's output for the same symbols.
  EXPECT_EQ(demangle_kernel_name("_Z5scaleIfEvPT_i"), "void scale<float>(float*, int)");
  EXPECT_EQ(demangle_kernel_name(
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"),
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)");
  for (const std::string& name : kNames) EXPECT_EQ(demangle_kernel_name(name), name);
  EXPECT_EQ(demangle_kernel_name("_Znot a symbol"), "_Znot a symbol");
}

// --- the tracer --------------------------------------------------------------------------------

// Attaches an observer for a scope.
class Attached {
 public:
  explicit Attached(Observer* o) : o_(o) { add_observer(o_); }
  ~Attached() { remove_observer(o_); }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  Observer* o_;
};

TEST(CuptiTracer, WithoutAGpuSaysUnavailableAndCostsNothing) {
  if (kernels::cuda::probe().device_count > 0) GTEST_SKIP() << "a GPU is usable here";
  const std::uint64_t calls_before = cupti::calls();
  CuptiTracer tracer;
  EXPECT_FALSE(tracer.available());
  const std::string& why = tracer.why_unavailable();
  EXPECT_TRUE(why.starts_with("no GPU") || why.starts_with("this build has no CUDA")) << why;
  EXPECT_FALSE(tracer.start());
  EXPECT_FALSE(tracer.running());
  {
    Attached on(&tracer);
    Generator gen(1);
    const Tensor a = Tensor::randn({4, 8}, gen);
    const Tensor b = Tensor::randn({8, 3}, gen);
    begin_step(1);
    const Tensor y = sum(relu(matmul(a, b)));
    end_step();
    EXPECT_TRUE(y.defined());
  }
  tracer.flush(1);
  tracer.stop();
  EXPECT_TRUE(tracer.flushes().empty());
  EXPECT_EQ(tracer.stats(), KernelTraceStats{});
  EXPECT_EQ(tracer.waiting(), 0u);
  EXPECT_EQ(tracer.error_count(), 0u);
  EXPECT_EQ(tracer.cupti_calls(), 0u);
  EXPECT_EQ(cupti::calls(), calls_before);
}

TEST(CuptiTracer, TiesTheKernelsOfAMatmulToItsOpInstanceOnTheGpu) {
  if (kernels::cuda::probe().device_count == 0) GTEST_SKIP() << "no GPU: " << kernels::cuda::probe().why_none;
  CuptiTracer tracer;
  ASSERT_TRUE(tracer.available()) << tracer.why_unavailable();
  ASSERT_TRUE(tracer.start()) << tracer.why_unavailable();
  Generator gen(5);
  const Tensor a = Tensor::randn({64, 128}, gen).to(Device::cuda);
  const Tensor b = Tensor::randn({128, 32}, gen).to(Device::cuda);
  {
    Attached on(&tracer);
    begin_step(1);
    const Tensor y = relu(matmul(a, b));
    (void)y.to(Device::cpu);  // waits for the GPU
    end_step();
  }
  tracer.stop();
  EXPECT_EQ(tracer.error_count(), 0u) << (tracer.errors().empty() ? "" : tracer.errors().front());
  EXPECT_EQ(tracer.stats().dropped, 0u);
  bool matmul_seen = false, relu_seen = false;
  for (const KernelFlush& f : tracer.flushes())
    for (const OpActivity& o : f.ops) {
      EXPECT_EQ(o.op.step, 1);
      for (const KernelRecord& k : o.kernels) {
        EXPECT_FALSE(k.name.empty());
        EXPECT_GT(k.end_ns, k.start_ns) << k.name;
        EXPECT_GE(k.grid.x * k.block.x, 1u) << k.name;
      }
      matmul_seen = matmul_seen || (o.op.op == Op::matmul && !o.kernels.empty());
      relu_seen = relu_seen || (o.op.op == Op::relu && !o.kernels.empty());
    }
  EXPECT_TRUE(matmul_seen);
  EXPECT_TRUE(relu_seen);
  EXPECT_GT(tracer.cupti_calls(), 0u);
}

#if AMPCHECK_HAVE_CUDA
// CUPTI's own record structs, filled as CUPTI fills them, read without a CUPTI call.
TEST(CuptiTranslate, ReadsKernelCopyMemsetAndCorrelationRecords) {
  const std::uint64_t calls_before = cupti::calls();
  ActivityBatch b;

  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = kNames[1].c_str();
  k.start = 1'000;
  k.end = 9'000;
  k.deviceId = 0;
  k.streamId = 13;
  k.gridX = 264, k.gridY = 2, k.gridZ = 1;
  k.blockX = 384, k.blockY = 1, k.blockZ = 1;
  k.correlationId = 77;
  cupti::translate(&k, b);
  KernelRecord want_k = kernel(kNames[1], 1'000, 9'000, 77, 13);
  want_k.grid = {264, 2, 1};
  want_k.block = {384, 1, 1};
  EXPECT_EQ(b.kernels, std::vector<KernelRecord>{want_k});

  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = 4096;
  m.start = 10, m.end = 20;
  m.streamId = 7;
  m.correlationId = 78;
  cupti::translate(&m, b);
  EXPECT_EQ(b.memcpys, (std::vector<MemcpyRecord>{{MemcpyKind::host_to_device, 4096, 10, 20, 0, 7, 78}}));

  CUpti_ActivityMemset4 s{};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  s.value = 0;
  s.bytes = 512;
  s.start = 30, s.end = 31;
  s.streamId = 7;
  s.correlationId = 79;
  cupti::translate(&s, b);
  EXPECT_EQ(b.memsets, (std::vector<MemsetRecord>{{MemoryKind::device, 512, 0, 30, 31, 0, 7, 79}}));

  CUpti_ActivityExternalCorrelation ours{};
  ours.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ours.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  ours.externalId = 5;
  ours.correlationId = 77;
  CUpti_ActivityExternalCorrelation theirs = ours;  // another tool's kind: not ours to join
  theirs.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  cupti::translate(&ours, b);
  cupti::translate(&theirs, b);
  cupti::translate(&api, b);
  EXPECT_EQ(b.correlations, (std::vector<CorrelationRecord>{{5, 77}}));
  EXPECT_EQ(b.other, 2u);
  EXPECT_EQ(cupti::calls(), calls_before);
}
#endif

}  // namespace
}  // namespace ampcheck::inspector
