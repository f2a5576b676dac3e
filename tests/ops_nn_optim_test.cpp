// Modules (names, modes, attention) and optimizers (PyTorch's update rules written out
// in double in the test, clipping, state save/load).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "tests/op_check.h"

namespace ampcheck {
namespace {

class Block : public nn::Module {
 public:
  explicit Block(Generator& gen) : Module("Block") {
    attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(8, 2, gen));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{8}));
  }
  Tensor forward(const Tensor& x) override { return (*norm)(x + (*attn)(x)); }
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::LayerNorm> norm;
};

TEST(Modules, HierarchicalNames) {
  Generator gen(1);
  nn::Sequential layers;
  layers.add(std::make_shared<nn::Linear>(8, 8, gen));
  layers.add(std::make_shared<nn::Act>(nn::Activation::relu));
  auto block = std::make_shared<Block>(gen);
  layers.add(block, "block");
  std::vector<std::string> names;
  for (const auto& [name, t] : layers.named_parameters()) names.push_back(name);
  const std::vector<std::string> want = {
      "0.weight", "0.bias", "block.attn.q.weight", "block.attn.q.bias", "block.attn.k.weight", "block.attn.k.bias",
      "block.attn.v.weight", "block.attn.v.bias", "block.attn.out.weight", "block.attn.out.bias",
      "block.norm.weight", "block.norm.bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(block->attn->q->path(), "block.attn.q");
  EXPECT_EQ(layers.parameter_count(), 8 * 8 + 8 + 4 * (8 * 8 + 8) + 16);
  layers.eval();
  EXPECT_FALSE(block->attn->training());
}

TEST(Modules, LinearInitialisationBounds) {
  Generator gen(2);
  nn::Linear l(100, 30, gen);
  for (double w : l.weight.to_f64()) ASSERT_LE(std::fabs(w), 0.1);
  for (double b : l.bias.to_f64()) ASSERT_LE(std::fabs(b), 0.1);
  EXPECT_TRUE(l.weight.requires_grad());
}

TEST(Modules, BatchNormUsesRunningStatsInEval) {
  nn::BatchNorm2d bn(2);
  Generator gen(3);
  const Tensor x = Tensor::randn({8, 2, 3, 3}, gen, DType::f32, 5.0, 2.0);
  bn(x);  // training: running stats move toward mean 5 and var 4
  const std::vector<double> rm = bn.running_mean.to_f64();
  EXPECT_GT(rm[0], 0.3);
  bn.eval();
  const Tensor y = bn(x);
  // eval: (x - rm) / sqrt(rv + eps), with the running stats, not the batch's
  const std::vector<double> xv = x.to_f64(), yv = y.to_f64(), rv = bn.running_var.to_f64();
  EXPECT_NEAR(yv[0], (xv[0] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-4);
}

// Attention against plain loops in double with the module's own weights.
TEST(Modules, AttentionMatchesAReferenceAndRespectsTheMask) {
  Generator gen(4);
  const std::int64_t B = 2, T = 3, D = 4, H = 2, dh = D / H;
  nn::MultiHeadAttention mha(D, H, gen);
  const Tensor x = Tensor::randn({B, T, D}, gen);
  const std::vector<double> xv = x.to_f64();
  auto proj = [&](const nn::Linear& l) {
    const std::vector<double> w = l.weight.to_f64(), b = l.bias.to_f64();
    std::vector<double> y(static_cast<std::size_t>(B * T * D));
    for (std::int64_t r = 0; r < B * T; ++r)
      for (std::int64_t o = 0; o < D; ++o) {
        double s = b[static_cast<std::size_t>(o)];
        for (std::int64_t i = 0; i < D; ++i) s += xv[static_cast<std::size_t>(r * D + i)] * w[static_cast<std::size_t>(o * D + i)];
        y[static_cast<std::size_t>(r * D + o)] = s;
      }
    return y;
  };
  const auto q = proj(*mha.q), k = proj(*mha.k), v = proj(*mha.v);
  std::vector<double> att(static_cast<std::size_t>(B * T * D));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<std::size_t>(T));
        double mx = -1e300, z = 0;
        for (std::int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < dh; ++e)
            dot += q[static_cast<std::size_t>((b * T + i) * D + h * dh + e)] * k[static_cast<std::size_t>((b * T + j) * D + h * dh + e)];
          s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, s[static_cast<std::size_t>(j)]);
        }
        for (double& sj : s) z += (sj = std::exp(sj - mx));
        for (std::int64_t e = 0; e < dh; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j < T; ++j) o += s[static_cast<std::size_t>(j)] / z * v[static_cast<std::size_t>((b * T + j) * D + h * dh + e)];
          att[static_cast<std::size_t>((b * T + i) * D + h * dh + e)] = o;
        }
      }
  const std::vector<double> wo = mha.out->weight.to_f64(), bo = mha.out->bias.to_f64();
  const std::vector<double> got = mha(x).to_f64();
  for (std::int64_t r = 0; r < B * T; ++r)
    for (std::int64_t o = 0; o < D; ++o) {
      double s = bo[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < D; ++i) s += att[static_cast<std::size_t>(r * D + i)] * wo[static_cast<std::size_t>(o * D + i)];
      EXPECT_NEAR(got[static_cast<std::size_t>(r * D + o)], s, 1e-5);
    }

  // A causal mask: position 0 attends to itself only, so changing x[:, 1:] leaves it.
  std::vector<double> causal(static_cast<std::size_t>(T * T));
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j) causal[static_cast<std::size_t>(i * T + j)] = j > i ? 1 : 0;
  const Tensor mask = Tensor::from(causal, {T, T});
  std::vector<double> x2 = xv;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 1; t < T; ++t)
      for (std::int64_t d = 0; d < D; ++d) x2[static_cast<std::size_t>((b * T + t) * D + d)] += 1.0;
  const Tensor y1 = mha.forward(x, x, x, mask), y2 = mha.forward(Tensor::from(x2, x.shape()), Tensor::from(x2, x.shape()), Tensor::from(x2, x.shape()), mask);
  const std::vector<double> a = y1.to_f64(), c = y2.to_f64();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t d = 0; d < D; ++d)
      EXPECT_EQ(a[static_cast<std::size_t>(b * T * D + d)], c[static_cast<std::size_t>(b * T * D + d)]);
}

// ---- optimizers, against PyTorch's documented algorithms written out here ----
struct Trace {
  std::vector<double> p;
};

std::vector<std::vector<double>> grads_for_steps() {
  return {{0.5, -1.0, 2.0}, {0.25, 0.5, -1.5}, {-0.75, 1.0, 0.1}};
}

optim::NamedParams one_param(DType dtype = DType::f64) {
  Tensor p = Tensor::from(std::vector<double>{1.0, -2.0, 0.5}, {3}, dtype).set_requires_grad();
  return {{"w", p}};
}

std::vector<double> run(optim::Optimizer& opt) {
  for (const auto& g : grads_for_steps()) {
    Tensor p = opt.params()[0].second;
    p.set_grad(Tensor::from(g, {3}, p.dtype()));
    opt.step();
  }
  return opt.params()[0].second.to_f64();
}

TEST(Optimizers, SgdMomentumNesterovWeightDecayFollowPyTorch) {
  for (bool nesterov : {false, true}) {
    const double lr = 0.1, mu = 0.9, wd = 0.01;
    std::vector<double> p = {1.0, -2.0, 0.5}, b(3);
    bool first = true;
    for (const auto& g0 : grads_for_steps()) {
      for (std::size_t i = 0; i < 3; ++i) {
        const double g = g0[i] + wd * p[i];
        b[i] = first ? g : mu * b[i] + g;
        p[i] -= lr * (nesterov ? g + mu * b[i] : b[i]);
      }
      first = false;
    }
    optim::SGD opt(one_param(), lr, {mu, 0, wd, nesterov});
    const std::vector<double> got = run(opt);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-15) << "nesterov=" << nesterov;
  }
}

TEST(Optimizers, AdamAndAdamWFollowPyTorch) {
  for (bool decoupled : {false, true}) {
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    std::vector<double> p = {1.0, -2.0, 0.5}, m(3), v(3);
    int t = 0;
    for (const auto& g0 : grads_for_steps()) {
      ++t;
      for (std::size_t i = 0; i < 3; ++i) {
        double g = g0[i];
        if (decoupled) p[i] *= 1 - lr * wd; else g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    std::vector<double> got;
    if (decoupled) {
      optim::AdamW opt(one_param(), lr, wd);
      got = run(opt);
    } else {
      optim::Adam opt(one_param(), lr, {b1, b2, eps, wd, false});
      got = run(opt);
    }
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-13) << "decoupled=" << decoupled;
  }
}

TEST(Optimizers, LowPrecisionParametersUpdateInF32AndRoundOnce) {
  optim::SGD opt(one_param(DType::f16), 0.1);
  Tensor p = opt.params()[0].second;
  p.set_grad(Tensor::from(std::vector<double>{0.5, -1.0, 2.0}, {3}, DType::f16));
  opt.step();
  const std::vector<double> want = {1.0 - 0.05f, -2.0 + 0.1f, 0.5 - 0.2f};
  const std::vector<double> got = p.to_f64();
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(got[i], Tensor::from(std::vector<double>{static_cast<float>(want[i])}, {1}, DType::f16).item());
}

TEST(Optimizers, OneStepOverAllParametersKeepsEachOnesRule) {
  // A step updates every parameter at once (one launch on a GPU). Each keeps its own rule:
  // b's momentum buffer starts at its first gradient (step 2) while a's carries on, a
  // parameter without a gradient is left alone, and parameters of different dtypes (f64,
  // f32) update in their own compute types. Against the rule in f64 per parameter.
  const double lr = 0.1, mu = 0.9;
  Tensor a = Tensor::from(std::vector<double>{1.0, -2.0}, {2}, DType::f64).set_requires_grad();
  Tensor b = Tensor::from(std::vector<double>{0.5, 0.25, -1.0}, {3}, DType::f64).set_requires_grad();
  Tensor c = Tensor::from(std::vector<double>{3.0}, {1}, DType::f64).set_requires_grad();
  optim::SGD opt({{"a", a}, {"b", b}, {"c", c}}, lr, {mu, 0, 0, false});
  std::vector<double> pa = {1.0, -2.0}, pb = {0.5, 0.25, -1.0}, ba(2), bb(3);
  const std::vector<std::vector<double>> ga = {{0.5, -1.0}, {0.25, 0.75}, {-0.5, 1.5}};
  const std::vector<std::vector<double>> gb = {{}, {1.0, -0.5, 0.125}, {0.5, 0.5, -2.0}};
  for (std::size_t step = 0; step < 3; ++step) {
    opt.zero_grad();
    a.set_grad(Tensor::from(ga[step], {2}, DType::f64));
    if (!gb[step].empty()) b.set_grad(Tensor::from(gb[step], {3}, DType::f64));
    opt.step();
    for (std::size_t i = 0; i < 2; ++i) {
      ba[i] = step == 0 ? ga[step][i] : mu * ba[i] + ga[step][i];
      pa[i] -= lr * ba[i];
    }
    if (!gb[step].empty())
      for (std::size_t i = 0; i < 3; ++i) {
        bb[i] = step == 1 ? gb[step][i] : mu * bb[i] + gb[step][i];
        pb[i] -= lr * bb[i];
      }
    const std::vector<double> got_a = a.to_f64(), got_b = b.to_f64();
    for (std::size_t i = 0; i < 2; ++i) EXPECT_NEAR(got_a[i], pa[i], 1e-15) << "a, step " << step;
    for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(got_b[i], pb[i], 1e-15) << "b, step " << step;
    EXPECT_EQ(c.item(), 3.0);
  }
}

TEST(Optimizers, MasterWeightsAreWrittenIntoTheParametersRoundedOnce) {
  // O2: every f16 parameter's f32 master takes the Adam step; the parameter becomes the
  // master rounded once to f16, for all parameters of the step at once.
  Tensor a = Tensor::from(std::vector<double>{1.0, -2.0, 0.5}, {3}, DType::f16).set_requires_grad();
  Tensor b = Tensor::from(std::vector<double>{0.1, 7.0}, {2}, DType::f16).set_requires_grad();
  optim::Adam opt({{"a", a}, {"b", b}}, 1e-3);
  opt.enable_master_weights();
  for (int step = 0; step < 3; ++step) {
    a.set_grad(Tensor::from(std::vector<double>{0.5, -1.0, 2.0}, {3}, DType::f16));
    b.set_grad(Tensor::from(std::vector<double>{-3.0, 0.25}, {2}, DType::f16));
    opt.step();
  }
  for (std::size_t i = 0; i < 2; ++i) {
    const Tensor& p = opt.params()[i].second;
    const Tensor& m = opt.master(i);
    EXPECT_EQ(m.dtype(), DType::f32);
    EXPECT_EQ(p.dtype(), DType::f16);
    EXPECT_EQ(p.to_f64(), m.to(DType::f16).to_f64()) << opt.params()[i].first;
    EXPECT_NE(m.to_f64(), p.to_f64()) << "the master keeps what f16 cannot hold";
  }
}

TEST(Optimizers, ClipGradNormScalesToTheLimit) {
  Tensor a = Tensor::zeros({1}, DType::f64).set_requires_grad(), b = Tensor::zeros({1}, DType::f64).set_requires_grad();
  a.set_grad(Tensor::from(std::vector<double>{3}, {1}, DType::f64));
  b.set_grad(Tensor::from(std::vector<double>{4}, {1}, DType::f64));
  const double norm = optim::clip_grad_norm({{"a", a}, {"b", b}}, 1.0);
  EXPECT_EQ(norm, 5.0);
  EXPECT_NEAR(a.grad().item(), 3.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_NEAR(b.grad().item(), 4.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_EQ(optim::clip_grad_norm({{"a", a}, {"b", b}}, 10.0), std::hypot(a.grad().item(), b.grad().item()));
}

TEST(Optimizers, StateSavedAndLoadedResumesBitIdentically) {
  const auto path = (std::filesystem::temp_directory_path() / "ampcheck_adam_state.bin").string();
  auto params = one_param(DType::f32);
  optim::Adam a(params, 0.01);
  const auto grads = grads_for_steps();
  Tensor p = params[0].second;
  for (int s = 0; s < 2; ++s) {
    p.set_grad(Tensor::from(grads[static_cast<std::size_t>(s)], {3}));
    a.step();
  }
  a.save(path);
  const Tensor snapshot = p.clone();
  p.set_grad(Tensor::from(grads[2], {3}));
  a.step();
  const std::vector<double> continued = p.to_f64();

  Tensor q = snapshot.clone().set_requires_grad();
  optim::Adam b({{"w", q}}, 0.01);
  b.load(path);
  q.set_grad(Tensor::from(grads[2], {3}));
  b.step();
  EXPECT_EQ(q.to_f64(), continued);
  std::filesystem::remove(path);

  optim::Adam c({{"other", q}}, 0.01);
  EXPECT_THROW(c.load_state(a.state()), std::invalid_argument);
  EXPECT_THROW(c.load("/nonexistent/ampcheck.bin"), std::runtime_error);
}

}  // namespace
}  // namespace ampcheck
