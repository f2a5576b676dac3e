// The elementwise and reduction families over Views (kernels/elementwise_kernels.h,
// kernels/reduce_kernels.h): the function list and the tables; every MapFn on the CPU
// against a reference written here in double, and in f16/bf16 as the f32 result rounded
// once; broadcasting; the CPU kernels called directly against the ops; the reductions
// against plain loops; max's merge rule (what the CUDA block reduction combines with)
// against the sequential fold on every partition; and, on a machine with a GPU, the CUDA
// tables against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cuda/cuda.h"  // probe
#include "kernels/elementwise_kernels.h"
#include "kernels/kernel_note.h"
#include "tests/gpu_test_util.h"
#include "kernels/reduce_kernels.h"

namespace ampcheck {
namespace {

using testing::bytes_of;
using testing::has_gpu;

using kernels::ElementwiseKernels;
using kernels::MapFn;
using kernels::MapScalars;
using kernels::ReduceKernels;
using kernels::View;
using i64 = std::int64_t;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_value(double got, double want, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
}

// out = fn(inputs) of `shape` and `dtype` on the inputs' device, through table k.
Tensor run_map(const ElementwiseKernels& k, MapFn fn, const MapScalars& s, const std::vector<Tensor>& in,
               const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype, in.at(0).device());
  std::vector<View> views;
  for (const Tensor& t : in) views.push_back(view_of(t));
  k.map(fn, s, views.data(), static_cast<int>(views.size()), view_of(out));
  return out;
}

// ---- the function list and the tables -------------------------------------------------------

TEST(ElementwiseKernels, EveryMapFnHasOneNameAndAnArityOfOneToThree) {
  std::set<std::string> names;
  for (int i = 0; i < kernels::kMapFnCount; ++i) {
    const auto fn = static_cast<MapFn>(i);
    const std::string name = kernels::map_fn_name(fn);
    EXPECT_NE(name, "?") << i;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    EXPECT_GE(kernels::map_arity(fn), 1) << name;
    EXPECT_LE(kernels::map_arity(fn), 3) << name;
  }
}

TEST(ElementwiseKernels, TheCpuTablesHaveEveryEntry) {
  EXPECT_NE(ElementwiseKernels::cpu().map, nullptr);
  const ReduceKernels& r = ReduceKernels::cpu();
  EXPECT_NE(r.sum, nullptr);
  EXPECT_NE(r.mean, nullptr);
  EXPECT_NE(r.max, nullptr);
  EXPECT_NE(r.max_backward, nullptr);
}

TEST(ElementwiseKernels, TheCudaTablesAreCompleteOrSayThereIsNoGpuBuild) {
  if (kernels::cuda::probe().built_with_cuda) {
    // asking for a table touches no GPU
    EXPECT_NE(ElementwiseKernels::cuda().map, nullptr);
    const ReduceKernels& r = ReduceKernels::cuda();
    EXPECT_NE(r.sum, nullptr);
    EXPECT_NE(r.mean, nullptr);
    EXPECT_NE(r.max, nullptr);
    EXPECT_NE(r.max_backward, nullptr);
    return;
  }
  for (const std::function<void()>& ask : std::vector<std::function<void()>>{
           [] { ElementwiseKernels::cuda(); }, [] { ReduceKernels::cuda(); }}) {
    try {
      ask();
      ADD_FAILURE() << "a build without CUDA handed out a CUDA table";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no GPU implementation"), std::string::npos) << e.what();
    }
  }
}

TEST(ElementwiseKernels, AWrongNumberOfInputsNamesTheFunction) {
  const Tensor x = Tensor::ones({3});
  try {
    run_map(ElementwiseKernels::cpu(), MapFn::relu_backward, {}, {x}, {3}, DType::f32);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "map relu_backward: takes 2 inputs, given 1");
  }
}

// ---- every MapFn against a reference in double ----------------------------------------------

// How a case draws each input: 'r' real in [-3.5, 3.5) (past hardswish's and
// hardsigmoid's kinks), 'p' positive in [0.25, 4), 'c' a condition or mask (0, 1, -2,
// 0.5, 0, ...: zeros and nonzeros of either sign), 'n' and 'i' a softmax's output and
// input (NaN against -Inf and against a finite score, finite values against -Inf).
struct MapCase {
  MapFn fn;
  std::string inputs;
  MapScalars s;
  std::function<double(const double* v, double a, double b)> ref;
};

double sgn(double x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
const double kSqrt2 = std::sqrt(2.0);
const double kPi = 3.14159265358979323846;
double gelu_tanh_inner(double x) { return std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x); }

// One case per MapFn at least (checked below); derivatives written from calculus, and
// where a closed form has a second spelling (erfc for erf), that one.
std::vector<MapCase> map_cases() {
  return {
      {MapFn::relu, "r", {}, [](const double* v, double, double) { return v[0] > 0 ? v[0] : 0.0; }},
      {MapFn::relu_backward, "rr", {}, [](const double* v, double, double) { return v[1] > 0 ? v[0] : 0.0; }},
      {MapFn::gelu_erf, "r", {}, [](const double* v, double, double) {
         return 0.5 * v[0] * std::erfc(-v[0] / kSqrt2);
       }},
      {MapFn::gelu_erf_backward, "rr", {}, [](const double* v, double, double) {
         const double x = v[1];
         return v[0] * (0.5 * std::erfc(-x / kSqrt2) + x * std::exp(-x * x / 2) / std::sqrt(2 * kPi));
       }},
      {MapFn::gelu_tanh, "r", {}, [](const double* v, double, double) {
         return 0.5 * v[0] * (1 + std::tanh(gelu_tanh_inner(v[0])));
       }},
      {MapFn::gelu_tanh_backward, "rr", {}, [](const double* v, double, double) {
         const double x = v[1], t = std::tanh(gelu_tanh_inner(x));
         const double du = std::sqrt(2 / kPi) * (1 + 3 * 0.044715 * x * x);
         return v[0] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du);
       }},
      {MapFn::silu, "r", {}, [](const double* v, double, double) { return v[0] / (1 + std::exp(-v[0])); }},
      {MapFn::silu_backward, "rr", {}, [](const double* v, double, double) {
         const double s = sigmoid_ref(v[1]);
         return v[0] * (s + v[1] * s * (1 - s));
       }},
      {MapFn::sigmoid, "r", {}, [](const double* v, double, double) { return sigmoid_ref(v[0]); }},
      {MapFn::sigmoid_backward, "rr", {}, [](const double* v, double, double) { return v[0] * v[1] * (1 - v[1]); }},
      {MapFn::tanh, "r", {}, [](const double* v, double, double) { return std::tanh(v[0]); }},
      {MapFn::tanh_backward, "rr", {}, [](const double* v, double, double) { return v[0] * (1 - v[1] * v[1]); }},
      {MapFn::hardswish, "r", {}, [](const double* v, double, double) {
         return v[0] * std::min(std::max(v[0] + 3, 0.0), 6.0) / 6;
       }},
      {MapFn::hardswish_backward, "rr", {}, [](const double* v, double, double) {
         const double x = v[1];
         return x < -3 ? 0.0 : x <= 3 ? v[0] * (2 * x + 3) / 6 : v[0];
       }},
      {MapFn::hardsigmoid, "r", {}, [](const double* v, double, double) {
         return std::min(std::max(v[0] + 3, 0.0), 6.0) / 6;
       }},
      {MapFn::hardsigmoid_backward, "rr", {}, [](const double* v, double, double) {
         return v[1] > -3 && v[1] < 3 ? v[0] / 6 : 0.0;
       }},
      {MapFn::add, "rr", {}, [](const double* v, double, double) { return v[0] + v[1]; }},
      {MapFn::sub, "rr", {}, [](const double* v, double, double) { return v[0] - v[1]; }},
      {MapFn::mul, "rr", {}, [](const double* v, double, double) { return v[0] * v[1]; }},
      {MapFn::div, "rp", {}, [](const double* v, double, double) { return v[0] / v[1]; }},
      {MapFn::div_backward_divisor, "rrp", {}, [](const double* v, double, double) { return -(v[0] * v[1]) / v[2]; }},
      {MapFn::add_scalar, "r", {0.75}, [](const double* v, double a, double) { return v[0] + a; }},
      {MapFn::sub_scalar, "r", {-1.5}, [](const double* v, double a, double) { return v[0] - a; }},
      {MapFn::mul_scalar, "r", {3}, [](const double* v, double a, double) { return v[0] * a; }},
      {MapFn::div_scalar, "r", {-8}, [](const double* v, double a, double) { return v[0] / a; }},
      {MapFn::neg, "r", {}, [](const double* v, double, double) { return -v[0]; }},
      {MapFn::abs, "r", {}, [](const double* v, double, double) { return v[0] < 0 ? -v[0] : v[0]; }},
      {MapFn::abs_backward, "rr", {}, [](const double* v, double, double) { return v[0] * sgn(v[1]); }},
      {MapFn::square, "r", {}, [](const double* v, double, double) { return v[0] * v[0]; }},
      {MapFn::square_backward, "rr", {}, [](const double* v, double, double) { return 2 * v[0] * v[1]; }},
      {MapFn::exp, "r", {}, [](const double* v, double, double) { return std::exp(v[0]); }},
      {MapFn::log, "p", {}, [](const double* v, double, double) { return std::log(v[0]); }},
      {MapFn::sqrt, "p", {}, [](const double* v, double, double) { return std::sqrt(v[0]); }},
      {MapFn::sqrt_backward, "rp", {}, [](const double* v, double, double) { return v[0] / (2 * v[1]); }},
      {MapFn::rsqrt, "p", {}, [](const double* v, double, double) { return std::pow(v[0], -0.5); }},
      {MapFn::rsqrt_backward, "rp", {}, [](const double* v, double, double) {
         return -0.5 * v[0] * v[1] * v[1] * v[1];
       }},
      {MapFn::pow, "p", {2.5}, [](const double* v, double a, double) { return std::pow(v[0], a); }},
      {MapFn::pow_backward, "rp", {2.5, 1.5}, [](const double* v, double, double) {
         return v[0] * 2.5 * std::pow(v[1], 1.5);
       }},
      {MapFn::reciprocal, "p", {}, [](const double* v, double, double) { return 1 / v[0]; }},
      {MapFn::reciprocal_backward, "rr", {}, [](const double* v, double, double) { return -v[0] * v[1] * v[1]; }},
      {MapFn::erf, "r", {}, [](const double* v, double, double) { return std::erf(v[0]); }},
      {MapFn::erf_backward, "rr", {}, [](const double* v, double, double) {
         return v[0] * 2 / std::sqrt(kPi) * std::exp(-v[1] * v[1]);
       }},
      {MapFn::clamp, "r", {-1, 2}, [](const double* v, double a, double b) { return std::min(std::max(v[0], a), b); }},
      {MapFn::clamp_backward, "rr", {-1, 2}, [](const double* v, double a, double b) {
         return v[1] >= a && v[1] <= b ? v[0] : 0.0;
       }},
      {MapFn::where, "crr", {}, [](const double* v, double, double) { return v[0] != 0 ? v[1] : v[2]; }},
      {MapFn::where_backward_taken, "cr", {}, [](const double* v, double, double) { return v[0] != 0 ? v[1] : 0.0; }},
      {MapFn::where_backward_other, "cr", {}, [](const double* v, double, double) { return v[0] != 0 ? 0.0 : v[1]; }},
      {MapFn::masked_fill, "rc", {-7.25}, [](const double* v, double a, double) { return v[1] != 0 ? a : v[0]; }},
      {MapFn::masked_fill_backward, "rc", {}, [](const double* v, double, double) { return v[1] != 0 ? 0.0 : v[0]; }},
      {MapFn::safe_softmax, "ni", {}, [](const double* v, double, double) {
         return std::isnan(v[0]) && v[1] == -std::numeric_limits<double>::infinity() ? 0.0 : v[0];
       }},
  };
}

std::vector<Tensor> draw_inputs(const MapCase& c, const Shape& shape, Generator& gen) {
  std::vector<Tensor> in;
  for (char kind : c.inputs) {
    if (kind == 'n' || kind == 'i') {
      // A softmax's output and input: NaN and -Inf, NaN and finite, finite and -Inf, both finite.
      const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
      const double p[] = {nan, nan, 0.25, 0.5}, s[] = {-inf, 1.5, -inf, -2};
      std::vector<double> v(static_cast<std::size_t>(numel(shape)));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = kind == 'n' ? p[i % 4] : s[i % 4];
      in.push_back(Tensor::from(v, shape, DType::f64));
    } else if (kind == 'c') {
      const double pattern[] = {0, 1, -2, 0.5, 0};
      std::vector<double> v(static_cast<std::size_t>(numel(shape)));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = pattern[i % 5];
      in.push_back(Tensor::from(v, shape, DType::f64));
    } else if (kind == 'p') {
      in.push_back(Tensor::uniform(shape, gen, 0.25, 4, DType::f64));
    } else {
      in.push_back(Tensor::uniform(shape, gen, -3.5, 3.5, DType::f64));
    }
  }
  return in;
}

TEST(ElementwiseKernels, EveryMapFnOnTheCpuIsItsReferenceInF64) {
  Generator gen(3);
  const Shape shape = {257};
  std::set<int> covered;
  for (const MapCase& c : map_cases()) {
    const char* name = kernels::map_fn_name(c.fn);
    covered.insert(static_cast<int>(c.fn));
    ASSERT_EQ(static_cast<int>(c.inputs.size()), kernels::map_arity(c.fn)) << name;
    const std::vector<Tensor> in = draw_inputs(c, shape, gen);
    const std::vector<double> got = run_map(ElementwiseKernels::cpu(), c.fn, c.s, in, shape, DType::f64).to_f64();
    std::vector<std::vector<double>> values;
    for (const Tensor& t : in) values.push_back(t.to_f64());
    for (std::size_t i = 0; i < got.size(); ++i) {
      double v[3] = {};
      for (std::size_t k = 0; k < values.size(); ++k) v[k] = values[k][i];
      const double want = c.ref(v, c.s.a, c.s.b);
      ASSERT_TRUE(same_value(got[i], want, 1e-10)) << name << " element " << i << ": " << got[i] << " vs " << want;
    }
  }
  for (int i = 0; i < kernels::kMapFnCount; ++i)
    EXPECT_TRUE(covered.count(i)) << kernels::map_fn_name(static_cast<MapFn>(i)) << " has no reference case";
}

TEST(ElementwiseKernels, EveryMapFnInF16AndBf16IsTheF32ResultRoundedOnce) {
  Generator gen(4);
  const Shape shape = {5, 131};
  for (const MapCase& c : map_cases()) {
    const std::vector<Tensor> in64 = draw_inputs(c, shape, gen);
    for (DType d : {DType::f16, DType::bf16}) {
      std::vector<Tensor> low, wide;
      for (const Tensor& t : in64) {
        low.push_back(t.to(d));
        wide.push_back(low.back().to(DType::f32));  // the same values, exactly
      }
      const Tensor got = run_map(ElementwiseKernels::cpu(), c.fn, c.s, low, shape, d);
      const Tensor want = run_map(ElementwiseKernels::cpu(), c.fn, c.s, wide, shape, DType::f32).to(d);
      EXPECT_EQ(bytes_of(got), bytes_of(want)) << kernels::map_fn_name(c.fn) << " " << name(d);
    }
  }
}

TEST(ElementwiseKernels, InputsBroadcastToTheOutputsShape) {
  Generator gen(5);
  const Tensor a = Tensor::uniform({3, 1, 4}, gen, -1, 1, DType::f64);
  const Tensor b = Tensor::uniform({2, 1}, gen, -1, 1, DType::f64);
  const Tensor c = Tensor::from(std::vector<double>{1, 0, 1, 1}, {4}, DType::f64);
  const std::vector<double> av = a.to_f64(), bv = b.to_f64(), cv = c.to_f64();
  const std::vector<double> sum = run_map(ElementwiseKernels::cpu(), MapFn::add, {}, {a, b}, {3, 2, 4}, DType::f64).to_f64();
  const std::vector<double> pick =
      run_map(ElementwiseKernels::cpu(), MapFn::where, {}, {c, a, b}, {3, 2, 4}, DType::f64).to_f64();
  const std::vector<double> scaled =
      run_map(ElementwiseKernels::cpu(), MapFn::mul_scalar, {0.5}, {b}, {3, 2, 4}, DType::f64).to_f64();
  for (i64 i = 0; i < 3; ++i)
    for (i64 j = 0; j < 2; ++j)
      for (i64 k = 0; k < 4; ++k) {
        const auto o = static_cast<std::size_t>((i * 2 + j) * 4 + k);
        const double x = av[static_cast<std::size_t>(i * 4 + k)], y = bv[static_cast<std::size_t>(j)];
        EXPECT_EQ(sum[o], x + y) << i << " " << j << " " << k;
        EXPECT_EQ(pick[o], cv[static_cast<std::size_t>(k)] != 0 ? x : y) << i << " " << j << " " << k;
        EXPECT_EQ(scaled[o], y * 0.5) << i << " " << j << " " << k;
      }
}

TEST(ElementwiseKernels, TheCpuKernelsCalledDirectlyAreTheOpsBitForBit) {
  Generator gen(6);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::uniform({4, 1000}, gen, -3, 3, d);
    const Tensor y = Tensor::uniform({1000}, gen, 0.5, 2, d);
    const ElementwiseKernels& k = ElementwiseKernels::cpu();
    EXPECT_EQ(bytes_of(gelu(x)), bytes_of(run_map(k, MapFn::gelu_erf, {}, {x}, x.shape(), d))) << name(d);
    EXPECT_EQ(bytes_of(gelu(x, true)), bytes_of(run_map(k, MapFn::gelu_tanh, {}, {x}, x.shape(), d))) << name(d);
    EXPECT_EQ(bytes_of(div(x, y)), bytes_of(run_map(k, MapFn::div, {}, {x, y}, x.shape(), d))) << name(d);
    EXPECT_EQ(bytes_of(pow(x, 3.0)), bytes_of(run_map(k, MapFn::pow, {3.0}, {x}, x.shape(), d))) << name(d);
    EXPECT_EQ(bytes_of(clamp(x, -1, 0.5)), bytes_of(run_map(k, MapFn::clamp, {-1, 0.5}, {x}, x.shape(), d)))
        << name(d);
    EXPECT_EQ(bytes_of(erf(x)), bytes_of(run_map(k, MapFn::erf, {}, {x}, x.shape(), d))) << name(d);
    // a backward: silu's d x = g * s (1 + x (1 - s))
    Tensor xg = x.detach().set_requires_grad(true);
    const Tensor g = Tensor::uniform(x.shape(), gen, -1, 1, d);
    silu(xg).backward(g);
    EXPECT_EQ(bytes_of(xg.grad()), bytes_of(run_map(k, MapFn::silu_backward, {}, {g, x}, x.shape(), d))) << name(d);
  }
}

// ---- reductions -----------------------------------------------------------------------------

// out (keep shape: x's rank, 1 along the reduced dims) by plain loops in double.
struct Reference {
  std::vector<double> sum, max;
  std::vector<i64> argmax;
};
Reference reduce_ref(const std::vector<double>& x, const Shape& shape, const Shape& keep) {
  Reference r;
  const auto outputs = static_cast<std::size_t>(numel(keep));
  r.sum.assign(outputs, 0);
  r.max.assign(outputs, 0);
  r.argmax.assign(outputs, -1);
  for (i64 i = 0; i < numel(shape); ++i) {
    // the output this element reduces into: its multi-index with reduced dims set to 0
    i64 rest = i, j = 0, out_stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      const i64 idx = rest % shape[d];
      rest /= shape[d];
      if (keep[d] != 1) j += idx * out_stride;
      out_stride *= keep[d];
    }
    const auto o = static_cast<std::size_t>(j);
    const double v = x[static_cast<std::size_t>(i)];
    r.sum[o] += v;
    if (r.argmax[o] < 0 || (!std::isnan(r.max[o]) && (std::isnan(v) || v > r.max[o]))) {
      r.max[o] = v;
      r.argmax[o] = i;
    }
  }
  return r;
}

Shape keep_shape(const Shape& shape, const std::vector<int>& reduced) {
  Shape keep = shape;
  for (int d : reduced) keep[static_cast<std::size_t>(d)] = 1;
  return keep;
}

TEST(ReduceKernels, SumMeanAndMaxOnTheCpuArePlainLoopsOverEveryDimSet) {
  Generator gen(7);
  const Shape shape = {3, 4, 5};
  Tensor x = Tensor::uniform(shape, gen, -1, 1, DType::f64);
  // ties and a NaN: the first maximum and the first NaN are the answers
  std::vector<double> v = x.to_f64();
  v[7] = v[2] = 5;
  v[33] = kNaN;
  v[38] = kNaN;
  x = Tensor::from(v, shape, DType::f64);
  for (const std::vector<int>& dims : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}) {
    const Shape keep = keep_shape(shape, dims);
    const Reference ref = reduce_ref(v, shape, keep);
    Tensor t_sum = Tensor::empty(keep, DType::f64), t_mean = Tensor::empty(keep, DType::f64),
           t_max = Tensor::empty(keep, DType::f64), arg = Tensor::empty(keep, DType::i64);
    const ReduceKernels& k = ReduceKernels::cpu();
    k.sum(view_of(x), view_of(t_sum));
    k.mean(view_of(x), view_of(t_mean));
    k.max(view_of(x), view_of(t_max), view_of(arg));
    const double count = static_cast<double>(numel(shape) / numel(keep));
    const std::vector<double> s = t_sum.to_f64(), m = t_mean.to_f64(), mx = t_max.to_f64();
    const std::vector<i64> a = arg.to_i64();
    for (std::size_t j = 0; j < s.size(); ++j) {
      EXPECT_TRUE(same_value(s[j], ref.sum[j], 1e-14)) << to_string(keep) << " " << j;
      EXPECT_TRUE(same_value(m[j], ref.sum[j] / count, 1e-14)) << to_string(keep) << " " << j;
      EXPECT_TRUE(same_value(mx[j], ref.max[j], 0)) << to_string(keep) << " " << j;
      EXPECT_EQ(a[j], ref.argmax[j]) << to_string(keep) << " " << j;
    }
  }
}

TEST(ReduceKernels, ASumToAShapeOfFewerDimsReducesTheMissingLeadingDims) {
  Generator gen(8);
  const Tensor g = Tensor::uniform({2, 3, 4}, gen, -1, 1, DType::f64);
  const std::vector<double> v = g.to_f64();
  Tensor last = Tensor::empty({4}, DType::f64), middle = Tensor::empty({3, 1}, DType::f64);
  ReduceKernels::cpu().sum(view_of(g), view_of(last));
  ReduceKernels::cpu().sum(view_of(g), view_of(middle));
  const Reference r_last = reduce_ref(v, {2, 3, 4}, {1, 1, 4});
  const Reference r_middle = reduce_ref(v, {2, 3, 4}, {1, 3, 1});
  for (std::size_t j = 0; j < 4; ++j) EXPECT_TRUE(same_value(last.to_f64()[j], r_last.sum[j], 1e-14)) << j;
  for (std::size_t j = 0; j < 3; ++j) EXPECT_TRUE(same_value(middle.to_f64()[j], r_middle.sum[j], 1e-14)) << j;
}

TEST(ReduceKernels, EmptyGroupsSumToZeroAndAverageToNan) {
  const Tensor x = Tensor::empty({2, 0}, DType::f32);
  Tensor t_sum = Tensor::empty({2, 1}, DType::f32), t_mean = Tensor::empty({2, 1}, DType::f32);
  ReduceKernels::cpu().sum(view_of(x), view_of(t_sum));
  ReduceKernels::cpu().mean(view_of(x), view_of(t_mean));
  EXPECT_EQ(t_sum.to_f64(), (std::vector<double>{0, 0}));
  for (double m : t_mean.to_f64()) EXPECT_TRUE(std::isnan(m));
}

TEST(ReduceKernels, LowPrecisionSumsAccumulateInF32AndRoundOnce) {
  // 4096 values of 1 + 2^-10 in f16: an f16 accumulator would stall at 2048; f32 holds
  // the exact 4100, which rounds to 4100 in f16 (a multiple of 4, the f16 spacing there).
  const Tensor x = Tensor::full({4096}, 1 + std::ldexp(1.0, -10), DType::f16);
  Tensor out = Tensor::empty({1}, DType::f16);
  ReduceKernels::cpu().sum(view_of(x), view_of(out));
  EXPECT_EQ(out.item(), 4100.0);
}

TEST(ReduceKernels, MaxBackwardPutsEachGradientAtItsArgmaxAndZerosElsewhere) {
  const Tensor grad = Tensor::from(std::vector<double>{2.5, -0.0, -1}, {3}, DType::f32);
  const Tensor arg = Tensor::from(std::vector<i64>{4, 0, 5}, {3});
  Tensor gx = Tensor::full({2, 3}, 9, DType::f32);
  ReduceKernels::cpu().max_backward(view_of(grad), view_of(arg), view_of(gx));
  const std::vector<double> got = gx.to_f64();
  EXPECT_EQ(got, (std::vector<double>{0, 0, 0, 0, 2.5, -1}));
  EXPECT_FALSE(std::signbit(got[0])) << "0 + (-0) is +0, as the CPU accumulates into zeros";
}

// The merge the CUDA block reduction combines thread partials with gives the sequential
// fold's answer (first NaN, else the first maximum) for every way of splitting a group
// into strided slices and every order of merging them.
TEST(ReduceKernels, MaxMergeOfAnySlicesIsTheSequentialFold) {
  using kernels::ArgMax;
  const double choices[] = {-1, 0, -0.0, 1, 2, 2, kNaN};
  std::uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const auto n = static_cast<std::size_t>(1 + next() % 40);
    std::vector<double> v(n);
    for (double& e : v) e = choices[next() % 7];
    ArgMax<double> seq{0, -1};
    for (std::size_t i = 0; i < n; ++i)
      if (seq.index < 0 || kernels::max_takes(v[i], seq.value)) seq = {v[i], static_cast<i64>(i)};
    const auto threads = static_cast<std::size_t>(1 + next() % 9);
    std::vector<ArgMax<double>> part(threads, ArgMax<double>{0, -1});
    for (std::size_t t = 0; t < threads; ++t)
      for (std::size_t i = t; i < n; i += threads)
        if (part[t].index < 0 || kernels::max_takes(v[i], part[t].value)) part[t] = {v[i], static_cast<i64>(i)};
    while (part.size() > 1) {  // merge random neighbours, in either order
      const std::size_t k = next() % (part.size() - 1);
      part[k] = next() % 2 ? kernels::max_merge(part[k], part[k + 1]) : kernels::max_merge(part[k + 1], part[k]);
      part.erase(part.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    }
    ASSERT_EQ(part[0].index, seq.index) << "trial " << trial;
  }
}

TEST(ReduceKernels, TheCpuKernelsCalledDirectlyAreTheOpsBitForBit) {
  Generator gen(9);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::uniform({6, 70, 9}, gen, -3, 3, d);
    const Shape keep = {6, 1, 9};
    Tensor s = Tensor::empty(keep, d), m = Tensor::empty(keep, d), mx = Tensor::empty(keep, d),
           arg = Tensor::empty(keep, DType::i64);
    ReduceKernels::cpu().sum(view_of(x), view_of(s));
    ReduceKernels::cpu().mean(view_of(x), view_of(m));
    ReduceKernels::cpu().max(view_of(x), view_of(mx), view_of(arg));
    EXPECT_EQ(bytes_of(s), bytes_of(sum(x, {1}, true))) << name(d);
    EXPECT_EQ(bytes_of(m), bytes_of(mean(x, {1}, true))) << name(d);
    EXPECT_EQ(bytes_of(mx), bytes_of(max(x, {1}, true))) << name(d);
  }
}

// ---- CUDA against the CPU -------------------------------------------------------------------

// NMSE of got against want, with NaN and Inf required at the same places.
double nmse(const std::vector<double>& got, const std::vector<double>& want, std::string& mismatch) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      if (!(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]) && mismatch.empty())
        mismatch = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
      continue;
    }
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? err : err / norm;
}

// Elementwise: libm a few ulp apart, and the last bit of f16/bf16 flipped where the f32
// results straddle a rounding boundary.
double nmse_limit(DType d) {
  switch (d) {
    case DType::f64: return 1e-24;
    case DType::f32: return 1e-11;
    case DType::f16: return 1e-6;
    default: return 1e-4;  // bf16: a last-bit difference of 2^-8 relative
  }
}
// Reductions: a tree of additions against the CPU's sequential fold.
double reduce_nmse_limit(DType d) {
  switch (d) {
    case DType::f64: return 1e-20;
    case DType::f32: return 1e-9;
    case DType::f16: return 1e-5;
    default: return 1e-3;
  }
}

TEST(ElementwiseKernelsCuda, EveryMapFnMatchesTheCpuInEveryDtypeWithBroadcasting) {
  SKIP_WITHOUT_GPU();
  testing::NotesKept notes_kept;  // the notes named below are taken only while observed
  Generator gen(21);
  const Shape shape = {37, 129};
  for (const MapCase& c : map_cases()) {
    std::vector<Tensor> in64 = draw_inputs(c, shape, gen);
    if (in64.size() > 1) in64[1] = in64[1].rows(0, 1).clone();  // [1, 129]: a broadcast operand
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      std::vector<Tensor> cpu_in, gpu_in;
      for (const Tensor& t : in64) {
        cpu_in.push_back(t.to(d));
        gpu_in.push_back(cpu_in.back().to(Device::cuda));
      }
      const Tensor want = run_map(ElementwiseKernels::cpu(), c.fn, c.s, cpu_in, shape, d);
      const Tensor got = run_map(ElementwiseKernels::cuda(), c.fn, c.s, gpu_in, shape, d);
      std::string mismatch;
      const double e = nmse(got.to_f64(), want.to_f64(), mismatch);
      EXPECT_LE(e, nmse_limit(d)) << kernels::map_fn_name(c.fn) << " " << name(d);
      EXPECT_EQ(mismatch, "") << kernels::map_fn_name(c.fn) << " " << name(d);
    }
  }
  EXPECT_NE(notes_kept.take().find("CUDA map kernel"), std::string::npos);
}

TEST(ElementwiseKernelsCuda, SelectionsAndArithmeticAreTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  Generator gen(22);
  const Shape shape = {3, 1000};
  for (const MapCase& c : map_cases()) {
    // no libm call: the same IEEE operations in the same order on both devices (nvcc
    // contracts a * b + c into an fma, so only single-operation entries are compared)
    const MapFn f = c.fn;
    if (f != MapFn::relu && f != MapFn::relu_backward && f != MapFn::add && f != MapFn::sub && f != MapFn::mul &&
        f != MapFn::div && f != MapFn::neg && f != MapFn::abs && f != MapFn::clamp && f != MapFn::clamp_backward &&
        f != MapFn::where && f != MapFn::where_backward_taken && f != MapFn::where_backward_other &&
        f != MapFn::masked_fill && f != MapFn::masked_fill_backward && f != MapFn::mul_scalar)
      continue;
    const std::vector<Tensor> in64 = draw_inputs(c, shape, gen);
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      std::vector<Tensor> cpu_in, gpu_in;
      for (const Tensor& t : in64) {
        cpu_in.push_back(t.to(d));
        gpu_in.push_back(cpu_in.back().to(Device::cuda));
      }
      EXPECT_EQ(bytes_of(run_map(ElementwiseKernels::cuda(), c.fn, c.s, gpu_in, shape, d)),
                bytes_of(run_map(ElementwiseKernels::cpu(), c.fn, c.s, cpu_in, shape, d)))
          << kernels::map_fn_name(c.fn) << " " << name(d);
    }
  }
}

struct ReduceCase {
  const char* what;
  Shape x;
  Shape keep;
};

// Both CUDA paths: one thread per group (small groups; groups strided across the last
// dim) and a block per group (large contiguous groups), and a sum to fewer dims.
const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {"rows of 20 (one thread each)", {300, 20}, {300, 1}},
      {"rows of 5000 (a block each)", {7, 5000}, {7, 1}},
      {"columns of 3000 (a block each, strided)", {3000, 5}, {1, 5}},
      {"columns of 64 over 20000 (one thread each, coalesced)", {64, 20000}, {1, 20000}},
      {"middle dim of a 3-d tensor", {4, 333, 6}, {4, 1, 6}},
      {"everything", {17, 19, 23}, {1, 1, 1}},
      {"to fewer dims (sum_to_shape)", {9, 40, 8}, {8}},
  };
  return cases;
}

TEST(ReduceKernelsCuda, SumMeanMaxAndMaxBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator gen(23);
  for (const ReduceCase& c : reduce_cases())
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      std::vector<double> v = Tensor::uniform(c.x, gen, -2, 2, DType::f64).to_f64();
      v[v.size() / 3] = 7;  // a tie for the maximum
      v[v.size() / 2] = 7;
      const Tensor x = Tensor::from(v, c.x, d), xg = x.to(Device::cuda);
      const std::string what = std::string(c.what) + " " + std::string(name(d));
      for (bool mean_of : {false, true}) {
        Tensor want = Tensor::empty(c.keep, d), got = Tensor::empty(c.keep, d, Device::cuda);
        const auto fn = mean_of ? &ReduceKernels::mean : &ReduceKernels::sum;
        (ReduceKernels::cpu().*fn)(view_of(x), view_of(want));
        (ReduceKernels::cuda().*fn)(view_of(xg), view_of(got));
        std::string mismatch;
        EXPECT_LE(nmse(got.to_f64(), want.to_f64(), mismatch), reduce_nmse_limit(d))
            << what << (mean_of ? " mean" : " sum");
        // deterministic: a second run repeats the bits
        Tensor again = Tensor::empty(c.keep, d, Device::cuda);
        (ReduceKernels::cuda().*fn)(view_of(xg), view_of(again));
        EXPECT_EQ(bytes_of(again), bytes_of(got)) << what;
      }
      if (c.keep.size() != c.x.size()) continue;  // max takes the keep shape only
      Tensor mx = Tensor::empty(c.keep, d), arg = Tensor::empty(c.keep, DType::i64);
      Tensor gmx = Tensor::empty(c.keep, d, Device::cuda), garg = Tensor::empty(c.keep, DType::i64, Device::cuda);
      ReduceKernels::cpu().max(view_of(x), view_of(mx), view_of(arg));
      ReduceKernels::cuda().max(view_of(xg), view_of(gmx), view_of(garg));
      EXPECT_EQ(bytes_of(gmx), bytes_of(mx)) << what << " max";
      EXPECT_EQ(bytes_of(garg), bytes_of(arg)) << what << " argmax";
      const Tensor g = Tensor::uniform(c.keep, gen, -1, 1, d);
      Tensor gx = Tensor::empty(c.x, d), ggx = Tensor::empty(c.x, d, Device::cuda);
      ReduceKernels::cpu().max_backward(view_of(g), view_of(arg), view_of(gx));
      const Tensor gg = g.to(Device::cuda);
      ReduceKernels::cuda().max_backward(view_of(gg), view_of(garg), view_of(ggx));
      EXPECT_EQ(bytes_of(ggx), bytes_of(gx)) << what << " max backward";
    }
}

TEST(ReduceKernelsCuda, AOneThreadSumIsTheCpuSumBitForBit) {
  SKIP_WITHOUT_GPU();
  Generator gen(24);
  const Tensor x = Tensor::uniform({500, 24}, gen, -2, 2, DType::f32);
  Tensor want = Tensor::empty({500, 1}, DType::f32), got = Tensor::empty({500, 1}, DType::f32, Device::cuda);
  const Tensor xg = x.to(Device::cuda);
  ReduceKernels::cpu().sum(view_of(x), view_of(want));
  ReduceKernels::cuda().sum(view_of(xg), view_of(got));
  EXPECT_EQ(bytes_of(got), bytes_of(want));
}

TEST(ReduceKernelsCuda, TheFirstNanIsTheMaximumWhereverTheBlockSplitsTheGroup) {
  SKIP_WITHOUT_GPU();
  std::vector<double> v(10000, 1.0);
  v[4321] = kNaN;
  v[9000] = kNaN;
  v[17] = 50;
  const Tensor x = Tensor::from(v, {1, 10000}, DType::f32), xg = x.to(Device::cuda);
  Tensor out = Tensor::empty({1, 1}, DType::f32, Device::cuda), arg = Tensor::empty({1, 1}, DType::i64, Device::cuda);
  ReduceKernels::cuda().max(view_of(xg), view_of(out), view_of(arg));
  EXPECT_TRUE(std::isnan(out.item()));
  EXPECT_EQ(arg.to_i64(), std::vector<i64>{4321});
}

}  // namespace
}  // namespace ampcheck
