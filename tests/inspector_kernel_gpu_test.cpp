// CUPTI on a GPU, on real training, through the inspector (inspector/kernel_watch.h):
//   - a step of each sample whose ops launch library GEMMs and convolutions, at O2 in
//     float16 and bfloat16: every op kernel lands on its op instance, and every library
//     GEMM or convolution of an op the policy ran in fp16/bf16 either multiplied in that
//     dtype on tensor cores or is a finding of the kernel check (inspector/kernel_check.h)
//     that names it. With AMPCHECK_KERNEL_NAMES=FILE the kernels seen are also written
//     there, one line each, for tests/data/cuda-kernel-names.tsv;
//   - a planted fp32 fallback: the MLP with linear black-listed (its GEMMs really run in
//     f32), its trace then told the policy said float16: each linear instance is flagged;
//   - a GEMM whose dimensions are not multiples of 8: either cuBLAS still ran it in f16
//     on tensor cores, or the check says so naming the dimension;
//   - GLOG_v=5 on the GPU: expected_kernel_key filled from the kernels that ran.
// Every case skips where no GPU is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "inspector/inspector.h"
#include "inspector/kernel_check.h"
#include "models/runner.h"
#include "samples/builtin_models.h"
#include "tests/gpu_test_util.h"

namespace ampcheck::inspector {
namespace {

InspectorOptions traced(Mode mode = Mode::trace) {
  InspectorOptions o;
  o.mode = mode;
  o.cupti = true;
  return o;
}

models::RunOptions o2(const char* sample, DType dtype) {
  models::RunOptions o;
  o.model = sample;
  o.catalog = samples::builtin_models();
  o.device = Device::cuda;
  o.amp.level = amp::Level::O2;
  o.amp.dtype = dtype;
  return o;
}

bool flagged(const KernelCheck& check, const std::string& instance, const std::string& kernel) {
  for (const KernelFinding& f : check.findings)
    if (f.instance == instance && f.kernel == kernel) return true;
  return false;
}

TEST(CuptiSamplesGpu, LowPrecisionGemmsAndConvolutionsRunOnTensorCoresOrAreFlagged) {
  SKIP_WITHOUT_GPU();
  std::ofstream names;
  if (const char* path = std::getenv("AMPCHECK_KERNEL_NAMES")) names.open(path);
  std::set<std::tuple<std::string, std::string, std::string, std::string>> written;
  for (const char* sample : {"cnn", "mlp", "transformer", "mobilenet"}) {
    for (DType dtype : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(std::string(sample) + " O2 " + std::string(name(dtype)));
      models::Trainer trainer(o2(sample, dtype));
      Inspector insp(traced());
      insp.attach();
      for (int i = 0; i < 3; ++i) (void)trainer.step();
      insp.detach();
      const KernelWatch* w = insp.kernels();
      ASSERT_NE(w, nullptr) << insp.kernels_not_traced();
      EXPECT_EQ(w->error_count(), 0u) << (w->errors().empty() ? "" : w->errors().front());
      EXPECT_EQ(w->stats().dropped, 0u);
      EXPECT_EQ(w->stats().unknown_op, 0u);
      EXPECT_EQ(insp.trace()->kernels_lost(), 0u);
      EXPECT_GT(w->stats().attributed, 0u);
      const KernelCheck check = check_kernels(*insp.trace());
      std::size_t matrix_kernels = 0;
      for (const InstanceStats& s : insp.trace()->instances()) {
        for (const GpuKernelStats& g : s.gpu_kernels) {
          if (names.is_open() && written.emplace(sample, std::string(name(dtype)), s.name(), g.name).second)
            names << sample << '\t' << name(dtype) << '\t' << s.name() << '\t' << g.name << '\t'
                  << precision_name(g.cls.input) << '\t' << precision_name(g.cls.accumulate) << '\t'
                  << tensor_cores_name(g.cls.tensor_cores) << '\t' << kind_name(g.cls.kind) << '\n';
          if (!multiplies_matrices(g.cls.kind) || s.kernel_dtypes.total() != s.kernel_dtypes.fp16 + s.kernel_dtypes.bf16)
            continue;
          ++matrix_kernels;
          const bool as_asked = g.cls.input == (dtype == DType::f16 ? KernelPrecision::f16 : KernelPrecision::bf16) &&
                                g.cls.tensor_cores == TensorCores::yes;
          const bool unread = g.cls.input == KernelPrecision::unknown || g.cls.tensor_cores == TensorCores::unknown;
          EXPECT_TRUE(as_asked || unread || flagged(check, s.name(), g.name))
              << s.name() << ": " << g.name << " (" << g.cls.why << ") is neither as the policy asked nor flagged";
        }
      }
      EXPECT_GT(matrix_kernels, 0u) << "no library GEMM or convolution kernel was seen";
      // The inspector's own statistics are not the ops' (stats and full mode): none of
      // the op kernels is one of the project's numerics kernels.
      for (const InstanceStats& s : insp.trace()->instances())
        for (const GpuKernelStats& g : s.gpu_kernels)
          EXPECT_EQ(g.name.find("stats_blocks"), std::string::npos) << s.name();
      if (names.is_open())
        for (const auto& [kname, o] : w->outside_ops())
          if (written.emplace(sample, std::string(name(dtype)), "(no op)", kname).second)
            names << sample << '\t' << name(dtype) << "\t(no op)\t" << kname << '\n';
    }
  }
}

TEST(KernelCheckGpu, APlantedFp32FallbackIsFlaggedWithItsKernel) {
  SKIP_WITHOUT_GPU();
  models::RunOptions o = o2("mlp", DType::f16);
  o.amp.custom_black_list = {"linear"};  // the linears' GEMMs really run in f32
  models::Trainer trainer(o);
  Inspector insp(traced());
  insp.attach();
  for (int i = 0; i < 2; ++i) (void)trainer.step();
  insp.detach();
  ASSERT_NE(insp.kernels(), nullptr) << insp.kernels_not_traced();
  // As run: the policy said fp32 and the kernels were fp32: nothing to say of them.
  for (const KernelFinding& f : check_kernels(*insp.trace()).findings) EXPECT_NE(f.op, Op::linear) << f.text();
  // The plant: the trace told the linears ran in float16.
  std::vector<InstanceStats> told = insp.trace()->instances();
  int planted = 0;
  for (InstanceStats& s : told) {
    if (s.op != Op::linear) continue;
    ASSERT_GT(s.kernel_dtypes.fp32, 0u) << s.name();
    s.kernel_dtypes = DtypeCalls{};
    s.kernel_dtypes.fp16 = static_cast<std::uint64_t>(s.calls);
    ++planted;
  }
  ASSERT_GT(planted, 0);
  const KernelCheck check = check_kernels(told);
  for (const InstanceStats& s : told) {
    if (s.op != Op::linear) continue;
    bool wider = false;
    for (const KernelFinding& f : check.findings)
      wider = wider || (f.instance == s.name() && f.problem == KernelProblem::wider_kernel &&
                        f.severity == Severity::warning && !f.kernel.empty() && f.text().find("float16") != std::string::npos);
    EXPECT_TRUE(wider) << s.name() << ": its f32 GEMM under a float16 claim was not flagged";
  }
}

TEST(KernelCheckGpu, AGemmOfDimensionsNotAMultipleOf8RunsOnTensorCoresOrIsFlaggedNamingThem) {
  SKIP_WITHOUT_GPU();
  Generator gen(3);
  const Tensor a = Tensor::randn({37, 13}, gen).to(Device::cuda);
  const Tensor b = Tensor::randn({13, 29}, gen).to(Device::cuda);
  amp::AmpOptions ao;
  ao.level = amp::Level::O1;
  const amp::Policy policy(ao);
  Inspector insp(traced());
  insp.attach();
  begin_step(1);
  {
    amp::Autocast on(&policy);
    (void)matmul(a, b).to(Device::cpu);
  }
  end_step();
  insp.detach();
  ASSERT_NE(insp.kernels(), nullptr) << insp.kernels_not_traced();
  const KernelCheck check = check_kernels(*insp.trace());
  int gemms = 0;
  for (const InstanceStats& s : insp.trace()->instances()) {
    if (s.op != Op::matmul) continue;
    for (const GpuKernelStats& g : s.gpu_kernels) {
      if (!multiplies_matrices(g.cls.kind)) continue;
      ++gemms;
      const bool tensor_f16 = g.cls.input == KernelPrecision::f16 && g.cls.tensor_cores == TensorCores::yes;
      std::cout << "[ info ] f16 GEMM 37x13x29 ran " << g.name << " (" << precision_name(g.cls.input) << ", tensor cores "
                << tensor_cores_name(g.cls.tensor_cores) << ")\n";
      if (tensor_f16) continue;
      bool named = false;
      for (const KernelFinding& f : check.findings)
        named = named || (f.kernel == g.name && f.reason.find("K=13") != std::string::npos);
      EXPECT_TRUE(named) << g.name << " is not f16 on tensor cores and no finding names K=13";
    }
  }
  EXPECT_GT(gemms, 0);
}

TEST(GlogGpu, ExpectedKernelKeyComesFromTheKernelsThatRan) {
  SKIP_WITHOUT_GPU();
  models::Trainer trainer(o2("cnn", DType::f16));
  std::ostringstream log;
  InspectorOptions io = traced();
  io.glog_level = 5;
  io.glog = &log;
  io.glog_timestamps = false;
  Inspector insp(io);
  insp.attach();
  (void)trainer.step();
  insp.detach();
  ASSERT_NE(insp.kernels(), nullptr) << insp.kernels_not_traced();
  const std::string text = log.str();
  EXPECT_NE(text.find("linear GPU kernels: "), std::string::npos) << text.substr(0, 4000);
  EXPECT_NE(text.find("conv2d GPU kernels: "), std::string::npos);
  EXPECT_NE(text.find("library_type[CUDNN]"), std::string::npos);
  // Each op's key line is followed by its kernel line; a linear's data_type is its GEMM's.
  const auto at = text.find("linear GPU kernels: ");
  ASSERT_NE(at, std::string::npos);
  const auto key = text.rfind("expected_kernel_key:data_type[", at);
  ASSERT_NE(key, std::string::npos);
  EXPECT_EQ(text.compare(key, 38, "expected_kernel_key:data_type[float16]"), 0) << text.substr(key, 200);
}

}  // namespace
}  // namespace ampcheck::inspector
