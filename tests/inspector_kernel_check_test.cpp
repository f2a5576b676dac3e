// The kernels of op calls on the op trace (OpTrace::add_gpu) and the kernel check
// (inspector/kernel_check.h), on synthetic calls and CUPTI records: which op ran which
// kernel is decided here, with real kernel names from tests/data/cuda-kernel-names.tsv
// (captured on an H100 and from public profiler output), each classified by the
// classifier as a profiler would see it. The expectations come from the construction: a
// GEMM of 3 output features is unaligned because 3 is not a multiple of 8, a depthwise
// convolution is one because its weight has one input channel per group.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/hooks.h"
#include "inspector/kernel_check.h"
#include "inspector/kernel_class.h"
#include "inspector/kernel_trace.h"
#include "inspector/to_report.h"
#include "inspector/trace.h"

namespace ampcheck::inspector {
namespace {

// Real names (tests/data/cuda-kernel-names.tsv).
const std::string kHss = "nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT";  // f16 GEMM, tensor cores
const std::string kTst = "nvjet_sm90_tst_32x64_64x16_1x1_h_bz_NTN";  // bf16 GEMM, tensor cores
const std::string kSgemmConv =
    "void implicit_convolve_sgemm<__half, __half, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, __half "
    "const*, int, __half*, __half const*, kernel_conv_params, unsigned long long, int, float, float, int, __half const*, "
    "__half const*, bool, bool, int, int)";
const std::string kTf32Wgrad =
    "sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize32x16x64_stage1_"
    "warpsize2x1x1_g1_tensor16x8x8_aligna8_alignc8_execute_kernel__5x_cudnn";
const std::string kDepthwise =
    "sm90_xmma_depthwise_convolution_fprop_tiling_f16f16_f32f32_f32_nhwckrsc_nhwc_tilesize1x8x8_1x3x3_1x1x1_1x1x1_"
    "stage4_warpsize4x1x1_g64_betaFalse_execute_kernel__5x_cudnn";
const std::string kGemv =
    "void gemv2N_kernel<int, int, __half, __half, __half, float, 128, 1, 2, 4, 1, false, cublasGemvParamsEx<int, "
    "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half const>, "
    "cublasGemvTensorStridedBatched<__half>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__half "
    "const>, cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>, float>)";
const std::string kVoltaSgemm = "volta_sgemm_128x64_nn";
const std::string kOwnMap =
    "void ampcheck::kernels::cuda::elementwise::(anonymous namespace)::map_kernel<(ampcheck::kernels::MapFn)0, "
    "float>(ampcheck::kernels::cuda::elementwise::(anonymous namespace)::MapInputs, void*, ampcheck::DType, long, "
    "float, float)";

// One op call as the engine reports its end.
struct Call {
  std::uint64_t sequence;
  std::int64_t step;
  Op op;
  Phase phase;
  std::string module;
  DType dtype;  // the dtype of every floating input (the policy's, after its casts)
  std::vector<Shape> shapes;
  bool inserted_cast = false;
};

OpEvent event(const Call& c) {
  OpEvent e;
  e.sequence = c.sequence;
  e.step = c.step;
  e.op = c.op;
  e.phase = c.phase;
  e.module = c.module;
  e.inserted_cast = c.inserted_cast;
  e.amp = true;
  e.level = amp::Level::O2;
  e.reason = amp::Reason::white;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) e.dtypes_before.push_back(c.dtype);
  e.shapes = c.shapes;
  e.out_dtype = c.dtype;
  e.kernel = "cuda:" + std::string(op_name(c.op)) + ":f32";
  return e;
}

// Kernels of one call, each `ns` long, back to back from `start`.
OpActivity activity(const Call& c, const std::vector<std::string>& names, std::uint64_t start = 1000,
                    std::uint64_t ns = 100) {
  OpActivity a;
  a.op = OpInstance::of(event(c));
  for (const std::string& n : names) {
    KernelRecord k;
    k.name = n;
    k.start_ns = start;
    k.end_ns = start + ns;
    k.grid = {4, 1, 1};
    k.block = {128, 1, 1};
    start += ns;
    a.kernels.push_back(k);
  }
  return a;
}

// The classes, as the watch keeps them: one per name, alive as long as the test.
struct Classes {
  std::vector<std::unique_ptr<KernelClass>> owned;
  std::vector<const KernelClass*> of(const OpActivity& a) {
    std::vector<const KernelClass*> out;
    for (const KernelRecord& k : a.kernels) {
      owned.push_back(std::make_unique<KernelClass>(classify_kernel_name(k.name)));
      out.push_back(owned.back().get());
    }
    return out;
  }
};

OpTrace gpu_trace() {
  OpTraceOptions o;
  o.gpu_kernels = true;
  return OpTrace(o);
}

void run(OpTrace& t, Classes& classes, const Call& c, const std::vector<std::string>& names) {
  t.on_op_end(event(c));
  const OpActivity a = activity(c, names);
  t.add_gpu(a, classes.of(a), 0.0);
}

const KernelFinding* finding_of(const KernelCheck& check, const std::string& instance) {
  for (const KernelFinding& f : check.findings)
    if (f.instance == instance) return &f;
  return nullptr;
}

TEST(OpTraceGpu, PutsEachCallsKernelsOnItsRecordInstanceAndOpType) {
  OpTrace t = gpu_trace();
  Classes classes;
  const Call fc{1, 1, Op::linear, Phase::forward, "fc1", DType::f16, {{60, 64}, {32, 64}, {32}}};
  run(t, classes, fc, {kHss, kOwnMap});
  Call again = fc;
  again.sequence = 2;
  again.step = 2;
  t.on_op_end(event(again));
  const OpActivity a = activity(again, {kHss}, 5000, 300);
  t.add_gpu(a, classes.of(a), 0.0);

  ASSERT_EQ(t.instances().size(), 1u);
  const InstanceStats& s = t.instances()[0];
  ASSERT_EQ(s.gpu_kernels.size(), 2u);
  EXPECT_EQ(s.gpu_kernels[0].name, kHss);
  EXPECT_EQ(s.gpu_kernels[0].launches, 2);
  EXPECT_EQ(s.gpu_kernels[0].total_ns, 400u);
  EXPECT_EQ(s.gpu_kernels[0].min_ns, 100u);
  EXPECT_EQ(s.gpu_kernels[0].max_ns, 300u);
  EXPECT_EQ(s.gpu_kernels[0].cls.tensor_cores, TensorCores::yes);
  EXPECT_EQ(s.gpu_kernels[1].launches, 1);
  // The records carry their launches for the Chrome trace's GPU track.
  ASSERT_EQ(t.records().size(), 2u);
  EXPECT_EQ(t.records()[0].gpu.size(), 2u);
  EXPECT_DOUBLE_EQ(t.records()[1].gpu[0].start, 5000e-9);
  EXPECT_DOUBLE_EQ(t.records()[1].gpu[0].seconds, 300e-9);
  // The op type's GPU time: 500 ns of which the GEMMs' 400 on tensor cores.
  const GpuTime& time = t.gpu_by_type().at("linear");
  EXPECT_EQ(time.launches, 3);
  EXPECT_EQ(time.total_ns, 500u);
  EXPECT_EQ(time.matrix_ns, 400u);
  EXPECT_EQ(time.tensor_core_ns, 400u);
  EXPECT_EQ(time.cuda_core_ns, 0u);
}

TEST(OpTraceGpu, InsertedCastsHaveTheirOwnRowAndNoInstance) {
  OpTrace t = gpu_trace();
  Classes classes;
  Call cast{1, 1, Op::cast, Phase::forward, "fc1", DType::f32, {{60, 64}}, true};
  run(t, classes, cast, {kOwnMap});
  EXPECT_TRUE(t.instances().empty());
  EXPECT_EQ(t.gpu_by_type().at(kInsertedCastRow).launches, 1);
}

TEST(OpTraceGpu, KernelsOfACallNotEndedWaitForItsEnd) {
  OpTrace t = gpu_trace();
  Classes classes;
  const Call fc{7, 1, Op::linear, Phase::forward, "fc", DType::f16, {{8, 8}, {8, 8}}};
  const OpActivity a = activity(fc, {kHss});
  t.add_gpu(a, classes.of(a), 0.0);  // a per-op flush inside the op, before its end
  t.on_op_end(event(fc));
  ASSERT_EQ(t.instances().size(), 1u);
  EXPECT_EQ(t.instances()[0].gpu_kernels.size(), 1u);
  EXPECT_EQ(t.kernels_lost(), 0u);
}

TEST(OpTraceGpu, KernelsOfACallLongLetGoAreCountedLost) {
  OpTrace t = gpu_trace();
  Classes classes;
  const Call old{1, 1, Op::relu, Phase::forward, "a", DType::f16, {{4}}};
  t.on_op_end(event(old));
  for (std::int64_t step = 2; step <= 9; ++step)
    t.on_op_end(event(Call{static_cast<std::uint64_t>(step), step, Op::relu, Phase::forward, "a", DType::f16, {{4}}}));
  const OpActivity a = activity(old, {kOwnMap, kOwnMap});
  t.add_gpu(a, classes.of(a), 0.0);
  EXPECT_EQ(t.kernels_lost(), 2u);
  EXPECT_TRUE(t.instances()[0].gpu_kernels.empty());
}

TEST(KernelCheck, AnFp16GemmOnTensorCoresIsAsThePolicySaid) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::forward, "fc1", DType::f16, {{64, 64}, {32, 64}, {32}}}, {kHss, kOwnMap});
  const KernelCheck check = check_kernels(t);
  EXPECT_TRUE(check.findings.empty()) << check.findings.front().text();
  EXPECT_EQ(check.instances_checked, 1);
  EXPECT_EQ(check.warnings(), 0);
}

TEST(KernelCheck, ACudaCoreConvolutionOf3InputChannelsIsAWarningNamingThem) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::conv2d, Phase::forward, "stem.conv", DType::f16, {{32, 3, 16, 16}, {8, 3, 3, 3}}},
      {kSgemmConv});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "stem.conv/conv2d#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->problem, KernelProblem::cuda_cores);
  EXPECT_EQ(f->severity, Severity::warning);
  EXPECT_EQ(f->expected, DType::f16);
  EXPECT_EQ(f->kernel, kSgemmConv);
  EXPECT_NE(f->reason.find("C_in=3"), std::string::npos) << f->reason;
  EXPECT_EQ(f->reason.find("C_out=8"), std::string::npos) << f->reason;  // 8 is aligned
  const std::string text = f->text();
  EXPECT_NE(text.find("float16"), std::string::npos) << text;
  EXPECT_NE(text.find("implicit_convolve_sgemm"), std::string::npos) << text;
  EXPECT_EQ(text.find("(int, int"), std::string::npos) << "the parameter list is left out: " << text;
}

TEST(KernelCheck, ATf32WeightGradientOfAnFp16ConvolutionIsAWarning) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::conv2d, Phase::backward, "stem.conv", DType::f16, {{32, 3, 16, 16}, {8, 3, 3, 3}}},
      {kTf32Wgrad});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "stem.conv/conv2d_grad#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->problem, KernelProblem::tf32_kernel);
  EXPECT_NE(f->reason.find("TF32"), std::string::npos);
  EXPECT_NE(f->reason.find("C_in=3"), std::string::npos);
}

TEST(KernelCheck, AWiderKernelUnderAnFp16PolicyIsAWarning) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::matmul, Phase::forward, "attn", DType::f16, {{64, 64}, {64, 64}}}, {kVoltaSgemm});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "attn/matmul#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->problem, KernelProblem::wider_kernel);
  EXPECT_EQ(f->severity, Severity::warning);
}

TEST(KernelCheck, ALowPrecisionKernelUnderAnFp32PolicyIsAWarning) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::forward, "head", DType::f32, {{64, 64}, {32, 64}}}, {kHss});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "head/linear#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->problem, KernelProblem::narrower_kernel);
  EXPECT_EQ(f->expected, DType::f32);
}

TEST(KernelCheck, TheOtherLowPrecisionIsAWarning) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::forward, "fc", DType::f16, {{64, 64}, {32, 64}}}, {kTst});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "fc/linear#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->problem, KernelProblem::other_low_precision);
}

TEST(KernelCheck, ADepthwiseConvolutionInF32OnCudaCoresIsANoteNotAWarning) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::conv2d, Phase::forward, "dw", DType::f16, {{8, 64, 8, 8}, {64, 1, 3, 3}}}, {kDepthwise});
  const KernelCheck check = check_kernels(t);
  const KernelFinding* f = finding_of(check, "dw/conv2d#0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::note);
  EXPECT_NE(f->reason.find("depthwise"), std::string::npos);
  EXPECT_EQ(check.warnings(), 0);
}

TEST(KernelCheck, AGemvIsNotExpectedOnTensorCores) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::backward, "fc", DType::f16, {{60, 64}, {3, 64}, {3}}}, {kGemv});
  EXPECT_TRUE(check_kernels(t).findings.empty());
}

TEST(KernelCheck, AKernelWhoseNameDoesNotSayIsCountedUnreadNotGuessed) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::forward, "fc", DType::f16, {{64, 64}, {32, 64}}},
      {"sm80_xmma_gemm_somethingnew_kernel"});
  const KernelCheck check = check_kernels(t);
  EXPECT_TRUE(check.findings.empty());
  EXPECT_EQ(check.kernels_unread, 1);
}

TEST(KernelCheck, AnInstanceCalledInSeveralDtypesIsNotJudged) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::forward, "fc", DType::f16, {{64, 64}, {32, 64}}}, {kVoltaSgemm});
  run(t, classes, {2, 2, Op::linear, Phase::forward, "fc", DType::f32, {{64, 64}, {32, 64}}}, {kVoltaSgemm});
  EXPECT_TRUE(check_kernels(t).findings.empty());
}

TEST(KernelCheck, WarningsComeBeforeNotes) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::conv2d, Phase::forward, "dw", DType::f16, {{8, 64, 8, 8}, {64, 1, 3, 3}}}, {kDepthwise});
  run(t, classes, {2, 1, Op::matmul, Phase::forward, "attn", DType::f16, {{64, 64}, {64, 64}}}, {kVoltaSgemm});
  const KernelCheck check = check_kernels(t);
  ASSERT_EQ(check.findings.size(), 2u);
  EXPECT_EQ(check.findings[0].severity, Severity::warning);
  EXPECT_EQ(check.findings[1].severity, Severity::note);
}

// The check on its neutral input, as a profile builds it (inspector/profile_check.h).
CheckedInstance checked(Op op, DType expected, std::vector<Shape> shapes, const std::string& kernel_name) {
  CheckedInstance c;
  c.name = "m/" + std::string(op_name(op)) + "#0";
  c.type = std::string(op_name(op));
  c.op = op;
  c.expected = expected;
  c.reason = amp::Reason::white;
  c.intended = true;
  c.shapes = std::move(shapes);
  c.kernels.push_back({kernel_name, classify_kernel_name(kernel_name), 1, 100});
  return c;
}

TEST(KernelCheck, AMatrixVectorProductOnCudaCoresIsANoteNotAWarning) {
  // M = 1: one row; the f16 CUDA-core GEMM is what such a product should run.
  const std::string kHgemm = "maxwell_hgemm_128x64_nn";  // [cuBLAS] f16 accumulator, no MMA shape
  const KernelCheck check = check_kernels(std::vector<CheckedInstance>{
      checked(Op::matmul, DType::f16, {{1, 64}, {64, 64}}, kHgemm), checked(Op::matmul, DType::f16, {{64, 64}, {64, 64}}, kHgemm)});
  ASSERT_EQ(check.findings.size(), 2u);
  EXPECT_EQ(check.findings[0].severity, Severity::warning);  // M = 64: a warning
  EXPECT_EQ(check.findings[1].severity, Severity::note);
  EXPECT_NE(check.findings[1].reason.find("matrix-vector"), std::string::npos) << check.findings[1].reason;
}

TEST(KernelCheck, RecordedFloatInputsAreTheReasonOfAWiderKernel) {
  CheckedInstance c = checked(Op::bmm, DType::bf16, {{1, 32, 1}, {1, 1, 559}}, kVoltaSgemm);
  c.recorded_inputs = DType::f32;
  c.recorded_types = "float, float";
  const KernelCheck check = check_kernels(std::vector<CheckedInstance>{c});
  ASSERT_EQ(check.findings.size(), 1u);
  const KernelFinding& f = check.findings[0];
  EXPECT_EQ(f.problem, KernelProblem::wider_kernel);
  EXPECT_NE(f.reason.find("Input type: float, float"), std::string::npos) << f.reason;
  EXPECT_NE(f.text().find("the policy puts it in bfloat16"), std::string::npos) << f.text();
  EXPECT_EQ(f.type, "bmm");
  EXPECT_EQ(f.total_ns, 100u);
}

TEST(KernelCheck, TheEnginesInstancesReachTheCheckAsTheyWere) {
  OpTrace t = gpu_trace();
  Classes classes;
  run(t, classes, {1, 1, Op::linear, Phase::backward, "fc1", DType::f16, {{64, 64}, {32, 64}, {32}}}, {kHss});
  const std::vector<CheckedInstance> c = checked_instances(t.instances());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].name, t.instances()[0].name());
  EXPECT_EQ(c[0].type, "linear_grad");
  EXPECT_EQ(c[0].expected, DType::f16);
  EXPECT_FALSE(c[0].intended);
  EXPECT_FALSE(c[0].recorded_inputs.has_value());
  ASSERT_EQ(c[0].kernels.size(), 1u);
  EXPECT_EQ(c[0].kernels[0].name, kHss);
  EXPECT_EQ(c[0].kernels[0].launches, 1);
}

TEST(MatrixShape, ReadsTheProductsOfEachOp) {
  MatrixShape m = matrix_shape(Op::linear, {{4, 15, 64}, {3, 64}, {3}});
  EXPECT_EQ(m.dims, "M=60 N=3 K=64");
  EXPECT_EQ(m.unaligned, (std::vector<std::string>{"N=3", "M=60"}));
  EXPECT_DOUBLE_EQ(m.work, 60.0 * 3 * 64);
  m = matrix_shape(Op::matmul, {{2, 16, 13}, {2, 13, 24}});
  EXPECT_EQ(m.dims, "M=16 N=24 K=13");
  EXPECT_EQ(m.unaligned, std::vector<std::string>{"K=13"});
  EXPECT_DOUBLE_EQ(m.work, 2.0 * 16 * 24 * 13);
  m = matrix_shape(Op::matmul, {{16}, {16, 8}});  // a vector times a matrix: M = 1, not unaligned
  EXPECT_EQ(m.dims, "M=1 N=8 K=16");
  EXPECT_TRUE(m.unaligned.empty());
  m = matrix_shape(Op::conv2d, {{32, 3, 16, 16}, {8, 3, 3, 3}});
  EXPECT_EQ(m.dims, "C_in=3 C_out=8");
  EXPECT_EQ(m.unaligned, std::vector<std::string>{"C_in=3"});
  EXPECT_FALSE(m.depthwise);
  m = matrix_shape(Op::conv2d, {{32, 64, 8, 8}, {64, 1, 3, 3}});
  EXPECT_TRUE(m.depthwise);
  EXPECT_TRUE(m.unaligned.empty());
  EXPECT_TRUE(matrix_shape(Op::relu, {{4}}).dims.empty());
  EXPECT_TRUE(matrix_shape(Op::linear, {{4}}).dims.empty());  // malformed: nothing read
}

// The correlator keeps an op that flushes happen inside until it ends, and the
// observers' own work is theirs.
TEST(KernelCorrelatorEnds, AnOpFlushedInsideStaysLiveUntilItEnds) {
  KernelCorrelatorOptions o;  // late_flushes 2
  o.ends_told = true;
  KernelCorrelator c(o);
  OpInstance parent;
  parent.sequence = 10;
  parent.op = Op::linear;
  const std::uint64_t id = c.begin_op(parent);
  for (std::int64_t i = 0; i < 5; ++i) (void)c.flush(1);  // five casts' per-op flushes
  ActivityBatch b;
  KernelRecord k;
  k.name = kHss;
  k.correlation = 77;
  b.kernels.push_back(k);
  b.correlations.push_back({id, 77});
  c.add(b);
  c.end_op(id);
  const KernelFlush f = c.flush(1);
  ASSERT_EQ(f.ops.size(), 1u);
  EXPECT_EQ(f.ops[0].op.sequence, 10u);
  EXPECT_EQ(c.stats().unknown_op, 0u);
  for (int i = 0; i < 3; ++i) (void)c.flush(2);
  EXPECT_EQ(c.live_instances(), 0u);  // ended, then let go after its late window
}

TEST(KernelCorrelatorEnds, TheObserversOwnWorkIsKeptApart) {
  KernelCorrelator c;
  const std::uint64_t id = c.begin_op(OpInstance{});
  ActivityBatch b;
  KernelRecord mine, theirs;
  mine.name = kOwnMap;
  mine.correlation = 1;
  theirs.name = "void ampcheck::kernels::cuda::(anonymous namespace)::stats_blocks(void const*)";
  theirs.correlation = 2;
  b.kernels = {mine, theirs};
  b.correlations = {{id, 1}, {kObserversExternal, 2}};
  c.add(b);
  const KernelFlush f = c.flush(1);
  ASSERT_EQ(f.ops.size(), 1u);
  EXPECT_EQ(f.ops[0].kernels.size(), 1u);
  ASSERT_EQ(f.observers.kernels.size(), 1u);
  EXPECT_EQ(f.observers.kernels[0].name, theirs.name);
  EXPECT_TRUE(f.unattributed.empty());
  EXPECT_EQ(c.stats().observers, 1u);
  EXPECT_EQ(c.stats().attributed, 1u);
}

// The Chrome trace's GPU track: each kernel where CUPTI timed it, on its own track, with
// the op that launched it and how its name reads.
TEST(OpTraceGpu, KernelsAreSpansOnTheGpuTrackUnderTheirOp) {
  OpTrace t = gpu_trace();
  Classes classes;
  OpEvent e = event({1, 3, Op::linear, Phase::forward, "fc1", DType::f16, {{64, 64}, {32, 64}}});
  e.start = 10.0;  // the op began at 10 s on the steady clock; its GEMM 2 us later
  e.seconds = 5e-6;
  t.on_op_end(e);
  OpActivity a = activity({1, 3, Op::linear, Phase::forward, "fc1", DType::f16, {{64, 64}, {32, 64}}}, {kHss}, 2000, 1500);
  t.add_gpu(a, classes.of(a), 10.0);
  const std::vector<reports::TraceSpan> spans = trace_spans(t);
  const reports::TraceSpan* gpu = nullptr;
  for (const reports::TraceSpan& s : spans)
    if (s.track == 1) gpu = &s;
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->name, kHss);
  EXPECT_EQ(gpu->category, "kernel");
  EXPECT_NEAR(gpu->start_us, 2.0, 1e-6);
  EXPECT_NEAR(gpu->duration_us, 1.5, 1e-9);
  auto arg = [&](const std::string& key) {
    for (const auto& [k, v] : gpu->args)
      if (k == key) return v;
    return std::string("(absent)");
  };
  EXPECT_EQ(arg("op"), "linear");
  EXPECT_EQ(arg("module"), "fc1");
  EXPECT_EQ(arg("step"), "3");
  EXPECT_EQ(arg("input"), "f16");
  EXPECT_EQ(arg("tensor cores"), "yes");
  EXPECT_EQ(arg("grid"), "4x1x1");
}

}  // namespace
}  // namespace ampcheck::inspector
