// CUPTI on a GPU, on real training: a step of each sample whose ops launch library GEMMs
// and convolutions, at O2 in float16 and bfloat16, traced by the CUPTI tracer. Every
// kernel must land on an op instance, and every library GEMM or convolution of an op the
// policy ran in fp16/bf16 must read, by its name, as that precision on tensor cores (the
// H100's cuBLASLt and cuDNN choose such kernels for these shapes). Skips where no GPU is
// usable. With AMPCHECK_KERNEL_NAMES=FILE the kernels seen are also written there, one
// line each (sample, dtype, op, phase, name, and how the classifier read it), for
// ../shared/data/cuda-kernel-names.tsv.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <tuple>

#include "engine/hooks.h"
#include "inspector/cupti_tracer.h"
#include "inspector/kernel_class.h"
#include "samples/runner.h"
#include "tests/gpu_test_util.h"

namespace ampcheck::inspector {
namespace {

class Attached {
 public:
  explicit Attached(Observer* o) : o_(o) { add_observer(o_); }
  ~Attached() { remove_observer(o_); }
  Attached(const Attached&) = delete;
  Attached& operator=(const Attached&) = delete;

 private:
  Observer* o_;
};

bool multiplies(Op op) { return op == Op::linear || op == Op::matmul || op == Op::bmm || op == Op::conv2d; }

TEST(CuptiSamplesGpu, LowPrecisionGemmsAndConvolutionsRunOnTensorCoresAndEveryKernelHasItsOp) {
  SKIP_WITHOUT_GPU();
  std::ofstream names;
  if (const char* path = std::getenv("AMPCHECK_KERNEL_NAMES")) names.open(path);
  std::set<std::tuple<std::string, std::string, std::string, std::string, std::string>> written;
  for (const char* sample : {"cnn", "mlp", "transformer", "mobilenet"}) {
    for (DType dtype : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(std::string(sample) + " O2 " + std::string(name(dtype)));
      samples::RunOptions o;
      o.model = sample;
      o.device = Device::cuda;
      o.amp.level = amp::Level::O2;
      o.amp.dtype = dtype;
      samples::Trainer trainer(o);
      CuptiTracer tracer;
      ASSERT_TRUE(tracer.start()) << tracer.why_unavailable();
      {
        Attached on(&tracer);
        for (int i = 0; i < 2; ++i) (void)trainer.step();  // a step ends with the loss on the host
      }
      tracer.stop();
      EXPECT_EQ(tracer.error_count(), 0u) << (tracer.errors().empty() ? "" : tracer.errors().front());
      EXPECT_EQ(tracer.stats().dropped, 0u);
      EXPECT_EQ(tracer.stats().unknown_op, 0u);
      EXPECT_GT(tracer.stats().attributed, 0u);
      std::size_t matrix_kernels = 0;
      for (const KernelFlush& f : tracer.flushes()) {
        for (const OpActivity& a : f.ops) {
          for (const KernelRecord& k : a.kernels) {
            const KernelClass c = classify_kernel_name(k.name);
            const std::string phase(phase_name(a.op.phase));
            if (names.is_open() && written.emplace(sample, std::string(name(dtype)), std::string(op_name(a.op.op)), phase, k.name).second)
              names << sample << '\t' << name(dtype) << '\t' << op_name(a.op.op) << (a.op.inserted_cast ? " (inserted)" : "")
                    << '\t' << phase << '\t' << k.name << '\t' << precision_name(c.input) << '\t'
                    << precision_name(c.accumulate) << '\t' << tensor_cores_name(c.tensor_cores) << '\t'
                    << kind_name(c.kind) << '\n';
            if (!multiplies(a.op.op) || !multiplies_matrices(c.kind)) continue;
            ++matrix_kernels;
            EXPECT_EQ(c.input, dtype == DType::f16 ? KernelPrecision::f16 : KernelPrecision::bf16)
                << op_name(a.op.op) << " " << phase << ": " << k.name << " (" << c.why << ")";
            EXPECT_EQ(c.tensor_cores, TensorCores::yes)
                << op_name(a.op.op) << " " << phase << ": " << k.name << " (" << c.why << ")";
          }
        }
        if (names.is_open())
          for (const KernelRecord& k : f.unattributed.kernels)
            if (written.emplace(sample, std::string(name(dtype)), "-", "-", k.name).second)
              names << sample << '\t' << name(dtype) << "\t(no op)\t-\t" << k.name << '\n';
      }
      EXPECT_GT(matrix_kernels, 0u) << "no library GEMM or convolution kernel was seen";
    }
  }
}

}  // namespace
}  // namespace ampcheck::inspector
