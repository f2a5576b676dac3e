// Tensors on a device (engine/tensor.h, engine/dispatch.h): what holds on every machine
// (the CPU side of the seam, a CUDA tensor refused without a GPU), and, where a GPU is
// usable, copies both ways, the mixing error, host access refused, modules moving whole
// and a sample training on the GPU to its documented accuracy. The GPU cases skip naming
// the reason elsewhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dispatch.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"
#include "tests/gpu_test_util.h"
#include "models/runner.h"
#include "samples/builtin_models.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(Device, CpuTensorsStayPutAndKeepTheirHandleWhenMovedToTheCpu) {
  Generator gen(3);
  Tensor t = Tensor::randn({4, 5}, gen);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_TRUE(t.to(Device::cpu).same(t));  // already there: no copy
  const Tensor alias = t;
  t.move_to_(Device::cpu);
  EXPECT_TRUE(alias.same(t));
  EXPECT_EQ(view_of(t).data, t.raw());
  EXPECT_EQ(view_of(Tensor()).data, nullptr);
  // Views carry their tensor's device.
  EXPECT_EQ(t.rows(1, 2).device(), Device::cpu);
  EXPECT_EQ(t.view({20}).device(), Device::cpu);
  EXPECT_EQ(common_device("add", {&t, nullptr}), Device::cpu);
}

TEST(Device, ACudaTensorWithoutAGpuIsRefusedNamingWhy) {
  if (kernels::cuda::probe().device_count > 0) GTEST_SKIP() << "a GPU is usable here";
  try {
    (void)Tensor::empty({2, 3}, DType::f32, Device::cuda);
    FAIL() << "a CUDA tensor without a GPU";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_TRUE(has(what, "GPU") || has(what, "CUDA")) << what;
  }
}

TEST(Device, ModuleToTheCpuKeepsParametersWhereTheOptimizerHoldsThem) {
  Generator gen(1);
  nn::Linear layer(3, 2, gen);
  const std::vector<Tensor> before = layer.parameters();
  layer.to(Device::cpu);
  const std::vector<Tensor> after = layer.parameters();
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(before[i].same(after[i]));
}

TEST(DeviceCuda, CopiesBothWaysKeepEveryBitInEveryDtype) {
  SKIP_WITHOUT_GPU();
  Generator gen(7);
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Tensor host = Tensor::randn({5, 7}, gen, d);
    const Tensor there = host.to(Device::cuda);
    EXPECT_EQ(there.device(), Device::cuda);
    EXPECT_EQ(bytes_of(there), bytes_of(host)) << name(d);
    // A conversion on the GPU rounds as the CPU's does (kernels/element.h).
    EXPECT_EQ(bytes_of(there.to(DType::f16)), bytes_of(host.to(DType::f16))) << name(d);
  }
  const Tensor labels = Tensor::from(std::vector<std::int64_t>{3, 1, 4}, {3});
  EXPECT_EQ(labels.to(Device::cuda).to_i64(), labels.to_i64());
}

TEST(DeviceCuda, MixingDevicesNamesTheOpAndBothDevices) {
  SKIP_WITHOUT_GPU();
  const Tensor a = Tensor::ones({2, 2});
  const Tensor b = Tensor::ones({2, 2}, DType::f32, Device::cuda);
  try {
    (void)add(a, b);
    FAIL() << "add of a cpu and a cuda tensor";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(has(what, "add") && has(what, "cpu") && has(what, "cuda")) << what;
  }
  EXPECT_THROW((void)b.data<float>(), DeviceError);  // host access to GPU memory
}

TEST(DeviceCuda, AModuleMovesWholeAndRunsThere) {
  SKIP_WITHOUT_GPU();
  Generator gen(1);
  nn::Linear layer(3, 2, gen);
  const Tensor x = Tensor::randn({4, 3}, gen);
  const std::vector<double> on_cpu = layer(x).to_f64();
  layer.to(Device::cuda);
  for (const Tensor& p : layer.parameters()) EXPECT_EQ(p.device(), Device::cuda);
  const Tensor y = layer(x.to(Device::cuda));
  EXPECT_EQ(y.device(), Device::cuda);
  const std::vector<double> on_gpu = y.to_f64();
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  for (std::size_t i = 0; i < on_cpu.size(); ++i) EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-5);
}

TEST(DeviceCuda, TheMlpSampleTrainsOnTheGpuAtO2ToItsDocumentedAccuracy) {
  SKIP_WITHOUT_GPU();
  models::RunOptions o;
  o.model = "mlp";
  o.catalog = samples::builtin_models();
  o.device = Device::cuda;
  o.amp.level = amp::Level::O2;
  const models::RunResult r = models::run(o);
  EXPECT_GE(r.accuracy, 0.95 - 0.03);  // samples/models/mlp.json's "expect"
  EXPECT_EQ(r.skipped, 0);
}

}  // namespace
}  // namespace ampcheck
