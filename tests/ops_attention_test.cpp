// scaled_dot_product_attention on the CPU, whose composed path defines the op: the forward
// against softmax(scale Q K^T + mask) V computed here in f64 from the same inputs, the
// gradients against the same function built of the engine's basic ops (matmul, softmax)
// through autograd in f64, the causal mask as PyTorch's tril(ones(L, S)), the AMP policy's
// category (autocast's fp16 list holds scaled_dot_product_attention), and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "engine/ops/ops.h"
#include "engine/random.h"

namespace ampcheck {
namespace {

struct Inputs {
  Tensor q, k, v, mask;
};

Inputs random_inputs(const Shape& lead, std::int64_t tq, std::int64_t tk, std::int64_t e, std::int64_t ev,
                     const Shape& mask_shape, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  auto with = [&](std::int64_t a, std::int64_t b) {
    Shape s = lead;
    s.push_back(a);
    s.push_back(b);
    return s;
  };
  Inputs in;
  in.q = Tensor::uniform(with(tq, e), gen, -1.5, 1.5, dtype);
  in.k = Tensor::uniform(with(tk, e), gen, -1.5, 1.5, dtype);
  in.v = Tensor::uniform(with(tk, ev), gen, -1, 1, dtype);
  if (!mask_shape.empty()) in.mask = Tensor::uniform(mask_shape, gen, -2, 0.5, dtype);
  return in;
}

// softmax(scale Q K^T + mask) V in f64 from the tensors' values, one batch-head at a time;
// the mask read through numpy broadcasting against [lead..., tq, tk].
std::vector<double> reference(const Inputs& in, double scale, bool causal) {
  const Shape& qs = in.q.shape();
  const std::int64_t tq = qs[qs.size() - 2], e = qs.back(), tk = in.k.shape()[qs.size() - 2],
                     ev = in.v.shape().back();
  const std::int64_t bh = numel(in.q.shape()) / (tq * e);
  const std::vector<double> q = in.q.to_f64(), k = in.k.to_f64(), v = in.v.to_f64();
  const std::vector<double> m = in.mask.defined() ? in.mask.to_f64() : std::vector<double>{};
  Shape full(qs.begin(), qs.end() - 2);
  full.push_back(tq);
  full.push_back(tk);
  auto mask_at = [&](std::int64_t flat) {
    if (m.empty()) return 0.0;
    const Shape& ms = in.mask.shape();
    std::int64_t off = 0, stride = 1, rest = flat;
    for (std::size_t i = 0; i < full.size(); ++i) {
      const std::int64_t idx = rest % full[full.size() - 1 - i];
      rest /= full[full.size() - 1 - i];
      if (i < ms.size()) {
        const std::int64_t md = ms[ms.size() - 1 - i];
        off += (md == 1 ? 0 : idx) * stride;
        stride *= md;
      }
    }
    return m[static_cast<std::size_t>(off)];
  };
  std::vector<double> out(static_cast<std::size_t>(bh * tq * ev), 0.0);
  for (std::int64_t b = 0; b < bh; ++b)
    for (std::int64_t i = 0; i < tq; ++i) {
      std::vector<double> s(static_cast<std::size_t>(tk));
      double top = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < tk; ++j) {
        double dot = 0;
        for (std::int64_t c = 0; c < e; ++c)
          dot += q[static_cast<std::size_t>((b * tq + i) * e + c)] * k[static_cast<std::size_t>((b * tk + j) * e + c)];
        double x = scale * dot + mask_at((b * tq + i) * tk + j);
        if (causal && j > i) x = -std::numeric_limits<double>::infinity();
        s[static_cast<std::size_t>(j)] = x;
        top = std::max(top, x);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (std::int64_t j = 0; j < tk; ++j)
        for (std::int64_t c = 0; c < ev; ++c)
          out[static_cast<std::size_t>((b * tq + i) * ev + c)] +=
              s[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((b * tk + j) * ev + c)];
    }
  return out;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * (1 + std::fabs(want[i]))) << what << " element " << i;
}

TEST(Attention, ForwardIsSoftmaxOfScaledScoresPlusMaskTimesV) {
  struct Case {
    Shape lead;
    std::int64_t tq, tk, e, ev;
    Shape mask;
    std::optional<double> scale;
    bool causal;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{2, 3}, 5, 7, 8, 4, {2, 1, 1, 7}, 0.4, false, "padding mask, Tq != Tk, Ev != E"},
      {{2, 2}, 6, 6, 8, 8, {}, std::nullopt, true, "causal, default scale"},
      {{4}, 5, 9, 3, 6, {5, 9}, std::nullopt, false, "one leading dim, a shared mask"},
      {{}, 4, 3, 5, 2, {}, 1.0, true, "no leading dims, causal with fewer keys than queries"},
      {{2, 3}, 5, 7, 8, 4, {2, 3, 5, 7}, std::nullopt, true, "full mask and causal"},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const Case& c : cases) {
      const Inputs in = random_inputs(c.lead, c.tq, c.tk, c.e, c.ev, c.mask, dtype, 11);
      const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, in.mask, c.scale, c.causal);
      Shape want_shape = c.lead;
      want_shape.push_back(c.tq);
      want_shape.push_back(c.ev);
      EXPECT_EQ(out.shape(), want_shape) << c.what;
      EXPECT_EQ(out.dtype(), dtype);
      const double scale = c.scale.value_or(1 / std::sqrt(static_cast<double>(c.e)));
      expect_near_all(out.to_f64(), reference(in, scale, c.causal), dtype == DType::f64 ? 1e-12 : 2e-6, c.what);
    }
  }
}

TEST(Attention, LowPrecisionStaysWithinItsRounding) {
  // f16/bf16 inputs: scores and softmax in f32, P and O rounded to the dtype once each.
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Inputs in = random_inputs({2, 2}, 9, 9, 16, 16, {2, 1, 1, 9}, dtype, 5);
    const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, in.mask, std::nullopt, true);
    EXPECT_EQ(out.dtype(), dtype);
    const double unit = dtype == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    expect_near_all(out.to_f64(), reference(in, 0.25, true), 4 * unit, name(dtype).data());
  }
}

TEST(Attention, CausalHidesLaterKeysAsPyTorchsTril) {
  // Query 0 sees key 0 only: its output is V's row 0 exactly; changing the keys and values
  // after a query's position changes nothing of its output.
  Inputs in = random_inputs({1, 1}, 4, 6, 3, 2, {}, DType::f64, 3);
  const std::vector<double> out = scaled_dot_product_attention(in.q, in.k, in.v, {}, std::nullopt, true).to_f64();
  const std::vector<double> v = in.v.to_f64();
  EXPECT_EQ(out[0], v[0]);
  EXPECT_EQ(out[1], v[1]);
  std::vector<double> k2 = in.k.to_f64(), v2 = v;
  for (std::size_t i = 4 * 3; i < k2.size(); ++i) k2[i] = 40;  // keys 4 and 5: after every query
  for (std::size_t i = 4 * 2; i < v2.size(); ++i) v2[i] = -7;
  const Tensor k = Tensor::from(k2, in.k.shape(), DType::f64), vv = Tensor::from(v2, in.v.shape(), DType::f64);
  EXPECT_EQ(scaled_dot_product_attention(in.q, k, vv, {}, std::nullopt, true).to_f64(), out);
}

TEST(Attention, GradientsMatchTheSameFunctionOfBasicOps) {
  // f64: d loss / d q, k, v of sum(w * attention) against matmul / softmax / matmul through
  // autograd (another code path: each basic op's own backward).
  for (const bool causal : {false, true}) {
    Inputs in = random_inputs({2, 2}, 5, causal ? 5 : 7, 4, 3, {2, 1, 5, causal ? 5 : 7}, DType::f64, 17);
    Generator gen(99);
    const Tensor w = Tensor::uniform({2, 2, 5, 3}, gen, -1, 1, DType::f64);
    const double scale = 0.7;
    auto grads_of = [&](bool fused) {
      Tensor q = in.q.clone(), k = in.k.clone(), v = in.v.clone();
      for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
      Tensor out;
      if (fused) {
        out = scaled_dot_product_attention(q, k, v, in.mask, scale, causal);
      } else {
        Tensor s = add(mul(matmul(q, transpose(k, -2, -1)), scale), in.mask);
        if (causal) {
          std::vector<double> above(25, 0.0);
          for (int i = 0; i < 5; ++i)
            for (int j = i + 1; j < 5; ++j) above[static_cast<std::size_t>(i * 5 + j)] = 1;
          s = masked_fill(s, Tensor::from(above, {5, 5}, DType::f64), -std::numeric_limits<double>::infinity());
        }
        out = matmul(softmax(s, -1), v);
      }
      sum(mul(out, w)).backward();
      return std::vector<std::vector<double>>{q.grad().to_f64(), k.grad().to_f64(), v.grad().to_f64()};
    };
    const auto got = grads_of(true), want = grads_of(false);
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) expect_near_all(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)], 1e-12, names[i]);
  }
}

TEST(Attention, AQueryTheMaskHidesEveryKeyFromGetsZeros) {
  // PyTorch's math path (_safe_softmax): a row of scores that are all -Inf gives
  // probabilities 0, so the output row is 0 and its query's gradient is 0; the other rows
  // are as without it.
  Inputs in = random_inputs({1, 2}, 3, 4, 4, 2, {}, DType::f64, 41);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> m(12, 0.0);
  for (int j = 0; j < 4; ++j) m[static_cast<std::size_t>(j)] = -inf;  // query 0 sees no key
  m[5] = -inf;                                                        // query 1 loses key 1
  in.mask = Tensor::from(m, {1, 1, 3, 4}, DType::f64);
  in.q.set_requires_grad(true);
  const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, in.mask);
  const std::vector<double> got = out.to_f64(), want = reference(in, 0.5, false);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool row0 = (i / 2) % 3 == 0;  // [head, query, value]: query 0 of either head
    if (row0) {
      EXPECT_EQ(got[i], 0.0) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-12) << i;
    }
  }
  sum(out).backward();
  const std::vector<double> dq = in.q.grad().to_f64();
  for (std::size_t i = 0; i < dq.size(); ++i) {
    if ((i / 4) % 3 == 0) {
      EXPECT_EQ(dq[i], 0.0) << i;
    } else {
      EXPECT_TRUE(std::isfinite(dq[i])) << i;
    }
  }
}

TEST(Attention, TheMaskTakesNoGradient) {
  Inputs in = random_inputs({1, 2}, 3, 3, 4, 4, {1, 1, 3, 3}, DType::f64, 23);
  in.mask.set_requires_grad(true);
  in.q.set_requires_grad(true);
  sum(scaled_dot_product_attention(in.q, in.k, in.v, in.mask)).backward();
  EXPECT_TRUE(in.q.grad().defined());
  EXPECT_FALSE(in.mask.grad().defined());
}

TEST(Attention, AutocastRunsItInTheLowPrecisionDtype) {
  // torch.autocast's fp16 list holds scaled_dot_product_attention: O1 casts q, k, v (and a
  // float mask) to float16, and the output is float16.
  amp::AmpOptions o;
  o.level = amp::Level::O1;
  o.dtype = DType::f16;
  const amp::Policy p(o);
  const Inputs in = random_inputs({1, 2}, 4, 4, 8, 8, {1, 1, 4, 4}, DType::f32, 29);
  amp::Autocast on(&p);
  const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, in.mask);
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_EQ(amp::torch_op_name(Op::scaled_dot_product_attention), "scaled_dot_product_attention");
  EXPECT_EQ(amp::paddle_op_name(Op::scaled_dot_product_attention), "flash_attn");
}

TEST(Attention, ErrorsNameTheOpAndTheShapes) {
  const Inputs in = random_inputs({2, 3}, 5, 7, 8, 4, {}, DType::f32, 31);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Generator gen(1);
  const Tensor other_heads = Tensor::uniform({2, 4, 7, 8}, gen, -1, 1);
  EXPECT_NE(message([&] { scaled_dot_product_attention(in.q, other_heads, in.v); }).find("same leading dims"),
            std::string::npos);
  const Tensor wide_mask = Tensor::uniform({5, 8}, gen, -1, 1);
  const std::string m = message([&] { scaled_dot_product_attention(in.q, in.k, in.v, wide_mask); });
  EXPECT_NE(m.find("scaled_dot_product_attention"), std::string::npos) << m;
  EXPECT_NE(m.find("mask"), std::string::npos) << m;
  const Tensor short_value = Tensor::uniform({2, 3, 6, 4}, gen, -1, 1);
  EXPECT_NE(message([&] { scaled_dot_product_attention(in.q, in.k, short_value); }).find("numbers of positions"),
            std::string::npos);
  EXPECT_NE(message([&] { scaled_dot_product_attention(in.q, in.k.to(DType::f16), in.v); }).find("one dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace ampcheck
