// Normalisation (batch_norm, layer_norm), softmax / log_softmax, the losses
// (cross_entropy, mse_loss), embedding and dropout on the CPU.
//
// Every kernel loads its operands into the compute type (double when an operand is f64,
// float otherwise), computes there, and stores each result with one rounding, so an
// f16/bf16 result is bit-identical to the f32 result rounded once. Reductions run in a
// fixed order whatever the thread count: work is split over independent rows or
// channels, and sums over many rows go through fixed blocks added in order.
#include <algorithm>    // std::max, std::min
#include <cmath>        // std::exp, std::log, std::sqrt, std::isfinite
#include <cstdint>
#include <cstring>      // std::memcpy (embedding rows are copied, never rounded)
#include <limits>
#include <sstream>      // number formatting in error messages
#include <stdexcept>
#include <string>
#include <utility>      // std::pair
#include <variant>
#include <vector>

#include "engine/ops/cpu_util.h"  // load/store, values/from_values, parallel_for
#include "engine/ops/impl.h"      // the forward/backward declarations
#include "engine/ops/ops.h"       // the public functions defined at the end
#include "engine/random.h"        // uniform01 (dropout's mask)
#include "kernels/elementwise.h"  // max_nan: a row's max is NaN when the row holds one

namespace ampcheck {
namespace {

using cpu::from_values;
using cpu::values;

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, std::string(what) + " is an undefined tensor; expected a tensor");
}

const Tensor& input_or_none(const std::vector<Tensor>& in, std::size_t i) {
  static const Tensor none;
  return i < in.size() ? in[i] : none;
}

// double when any defined float operand is f64 (f64 computes in double), else float.
DType compute_dtype(std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t->defined() && t->dtype() == DType::f64) return DType::f64;
  }
  return DType::f32;
}

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// Rows of `row_len` elements per work item, so one item holds about kChunk elements.
std::int64_t row_grain(std::int64_t row_len) {
  return std::max<std::int64_t>(1, cpu::kChunk / std::max<std::int64_t>(1, row_len));
}

// sum over [0, n) of f(i), in fixed blocks whose sums are added in block order: the same
// bits for any thread count, and a rounding error that grows with n / kBlock + kBlock
// rather than with n.
inline constexpr std::int64_t kBlock = 1024;
template <typename T, typename F>
T ordered_sum(std::int64_t n, F f) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<T> partial(static_cast<std::size_t>(blocks), T(0));
  parallel_for(blocks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      T acc = 0;
      for (std::int64_t i = k * kBlock; i < std::min(n, (k + 1) * kBlock); ++i) acc += f(i);
      partial[k] = acc;
    }
  });
  T total = 0;
  for (T v : partial) total += v;
  return total;
}

// A float operand's values in T, or `fill` repeated n times when the operand is absent.
template <typename T>
std::vector<T> values_or(const Tensor& t, std::int64_t n, T fill) {
  if (t.defined()) return values<T>(t);
  return std::vector<T>(static_cast<std::size_t>(n), fill);
}

// ---------------------------------------------------------------- softmax / log_softmax

// The tensor seen as [outer, n, inner] around the reduced dim.
struct Around {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Around around(const Shape& shape, std::int64_t dim) {
  const auto d = static_cast<std::size_t>(dim);
  return {product(shape, 0, d), shape[d], product(shape, d + 1, shape.size())};
}

// Calls f(base, stride) for every line along the reduced dim: element k of the line is
// at base + k * stride.
template <typename F>
void for_each_line(const Around& a, F f) {
  parallel_for(a.outer * a.inner, row_grain(a.n), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t o = r / a.inner, i = r % a.inner;
      f(o * a.n * a.inner + i, a.inner);
    }
  });
}

Tensor softmax_family_forward(const ForwardArgs& args, bool log, const char* op) {
  const Tensor& x = args.in.at(0);
  require_defined(x, op, "x");
  const DType out_dtype = cpu::float_dtype(x, op);
  const std::int64_t dim = cpu::normalize_dim(std::get<DimParams>(args.params).dim, x.dim(), op);
  const Around a = around(x.shape(), dim);
  return cpu::with_compute_type(out_dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    std::vector<T> y(xv.size());
    for_each_line(a, [&](std::int64_t base, std::int64_t stride) {
      // Subtracting the max keeps exp <= 1: no overflow for any finite input. A NaN in
      // the line makes every output NaN, as PyTorch's softmax.
      T mx = -std::numeric_limits<T>::infinity();
      for (std::int64_t k = 0; k < a.n; ++k) mx = kernels::max_nan(mx, xv[base + k * stride]);
      T s = 0;
      for (std::int64_t k = 0; k < a.n; ++k) s += std::exp(xv[base + k * stride] - mx);
      if (log) {
        const T ls = std::log(s);
        for (std::int64_t k = 0; k < a.n; ++k)
          y[base + k * stride] = (xv[base + k * stride] - mx) - ls;
      } else {
        for (std::int64_t k = 0; k < a.n; ++k)
          y[base + k * stride] = std::exp(xv[base + k * stride] - mx) / s;
      }
    });
    return from_values(y, x.shape(), out_dtype);
  });
}

// softmax:     dx_k = y_k (g_k - sum_j g_j y_j)
// log_softmax: dx_k = g_k - exp(y_k) sum_j g_j
std::vector<Tensor> softmax_family_backward(const BackwardArgs& args, bool log, const char* op) {
  const Tensor& x = args.in.at(0);
  const std::int64_t dim = cpu::normalize_dim(std::get<DimParams>(args.params).dim, x.dim(), op);
  const Around a = around(x.shape(), dim);
  return cpu::with_compute_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(args.grad), y = values<T>(args.out);
    std::vector<T> dx(g.size());
    for_each_line(a, [&](std::int64_t base, std::int64_t stride) {
      T s = 0;
      for (std::int64_t k = 0; k < a.n; ++k) {
        const std::int64_t i = base + k * stride;
        s += log ? g[i] : g[i] * y[i];
      }
      for (std::int64_t k = 0; k < a.n; ++k) {
        const std::int64_t i = base + k * stride;
        dx[i] = log ? g[i] - std::exp(y[i]) * s : y[i] * (g[i] - s);
      }
    });
    return std::vector<Tensor>{from_values(dx, x.shape(), x.dtype())};
  });
}

// ---------------------------------------------------------------- layer_norm

// Checks the operands; returns the number of elements normalised together.
std::int64_t check_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b,
                              std::int64_t normalized_dims, double eps) {
  const char* op = "layer_norm";
  require_defined(x, op, "x");
  cpu::float_dtype(x, op);
  if (normalized_dims < 1 || normalized_dims > x.dim())
    fail(op, "normalized_dims = " + std::to_string(normalized_dims) + " for x of shape " +
                 to_string(x.shape()) + "; expected 1 <= normalized_dims <= " +
                 std::to_string(x.dim()));
  if (!(eps >= 0) || !std::isfinite(eps))
    fail(op, "eps = " + num(eps) + "; expected a finite eps >= 0");
  const Shape norm_shape(x.shape().end() - normalized_dims, x.shape().end());
  for (const auto& [t, what] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    if (!t->defined()) continue;
    cpu::float_dtype(*t, op);
    if (t->shape() != norm_shape)
      fail(op, std::string(what) + " of shape " + to_string(t->shape()) +
                   "; expected the normalised shape " + to_string(norm_shape) + " of x " +
                   to_string(x.shape()));
  }
  return numel(norm_shape);
}

// ---------------------------------------------------------------- batch_norm

struct BnLayout {
  std::int64_t n = 0, c = 0, s = 0;  // x as [N, C, S]
  std::int64_t count() const { return n * s; }  // values per channel
  std::int64_t at(std::int64_t i, std::int64_t ch, std::int64_t j) const {
    return (i * c + ch) * s + j;
  }
};

BnLayout check_batch_norm(const std::vector<Tensor>& in, const BatchNormParams& p) {
  const char* op = "batch_norm";
  if (in.size() != 5)
    fail(op, "got " + std::to_string(in.size()) +
                 " inputs; expected 5 (x, weight, bias, running_mean, running_var)");
  const Tensor& x = in[0];
  require_defined(x, op, "x");
  cpu::float_dtype(x, op);
  if (x.dim() < 2)
    fail(op, "x of shape " + to_string(x.shape()) + "; expected rank >= 2 [N, C, ...]");
  const BnLayout l{x.shape()[0], x.shape()[1], product(x.shape(), 2, x.shape().size())};
  const char* names[] = {"x", "weight", "bias", "running_mean", "running_var"};
  for (std::size_t i = 1; i < 5; ++i) {
    if (!in[i].defined()) continue;
    cpu::float_dtype(in[i], op);
    if (in[i].shape() != Shape{l.c})
      fail(op, std::string(names[i]) + " of shape " + to_string(in[i].shape()) +
                   "; expected [" + std::to_string(l.c) + "] (the channels of x " +
                   to_string(x.shape()) + ")");
  }
  if (in[3].defined() != in[4].defined())
    fail(op, "running_mean is " + std::string(in[3].defined() ? "defined" : "undefined") +
                 " but running_var is " + (in[4].defined() ? "defined" : "undefined") +
                 "; expected both or neither");
  if (!p.training && !in[3].defined())
    fail(op, "evaluation mode (training = false) without running_mean/running_var; expected "
             "running statistics to normalise with");
  if (p.training && l.count() <= 1)
    fail(op, "training with " + std::to_string(l.count()) + " value(s) per channel (x " +
                 to_string(x.shape()) + "); expected more than 1 to estimate a variance");
  if (!(p.eps >= 0) || !std::isfinite(p.eps))
    fail(op, "eps = " + num(p.eps) + "; expected a finite eps >= 0");
  if (!std::isfinite(p.momentum))
    fail(op, "momentum = " + num(p.momentum) + "; expected a finite momentum (0.1 usual)");
  return l;
}

// ---------------------------------------------------------------- cross_entropy

void check_cross_entropy(const Tensor& logits, const Tensor& labels, double smoothing) {
  const char* op = "cross_entropy";
  require_defined(logits, op, "logits");
  require_defined(labels, op, "labels");
  cpu::float_dtype(logits, op);
  if (logits.dim() != 2)
    fail(op, "logits of shape " + to_string(logits.shape()) + "; expected [N, C]");
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (n == 0 || c == 0)
    fail(op, "logits of shape " + to_string(logits.shape()) +
                 "; expected N >= 1 samples and C >= 1 classes");
  if (labels.dtype() != DType::i64)
    fail(op, "labels of dtype " + std::string(name(labels.dtype())) +
                 "; expected i64 class indices");
  if (labels.shape() != Shape{n})
    fail(op, "labels of shape " + to_string(labels.shape()) + "; expected [" +
                 std::to_string(n) + "] (one per row of logits " + to_string(logits.shape()) +
                 ")");
  if (!(smoothing >= 0 && smoothing <= 1))
    fail(op, "label_smoothing = " + num(smoothing) + "; expected 0 <= label_smoothing <= 1");
  const std::vector<std::int64_t> y = labels.to_i64();
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 0 || y[i] >= c)
      fail(op, "label " + std::to_string(y[i]) + " at position " + std::to_string(i) +
                   " is out of range; expected a class in [0, " + std::to_string(c) + ")");
  }
}

// ---------------------------------------------------------------- mse_loss

void check_mse_loss(const Tensor& input, const Tensor& target) {
  const char* op = "mse_loss";
  require_defined(input, op, "input");
  require_defined(target, op, "target");
  cpu::float_dtype(input, op);
  cpu::float_dtype(target, op);
  if (input.shape() != target.shape())
    fail(op, "input of shape " + to_string(input.shape()) + " and target of shape " +
                 to_string(target.shape()) + "; expected the same shape");
  if (input.numel() == 0)
    fail(op, "input of shape " + to_string(input.shape()) +
                 " has no elements; expected at least one to average");
}

// ---------------------------------------------------------------- embedding

void check_embedding(const Tensor& indices, const Tensor& weight) {
  const char* op = "embedding";
  require_defined(indices, op, "indices");
  require_defined(weight, op, "weight");
  if (indices.dtype() != DType::i64)
    fail(op, "indices of dtype " + std::string(name(indices.dtype())) +
                 "; expected i64 row indices");
  cpu::float_dtype(weight, op);
  if (weight.dim() != 2)
    fail(op, "weight of shape " + to_string(weight.shape()) + "; expected [V, D]");
  const std::int64_t v = weight.shape()[0];
  const std::vector<std::int64_t> idx = indices.to_i64();
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= v)
      fail(op, "index " + std::to_string(idx[i]) + " at position " + std::to_string(i) +
                   " is out of range; expected a row in [0, " + std::to_string(v) +
                   ") of weight " + to_string(weight.shape()));
  }
}

// ---------------------------------------------------------------- dropout

void check_dropout(const Tensor& x, double p) {
  const char* op = "dropout";
  require_defined(x, op, "x");
  cpu::float_dtype(x, op);
  if (!(p >= 0 && p < 1))
    fail(op, "p = " + num(p) + "; expected a drop probability in [0, 1)");
}

}  // namespace

// ================================================================ forwards and backwards

namespace impl {

// ---- batch_norm ----

Tensor batch_norm_forward(const ForwardArgs& args) {
  const auto& p = std::get<BatchNormParams>(args.params);
  const BnLayout l = check_batch_norm(args.in, p);
  const Tensor& x = args.in[0];
  const Tensor &w = args.in[1], &b = args.in[2];
  Tensor running_mean = args.in[3], running_var = args.in[4];  // shared storage: updated in place
  const DType ct = compute_dtype({&x, &w, &b, &running_mean, &running_var});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    const std::vector<T> wv = values_or<T>(w, l.c, T(1)), bv = values_or<T>(b, l.c, T(0));
    const bool has_running = running_mean.defined();
    std::vector<T> rm = values_or<T>(running_mean, l.c, T(0));
    std::vector<T> rv = values_or<T>(running_var, l.c, T(1));
    std::vector<T> mean(static_cast<std::size_t>(l.c)), invstd(mean.size());
    std::vector<T> y(xv.size());
    const T m = static_cast<T>(l.count());
    const T eps = static_cast<T>(p.eps), momentum = static_cast<T>(p.momentum);
    // Channels are independent; within one, sums run in (n, s) order: deterministic.
    parallel_for(l.c, 1, [&](std::int64_t cb, std::int64_t ce) {
      for (std::int64_t c = cb; c < ce; ++c) {
        T mu, var;
        if (p.training) {
          // Two passes (mean, then squared deviations) avoid E[x^2] - E[x]^2
          // cancellation; each pass sums one [S] slab at a time, then the slabs.
          T total = 0;
          for (std::int64_t i = 0; i < l.n; ++i) {
            T slab = 0;
            for (std::int64_t j = 0; j < l.s; ++j) slab += xv[l.at(i, c, j)];
            total += slab;
          }
          mu = total / m;
          T sq = 0;
          for (std::int64_t i = 0; i < l.n; ++i) {
            T slab = 0;
            for (std::int64_t j = 0; j < l.s; ++j) {
              const T d = xv[l.at(i, c, j)] - mu;
              slab += d * d;
            }
            sq += slab;
          }
          var = sq / m;  // biased: what the batch is normalised with
          if (has_running) {
            // PyTorch: the running variance takes the unbiased estimate.
            rm[c] = (T(1) - momentum) * rm[c] + momentum * mu;
            rv[c] = (T(1) - momentum) * rv[c] + momentum * (sq / (m - T(1)));
          }
        } else {
          mu = rm[c];
          var = rv[c];
        }
        const T is = T(1) / std::sqrt(var + eps);
        mean[c] = mu;
        invstd[c] = is;
        const T scale = is * wv[c];
        for (std::int64_t i = 0; i < l.n; ++i)
          for (std::int64_t j = 0; j < l.s; ++j) {
            const std::int64_t k = l.at(i, c, j);
            y[k] = (xv[k] - mu) * scale + bv[c];
          }
      }
    });
    if (p.training && has_running) {
      cpu::store(running_mean, 0, l.c, rm.data());
      cpu::store(running_var, 0, l.c, rv.data());
    }
    args.saved.tensors = {from_values(mean, {l.c}, ct), from_values(invstd, {l.c}, ct)};
    return from_values(y, x.shape(), x.dtype());
  });
}

// xhat = (x - mean) invstd, per channel over the N*S values:
//   d bias = sum g,  d weight = sum g xhat,
//   training: dx = weight invstd (g - mean(g) - xhat mean(g xhat))  (batch stats depend on x)
//   eval:     dx = weight invstd g
// Each only for an input that needs it (the channel sums serve dx in training too).
std::vector<Tensor> batch_norm_backward(const BackwardArgs& args) {
  const auto& p = std::get<BatchNormParams>(args.params);
  const Tensor& x = args.in[0];
  const Tensor &w = args.in[1], &b = args.in[2];
  const BnLayout l{x.shape()[0], x.shape()[1], product(x.shape(), 2, x.shape().size())};
  const DType ct = compute_dtype({&x, &w, &b, &args.in[3], &args.in[4]});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x), g = values<T>(args.grad);
    const std::vector<T> wv = values_or<T>(w, l.c, T(1));
    const std::vector<T> mean = values<T>(args.saved.tensors.at(0));
    const std::vector<T> invstd = values<T>(args.saved.tensors.at(1));
    const bool need_x = args.needs(0), need_w = w.defined() && args.needs(1);
    const bool need_b = b.defined() && args.needs(2);
    const bool need_sums = need_w || need_b || (need_x && p.training);
    std::vector<T> dx(need_x ? xv.size() : 0), dw(static_cast<std::size_t>(l.c)), db(dw.size());
    const T m = static_cast<T>(l.count());
    parallel_for(l.c, 1, [&](std::int64_t cb, std::int64_t ce) {
      for (std::int64_t c = cb; c < ce; ++c) {
        T sg = 0, sgx = 0;
        for (std::int64_t i = 0; need_sums && i < l.n; ++i) {
          T slab_g = 0, slab_gx = 0;
          for (std::int64_t j = 0; j < l.s; ++j) {
            const std::int64_t k = l.at(i, c, j);
            slab_g += g[k];
            slab_gx += g[k] * ((xv[k] - mean[c]) * invstd[c]);
          }
          sg += slab_g;
          sgx += slab_gx;
        }
        db[c] = sg;
        dw[c] = sgx;
        const T scale = wv[c] * invstd[c];
        const T mg = sg / m, mgx = sgx / m;
        for (std::int64_t i = 0; need_x && i < l.n; ++i)
          for (std::int64_t j = 0; j < l.s; ++j) {
            const std::int64_t k = l.at(i, c, j);
            dx[k] = p.training ? scale * (g[k] - mg - (xv[k] - mean[c]) * invstd[c] * mgx)
                               : scale * g[k];
          }
      }
    });
    return std::vector<Tensor>{need_x ? from_values(dx, x.shape(), x.dtype()) : Tensor{},
                               need_w ? from_values(dw, w.shape(), w.dtype()) : Tensor{},
                               need_b ? from_values(db, b.shape(), b.dtype()) : Tensor{}, Tensor{}, Tensor{}};
  });
}

// ---- layer_norm ----

Tensor layer_norm_forward(const ForwardArgs& args) {
  const auto& p = std::get<LayerNormParams>(args.params);
  if (args.in.empty() || args.in.size() > 3)
    fail("layer_norm", "got " + std::to_string(args.in.size()) +
                           " inputs; expected 1 to 3 (x, weight, bias)");
  const Tensor& x = args.in[0];
  const Tensor &w = input_or_none(args.in, 1), &b = input_or_none(args.in, 2);
  const std::int64_t len = check_layer_norm(x, w, b, p.normalized_dims, p.eps);
  const std::int64_t rows = len == 0 ? 0 : x.numel() / len;
  const DType ct = compute_dtype({&x, &w, &b});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    const std::vector<T> wv = values_or<T>(w, len, T(1)), bv = values_or<T>(b, len, T(0));
    std::vector<T> y(xv.size()), mean(static_cast<std::size_t>(rows)), invstd(mean.size());
    const T eps = static_cast<T>(p.eps), count = static_cast<T>(len);
    parallel_for(rows, row_grain(len), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const T* xr = xv.data() + r * len;
        T s = 0;
        for (std::int64_t j = 0; j < len; ++j) s += xr[j];
        const T mu = s / count;
        T sq = 0;  // second pass over deviations: no cancellation
        for (std::int64_t j = 0; j < len; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
        const T is = T(1) / std::sqrt(sq / count + eps);
        mean[r] = mu;
        invstd[r] = is;
        for (std::int64_t j = 0; j < len; ++j) y[r * len + j] = (xr[j] - mu) * is * wv[j] + bv[j];
      }
    });
    args.saved.tensors = {from_values(mean, {rows}, ct), from_values(invstd, {rows}, ct)};
    return from_values(y, x.shape(), x.dtype());
  });
}

// Per row, xhat = (x - mean) invstd and h = g weight:
//   dx = invstd (h - mean(h) - xhat mean(h xhat)),
//   d weight = sum over rows of g xhat,  d bias = sum over rows of g;
// each only for an input that needs it.
std::vector<Tensor> layer_norm_backward(const BackwardArgs& args) {
  const Tensor& x = args.in[0];
  const Tensor &w = input_or_none(args.in, 1), &b = input_or_none(args.in, 2);
  const std::int64_t len =
      numel(Shape(x.shape().end() - std::get<LayerNormParams>(args.params).normalized_dims,
                  x.shape().end()));
  const std::int64_t rows = len == 0 ? 0 : x.numel() / len;
  const DType ct = compute_dtype({&x, &w, &b});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x), g = values<T>(args.grad);
    const std::vector<T> wv = values_or<T>(w, len, T(1));
    const std::vector<T> mean = values<T>(args.saved.tensors.at(0));
    const std::vector<T> invstd = values<T>(args.saved.tensors.at(1));
    const bool need_x = args.needs(0), need_w = w.defined() && args.needs(1);
    const bool need_b = b.defined() && args.needs(2);
    std::vector<T> dx(need_x ? xv.size() : 0);
    const T count = static_cast<T>(len);
    if (need_x) parallel_for(rows, row_grain(len), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t o = r * len;
        T sh = 0, shx = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const T h = g[o + j] * wv[j];
          sh += h;
          shx += h * ((xv[o + j] - mean[r]) * invstd[r]);
        }
        const T mh = sh / count, mhx = shx / count;
        for (std::int64_t j = 0; j < len; ++j) {
          const T xhat = (xv[o + j] - mean[r]) * invstd[r];
          dx[o + j] = invstd[r] * (g[o + j] * wv[j] - mh - xhat * mhx);
        }
      }
    });
    // Column sums over rows: each column is summed in row order by one work item.
    std::vector<T> dw(static_cast<std::size_t>(len)), db(dw.size());
    if (need_w || need_b) {
      parallel_for(len, 256, [&](std::int64_t jb, std::int64_t je) {
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t o = r * len;
          for (std::int64_t j = jb; j < je; ++j) {
            dw[j] += g[o + j] * ((xv[o + j] - mean[r]) * invstd[r]);
            db[j] += g[o + j];
          }
        }
      });
    }
    std::vector<Tensor> grads{need_x ? from_values(dx, x.shape(), x.dtype()) : Tensor{}};
    if (args.in.size() > 1) grads.push_back(need_w ? from_values(dw, w.shape(), w.dtype()) : Tensor{});
    if (args.in.size() > 2) grads.push_back(need_b ? from_values(db, b.shape(), b.dtype()) : Tensor{});
    return grads;
  });
}

// ---- softmax, log_softmax ----

Tensor softmax_forward(const ForwardArgs& args) {
  return softmax_family_forward(args, false, "softmax");
}
std::vector<Tensor> softmax_backward(const BackwardArgs& args) {
  return softmax_family_backward(args, false, "softmax");
}
Tensor log_softmax_forward(const ForwardArgs& args) {
  return softmax_family_forward(args, true, "log_softmax");
}
std::vector<Tensor> log_softmax_backward(const BackwardArgs& args) {
  return softmax_family_backward(args, true, "log_softmax");
}

// ---- cross_entropy ----

// With lse_n = log sum_c exp(x_nc) and q = (1 - ls) onehot(y) + ls / C:
//   loss = (1/N) sum_n -(sum_c q_c (x_nc - lse_n)).
Tensor cross_entropy_forward(const ForwardArgs& args) {
  const double ls = std::get<CrossEntropyParams>(args.params).label_smoothing;
  const Tensor& logits = args.in.at(0);
  const Tensor& labels = args.in.at(1);
  check_cross_entropy(logits, labels, ls);
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  const DType ct = compute_dtype({&logits});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> x = values<T>(logits);
    const std::vector<std::int64_t> y = labels.to_i64();
    std::vector<T> lse(static_cast<std::size_t>(n)), loss(lse.size());
    const T smooth = static_cast<T>(ls), hit = T(1) - smooth;
    const T per_class = smooth / static_cast<T>(c);
    parallel_for(n, row_grain(c), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const T* xr = x.data() + r * c;
        T mx = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < c; ++k) mx = kernels::max_nan(mx, xr[k]);
        T s = 0, sum_shifted = 0;
        for (std::int64_t k = 0; k < c; ++k) {
          s += std::exp(xr[k] - mx);
          sum_shifted += xr[k] - mx;
        }
        const T log_s = std::log(s);
        lse[r] = mx + log_s;
        // log p_k = (x_k - mx) - log_s; summed over k: sum_shifted - C log_s.
        const T logp_label = (xr[y[r]] - mx) - log_s;
        T l = -hit * logp_label;
        if (smooth != T(0)) l -= per_class * (sum_shifted - static_cast<T>(c) * log_s);
        loss[r] = l;
      }
    });
    const T total = ordered_sum<T>(n, [&](std::int64_t r) { return loss[r]; });
    args.saved.tensors = {from_values(lse, {n}, ct)};
    return from_values(std::vector<T>{total / static_cast<T>(n)}, {}, logits.dtype());
  });
}

// d logits_nc = g / N (softmax(x_n)_c - q_c); labels take no gradient.
std::vector<Tensor> cross_entropy_backward(const BackwardArgs& args) {
  const double ls = std::get<CrossEntropyParams>(args.params).label_smoothing;
  const Tensor& logits = args.in[0];
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  const DType ct = compute_dtype({&logits});
  return cpu::with_compute_type(ct, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> x = values<T>(logits), lse = values<T>(args.saved.tensors.at(0));
    const std::vector<std::int64_t> y = args.in[1].to_i64();
    T g = 0;
    cpu::load(args.grad, 0, 1, &g);
    const T gn = g / static_cast<T>(n), smooth = static_cast<T>(ls);
    const T hit = T(1) - smooth, per_class = smooth / static_cast<T>(c);
    std::vector<T> dx(x.size());
    parallel_for(n, row_grain(c), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t k = 0; k < c; ++k) {
          const T q = (k == y[r] ? hit : T(0)) + per_class;
          dx[r * c + k] = gn * (std::exp(x[r * c + k] - lse[r]) - q);
        }
    });
    return std::vector<Tensor>{from_values(dx, logits.shape(), logits.dtype()), Tensor{}};
  });
}

// ---- mse_loss ----

Tensor mse_loss_forward(const ForwardArgs& args) {
  const Tensor& a = args.in.at(0);
  const Tensor& b = args.in.at(1);
  check_mse_loss(a, b);
  const DType out_dtype = promote(a.dtype(), b.dtype());
  return cpu::with_compute_type(out_dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> av = values<T>(a), bv = values<T>(b);
    const T total = ordered_sum<T>(a.numel(), [&](std::int64_t i) {
      const T d = av[i] - bv[i];
      return d * d;
    });
    return from_values(std::vector<T>{total / static_cast<T>(a.numel())}, {}, out_dtype);
  });
}

// d input = 2 g (input - target) / n,  d target = -d input; the target (usually data)
// gets one only when it requires it.
std::vector<Tensor> mse_loss_backward(const BackwardArgs& args) {
  const Tensor& a = args.in[0];
  const Tensor& b = args.in[1];
  const bool need_a = args.needs(0), need_b = args.needs(1);
  return cpu::with_compute_type(promote(a.dtype(), b.dtype()), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> av = values<T>(a), bv = values<T>(b);
    T g = 0;
    cpu::load(args.grad, 0, 1, &g);
    const T k = T(2) * g / static_cast<T>(a.numel());
    std::vector<T> da(need_a ? av.size() : 0), db(need_b ? av.size() : 0);
    parallel_for(a.numel(), cpu::kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const T d = k * (av[i] - bv[i]);
        if (need_a) da[i] = d;
        if (need_b) db[i] = -d;
      }
    });
    return std::vector<Tensor>{need_a ? from_values(da, a.shape(), a.dtype()) : Tensor{},
                               need_b ? from_values(db, b.shape(), b.dtype()) : Tensor{}};
  });
}

// ---- embedding ----

Tensor embedding_forward(const ForwardArgs& args) {
  const Tensor& indices = args.in.at(0);
  const Tensor& weight = args.in.at(1);
  check_embedding(indices, weight);
  const std::int64_t d = weight.shape()[1];
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  const std::vector<std::int64_t> idx = indices.to_i64();
  // Rows are copied bit for bit: a lookup never rounds.
  const std::size_t row_bytes = static_cast<std::size_t>(d) * element_size(weight.dtype());
  const auto* src = static_cast<const unsigned char*>(weight.raw());
  auto* dst = static_cast<unsigned char*>(out.raw());
  parallel_for(static_cast<std::int64_t>(idx.size()), row_grain(d),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t i = b; i < e; ++i)
                   std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes,
                               src + static_cast<std::size_t>(idx[i]) * row_bytes, row_bytes);
               });
  return out;
}

// d weight[v] = sum of the grad rows at the positions whose index is v, added in
// position order (positions grouped by row with a stable counting sort, so rows are
// independent work items and the order is fixed); indices take no gradient.
std::vector<Tensor> embedding_backward(const BackwardArgs& args) {
  const Tensor& weight = args.in[1];
  const std::int64_t v = weight.shape()[0], d = weight.shape()[1];
  const std::vector<std::int64_t> idx = args.in[0].to_i64();
  std::vector<std::int64_t> start(static_cast<std::size_t>(v) + 1, 0);
  for (std::int64_t i : idx) ++start[static_cast<std::size_t>(i) + 1];
  for (std::size_t r = 0; r < static_cast<std::size_t>(v); ++r) start[r + 1] += start[r];
  std::vector<std::int64_t> positions(idx.size()), next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < idx.size(); ++i)
    positions[next[idx[i]]++] = static_cast<std::int64_t>(i);
  return cpu::with_compute_type(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(args.grad);
    std::vector<T> dw(static_cast<std::size_t>(v * d), T(0));
    parallel_for(v, row_grain(d), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t k = start[r]; k < start[r + 1]; ++k) {
          const std::int64_t o = positions[k] * d;
          for (std::int64_t j = 0; j < d; ++j) dw[r * d + j] += g[o + j];
        }
    });
    return std::vector<Tensor>{Tensor{}, from_values(dw, weight.shape(), weight.dtype())};
  });
}

// ---- dropout ----

// Element i is dropped iff uniform01(seed, offset + i) < p (counter-based: the mask does
// not depend on threads); kept ones are scaled by 1 / (1 - p). The output is x * noise
// with noise in {0, 1/(1-p)}, as PyTorch, so an Inf in x stays visible as a NaN.
Tensor dropout_forward(const ForwardArgs& args) {
  const auto& p = std::get<DropoutParams>(args.params);
  const Tensor& x = args.in.at(0);
  check_dropout(x, p.p);
  if (!p.training || p.p == 0) return x.clone();
  return cpu::with_compute_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    std::vector<T> y(xv.size()), mask(xv.size());
    const T scale = static_cast<T>(1.0 / (1.0 - p.p));
    parallel_for(x.numel(), cpu::kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const bool keep = uniform01(p.seed, p.offset + static_cast<std::uint64_t>(i)) >= p.p;
        mask[i] = keep ? T(1) : T(0);
        y[i] = xv[i] * (mask[i] * scale);
      }
    });
    args.saved.tensors = {from_values(mask, x.shape(), x.dtype())};  // 0/1: exact in any dtype
    return from_values(y, x.shape(), x.dtype());
  });
}

// dx = g * mask / (1 - p); the identity when the forward was.
std::vector<Tensor> dropout_backward(const BackwardArgs& args) {
  const auto& p = std::get<DropoutParams>(args.params);
  const Tensor& x = args.in[0];
  if (args.saved.tensors.empty()) return {args.grad.to(x.dtype())};
  return cpu::with_compute_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(args.grad), mask = values<T>(args.saved.tensors[0]);
    const T scale = static_cast<T>(1.0 / (1.0 - p.p));
    std::vector<T> dx(g.size());
    parallel_for(x.numel(), cpu::kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) dx[i] = g[i] * (mask[i] * scale);
    });
    return std::vector<Tensor>{from_values(dx, x.shape(), x.dtype())};
  });
}

}  // namespace impl

// ================================================================ public API

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  const BatchNormParams params{training, momentum, eps};
  check_batch_norm({x, weight, bias, running_mean, running_var}, params);
  return call(Op::batch_norm, {x, weight, bias, running_mean, running_var}, params);
}

Tensor layer_norm(const Tensor& x, std::int64_t normalized_dims, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_layer_norm(x, weight, bias, normalized_dims, eps);
  std::vector<Tensor> inputs{x, weight, bias};
  // Trailing absent operands are left out (the op is variadic); an absent weight before a
  // present bias stays as an undefined tensor.
  while (!inputs.back().defined()) inputs.pop_back();
  return call(Op::layer_norm, std::move(inputs), LayerNormParams{normalized_dims, eps});
}

Tensor softmax(const Tensor& x, std::int64_t dim) {
  require_defined(x, "softmax", "x");
  cpu::float_dtype(x, "softmax");
  cpu::normalize_dim(dim, x.dim(), "softmax");
  return call(Op::softmax, {x}, DimParams{dim});
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  require_defined(x, "log_softmax", "x");
  cpu::float_dtype(x, "log_softmax");
  cpu::normalize_dim(dim, x.dim(), "log_softmax");
  return call(Op::log_softmax, {x}, DimParams{dim});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  check_cross_entropy(logits, labels, label_smoothing);
  return call(Op::cross_entropy, {logits, labels}, CrossEntropyParams{label_smoothing});
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  check_mse_loss(input, target);
  return call(Op::mse_loss, {input, target});
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  check_embedding(indices, weight);
  return call(Op::embedding, {indices, weight});
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_dropout(x, p);  // before the generator moves: a rejected call draws nothing
  const std::uint64_t offset =
      training ? gen.advance(static_cast<std::uint64_t>(x.numel())) : gen.offset();
  return call(Op::dropout, {x}, DropoutParams{p, training, gen.seed(), offset});
}

}  // namespace ampcheck
