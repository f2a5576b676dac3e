// The GPU's step at the sizes that decide it, against the CPU: the optimizer's one launch
// over every parameter (master weights written back in the same pass) computes the CPU's
// bits, and cuDNN's fused attention, where it takes a call, stays within the dtype's
// tolerance of the composed path (the op's definition) forward and backward, and says
// that it ran. Skips, saying why, where no GPU is usable.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/parity.h"
#include "engine/random.h"
#include "tests/gpu_test_util.h"

namespace ampcheck {
namespace {

using testing::bytes_of;

class GpuTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::has_gpu()) GTEST_SKIP() << "no usable GPU: " << kernels::cuda::probe().why_none;
  }
};

// Parameters of several sizes (one of them larger than a chunk of the multi-tensor kernel),
// f16 with fp32 masters, on `device`; gradients drawn from one seed.
struct Model {
  std::vector<Tensor> params;
  optim::NamedParams named() const {
    optim::NamedParams n;
    for (std::size_t i = 0; i < params.size(); ++i) n.emplace_back("p" + std::to_string(i), params[i]);
    return n;
  }
};

Model model_on(Device device) {
  Generator gen(7);
  Model m;
  for (const Shape& s : {Shape{3}, Shape{64, 65}, Shape{70000}, Shape{1}})
    m.params.push_back(Tensor::uniform(s, gen, -1, 1, DType::f16).to(device).set_requires_grad());
  return m;
}

void train(optim::Optimizer& opt, const Model& m, Device device) {
  Generator gen(11);
  for (int step = 0; step < 3; ++step) {
    for (const Tensor& p : m.params) {
      Tensor p_mut = p;
      p_mut.set_grad(Tensor::uniform(p.shape(), gen, -2, 2, DType::f16).to(device));
    }
    opt.step();
  }
}

TEST_F(GpuTraining, OneLaunchOptimizerStepEqualsTheCpuBitForBit) {
  for (const bool adam : {false, true}) {
    Model cpu = model_on(Device::cpu), gpu = model_on(Device::cuda);
    std::unique_ptr<optim::Optimizer> a, b;
    if (adam) {
      a = std::make_unique<optim::AdamW>(cpu.named(), 1e-3);
      b = std::make_unique<optim::AdamW>(gpu.named(), 1e-3);
    } else {
      a = std::make_unique<optim::SGD>(cpu.named(), 0.05, optim::SGD::Options{0.9, 0, 1e-4, true});
      b = std::make_unique<optim::SGD>(gpu.named(), 0.05, optim::SGD::Options{0.9, 0, 1e-4, true});
    }
    a->enable_master_weights();
    b->enable_master_weights();
    train(*a, cpu, Device::cpu);
    train(*b, gpu, Device::cuda);
    for (std::size_t i = 0; i < cpu.params.size(); ++i) {
      EXPECT_EQ(bytes_of(cpu.params[i]), bytes_of(gpu.params[i])) << (adam ? "AdamW" : "SGD") << " p" << i;
      EXPECT_EQ(bytes_of(a->master(i)), bytes_of(b->master(i))) << (adam ? "AdamW" : "SGD") << " master " << i;
    }
  }
}

TEST_F(GpuTraining, FusedAttentionStaysWithinTheComposedPathsTolerance) {
  const std::vector<parity::Case> cases = parity::cases({Op::scaled_dot_product_attention}, {DType::f16, DType::bf16});
  ASSERT_FALSE(cases.empty());
  int fused = 0;
  for (const parity::Case& c : cases)
    for (const parity::Direction d : {parity::Direction::forward, parity::Direction::backward}) {
      testing::NotesKept notes;
      const parity::Result r = parity::run_case(c, d, Device::cuda);
      EXPECT_NE(r.status, parity::Status::fail) << c.shapes() << " " << parity::direction_name(d) << ": " << r.reason;
      if (notes.take().find("cudnn sdpa") != std::string::npos) ++fused;
    }
  // The cases with head dims of 64 are cuDNN's on an Ampere or newer GPU.
  if (kernels::cuda::probe().compute_capability >= 80) {
    EXPECT_GT(fused, 0) << "no case ran cuDNN's fused attention";
  }
}

}  // namespace
}  // namespace ampcheck
