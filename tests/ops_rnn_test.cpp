// lstm, gru, rnn_tanh and rnn_relu on the CPU, whose step-by-step path defines them: the
// forward against PyTorch's equations (torch.nn.LSTM / GRU / RNN docs) computed here in
// f64, one step after another; the backward through time against central finite
// differences of the forward in f64; low precision within its rounding; the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/random.h"

namespace ampcheck {
namespace {

enum class Mode { lstm, gru, rnn_tanh, rnn_relu };
const char* name_of(Mode m) {
  return m == Mode::lstm ? "lstm" : m == Mode::gru ? "gru" : m == Mode::rnn_tanh ? "rnn_tanh" : "rnn_relu";
}
std::int64_t gates(Mode m) { return m == Mode::lstm ? 4 : m == Mode::gru ? 3 : 1; }

Tensor run(Mode m, const RnnInputs& in) {
  switch (m) {
    case Mode::lstm: return lstm(in);
    case Mode::gru: return gru(in);
    case Mode::rnn_tanh: return rnn_tanh(in);
    case Mode::rnn_relu: return rnn_relu(in);
  }
  return {};
}

RnnInputs random_layer(Mode m, std::int64_t t, std::int64_t b, std::int64_t i, std::int64_t h, bool full, DType dtype,
                       std::uint64_t seed) {
  Generator gen(seed);
  const std::int64_t g = gates(m);
  RnnInputs in;
  in.x = Tensor::uniform({t, b, i}, gen, -1, 1, dtype);
  in.w_ih = Tensor::uniform({g * h, i}, gen, -0.6, 0.6, dtype);
  in.w_hh = Tensor::uniform({g * h, h}, gen, -0.6, 0.6, dtype);
  if (full) {
    in.b_ih = Tensor::uniform({g * h}, gen, -0.5, 0.5, dtype);
    in.b_hh = Tensor::uniform({g * h}, gen, -0.5, 0.5, dtype);
    in.h0 = Tensor::uniform({b, h}, gen, -1, 1, dtype);
    if (m == Mode::lstm) in.c0 = Tensor::uniform({b, h}, gen, -1, 1, dtype);
  }
  return in;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// PyTorch's equations in f64, step by step: every step's h, [T, B, H] flattened.
std::vector<double> reference(Mode m, const RnnInputs& in) {
  const std::int64_t T = in.x.size(0), B = in.x.size(1), I = in.x.size(2), H = in.w_hh.size(1), G = gates(m);
  const std::vector<double> x = in.x.to_f64(), wi = in.w_ih.to_f64(), wh = in.w_hh.to_f64();
  const std::vector<double> bi = in.b_ih.defined() ? in.b_ih.to_f64() : std::vector<double>(G * H, 0.0);
  const std::vector<double> bh = in.b_hh.defined() ? in.b_hh.to_f64() : std::vector<double>(G * H, 0.0);
  std::vector<double> h = in.h0.defined() ? in.h0.to_f64() : std::vector<double>(B * H, 0.0);
  std::vector<double> c = in.c0.defined() ? in.c0.to_f64() : std::vector<double>(B * H, 0.0);
  std::vector<double> y;
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> hn(B * H), cn(B * H);
    for (std::int64_t b = 0; b < B; ++b) {
      // a[r] = W_ih x + b_ih, s[r] = W_hh h + b_hh for every gate row r.
      std::vector<double> a(G * H), s(G * H);
      for (std::int64_t r = 0; r < G * H; ++r) {
        a[r] = bi[r];
        s[r] = bh[r];
        for (std::int64_t k = 0; k < I; ++k) a[r] += wi[r * I + k] * x[(t * B + b) * I + k];
        for (std::int64_t k = 0; k < H; ++k) s[r] += wh[r * H + k] * h[b * H + k];
      }
      for (std::int64_t j = 0; j < H; ++j) {
        const std::int64_t e = b * H + j;
        if (m == Mode::lstm) {
          const double ig = sigmoid(a[j] + s[j]), fg = sigmoid(a[H + j] + s[H + j]);
          const double gg = std::tanh(a[2 * H + j] + s[2 * H + j]), og = sigmoid(a[3 * H + j] + s[3 * H + j]);
          cn[e] = fg * c[e] + ig * gg;
          hn[e] = og * std::tanh(cn[e]);
        } else if (m == Mode::gru) {
          const double r = sigmoid(a[j] + s[j]), z = sigmoid(a[H + j] + s[H + j]);
          const double n = std::tanh(a[2 * H + j] + r * s[2 * H + j]);
          hn[e] = (1 - z) * n + z * h[e];
        } else {
          const double p = a[j] + s[j];
          hn[e] = m == Mode::rnn_tanh ? std::tanh(p) : std::max(p, 0.0);
        }
      }
    }
    h = hn;
    c = cn;
    y.insert(y.end(), h.begin(), h.end());
  }
  return y;
}

// Input k of a layer in the ops' order: x, w_ih, w_hh, b_ih, b_hh, h0, c0.
Tensor& member(RnnInputs& in, std::size_t k) {
  Tensor* all[] = {&in.x, &in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh, &in.h0, &in.c0};
  return *all[k];
}

constexpr Mode kModes[] = {Mode::lstm, Mode::gru, Mode::rnn_tanh, Mode::rnn_relu};

TEST(Recurrent, ForwardFollowsPyTorchsEquations) {
  for (const Mode m : kModes)
    for (const DType dtype : {DType::f64, DType::f32})
      for (const bool full : {true, false}) {
        const RnnInputs in = random_layer(m, 6, 3, 4, 5, full, dtype, 7);
        const Tensor y = run(m, in);
        ASSERT_EQ(y.shape(), (Shape{6, 3, 5})) << name_of(m);
        EXPECT_EQ(y.dtype(), dtype);
        const std::vector<double> got = y.to_f64(), want = reference(m, in);
        for (std::size_t k = 0; k < got.size(); ++k)
          EXPECT_NEAR(got[k], want[k], dtype == DType::f64 ? 1e-13 : 3e-6)
              << name_of(m) << " " << name(dtype) << (full ? " with" : " without") << " biases and states, element " << k;
      }
}

TEST(Recurrent, LowPrecisionStaysWithinItsRounding) {
  // Each step's state is rounded to the dtype, which the next step reads: the error grows
  // with the steps but stays within a few units of the dtype's rounding.
  for (const Mode m : kModes)
    for (const DType dtype : {DType::f16, DType::bf16}) {
      const RnnInputs in = random_layer(m, 5, 2, 8, 8, true, dtype, 13);
      const std::vector<double> got = run(m, in).to_f64(), want = reference(m, in);
      const double unit = dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      for (std::size_t k = 0; k < got.size(); ++k)
        EXPECT_NEAR(got[k], want[k], 12 * unit * (1 + std::fabs(want[k]))) << name_of(m) << " " << name(dtype) << " " << k;
    }
}

TEST(Recurrent, GradientsThroughTimeMatchFiniteDifferences) {
  // f64: d sum(w * y) / d (x, W_ih, W_hh, b_ih, b_hh, h0, c0) against central differences
  // of the forward, every element of every input.
  for (const Mode m : kModes) {
    RnnInputs in = random_layer(m, 4, 2, 3, 3, true, DType::f64, 21);
    Generator gen(5);
    const Tensor w = Tensor::uniform({4, 2, 3}, gen, -1, 1, DType::f64);
    std::vector<Tensor*> inputs;
    for (std::size_t k = 0; k < (m == Mode::lstm ? 7u : 6u); ++k) inputs.push_back(&member(in, k));
    for (Tensor* t : inputs) t->set_requires_grad(true);
    sum(mul(run(m, in), w)).backward();
    const char* names[] = {"x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0"};
    NoGradGuard no_grad;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      Tensor& t = *inputs[k];
      ASSERT_TRUE(t.grad().defined()) << name_of(m) << " " << names[k];
      const std::vector<double> analytic = t.grad().to_f64();
      std::vector<double> values = t.to_f64();
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double keep = values[i], step = 1e-6;
        auto loss = [&](double v) {
          values[i] = v;
          RnnInputs moved = in;
          member(moved, k) = Tensor::from(values, t.shape(), DType::f64);
          return sum(mul(run(m, moved), w)).item();
        };
        const double numeric = (loss(keep + step) - loss(keep - step)) / (2 * step);
        values[i] = keep;
        EXPECT_NEAR(analytic[i], numeric, 1e-7 * (1 + std::fabs(numeric))) << name_of(m) << " d" << names[k] << "[" << i << "]";
      }
    }
  }
}

TEST(Recurrent, ErrorsNameTheLayerAndTheFix) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RnnInputs in = random_layer(Mode::lstm, 3, 2, 4, 5, true, DType::f32, 1);
  RnnInputs one_bias = in;
  one_bias.b_hh = Tensor();
  EXPECT_NE(message([&] { lstm(one_bias); }).find("both biases"), std::string::npos);
  RnnInputs wrong = in;
  wrong.x = Tensor::zeros({3, 2, 7});
  EXPECT_NE(message([&] { lstm(wrong); }).find("lstm: W_ih"), std::string::npos);
  EXPECT_NE(message([&] { gru(in); }).find("gru:"), std::string::npos);  // an LSTM's 4 gates are not a GRU's 3
  RnnInputs with_c0 = random_layer(Mode::gru, 3, 2, 4, 5, true, DType::f32, 1);
  with_c0.c0 = Tensor::zeros({2, 5});
  EXPECT_NE(message([&] { gru(with_c0); }).find("only an LSTM takes c0"), std::string::npos);
}

}  // namespace
}  // namespace ampcheck
