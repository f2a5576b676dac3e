#include "engine/parity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>     // std::snprintf: numbers in reasons
#include <cstring>    // memcmp: the optimizer steps compared bit for bit
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "engine/optim/optimizer.h"  // the training steps that are not ops
#include "engine/random.h"   // Generator, uniform01: the inputs
#include "kernels/cuda/cuda.h"  // probe: compute capability, for the one skip rule

namespace ampcheck::parity {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::size_t index_of(DType d) {
  for (std::size_t i = 0; i < kFloatDTypes.size(); ++i)
    if (kFloatDTypes[i] == d) return i;
  return 1;  // i64 never reaches a threshold; f32's column is the neutral choice
}

}  // namespace

std::string_view direction_name(Direction d) { return d == Direction::forward ? "fwd" : "bwd"; }

std::string_view status_name(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::skip: return "SKIP";
  }
  return "?";
}

std::string_view tolerance_name(Tolerance t) {
  switch (t) {
    case Tolerance::exact: return "exact";
    case Tolerance::elementwise: return "elementwise";
    case Tolerance::transcendental: return "transcendental";
    case Tolerance::reduction: return "reduction";
    case Tolerance::gemm: return "gemm";
    case Tolerance::fp8_gemm: return "fp8_gemm";
  }
  return "?";
}

// ================================================================ thresholds

// NMSE thresholds, one row per reason to differ, columns f64, f32, f16, bf16 (the order of
// kFloatDTypes). An error of k ulps on every element gives NMSE ~ (k * 2^-p)^2, p the
// dtype's precision (53, 24, 11, 8).
//
//   exact:          selection and data movement (reshape, permute, slice, concat, cast,
//                   where, masked_fill, relu, clamp, max, embedding's gather): any
//                   difference is a bug.
//   elementwise:    f64/f32: nvcc contracts a*b+c into one fma where the CPU rounds twice,
//                   a last-bit difference: 4 ulps everywhere is 1e-31 / 2e-13.
//                   f16/bf16: both compute in f32 and round once, so such a difference
//                   only shows where the f32 result sits on a rounding boundary, and then
//                   as one ulp of the storage dtype; one ulp on *every* element, the worst,
//                   at the bottom of a binade is (2^-10)^2 ~ 1e-6 and (2^-7)^2 ~ 6e-5.
//   transcendental: CUDA's expf/logf/tanhf/erff/powf are within 2 ulps, glibc's within 1:
//                   up to ~8 ulps apart after a derivative chains two of them (4e-12 in
//                   f32). In f16/bf16 the final rounding dominates, as for elementwise.
//   reduction:      the same sums in another order (CUB's trees, atomics in a scatter-add,
//                   against the CPU's chunked loops): the error grows like sqrt(n) ulps
//                   of the partial sums; the cases reduce at most ~1600 values per output,
//                   ~1e-12 in f32; two ulps of the storage dtype in f16/bf16.
//   gemm:           cuBLAS/cuDNN choose blocking, split-K and, for convolutions,
//                   transform algorithms (Winograd) whose error is larger than a plain
//                   dot product's; f32 without TF32 (which would be ~1e-6 and fail here,
//                   as it should: ampcheck's f32 means f32). f16/bf16 inputs are the same
//                   bits and accumulate in f32, so outputs flip more often than in an
//                   elementwise op but by one ulp: a few ulps on every element
//                   (ggml's test-backend-ops allows 5e-4 for its matmuls).
//   fp8_gemm:       fp8_linear: the casts to fp8 are the same bits on both devices (one
//                   rounding of x * scale, then the shared cast); cuBLASLt then sums the
//                   exact fp8 products in binary32, in the forward with Hopper's fast
//                   accumulation, which keeps fewer bits between promotions: errors of
//                   ~2^-10 of the sums' magnitude, NMSE up to ~1e-6 (f64: the exact
//                   reference on both, a GEMM's tolerance).
namespace {
constexpr double kThresholds[6][4] = {
    /* exact          */ {0, 0, 0, 0},
    /* elementwise    */ {1e-28, 1e-12, 1e-6, 1e-4},
    /* transcendental */ {1e-26, 1e-11, 1e-6, 1e-4},
    /* reduction      */ {1e-24, 1e-9, 2e-6, 2e-4},
    /* gemm           */ {1e-22, 1e-8, 1e-5, 5e-4},
    /* fp8_gemm       */ {1e-22, 4e-6, 1e-5, 5e-4},
};
}  // namespace

double threshold(Tolerance t, DType dtype) {
  return kThresholds[static_cast<std::size_t>(t)][index_of(dtype)];
}

// Why each op may differ. No default: an op added to engine/ops/op_list.h fails the build
// here (-Wswitch, warnings are errors) until it says.
Tolerance tolerance(Op op, Direction d) {
  const bool fwd = d == Direction::forward;
  switch (op) {
    case Op::matmul:
    case Op::linear:
    case Op::bmm:
    case Op::conv2d:
    case Op::scaled_dot_product_attention:
    case Op::lstm:  // GEMMs, and the cells' exp and tanh over the steps
    case Op::gru:
    case Op::rnn_tanh:
    case Op::rnn_relu: return Tolerance::gemm;
    case Op::fp8_linear: return Tolerance::fp8_gemm;
    case Op::batch_norm:
    case Op::layer_norm:
    case Op::sum:
    case Op::mean:
    case Op::softmax:      // exp, then a sum over the dim
    case Op::log_softmax:
    case Op::cross_entropy:
    case Op::mse_loss:
    case Op::avg_pool2d:   // window sums; the backward adds overlapping windows
    case Op::adaptive_avg_pool2d: return Tolerance::reduction;
    case Op::relu:
    case Op::neg:
    case Op::abs:
    case Op::clamp:
    case Op::max:          // the backward puts each gradient at one saved index
    case Op::reshape:
    case Op::permute:
    case Op::concat:
    case Op::slice:
    case Op::masked_fill:  // the mask broadcasts to x: no gradient sums
    case Op::cast: return Tolerance::exact;
    // A gather forward; the backward adds the gradients of repeated indices / of
    // overlapping windows / of broadcast operands.
    case Op::embedding:
    case Op::max_pool2d:
    case Op::where: return fwd ? Tolerance::exact : Tolerance::reduction;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div: return fwd ? Tolerance::elementwise : Tolerance::reduction;
    case Op::add_scalar:
    case Op::sub_scalar:
    case Op::mul_scalar:
    case Op::div_scalar:
    case Op::square:
    case Op::sqrt:        // IEEE sqrt and division are correctly rounded on both
    case Op::reciprocal:
    case Op::hardswish:
    case Op::hardsigmoid:
    case Op::dropout: return Tolerance::elementwise;
    case Op::gelu:
    case Op::silu:
    case Op::sigmoid:
    case Op::tanh:
    case Op::exp:
    case Op::log:
    case Op::rsqrt:       // CUDA's rsqrtf is 2 ulps, 1/std::sqrt is ~1
    case Op::pow:
    case Op::erf: return Tolerance::transcendental;  // erff / std::erf; the backward's expf
  }
  return Tolerance::exact;
}

double threshold(Op op, Direction d, DType dtype) { return threshold(tolerance(op, d), dtype); }

// ================================================================ comparing

double nmse(const std::vector<double>& x, const std::vector<double>& ref) {
  double err = 0, norm = 0;
  const std::size_t n = std::min(x.size(), ref.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(ref[i])) continue;
    const double e = x[i] - ref[i];
    err += e * e;
    norm += ref[i] * ref[i];
  }
  if (std::isnan(err)) return err;
  if (err == 0) return 0;
  return norm == 0 ? kInf : err / norm;
}

Comparison compare(const std::vector<double>& x, const std::vector<double>& ref, double threshold) {
  Comparison c;
  auto fail = [&c](std::string why) {
    c.ok = false;
    c.reason = std::move(why);
    return c;
  };
  if (x.size() != ref.size())
    return fail(std::to_string(x.size()) + " values where the CPU has " + std::to_string(ref.size()));
  c.nmse = nmse(x, ref);
  std::size_t worst = 0;
  double worst_diff = -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], r = ref[i];
    const std::string at = "element " + std::to_string(i);
    if (std::isnan(r)) {
      if (!std::isnan(v)) return fail(at + " is " + num(v) + " where the CPU has NaN");
      continue;
    }
    if (std::isnan(v)) return fail("NaN at " + at + " where the CPU has " + num(r));
    if (std::isinf(r) || std::isinf(v)) {
      if (v != r) return fail(at + " is " + num(v) + " where the CPU has " + num(r));
      continue;
    }
    if (std::abs(v - r) > worst_diff) worst_diff = std::abs(v - r), worst = i;
  }
  if (!(c.nmse <= threshold))
    return fail("NMSE " + num(c.nmse) + " above " + num(threshold) + " (largest difference at element " +
                std::to_string(worst) + ": " + num(x[worst]) + " where the CPU has " + num(ref[worst]) + ")");
  return c;
}

// ================================================================ cases

std::string Case::shapes() const {
  std::string s;
  for (const Tensor& t : inputs) {
    if (!s.empty()) s += ", ";
    if (!t.defined()) {
      s += "-";
      continue;
    }
    s += to_string(t.shape());
    if (t.dtype() != dtype) s += ":" + std::string(name(t.dtype()));
  }
  return note.empty() ? s : s + " " + note;
}

namespace {

// Makes the cases of one op in one dtype. Each case draws its inputs from a generator
// seeded by (op, case number) alone, so every dtype sees the same values (rounded to it),
// and a case that exists in one dtype only (a mixed-dtype one) comes last.
class Builder {
 public:
  Builder(Op op, DType dtype) : op_(op), dtype_(dtype), gen_(seed(0)) {}

  // A float input in the case's dtype (or `d`), uniform in [lo, hi).
  Tensor x(const Shape& s, double lo = -1, double hi = 1) { return x_in(dtype_, s, lo, hi); }
  Tensor x_in(DType d, const Shape& s, double lo = -1, double hi = 1) {
    return Tensor::uniform(s, gen_, lo, hi, d);
  }
  // 0 or 1, exact in every dtype.
  Tensor mask(const Shape& s) {
    std::vector<double> v = Tensor::uniform(s, gen_, 0, 1, DType::f64).to_f64();
    for (double& e : v) e = e < 0.5 ? 0.0 : 1.0;
    return Tensor::from(v, s, dtype_);
  }
  // i64 in [0, n): labels, rows of an embedding.
  Tensor indices(const Shape& s, std::int64_t n) {
    const std::vector<double> u = Tensor::uniform(s, gen_, 0, 1, DType::f64).to_f64();
    std::vector<std::int64_t> v;
    for (double e : u) v.push_back(std::min<std::int64_t>(n - 1, static_cast<std::int64_t>(e * static_cast<double>(n))));
    return Tensor::from(v, s);
  }
  // The dtype a mixed-dtype case pairs with the case's: the next wider one (f64 has none).
  std::optional<DType> wider() const {
    if (dtype_ == DType::f64) return std::nullopt;
    return dtype_ == DType::f32 ? DType::f64 : DType::f32;
  }

  // `diff` empty: every defined float input takes a gradient.
  void add(std::vector<Tensor> in, Params p = NoParams{}, std::string note = {}, std::vector<bool> diff = {}) {
    Case c;
    c.op = op_;
    c.dtype = dtype_;
    if (diff.empty())
      for (const Tensor& t : in) diff.push_back(t.defined() && is_floating(t.dtype()));
    for (std::size_t i = 0; i < in.size(); ++i) diff[i] = diff[i] && in[i].defined();
    c.inputs = std::move(in);
    c.params = std::move(p);
    c.differentiable = std::move(diff);
    c.note = std::move(note);
    c.seed = seed(count_) + kUpstreamStream;
    cases_.push_back(std::move(c));
    gen_ = Generator(seed(++count_));
  }

  DType dtype() const { return dtype_; }
  std::vector<Case> take() { return std::move(cases_); }

 private:
  // Inputs and upstream gradients draw from disjoint seed ranges.
  static constexpr std::uint64_t kUpstreamStream = 1ULL << 32;
  std::uint64_t seed(std::uint64_t k) const {
    return 0x9a17'0000'0000'0000ULL + static_cast<std::uint64_t>(op_) * 1024 + k;
  }

  Op op_;
  DType dtype_;
  Generator gen_;
  std::uint64_t count_ = 0;
  std::vector<Case> cases_;
};

// Odd 2-D, more elements than one CPU chunk (4096) and one GPU block spans, a 0-dim
// tensor (one element), an empty one.
const std::vector<Shape> kUnaryShapes = {{7, 13}, {65, 257}, {}, {0, 5}};

void unary(Builder& b, double lo, double hi, const Params& p = NoParams{}, const std::string& note = {}) {
  for (const Shape& s : kUnaryShapes) b.add({b.x(s, lo, hi)}, p, note);
}

// Broadcasting in every form: same shape, a row, an outer product, a rank change, a
// 0-dim operand, an empty one, a large one, and mixed dtypes (promotion).
void binary(Builder& b, double lo, double hi) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{7, 13}, {7, 13}}, {{7, 13}, {13}},   {{7, 1}, {1, 13}},   {{3, 1, 5}, {4, 1}},
      {{}, {7, 13}},      {{0, 13}, {13}},   {{65, 257}, {257}}};
  for (const auto& [sa, sb] : shapes) b.add({b.x(sa), b.x(sb, lo, hi)});
  if (const auto w = b.wider()) b.add({b.x({7, 13}), b.x_in(*w, {13}, lo, hi)});
}

ReduceParams reduce(std::vector<std::int64_t> dims, bool keepdim = false) { return {std::move(dims), keepdim}; }

std::string dims_note(const ReduceParams& p) {
  std::string s = "dims=";
  if (p.dims.empty()) s += "all";
  for (std::size_t i = 0; i < p.dims.size(); ++i) s += (i ? "," : "") + std::to_string(p.dims[i]);
  return p.keepdim ? s + " keepdim" : s;
}

void reduction(Builder& b) {
  const std::vector<std::pair<Shape, ReduceParams>> list = {
      {{7, 13}, reduce({})},         {{7, 13}, reduce({1})},      {{7, 13}, reduce({0}, true)},
      {{3, 5, 7}, reduce({0, 2})},   {{3, 5, 7}, reduce({-1}, true)}, {{}, reduce({})},
      {{0, 5}, reduce({1})},         {{65, 257}, reduce({1})},    {{65, 257}, reduce({0})}};
  for (const auto& [s, p] : list) b.add({b.x(s)}, p, dims_note(p));
}

void softmax_like(Builder& b) {
  const std::vector<std::pair<Shape, std::int64_t>> list = {
      {{7, 13}, -1}, {{7, 13}, 0}, {{3, 5, 7}, 1}, {{1}, 0}, {{0, 5}, 1}, {{5, 1025}, 1}};
  for (const auto& [s, dim] : list) b.add({b.x(s, -4, 4)}, DimParams{dim}, "dim=" + std::to_string(dim));
}

std::string pair_note(const char* what, const std::array<std::int64_t, 2>& v) {
  return std::string(what) + (v[0] == v[1] ? std::to_string(v[0]) : std::to_string(v[0]) + "x" + std::to_string(v[1]));
}

void pool(Builder& b) {
  auto p = [](std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> s, std::array<std::int64_t, 2> pad) {
    PoolParams q;
    q.kernel = k, q.stride = s, q.padding = pad;
    return q;
  };
  const std::vector<std::pair<Shape, PoolParams>> list = {
      {{2, 3, 7, 9}, p({3, 3}, {2, 2}, {1, 1})}, {{2, 3, 7, 9}, p({2, 2}, {2, 2}, {0, 0})},
      {{2, 3, 7, 9}, p({3, 3}, {1, 1}, {1, 1})},  // overlapping windows
      {{2, 3, 7, 9}, p({2, 3}, {1, 2}, {1, 1})}, {{1, 1, 1, 1}, p({1, 1}, {1, 1}, {0, 0})},
      {{0, 2, 5, 5}, p({2, 2}, {2, 2}, {0, 0})}};
  for (const auto& [s, q] : list)
    b.add({b.x(s)}, q, pair_note("k", q.kernel) + " " + pair_note("s", q.stride) + " " + pair_note("p", q.padding));
}

void build(Op op, Builder& b) {
  const DType d = b.dtype();
  switch (op) {
    // ---- GEMM and convolution
    case Op::matmul: {
      const std::vector<std::pair<Shape, Shape>> shapes = {
          {{7, 13}, {13, 5}},    {{13}, {13, 5}},    {{7, 13}, {13}}, {{13}, {13}},
          {{3, 7, 13}, {13, 5}}, {{0, 13}, {13, 5}}, {{7, 0}, {0, 5}}, {{1, 1}, {1, 1}}, {{33, 70}, {70, 40}}};
      for (const auto& [sa, sb] : shapes) b.add({b.x(sa), b.x(sb)});
      return;
    }
    case Op::linear:
      b.add({b.x({7, 13}), b.x({5, 13}), b.x({5})});
      b.add({b.x({7, 13}), b.x({5, 13})}, NoParams{}, "no bias");
      b.add({b.x({2, 3, 13}), b.x({5, 13}), b.x({5})});
      b.add({b.x({0, 13}), b.x({5, 13}), b.x({5})});
      b.add({b.x({7, 0}), b.x({5, 0}), b.x({5})}, NoParams{}, "no input features: bias only");
      b.add({b.x({1, 1}), b.x({1, 1}), b.x({1})});
      b.add({b.x({33, 70}), b.x({40, 70}), b.x({40})});
      return;
    case Op::fp8_linear: {
      // Sizes cuBLASLt's fp8 GEMM takes (multiples of 16); scales that put the values in
      // E4M3's upper binades and the gradients (E5M2, HYBRID) well above its subnormals.
      const auto meta = [] {
        auto m = std::make_shared<Fp8LinearMeta>();
        m->input_scale = 256.0f;
        m->weight_scale = 128.0f;
        m->grad_scale = 4096.0f;
        return Fp8LinearParams{m};
      };
      b.add({b.x({32, 64}), b.x({48, 64}), b.x({48})}, meta());
      b.add({b.x({32, 64}), b.x({48, 64})}, meta(), "no bias");
      b.add({b.x({2, 16, 32}), b.x({16, 32}), b.x({16})}, meta());
      b.add({b.x({0, 32}), b.x({16, 32}), b.x({16})}, meta(), "no rows");
      b.add({b.x({1, 1}), b.x({1, 1}), b.x({1})}, meta(), "one element (the GPU refuses k, n below 16)");
      return;
    }
    case Op::bmm:
      b.add({b.x({3, 7, 13}), b.x({3, 13, 5})});
      b.add({b.x({1, 1, 1}), b.x({1, 1, 1})});
      b.add({b.x({0, 7, 13}), b.x({0, 13, 5})});
      b.add({b.x({2, 33, 70}), b.x({2, 70, 40})});
      return;
    case Op::scaled_dot_product_attention: {
      // q, k, v and an additive mask, which takes no gradient. The sizes a fused GPU kernel
      // takes (head dims of 64, fp16/bf16) run there; the others are the composed path's.
      const std::vector<bool> diff = {true, true, true, false};
      const auto attn = [](std::optional<double> scale, bool causal) { return AttentionParams{scale, causal}; };
      b.add({b.x({2, 3, 5, 8}), b.x({2, 3, 5, 8}), b.x({2, 3, 5, 8})}, attn({}, false), "");
      b.add({b.x({2, 2, 7, 8}), b.x({2, 2, 7, 8}), b.x({2, 2, 7, 8})}, attn({}, true), "causal");
      b.add({b.x({2, 3, 4, 8}), b.x({2, 3, 6, 8}), b.x({2, 3, 6, 5}), b.x({2, 1, 1, 6})}, attn(0.3, false),
            "padding mask, scale 0.3", diff);
      b.add({b.x({6, 5, 8}), b.x({6, 9, 8}), b.x({6, 9, 8}), b.x({5, 9})}, attn({}, false), "shared mask", diff);
      b.add({b.x({1, 1, 1, 1}), b.x({1, 1, 1, 1}), b.x({1, 1, 1, 1})}, attn({}, false), "");
      b.add({b.x({0, 2, 3, 8}), b.x({0, 2, 3, 8}), b.x({0, 2, 3, 8})}, attn({}, false), "no batches");
      b.add({b.x({2, 4, 64, 64}), b.x({2, 4, 64, 64}), b.x({2, 4, 64, 64})}, attn({}, true), "causal, head dim 64");
      b.add({b.x({2, 4, 64, 64}), b.x({2, 4, 96, 64}), b.x({2, 4, 96, 64}), b.x({2, 1, 64, 96}, -2, 0)},
            attn({}, false), "mask per batch, head dim 64", diff);
      return;
    }
    case Op::lstm:
    case Op::gru:
    case Op::rnn_tanh:
    case Op::rnn_relu: {
      // x, W_ih, W_hh, b_ih, b_hh, h0 (, c0): small ones, one without biases and states,
      // and one of the sizes cuDNN's tensor-core RNN takes (multiples of 8).
      const std::int64_t g = op == Op::lstm ? 4 : op == Op::gru ? 3 : 1;
      const bool lstm = op == Op::lstm;
      auto layer = [&](std::int64_t t, std::int64_t batch, std::int64_t in, std::int64_t h, bool full, const char* note) {
        std::vector<Tensor> x = {b.x({t, batch, in}), b.x({g * h, in}, -0.5, 0.5), b.x({g * h, h}, -0.5, 0.5)};
        if (full) {
          x.push_back(b.x({g * h}, -0.5, 0.5));
          x.push_back(b.x({g * h}, -0.5, 0.5));
          x.push_back(b.x({batch, h}));
          if (lstm) x.push_back(b.x({batch, h}));
        }
        b.add(std::move(x), NoParams{}, note);
      };
      layer(5, 3, 4, 6, true, "biases and initial states");
      layer(4, 2, 3, 5, false, "no biases, zero states");
      layer(1, 1, 1, 1, true, "one step");
      layer(0, 2, 3, 4, true, "no steps");
      layer(8, 4, 64, 64, true, "hidden 64");
      return;
    }
    case Op::conv2d: {
      auto conv = [](std::array<std::int64_t, 2> s, std::array<std::int64_t, 2> pad,
                     std::array<std::int64_t, 2> dil, std::int64_t groups) {
        ConvParams p;
        p.stride = s, p.padding = pad, p.dilation = dil, p.groups = groups;
        return p;
      };
      b.add({b.x({2, 3, 7, 9}), b.x({4, 3, 3, 3}), b.x({4})}, conv({1, 1}, {1, 1}, {1, 1}, 1), "k3 p1");
      b.add({b.x({2, 3, 7, 9}), b.x({4, 3, 3, 3})}, conv({2, 2}, {0, 0}, {1, 1}, 1), "k3 s2 no bias");
      b.add({b.x({2, 4, 9, 11}), b.x({6, 2, 3, 3}), b.x({6})}, conv({1, 2}, {2, 2}, {2, 2}, 2), "k3 s1x2 p2 d2 g2");
      b.add({b.x({2, 3, 7, 9}), b.x({5, 3, 1, 1}), b.x({5})}, conv({1, 1}, {0, 0}, {1, 1}, 1), "k1");
      b.add({b.x({1, 1, 1, 1}), b.x({1, 1, 1, 1}), b.x({1})}, conv({1, 1}, {0, 0}, {1, 1}, 1), "k1");
      b.add({b.x({0, 3, 5, 5}), b.x({4, 3, 3, 3}), b.x({4})}, conv({1, 1}, {1, 1}, {1, 1}, 1), "k3 p1");
      return;
    }
    // ---- normalisation
    case Op::batch_norm: {
      // x, weight, bias, running_mean, running_var; the statistics take no gradient.
      const std::vector<bool> diff = {true, true, true, false, false};
      auto bn = [&](const Shape& s, bool w, bool stats, bool training) {
        const std::int64_t c = s[1];
        b.add({b.x(s), w ? b.x({c}) : Tensor(), w ? b.x({c}) : Tensor(), stats ? b.x({c}, -0.5, 0.5) : Tensor(),
               stats ? b.x({c}, 0.5, 1.5) : Tensor()},
              BatchNormParams{training, 0.1, 1e-5}, training ? "training" : "eval", diff);
      };
      bn({4, 3, 5}, true, true, true);
      bn({6, 3}, true, false, true);
      bn({2, 3, 5, 7}, false, true, true);
      bn({4, 3, 5}, true, true, false);
      bn({1, 1}, true, true, false);
      bn({0, 3, 5}, true, true, false);
      bn({8, 2, 200}, true, true, true);  // 1600 values per channel
      return;
    }
    case Op::layer_norm:
      b.add({b.x({7, 13}), b.x({13}), b.x({13})}, LayerNormParams{1, 1e-5}, "dims=1");
      b.add({b.x({2, 3, 5}), b.x({3, 5}), b.x({3, 5})}, LayerNormParams{2, 1e-5}, "dims=2");
      b.add({b.x({7, 13})}, LayerNormParams{1, 1e-5}, "dims=1 no affine");
      b.add({b.x({7, 13}), Tensor(), b.x({13})}, LayerNormParams{1, 1e-5}, "dims=1 bias only");
      b.add({b.x({1, 1}), b.x({1}), b.x({1})}, LayerNormParams{1, 1e-5}, "dims=1");
      b.add({b.x({0, 13}), b.x({13}), b.x({13})}, LayerNormParams{1, 1e-5}, "dims=1");
      b.add({b.x({5, 1025}), b.x({1025}), b.x({1025})}, LayerNormParams{1, 1e-5}, "dims=1");
      return;
    // ---- activations: the interesting range (hardswish's kinks at +-3) on both sides
    case Op::relu: unary(b, -1, 1); return;
    case Op::gelu:
      unary(b, -4, 4, GeluParams{false}, "erf");
      b.add({b.x({7, 13}, -4, 4)}, GeluParams{true}, "tanh");
      b.add({b.x({65, 257}, -4, 4)}, GeluParams{true}, "tanh");
      return;
    case Op::silu:
    case Op::sigmoid:
    case Op::tanh:
    case Op::hardswish:
    case Op::hardsigmoid: unary(b, -4, 4); return;
    // ---- arithmetic
    case Op::add:
    case Op::sub:
    case Op::mul: binary(b, -1, 1); return;
    case Op::div: binary(b, 0.5, 2); return;  // divisors away from 0
    case Op::add_scalar:
    case Op::sub_scalar:
    case Op::mul_scalar: unary(b, -1, 1, ScalarParams{1.7}, "s=1.7"); return;
    case Op::div_scalar:
      unary(b, -1, 1, ScalarParams{1.7}, "s=1.7");
      b.add({b.x({7, 13})}, ScalarParams{-0.3}, "s=-0.3");
      return;
    case Op::neg:
    case Op::abs:
    case Op::square: unary(b, -1, 1); return;
    // ---- math: inputs where each is finite
    case Op::exp: unary(b, -4, 4); return;
    case Op::log:
    case Op::sqrt:
    case Op::rsqrt: unary(b, 0.1, 4); return;
    case Op::pow:
      unary(b, 0.5, 2, ScalarParams{2.5}, "e=2.5");
      for (double e : {-1.5, 2.0, 0.5, 3.0}) {
        char note[16];
        std::snprintf(note, sizeof note, "e=%g", e);
        b.add({b.x({7, 13}, 0.5, 2)}, ScalarParams{e}, note);
      }
      return;
    case Op::reciprocal: unary(b, 0.25, 4); return;
    case Op::erf: unary(b, -3, 3); return;  // its bend, and the tails where it saturates to +-1
    case Op::clamp:
      unary(b, -1, 1, ClampParams{-0.5, 0.5}, "[-0.5, 0.5]");
      b.add({b.x({7, 13})}, ClampParams{-kInf, 0.3}, "[-inf, 0.3]");
      b.add({b.x({7, 13})}, ClampParams{-0.2, kInf}, "[-0.2, inf]");
      return;
    // ---- reductions
    case Op::sum:
    case Op::mean:
    case Op::max: reduction(b); return;
    case Op::softmax:
    case Op::log_softmax: softmax_like(b); return;
    // ---- losses
    case Op::cross_entropy:
      b.add({b.x({7, 13}, -4, 4), b.indices({7}, 13)}, CrossEntropyParams{0}, "smoothing=0");
      b.add({b.x({7, 13}, -4, 4), b.indices({7}, 13)}, CrossEntropyParams{0.1}, "smoothing=0.1");
      b.add({b.x({1, 1}, -4, 4), b.indices({1}, 1)}, CrossEntropyParams{0}, "smoothing=0");
      b.add({b.x({5, 1025}, -4, 4), b.indices({5}, 1025)}, CrossEntropyParams{0.1}, "smoothing=0.1");
      return;
    case Op::mse_loss:
      for (const Shape& s : std::vector<Shape>{{7, 13}, {1}, {}, {65, 257}}) b.add({b.x(s), b.x(s)});
      return;
    // ---- layers
    case Op::embedding:
      // Random rows with replacement: repeated rows, whose gradients add up.
      b.add({b.indices({7}, 13), b.x({13, 5})});
      b.add({b.indices({3, 4}, 13), b.x({13, 5})});
      b.add({b.indices({0}, 13), b.x({13, 5})});
      b.add({b.indices({1}, 1), b.x({1, 1})});
      b.add({b.indices({200}, 7), b.x({7, 33})});
      return;
    case Op::dropout:
      for (const Shape& s : kUnaryShapes) b.add({b.x(s)}, DropoutParams{0.3, true, 7, 0}, "p=0.3");
      b.add({b.x({7, 13})}, DropoutParams{0.3, true, 7, 12345}, "p=0.3 offset=12345");
      b.add({b.x({7, 13})}, DropoutParams{0.3, false, 7, 0}, "eval");
      b.add({b.x({7, 13})}, DropoutParams{0, true, 7, 0}, "p=0");
      return;
    case Op::max_pool2d:
    case Op::avg_pool2d: pool(b); return;
    case Op::adaptive_avg_pool2d: {
      const std::vector<std::pair<Shape, std::array<std::int64_t, 2>>> list = {
          {{2, 3, 7, 9}, {3, 4}}, {{2, 3, 7, 9}, {1, 1}}, {{2, 3, 7, 9}, {9, 11}},  // windows overlap
          {{1, 1, 1, 1}, {1, 1}}, {{0, 2, 5, 5}, {2, 2}}};
      for (const auto& [s, o] : list) {
        PoolParams p;
        p.kernel = o;
        b.add({b.x(s)}, p, pair_note("out ", o));
      }
      return;
    }
    // ---- shape
    case Op::reshape: {
      const std::vector<std::pair<Shape, Shape>> list = {
          {{7, 13}, {13, 7}}, {{3, 5, 7}, {-1}}, {{}, {1}}, {{0, 5}, {5, 0}}, {{7, 13}, {7, 1, 13}}};
      for (const auto& [s, t] : list) b.add({b.x(s)}, ShapeParams{t}, "to " + to_string(t));
      return;
    }
    case Op::permute: {
      const std::vector<std::pair<Shape, std::vector<std::int64_t>>> list = {
          {{3, 5, 7}, {2, 0, 1}}, {{7, 13}, {1, 0}}, {{}, {}}, {{0, 5}, {1, 0}}, {{2, 3, 4, 5}, {0, 2, 3, 1}}};
      for (const auto& [s, perm] : list) {
        std::string note = "perm=";
        for (std::size_t i = 0; i < perm.size(); ++i) note += (i ? "," : "") + std::to_string(perm[i]);
        b.add({b.x(s)}, PermuteParams{perm}, perm.empty() ? "perm=()" : note);
      }
      return;
    }
    case Op::concat:
      b.add({b.x({7, 13}), b.x({3, 13})}, DimParams{0}, "dim=0");
      b.add({b.x({7, 2}), b.x({7, 5}), b.x({7, 1})}, DimParams{1}, "dim=1");
      b.add({b.x({3, 5, 7}), b.x({3, 2, 7})}, DimParams{-2}, "dim=-2");
      b.add({b.x({0, 13}), b.x({4, 13})}, DimParams{0}, "dim=0");
      b.add({b.x({1}), b.x({1})}, DimParams{0}, "dim=0");
      if (const auto w = b.wider()) b.add({b.x({7, 13}), b.x_in(*w, {3, 13})}, DimParams{0}, "dim=0");
      return;
    case Op::slice: {
      const std::vector<std::pair<Shape, SliceParams>> list = {
          {{7, 13}, {1, 2, 11, 3}}, {{7, 13}, {0, 1, 6, 1}}, {{3, 5, 7}, {2, 1, 7, 2}},
          {{1}, {0, 0, 1, 1}},      {{7, 13}, {1, 4, 4, 1}},  // an empty result
          {{0, 5}, {0, 0, 0, 1}}};
      for (const auto& [s, p] : list)
        b.add({b.x(s)}, p,
              "dim=" + std::to_string(p.dim) + " " + std::to_string(p.start) + ":" + std::to_string(p.end) + ":" +
                  std::to_string(p.step));
      return;
    }
    case Op::where: {
      const std::vector<bool> diff = {false, true, true};
      b.add({b.mask({7, 13}), b.x({7, 13}), b.x({7, 13})}, NoParams{}, "", diff);
      b.add({b.mask({13}), b.x({7, 13}), b.x({7, 1})}, NoParams{}, "", diff);
      b.add({b.mask({}), b.x({}), b.x({})}, NoParams{}, "", diff);
      b.add({b.mask({0, 5}), b.x({0, 5}), b.x({5})}, NoParams{}, "", diff);
      b.add({b.mask({65, 257}), b.x({65, 257}), b.x({257})}, NoParams{}, "", diff);
      if (const auto w = b.wider()) b.add({b.mask({7, 13}), b.x({7, 13}), b.x_in(*w, {7, 13})}, NoParams{}, "", diff);
      return;
    }
    case Op::masked_fill: {
      const std::vector<bool> diff = {true, false};
      const std::vector<std::pair<Shape, Shape>> list = {
          {{7, 13}, {13}}, {{7, 13}, {7, 13}}, {{}, {}}, {{0, 5}, {5}}, {{65, 257}, {65, 1}}};
      for (const auto& [s, m] : list) b.add({b.x(s), b.mask(m)}, FillParams{-2.5}, "value=-2.5", diff);
      return;
    }
    case Op::cast:
      for (DType to : kFloatDTypes) b.add({b.x({7, 13})}, CastParams{to}, "to " + std::string(name(to)));
      for (const Shape& s : {Shape{65, 257}, Shape{}, Shape{0, 5}})
        b.add({b.x(s)}, CastParams{d == DType::f16 ? DType::bf16 : DType::f16},
              d == DType::f16 ? "to bf16" : "to f16");
      return;
  }
}

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int i = 0; i < kOpCount; ++i) ops.push_back(static_cast<Op>(i));
  return ops;
}

}  // namespace

std::vector<Case> cases_for(Op op, DType dtype) {
  Builder b(op, dtype);
  build(op, b);
  return b.take();
}

std::vector<Case> cases(const std::vector<Op>& ops, const std::vector<DType>& dtypes) {
  std::vector<Case> out;
  for (Op op : ops.empty() ? all_ops() : ops)
    for (DType d : dtypes.empty() ? std::vector<DType>(kFloatDTypes.begin(), kFloatDTypes.end()) : dtypes)
      for (Case& c : cases_for(op, d)) out.push_back(std::move(c));
  return out;
}

// ================================================================ running

namespace {

// A fresh copy on `device`, never the tensor itself: the op may change its inputs in place
// (batch_norm's running statistics), and each run must start from the case's values.
Tensor copy_to(const Tensor& t, Device device) {
  if (!t.defined()) return t;
  return t.device() == device ? t.clone() : t.to(device);
}

Value value_of(std::string what, const Tensor& t) {
  Value v;
  v.what = std::move(what);
  v.defined = t.defined();
  if (v.defined) {
    v.shape = t.shape();
    v.dtype = t.dtype();
    v.values = t.to_f64();
  }
  return v;
}

}  // namespace

Outcome evaluate(const Case& c, Direction d, Device device) {
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) in.push_back(copy_to(t, device));
  const bool backward = d == Direction::backward;
  if (backward)
    for (std::size_t i = 0; i < in.size(); ++i)
      if (c.differentiable[i]) in[i].set_requires_grad(true);
  const Tensor out = call(c.op, in, c.params);
  Outcome o;
  if (!backward) {
    o.push_back(value_of("output", out));
    for (std::size_t i = 0; i < in.size(); ++i) o.push_back(value_of("input " + std::to_string(i) + " after the op", in[i]));
    return o;
  }
  Generator gen(c.seed);
  const Tensor upstream = Tensor::uniform(out.shape(), gen, -1, 1, out.dtype());
  out.backward(copy_to(upstream, device));
  for (std::size_t i = 0; i < in.size(); ++i)
    if (c.differentiable[i]) o.push_back(value_of("gradient of input " + std::to_string(i), in[i].grad()));
  return o;
}

namespace {

Result header(const Case& c, Direction d, Device device) {
  Result r;
  r.op = c.op;
  r.dtype = c.dtype;
  r.shapes = c.shapes();
  r.direction = d;
  r.device = device;
  r.threshold = threshold(c.op, d, c.dtype);
  return r;
}

Result failed(Result r, std::string reason) {
  r.status = Status::fail;
  r.reason = std::move(reason);
  return r;
}

}  // namespace

Result judge(const Case& c, Direction d, Device device, const Outcome& got, const Outcome& ref) {
  Result r = header(c, d, device);
  const std::string dev(device_name(device));
  if (got.size() != ref.size())
    return failed(r, dev + " gave " + std::to_string(got.size()) + " results where the CPU gives " +
                         std::to_string(ref.size()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Value& g = got[i];
    const Value& f = ref[i];
    std::string problem;
    if (g.defined != f.defined) {
      problem = std::string(g.defined ? "defined" : "undefined") + " where the CPU's is " +
                (f.defined ? "defined" : "undefined");
    } else if (!f.defined) {
      continue;
    } else if (g.shape != f.shape) {
      problem = "shape " + to_string(g.shape) + " where the CPU's is " + to_string(f.shape);
    } else if (g.dtype != f.dtype) {
      problem = "dtype " + std::string(name(g.dtype)) + " where the CPU's is " + std::string(name(f.dtype));
    } else {
      const Comparison cmp = compare(g.values, f.values, r.threshold);
      r.compared = true;
      if (std::isnan(cmp.nmse) || cmp.nmse > r.nmse) r.nmse = cmp.nmse;
      if (!cmp.ok) problem = cmp.reason;
    }
    if (!problem.empty() && r.status == Status::pass) {
      r.status = Status::fail;
      r.reason = f.what + ": " + problem;
    }
  }
  return r;
}

std::uint64_t guard_violations_during(const std::function<void()>& body) {
  struct On {
    On() { set_guard_bytes(true); }
    ~On() { set_guard_bytes(false); }
    On(const On&) = delete;
    On& operator=(const On&) = delete;
  };
  const std::uint64_t before = guard_violations();
  {
    const On on;
    body();
  }
  return guard_violations() - before;
}

Result run_case(const Case& c, Direction d, Device device) {
  const Result head = header(c, d, device);
  const std::string dev(device_name(device));
  auto guarded = [&](Device where, Outcome& outcome, std::string& error) {
    return guard_violations_during([&] {
      try {
        outcome = evaluate(c, d, where);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  };
  auto overwritten = [](std::uint64_t n, const std::string& who) {
    return who + " wrote outside a tensor: " + std::to_string(n) + " storage" + (n == 1 ? "" : "s") +
           " freed with guard bytes changed";
  };

  Outcome ref, got;
  std::string ref_error, error;
  if (const std::uint64_t n = guarded(Device::cpu, ref, ref_error); n > 0)
    return failed(head, overwritten(n, "the CPU reference"));
  if (!ref_error.empty()) return failed(head, "the CPU reference threw: " + ref_error);
  if (const std::uint64_t n = guarded(device, got, error); n > 0) return failed(head, overwritten(n, dev));
  if (!error.empty()) {
    // cuBLAS/cuDNN have no bf16 GEMM below Ampere on every version: a GPU that refuses one
    // lacks the feature, which is not a wrong result.
    const kernels::cuda::Probe& gpu = kernels::cuda::probe();
    // cuBLASLt's fp8 GEMM needs compute capability 8.9 and k, n multiples of 16 (as
    // TransformerEngine requires of an fp8 Linear's shapes): a case outside is a refusal,
    // not a wrong result.
    if (device == Device::cuda && c.op == Op::fp8_linear && error.find("has no fp8 GEMM") != std::string::npos) {
      Result r = head;
      r.status = Status::skip;
      r.reason = error;
      return r;
    }
    if (device == Device::cuda && c.dtype == DType::bf16 && tolerance(c.op, d) == Tolerance::gemm &&
        gpu.compute_capability > 0 && gpu.compute_capability < 80) {
      Result r = head;
      r.status = Status::skip;
      r.reason = "bf16 GEMM on compute capability " + std::to_string(gpu.compute_capability / 10) + "." +
                 std::to_string(gpu.compute_capability % 10) + " (needs 8.0): " + error;
      return r;
    }
    return failed(head, dev + " threw: " + error);
  }
  return judge(c, d, device, got, ref);
}

std::vector<Result> run(const Options& options) {
  std::vector<Result> results;
  const std::vector<DType> dtypes =
      options.dtypes.empty() ? std::vector<DType>(kFloatDTypes.begin(), kFloatDTypes.end()) : options.dtypes;
  for (Op op : options.ops.empty() ? all_ops() : options.ops)
    for (DType dtype : dtypes)
      for (const Case& c : cases_for(op, dtype))
        for (Direction d : options.directions) {
          results.push_back(run_case(c, d, options.device));
          if (options.on_result) options.on_result(results.back());
        }
  return results;
}

namespace {

// f16 parameters of several sizes (one of 70000 elements: more than one chunk of the GPU's
// multi-tensor kernel) on `device`, their optimizer with fp32 masters, three steps of
// gradients from one seed. The parameters and the masters after them, on the host.
std::vector<Tensor> train_steps(bool adamw, Device device) {
  Generator gen(20261129);
  optim::NamedParams named;
  for (const Shape& s : {Shape{3}, Shape{64, 65}, Shape{70000}, Shape{1}})
    named.emplace_back("p" + std::to_string(named.size()), Tensor::uniform(s, gen, -1, 1, DType::f16).to(device));
  std::unique_ptr<optim::Optimizer> opt;
  if (adamw) opt = std::make_unique<optim::AdamW>(named, 1e-3);
  else opt = std::make_unique<optim::SGD>(named, 0.05, optim::SGD::Options{0.9, 0, 1e-4, true});
  opt->enable_master_weights();
  for (int step = 0; step < 3; ++step) {
    for (auto& [name, p] : named) p.set_grad(Tensor::uniform(p.shape(), gen, -2, 2, DType::f16).to(device));
    opt->step();
  }
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < named.size(); ++i) {
    out.push_back(named[i].second.to(Device::cpu));
    out.push_back(opt->master(i).to(Device::cpu));
  }
  return out;
}

}  // namespace

std::vector<StepResult> run_steps(Device device) {
  std::vector<StepResult> results;
  for (const bool adamw : {false, true}) {
    StepResult r;
    r.step = std::string(adamw ? "AdamW" : "SGD (Nesterov, weight decay)") +
             " step over every parameter (fp32 masters of 4 f16 parameters, 3 steps)";
    try {
      const std::vector<Tensor> ref = train_steps(adamw, Device::cpu), got = train_steps(adamw, device);
      for (std::size_t k = 0; k < ref.size() && r.status == Status::pass; ++k) {
        const std::vector<double> a = got[k].to_f64(), b = ref[k].to_f64();
        for (std::size_t i = 0; i < a.size(); ++i)
          if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
            r.status = Status::fail;
            r.reason = std::string(k % 2 ? "master" : "parameter") + " p" + std::to_string(k / 2) + " element " +
                       std::to_string(i) + " is " + num(a[i]) + " where the CPU has " + num(b[i]);
            break;
          }
      }
    } catch (const std::exception& e) {
      r.status = Status::fail;
      r.reason = e.what();
    }
    results.push_back(std::move(r));
  }
  return results;
}

Summary summarize(const std::vector<Result>& results) {
  Summary s;
  for (const Result& r : results) {
    ++s.cases;
    if (r.status == Status::pass) ++s.passed;
    if (r.status == Status::fail) ++s.failed;
    if (r.status == Status::skip) ++s.skipped;
  }
  return s;
}

}  // namespace ampcheck::parity
