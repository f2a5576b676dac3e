// The kernel check on profiles (inspector/profile_check.h), on traces written here: each
// fallback's reason from the trace itself (the inputs' recorded type, shapes not
// multiples of 8, a GEMV, cuDNN's FFT path, TF32), what it cost at the tensor-core rate
// the same trace measured (hand-computed below from the shapes and durations written),
// the expectation `auto` picks, Nsight Compute's counters as ground truth, the ranks'
// differences, and byte-identical JSON for the same input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inspector/profile_check.h"
#include "profile_fixtures.h"
#include "profiles/read.h"
#include "reports/json.h"

namespace ampcheck::inspector {
namespace {

using namespace ampcheck::testing;

profiles::Profile read_trace(const std::vector<ordered_json>& events, const std::string& name = "trace.json",
                             ordered_json top = ordered_json::object()) {
  const fs::path p = scratch_dir() / name;
  write_text(p, trace_text(events, std::move(top)));
  return profiles::read_profile(p.string());
}

reports::ProfileRank check(const profiles::Profile& p, const std::string& expect) {
  ProfileCheckOptions o;
  o.expect = parse_expectation(expect);
  return check_profile(p, o);
}

// One op call on thread 1 with one kernel: the op at `ts`, its launch 2 us in, the kernel 5 us in.
std::vector<ordered_json> call(const std::string& op, double ts, long id, ordered_json dims, ordered_json types,
                               const std::string& kernel_name, double kernel_us) {
  return {cpu_op(op, 1, ts, 100, id, std::move(dims), std::move(types)), runtime("cudaLaunchKernel", 1, ts + 2, id, id),
          kernel(kernel_name, ts + 5, kernel_us, id, id)};
}

std::vector<ordered_json> concat(std::vector<std::vector<ordered_json>> parts) {
  std::vector<ordered_json> out;
  for (auto& p : parts)
    for (auto& e : p) out.push_back(std::move(e));
  return out;
}

const reports::KernelFinding* finding_on(const reports::ProfileRank& r, const std::string& op) {
  for (const reports::KernelFinding& f : r.check.findings)
    if (f.op.find(op) != std::string::npos) return &f;
  return nullptr;
}

TEST(ProfileCheck, AnFp32BmmUnderBf16AutocastIsAFallbackNamingItsInputType) {
  // The Qwen trace's rotary embedding: a bmm of float inputs (autocast disabled around it).
  const auto p = read_trace(concat({call("aten::bmm", 0, 1, {{1, 32, 1}, {1, 1, 559}}, {"float", "float"}, kF32SimtGemm, 3.5),
                                    call("aten::mm", 200, 2, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"},
                                         kBf16Gemm, 4)}));
  const reports::ProfileRank r = check(p, "autocast-bf16");
  const reports::KernelFinding* f = finding_on(r, "aten::bmm");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "warning");
  EXPECT_EQ(f->problem, "wider_kernel");
  EXPECT_EQ(f->expected, "bfloat16");
  EXPECT_EQ(f->input, "f32");
  EXPECT_NE(f->reason.find("Input type: float, float"), std::string::npos) << f->reason;
  EXPECT_NE(f->reason.find("outside autocast"), std::string::npos) << f->reason;
  EXPECT_NE(f->reason.find("K=1"), std::string::npos) << f->reason;
  EXPECT_NE(f->text.find("the policy puts it in bfloat16"), std::string::npos) << f->text;
  EXPECT_EQ(finding_on(r, "aten::mm"), nullptr);
  EXPECT_EQ(r.verdict, "fallbacks");
}

TEST(ProfileCheck, ALowPrecisionGemvIsShownAsWhatItIsNotAsAFallback) {
  const auto p = read_trace(call("aten::mm", 0, 1, {{1, 4096}, {4096, 4096}}, {"c10::BFloat16", "c10::BFloat16"}, kBf16Gemv, 9));
  const reports::ProfileRank r = check(p, "autocast-bf16");
  EXPECT_EQ(r.check.warnings(), 0);
  ASSERT_EQ(r.shares.size(), 1u);
  EXPECT_EQ(r.shares[0].precision, "bf16");
  EXPECT_EQ(r.shares[0].tensor_cores, "no");
  EXPECT_EQ(r.verdict, "amp_on");
}

TEST(ProfileCheck, Tf32WhereFp16WasExpectedAndCudnnsFftPathAreNamed) {
  const std::string fft = "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int)";
  const std::string gc = "ampere_gcgemm_64x64_nt";
  const auto p = read_trace(concat(
      {call("aten::cudnn_convolution", 0, 1, {{8, 64, 32, 32}, {64, 64, 3, 3}}, {"c10::Half", "c10::Half"}, kTf32Conv, 20),
       {cpu_op("aten::cudnn_convolution", 1, 300, 100, 2, {{8, 64, 32, 32}, {64, 64, 5, 5}}, {"c10::Half", "c10::Half"}),
        runtime("cudaLaunchKernel", 1, 302, 2, 2), runtime("cudaLaunchKernel", 1, 303, 3, 2), kernel(fft, 305, 5, 2),
        kernel(gc, 311, 30, 3)}}));
  const reports::ProfileRank r = check(p, "autocast-fp16");
  ASSERT_GE(r.check.findings.size(), 2u);
  EXPECT_EQ(r.check.findings[0].problem, "tf32_kernel");
  EXPECT_NE(r.check.findings[0].reason.find("TF32"), std::string::npos);
  const reports::KernelFinding& f = r.check.findings[1];
  EXPECT_EQ(f.kernel, gc);
  EXPECT_NE(f.reason.find("FFT"), std::string::npos) << f.reason;
}

TEST(ProfileCheck, AFallbacksCostIsItsFlopsAtTheTensorCoreRateTheTraceMeasured) {
  // A bf16 mm of 1024^3 multiply-adds took 10 us on tensor cores: 2 * 1024^3 FLOP / 10,000
  // ns. The f32 mm of 512 x 1024 x 1024 (half the FLOPs) took 40 us; at that rate it
  // would take 5,000 ns.
  const auto p = read_trace(
      concat({call("aten::mm", 0, 1, {{1024, 1024}, {1024, 1024}}, {"c10::BFloat16", "c10::BFloat16"}, kBf16Gemm, 10),
              call("aten::mm", 200, 2, {{512, 1024}, {1024, 1024}}, {"float", "float"}, kF32SimtGemm, 40)}));
  const reports::ProfileRank r = check(p, "autocast-bf16");
  ASSERT_EQ(r.fallbacks.size(), 1u);
  const reports::FallbackCost& c = r.fallbacks[0];
  EXPECT_EQ(c.op, "aten::mm#1");
  EXPECT_EQ(c.gpu_ns, 40000);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 512 * 1024 * 1024);
  EXPECT_EQ(c.at_rate_ns, 5000);
  EXPECT_EQ(r.fallback_ns, 40000);
  EXPECT_EQ(r.fallback_at_rate_ns, 5000);
  EXPECT_EQ(r.cost_text, "AMP fallbacks: 40.0 us of 50.0 us GPU time; at this profile's bf16 tensor-core rate ~5.0 us");
  EXPECT_NE(c.rate.find("214.7 TFLOP/s"), std::string::npos) << c.rate;
}

TEST(ProfileCheck, AutoChecksAgainstTheDtypeTheMatrixWorkMostlyTookOrSaysAmpIsOff) {
  const auto mixed = read_trace(
      concat({call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"}, kBf16Gemm, 30),
              call("aten::mm", 200, 2, {{64, 64}, {64, 64}}, {"c10::Half", "c10::Half"}, kF16Gemm, 10)}));
  const reports::ProfileRank r = check(mixed, "auto");
  EXPECT_EQ(r.expect, "autocast-bf16");
  EXPECT_NE(r.expect_note.find("75%"), std::string::npos) << r.expect_note;
  ASSERT_NE(finding_on(r, "aten::mm#1"), nullptr);
  EXPECT_EQ(finding_on(r, "aten::mm#1")->problem, "other_low_precision");

  const auto fp32 = read_trace(call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"float", "float"}, kF32SimtGemm, 30), "f32.json");
  const reports::ProfileRank off = check(fp32, "auto");
  EXPECT_EQ(off.expect, "none");
  EXPECT_EQ(off.verdict, "amp_off");
  EXPECT_EQ(off.check.warnings(), 0);
  EXPECT_NE(off.verdict_text.find("AMP is NOT on"), std::string::npos) << off.verdict_text;
  const reports::ProfileRank meant = check(fp32, "fp32");
  EXPECT_EQ(meant.verdict, "fp32");
}

TEST(ProfileCheck, Tf32UnderAnFp32ExpectationIsNarrower) {
  const auto p = read_trace(call("aten::cudnn_convolution", 0, 1, {{8, 64, 32, 32}, {64, 64, 3, 3}}, {"float", "float"},
                                 kTf32Conv, 20));
  const reports::ProfileRank r = check(p, "fp32");
  ASSERT_EQ(r.check.findings.size(), 1u);
  EXPECT_EQ(r.check.findings[0].problem, "narrower_kernel");
  EXPECT_EQ(r.verdict, "not_fp32");
}

TEST(ProfileCheck, AnFp32ExpectationOnATf32RunSaysNotFp32NamingTheTf32KernelsAndTheirShare) {
  // 30 us of TF32 convolution, 10 us of a CUDA-core float32 GEMM: 75% of the matrix work
  // took TF32 (10 mantissa bits), whatever the op's recorded types.
  const auto p = read_trace(concat(
      {call("aten::cudnn_convolution", 0, 1, {{8, 64, 32, 32}, {64, 64, 3, 3}}, {"float", "float"}, kTf32Conv, 30),
       call("aten::mm", 300, 2, {{64, 64}, {64, 64}}, {"float", "float"}, kF32SimtGemm, 10)}));
  const reports::ProfileRank r = check(p, "fp32");
  EXPECT_EQ(r.verdict, "not_fp32");
  EXPECT_NE(r.verdict_text.find("tf32 75%"), std::string::npos) << r.verdict_text;
  EXPECT_NE(r.verdict_text.find(kernel_label(kTf32Conv)), std::string::npos) << r.verdict_text;
  // Without input types the verdict is the same: it rests on the kernels alone.
  const auto bare = read_trace(concat({call("aten::cudnn_convolution", 0, 1, nullptr, nullptr, kTf32Conv, 30),
                                       call("aten::mm", 300, 2, nullptr, nullptr, kF32SimtGemm, 10)}),
                               "bare.json");
  EXPECT_EQ(check(bare, "fp32").verdict, "not_fp32");
}

TEST(ProfileCheck, WithoutRecordedInputTypesNoFallbackIsClaimed) {
  // A profile recorded without record_shapes, float32 throughout (CUDA-core f32 GEMMs and a
  // TF32 convolution), checked against autocast-fp16 as asked: what each kernel took is
  // listed, but no finding says the library took float16 tensors, none is a warning, and
  // the verdict says the input types were not recorded.
  std::vector<std::vector<ordered_json>> calls;
  for (int i = 0; i < 4; ++i) calls.push_back(call("aten::mm", 200.0 * i, i + 1, nullptr, nullptr, kF32SimtGemm, 10));
  calls.push_back(call("aten::cudnn_convolution", 1000, 9, nullptr, nullptr, kTf32Conv, 10));
  const reports::ProfileRank r = check(read_trace(concat(std::move(calls))), "autocast-fp16");
  EXPECT_EQ(r.check.warnings(), 0);
  ASSERT_EQ(r.check.findings.size(), 5u);
  for (const reports::KernelFinding& f : r.check.findings) {
    EXPECT_EQ(f.severity, "note") << f.text;
    EXPECT_EQ(f.text.find("took the float16 tensors"), std::string::npos) << f.text;
    EXPECT_EQ(f.text.find("converted the float16 data"), std::string::npos) << f.text;
    EXPECT_NE(f.reason.find("input types were not recorded"), std::string::npos) << f.reason;
  }
  EXPECT_EQ(r.verdict, "amp_off");
  // The same trace with the types recorded (float16 tensors, a float32 kernel): a fallback.
  const auto typed = read_trace(
      call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"c10::Half", "c10::Half"}, kF32SimtGemm, 10), "typed.json");
  const reports::ProfileRank t = check(typed, "autocast-fp16");
  ASSERT_EQ(t.check.findings.size(), 1u);
  EXPECT_EQ(t.check.findings[0].severity, "warning");
  EXPECT_NE(t.check.findings[0].reason.find("took the float16 tensors"), std::string::npos) << t.check.findings[0].reason;
}

TEST(ProfileCheck, AMixOfLowPrecisionAndUnrecordedOpsSaysWhatIsNotJudged) {
  const auto p = read_trace(concat({call("aten::mm", 0, 1, nullptr, nullptr, kF16Gemm, 30),
                                    call("aten::mm", 300, 2, nullptr, nullptr, kF32SimtGemm, 10)}));
  const reports::ProfileRank r = check(p, "autocast-fp16");
  EXPECT_EQ(r.verdict, "amp_on") << r.verdict_text;
  EXPECT_NE(r.verdict_text.find("1 finding(s) on ops whose input types were not recorded"), std::string::npos)
      << r.verdict_text;
  EXPECT_EQ(r.verdict_text.find("tensor cores; no fallback"), std::string::npos) << r.verdict_text;
}

TEST(ProfileCheck, ABackwardInstanceIsLabelledOnce) {
  // Kineto's autograd thread: an op inside a backward node is read as backward; its
  // instance name carries the phase, and the finding's line does not repeat it.
  const auto p = read_trace(
      {cpu_op("autograd::engine::evaluate_function: MmBackward0", 2, 0, 200, 1),
       cpu_op("aten::mm", 2, 10, 100, 2, {{64, 64}, {64, 64}}, {"float", "float"}),
       runtime("cudaLaunchKernel", 2, 12, 2, 2), kernel(kF32SimtGemm, 15, 10, 2, 2)});
  const reports::ProfileRank r = check(p, "autocast-fp16");
  ASSERT_EQ(r.check.findings.size(), 1u);
  EXPECT_EQ(r.check.findings[0].phase, "backward");
  EXPECT_EQ(r.check.findings[0].text.find("(backward) (backward)"), std::string::npos) << r.check.findings[0].text;
  EXPECT_NE(r.check.findings[0].text.find("(backward)"), std::string::npos) << r.check.findings[0].text;
}

TEST(ProfileCheck, AKernelWhoseNameHasNoTypeTakesItsLaunchersRecordedInputType) {
  // Inductor launches each Triton kernel inside a record of its own name whose inputs are
  // the kernel's tensor arguments: float16 there, so the template GEMM multiplied float16
  // operands (tensor cores: the name does not say). Float32 arguments say nothing (tl.dot
  // may take them as TF32), and neither do mixed ones.
  const std::string tem = "triton_tem_fused_mm_0";
  const auto p = read_trace(concat(
      {call(tem, 0, 1, {{64, 64}, {64, 64}, {64, 64}}, {"c10::Half", "c10::Half", "c10::Half"}, tem, 20),
       call("triton_tem_fused_mm_1", 300, 2, {{64, 64}, {64, 64}, {64, 64}}, {"float", "float", "float"},
            "triton_tem_fused_mm_1", 10)}));
  const reports::ProfileRank r = check(p, "autocast-fp16");
  std::int64_t f16 = 0, unknown = 0;
  for (const reports::PrecisionShare& s : r.shares) {
    if (s.precision == "f16") {
      f16 += s.ns;
      EXPECT_EQ(s.tensor_cores, "unknown");
    }
    if (s.precision == "unknown") unknown += s.ns;
  }
  EXPECT_EQ(f16, 20000);
  EXPECT_EQ(unknown, 10000);
}

TEST(ProfileCheck, NsightComputeCountersDecideTensorCoresAndDisagreementsAreListed) {
  const std::string wmma = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>("
                           "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)";
  auto timeline = read_trace(concat({call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"}, wmma, 10),
                                     call("aten::add", 200, 2, {{64}, {64}}, {"c10::BFloat16", "c10::BFloat16"}, kAdd, 1)}));
  // Counters that contradict the name (made up for the test: the name says tensor cores).
  const fs::path csv = scratch_dir() / "ncu.csv";
  write_text(csv,
             "\"ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
             "\"0\",\"void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)\","
             "\"m\",\"sm__ops_path_tensor_src_bf16_dst_fp32.sum\",\"\",\"0\"\n"
             "\"1\",\"void vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>, array<char *, 3>>(int, T2, T3)\","
             "\"m\",\"sm__ops_path_tensor_src_bf16_dst_fp32.sum\",\"\",\"0\"\n");
  const profiles::Profile ncu = profiles::read_profile(csv.string());
  EXPECT_EQ(join_counters(timeline, ncu), 2u);
  const reports::ProfileRank r = check(timeline, "autocast-bf16");
  ASSERT_EQ(r.counters.size(), 2u);
  EXPECT_EQ(r.counter_disagreements, 1);
  const reports::CounterCheck& c = r.counters[0];
  EXPECT_EQ(c.name_tensor_cores, "yes");
  EXPECT_EQ(c.counters_tensor_cores, "no");
  EXPECT_FALSE(c.agrees);
  EXPECT_TRUE(r.counters[1].agrees);
  // The counters are the ground truth: the mm ran on CUDA cores, a fallback.
  ASSERT_NE(finding_on(r, "aten::mm"), nullptr);
  EXPECT_EQ(finding_on(r, "aten::mm")->problem, "cuda_cores");
}

TEST(ProfileCheck, RanksThatRanAnOpDifferentlyAreListed) {
  std::vector<profiles::Profile> ranks;
  ranks.push_back(read_trace(call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"}, kBf16Gemm, 10),
                             "r0.json", {{"distributedInfo", {{"rank", 0}}}}));
  ranks.push_back(read_trace(call("aten::mm", 0, 1, {{64, 64}, {64, 64}}, {"float", "float"}, kF32SimtGemm, 40), "r1.json",
                             {{"distributedInfo", {{"rank", 1}}}}));
  ProfileCheckOptions o;
  o.expect = parse_expectation("autocast-bf16");
  const reports::KernelsReport r = check_profiles(ranks, o, "ranks/");
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].verdict, "amp_on");
  EXPECT_EQ(r.ranks[1].verdict, "amp_off");  // none of its matrix work in bf16
  EXPECT_EQ(r.verdict, "amp_off");           // the worst rank speaks for the run
  const reports::RankDifference* mm = nullptr;
  for (const auto& d : r.differences)
    if (d.what == "aten::mm") mm = &d;
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->per_rank, (std::vector<std::string>{"bf16 on tensor cores", "f32 on CUDA cores"}));
  bool time = false;
  for (const auto& d : r.differences) time = time || d.what.find("GPU kernel time") != std::string::npos;
  EXPECT_TRUE(time);
}

TEST(ProfileCheck, TheSameProfileGivesByteIdenticalJson) {
  const auto events = concat({call("aten::bmm", 0, 1, {{1, 32, 1}, {1, 1, 559}}, {"float", "float"}, kF32SimtGemm, 3.5),
                              call("aten::mm", 200, 2, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"}, kBf16Gemm, 4)});
  std::vector<profiles::Profile> a, b;
  a.push_back(read_trace(events, "a.json"));
  b.push_back(read_trace(events, "a.json"));
  ProfileCheckOptions o;
  EXPECT_EQ(reports::to_json(check_profiles(a, o, "t")), reports::to_json(check_profiles(b, o, "t")));
  // And what is written reads back to the same text.
  const std::string text = reports::to_json(check_profiles(a, o, "t"));
  EXPECT_EQ(reports::to_json(reports::kernels_from_json(text, "t.json")), text);
}

TEST(ProfileCheck, FrameworkOpsAreReadAsTheOpsOfAmpchecksLists) {
  EXPECT_EQ(framework_op("aten::addmm"), Op::linear);
  EXPECT_EQ(framework_op("aten::cudnn_convolution"), Op::conv2d);
  EXPECT_EQ(framework_op("aten::_scaled_dot_product_flash_attention"), Op::bmm);
  EXPECT_EQ(framework_op("aten::relu_"), Op::relu);
  EXPECT_EQ(framework_op("aten::native_layer_norm"), Op::layer_norm);
  EXPECT_EQ(framework_op("matmul_v2_grad"), Op::matmul);
  EXPECT_EQ(framework_op("elementwise_add"), Op::add);
  EXPECT_EQ(framework_op("aten::copy_"), std::nullopt);
  EXPECT_EQ(framework_op("vllm::moe_forward"), std::nullopt);
  EXPECT_EQ(recorded_dtype("c10::BFloat16"), DType::bf16);
  EXPECT_EQ(recorded_dtype("float16"), DType::f16);
  EXPECT_EQ(recorded_dtype("Scalar"), std::nullopt);
  EXPECT_THROW(parse_expectation("autocast-fp8"), std::invalid_argument);
  EXPECT_EQ(parse_expectation("paddle-O2").level, amp::Level::O2);
}

}  // namespace
}  // namespace ampcheck::inspector
