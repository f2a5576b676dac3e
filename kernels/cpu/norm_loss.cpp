// The normalisation, softmax, loss, embedding and dropout family on the CPU
// (kernels/norm_loss_kernels.h).
//
// Each kernel loads its operands whole into the compute type, computes there, and stores
// each result with one rounding. Reductions run in a fixed order whatever the thread
// count: work is split over independent rows or channels, and sums over many rows go
// through fixed blocks added in order, so every thread count gives the same bits.
#include <algorithm>  // std::max, std::min
#include <cstdint>
#include <cstring>  // std::memcpy (embedding rows are copied, never rounded)
#include <limits>
#include <vector>

#include "kernels/cpu/tensor_io.h"  // load, store, values, parallel_for, kChunk
#include "kernels/elementwise.h"    // max_nan: a row's max is NaN when the row holds one
#include "kernels/norm_loss_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

namespace nl = kernels::norm_loss;

bool present(const View& v) { return v.data != nullptr; }

// An operand's values in T, or `fill` repeated n times when the operand is absent.
template <typename T>
std::vector<T> values_or(const View& v, std::int64_t n, T fill) {
  if (present(v)) return values<T>(v);
  return std::vector<T>(static_cast<std::size_t>(n), fill);
}

template <typename T>
void store_all(const View& v, const std::vector<T>& vals) {
  store(v, 0, static_cast<std::int64_t>(vals.size()), vals.data());
}

// Rows of `row_len` elements per work item, so one item holds about kChunk elements.
std::int64_t row_grain(std::int64_t row_len) {
  return std::max<std::int64_t>(1, kChunk / std::max<std::int64_t>(1, row_len));
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

// ---------------------------------------------------------------- softmax / log_softmax

// Calls f(base, stride) for every line along the reduced dim: element k of the line is
// at base + k * stride.
template <typename F>
void for_each_line(const SoftmaxLines& a, F f) {
  parallel_for(a.outer * a.inner, row_grain(a.n), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t o = r / a.inner, i = r % a.inner;
      f(o * a.n * a.inner + i, a.inner);
    }
  });
}

void softmax(const View& x, const SoftmaxLines& a, bool log, const View& y) {
  with_compute_type(y.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    std::vector<T> out(xv.size());
    for_each_line(a, [&](std::int64_t base, std::int64_t stride) {
      T mx = -std::numeric_limits<T>::infinity();
      for (std::int64_t k = 0; k < a.n; ++k) mx = max_nan(mx, xv[base + k * stride]);
      T s = 0;
      for (std::int64_t k = 0; k < a.n; ++k) s += nl::exp_of(xv[base + k * stride] - mx);
      if (log) {
        const T ls = nl::log_of(s);
        for (std::int64_t k = 0; k < a.n; ++k)
          out[base + k * stride] = nl::log_softmax_value(xv[base + k * stride], mx, ls);
      } else {
        for (std::int64_t k = 0; k < a.n; ++k) out[base + k * stride] = nl::softmax_value(xv[base + k * stride], mx, s);
      }
    });
    store_all(y, out);
  });
}

void softmax_backward(const View& grad, const View& y, const SoftmaxLines& a, bool log, const View& dx) {
  with_compute_type(dx.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(grad), yv = values<T>(y);
    std::vector<T> out(g.size());
    for_each_line(a, [&](std::int64_t base, std::int64_t stride) {
      T s = 0;
      for (std::int64_t k = 0; k < a.n; ++k) {
        const std::int64_t i = base + k * stride;
        s += nl::softmax_backward_term(g[i], yv[i], log);
      }
      for (std::int64_t k = 0; k < a.n; ++k) {
        const std::int64_t i = base + k * stride;
        out[i] = nl::softmax_backward_value(g[i], yv[i], s, log);
      }
    });
    store_all(dx, out);
  });
}

// ---------------------------------------------------------------- layer_norm

void layer_norm(const View& x, const View& weight, const View& bias, const LayerNormArgs& a, const View& y,
                const View& mean, const View& invstd) {
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t len = a.len;
    const std::vector<T> xv = values<T>(x);
    const std::vector<T> wv = values_or<T>(weight, len, T(1)), bv = values_or<T>(bias, len, T(0));
    std::vector<T> yv(xv.size()), mv(static_cast<std::size_t>(a.rows)), iv(mv.size());
    const T eps = static_cast<T>(a.eps), count = static_cast<T>(len);
    parallel_for(a.rows, row_grain(len), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const T* xr = xv.data() + r * len;
        T s = 0;
        for (std::int64_t j = 0; j < len; ++j) s += xr[j];
        const T mu = s / count;
        T sq = 0;  // second pass over deviations: no cancellation
        for (std::int64_t j = 0; j < len; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
        const T is = nl::inverse_std(sq / count, eps);
        mv[r] = mu;
        iv[r] = is;
        for (std::int64_t j = 0; j < len; ++j) yv[r * len + j] = nl::layer_norm_value(xr[j], mu, is, wv[j], bv[j]);
      }
    });
    store_all(y, yv);
    store_all(mean, mv);
    store_all(invstd, iv);
  });
}

void layer_norm_backward(const View& grad, const View& x, const View& weight, const View& mean, const View& invstd,
                         const LayerNormArgs& a, const View& dx, const View& dweight, const View& dbias) {
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t len = a.len, rows = a.rows;
    const std::vector<T> xv = values<T>(x), g = values<T>(grad);
    const std::vector<T> wv = values_or<T>(weight, len, T(1));
    const std::vector<T> mv = values<T>(mean), iv = values<T>(invstd);
    const T count = static_cast<T>(len);
    if (present(dx)) {
      std::vector<T> out(xv.size());
      parallel_for(rows, row_grain(len), [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          const std::int64_t o = r * len;
          T sh = 0, shx = 0;
          for (std::int64_t j = 0; j < len; ++j) {
            const T h = g[o + j] * wv[j];
            sh += h;
            shx += h * ((xv[o + j] - mv[r]) * iv[r]);
          }
          const T mh = sh / count, mhx = shx / count;
          for (std::int64_t j = 0; j < len; ++j)
            out[o + j] = nl::layer_norm_dx(g[o + j], xv[o + j], wv[j], mv[r], iv[r], mh, mhx);
        }
      });
      store_all(dx, out);
    }
    if (!present(dweight) && !present(dbias)) return;
    // Column sums over rows: each column is summed in row order by one work item.
    std::vector<T> dw(static_cast<std::size_t>(len)), db(dw.size());
    parallel_for(len, 256, [&](std::int64_t jb, std::int64_t je) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t o = r * len;
        for (std::int64_t j = jb; j < je; ++j) {
          dw[j] += g[o + j] * ((xv[o + j] - mv[r]) * iv[r]);
          db[j] += g[o + j];
        }
      }
    });
    if (present(dweight)) store_all(dweight, dw);
    if (present(dbias)) store_all(dbias, db);
  });
}

// ---------------------------------------------------------------- batch_norm

std::int64_t bn_at(const BatchNormArgs& a, std::int64_t i, std::int64_t ch, std::int64_t j) {
  return (i * a.c + ch) * a.s + j;
}

void batch_norm(const View& x, const View& weight, const View& bias, const View& running_mean,
                const View& running_var, const BatchNormArgs& a, const View& y, const View& mean,
                const View& invstd) {
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    const std::vector<T> wv = values_or<T>(weight, a.c, T(1)), bv = values_or<T>(bias, a.c, T(0));
    const bool has_running = present(running_mean);
    std::vector<T> rm = values_or<T>(running_mean, a.c, T(0));
    std::vector<T> rv = values_or<T>(running_var, a.c, T(1));
    std::vector<T> mv(static_cast<std::size_t>(a.c)), iv(mv.size());
    std::vector<T> yv(xv.size());
    const T m = static_cast<T>(a.n * a.s);
    const T eps = static_cast<T>(a.eps), momentum = static_cast<T>(a.momentum);
    // Channels are independent; within one, sums run in (n, s) order: deterministic.
    parallel_for(a.c, 1, [&](std::int64_t cb, std::int64_t ce) {
      for (std::int64_t c = cb; c < ce; ++c) {
        T mu, var;
        if (a.training) {
          // Two passes (mean, then squared deviations) avoid E[x^2] - E[x]^2
          // cancellation; each pass sums one [S] slab at a time, then the slabs.
          T total = 0;
          for (std::int64_t i = 0; i < a.n; ++i) {
            T slab = 0;
            for (std::int64_t j = 0; j < a.s; ++j) slab += xv[bn_at(a, i, c, j)];
            total += slab;
          }
          mu = total / m;
          T sq = 0;
          for (std::int64_t i = 0; i < a.n; ++i) {
            T slab = 0;
            for (std::int64_t j = 0; j < a.s; ++j) {
              const T d = xv[bn_at(a, i, c, j)] - mu;
              slab += d * d;
            }
            sq += slab;
          }
          var = sq / m;  // biased: what the batch is normalised with
          if (has_running) {
            // PyTorch: the running variance takes the unbiased estimate.
            rm[c] = nl::running_update(rm[c], mu, momentum);
            rv[c] = nl::running_update(rv[c], sq / (m - T(1)), momentum);
          }
        } else {
          mu = rm[c];
          var = rv[c];
        }
        const T is = nl::inverse_std(var, eps);
        mv[c] = mu;
        iv[c] = is;
        const T scale = is * wv[c];
        for (std::int64_t i = 0; i < a.n; ++i)
          for (std::int64_t j = 0; j < a.s; ++j) {
            const std::int64_t k = bn_at(a, i, c, j);
            yv[k] = nl::batch_norm_value(xv[k], mu, scale, bv[c]);
          }
      }
    });
    if (a.training && has_running) {
      store_all(running_mean, rm);
      store_all(running_var, rv);
    }
    store_all(y, yv);
    store_all(mean, mv);
    store_all(invstd, iv);
  });
}

void batch_norm_backward(const View& grad, const View& x, const View& weight, const View& mean, const View& invstd,
                         const BatchNormArgs& a, const View& dx, const View& dweight, const View& dbias) {
  with_compute_type(a.compute, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x), g = values<T>(grad);
    const std::vector<T> wv = values_or<T>(weight, a.c, T(1));
    const std::vector<T> mv = values<T>(mean), iv = values<T>(invstd);
    const bool need_x = present(dx);
    const bool need_sums = present(dweight) || present(dbias) || (need_x && a.training);
    std::vector<T> dxv(need_x ? xv.size() : 0), dw(static_cast<std::size_t>(a.c)), db(dw.size());
    const T m = static_cast<T>(a.n * a.s);
    parallel_for(a.c, 1, [&](std::int64_t cb, std::int64_t ce) {
      for (std::int64_t c = cb; c < ce; ++c) {
        T sg = 0, sgx = 0;
        for (std::int64_t i = 0; need_sums && i < a.n; ++i) {
          T slab_g = 0, slab_gx = 0;
          for (std::int64_t j = 0; j < a.s; ++j) {
            const std::int64_t k = bn_at(a, i, c, j);
            slab_g += g[k];
            slab_gx += g[k] * ((xv[k] - mv[c]) * iv[c]);
          }
          sg += slab_g;
          sgx += slab_gx;
        }
        db[c] = sg;
        dw[c] = sgx;
        const T scale = wv[c] * iv[c];
        const T mg = sg / m, mgx = sgx / m;
        for (std::int64_t i = 0; need_x && i < a.n; ++i)
          for (std::int64_t j = 0; j < a.s; ++j) {
            const std::int64_t k = bn_at(a, i, c, j);
            dxv[k] = nl::batch_norm_dx(g[k], xv[k], mv[c], iv[c], scale, mg, mgx, a.training);
          }
      }
    });
    if (need_x) store_all(dx, dxv);
    if (present(dweight)) store_all(dweight, dw);
    if (present(dbias)) store_all(dbias, db);
  });
}

// ---------------------------------------------------------------- cross_entropy

void cross_entropy(const View& logits, const View& labels, double smoothing, const View& lse, const View& loss) {
  const std::int64_t n = logits.shape[0], c = logits.shape[1];
  const std::int64_t* y = labels.as<const std::int64_t>();
  with_compute_type(logits.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> x = values<T>(logits);
    std::vector<T> lv(static_cast<std::size_t>(n)), row_loss(lv.size());
    const T smooth = static_cast<T>(smoothing), hit = T(1) - smooth;
    const T per_class = smooth / static_cast<T>(c);
    parallel_for(n, row_grain(c), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const T* xr = x.data() + r * c;
        T mx = -std::numeric_limits<T>::infinity();
        for (std::int64_t k = 0; k < c; ++k) mx = max_nan(mx, xr[k]);
        T s = 0, sum_shifted = 0;
        for (std::int64_t k = 0; k < c; ++k) {
          s += nl::exp_of(xr[k] - mx);
          sum_shifted += xr[k] - mx;
        }
        const T log_s = nl::log_of(s);
        lv[r] = mx + log_s;
        row_loss[r] = nl::cross_entropy_row(xr[y[r]], mx, log_s, sum_shifted, static_cast<T>(c), smooth != T(0), hit,
                                            per_class);
      }
    });
    const T total = ordered_sum<T>(n, [&](std::int64_t r) { return row_loss[r]; });
    store_all(lse, lv);
    const T mean_loss = total / static_cast<T>(n);
    store(loss, 0, 1, &mean_loss);
  });
}

void cross_entropy_backward(const View& grad, const View& logits, const View& labels, const View& lse,
                            double smoothing, const View& dlogits) {
  const std::int64_t n = logits.shape[0], c = logits.shape[1];
  const std::int64_t* y = labels.as<const std::int64_t>();
  with_compute_type(logits.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> x = values<T>(logits), lv = values<T>(lse);
    T g = 0;
    load(grad, 0, 1, &g);
    const T gn = g / static_cast<T>(n), smooth = static_cast<T>(smoothing);
    const T hit = T(1) - smooth, per_class = smooth / static_cast<T>(c);
    std::vector<T> dx(x.size());
    parallel_for(n, row_grain(c), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t k = 0; k < c; ++k)
          dx[r * c + k] = nl::cross_entropy_dx(gn, x[r * c + k], lv[r], k == y[r], hit, per_class);
    });
    store_all(dlogits, dx);
  });
}

// ---------------------------------------------------------------- mse_loss

void mse_loss(const View& input, const View& target, const View& loss) {
  with_compute_type(loss.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> av = values<T>(input), bv = values<T>(target);
    const std::int64_t n = input.numel();
    const T total = ordered_sum<T>(n, [&](std::int64_t i) {
      const T d = av[i] - bv[i];
      return d * d;
    });
    const T mean_loss = total / static_cast<T>(n);
    store(loss, 0, 1, &mean_loss);
  });
}

void mse_loss_backward(const View& grad, const View& input, const View& target, DType compute, const View& dinput,
                       const View& dtarget) {
  with_compute_type(compute, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> av = values<T>(input), bv = values<T>(target);
    const std::int64_t n = input.numel();
    T g = 0;
    load(grad, 0, 1, &g);
    const T k = T(2) * g / static_cast<T>(n);
    const bool need_a = present(dinput), need_b = present(dtarget);
    std::vector<T> da(need_a ? av.size() : 0), db(need_b ? av.size() : 0);
    parallel_for(n, kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const T d = k * (av[i] - bv[i]);
        if (need_a) da[i] = d;
        if (need_b) db[i] = -d;
      }
    });
    if (need_a) store_all(dinput, da);
    if (need_b) store_all(dtarget, db);
  });
}

// ---------------------------------------------------------------- embedding

void embedding(const View& indices, const View& weight, const View& out) {
  const std::int64_t d = weight.shape[1];
  const std::int64_t* idx = indices.as<const std::int64_t>();
  // Rows are copied bit for bit: a lookup never rounds.
  const std::size_t row_bytes = static_cast<std::size_t>(d) * element_size(weight.dtype);
  const auto* src = static_cast<const unsigned char*>(weight.data);
  auto* dst = static_cast<unsigned char*>(out.data);
  parallel_for(indices.numel(), row_grain(d), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes, src + static_cast<std::size_t>(idx[i]) * row_bytes,
                  row_bytes);
  });
}

// Positions grouped by row with a stable counting sort, so rows are independent work
// items and each row's order is the positions' order.
void embedding_backward(const View& indices, const View& grad, const View& dweight) {
  const std::int64_t v = dweight.shape[0], d = dweight.shape[1];
  const std::int64_t* idx = indices.as<const std::int64_t>();
  const auto count = static_cast<std::size_t>(indices.numel());
  std::vector<std::int64_t> start(static_cast<std::size_t>(v) + 1, 0);
  for (std::size_t i = 0; i < count; ++i) ++start[static_cast<std::size_t>(idx[i]) + 1];
  for (std::size_t r = 0; r < static_cast<std::size_t>(v); ++r) start[r + 1] += start[r];
  std::vector<std::int64_t> positions(count), next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < count; ++i) positions[next[idx[i]]++] = static_cast<std::int64_t>(i);
  with_compute_type(dweight.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(grad);
    std::vector<T> dw(static_cast<std::size_t>(v * d), T(0));
    parallel_for(v, row_grain(d), [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t k = start[r]; k < start[r + 1]; ++k) {
          const std::int64_t o = positions[k] * d;
          for (std::int64_t j = 0; j < d; ++j) dw[r * d + j] += g[o + j];
        }
    });
    store_all(dweight, dw);
  });
}

// ---------------------------------------------------------------- dropout

void dropout(const View& x, double p, std::uint64_t seed, std::uint64_t offset, const View& y, const View& mask) {
  with_compute_type(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> xv = values<T>(x);
    std::vector<T> yv(xv.size()), mv(xv.size());
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for(x.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        mv[i] = nl::dropout_keeps(seed, offset + static_cast<std::uint64_t>(i), p) ? T(1) : T(0);
        yv[i] = xv[i] * (mv[i] * scale);
      }
    });
    store_all(mask, mv);  // 0/1: exact in any dtype
    store_all(y, yv);
  });
}

void dropout_backward(const View& grad, const View& mask, double p, const View& dx) {
  with_compute_type(dx.dtype, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> g = values<T>(grad), mv = values<T>(mask);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    std::vector<T> out(g.size());
    parallel_for(dx.numel(), kChunk, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) out[i] = g[i] * (mv[i] * scale);
    });
    store_all(dx, out);
  });
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const NormLossKernels& NormLossKernels::cpu() {
  static const NormLossKernels k{&cpu::softmax,
                                 &cpu::softmax_backward,
                                 &cpu::layer_norm,
                                 &cpu::layer_norm_backward,
                                 &cpu::batch_norm,
                                 &cpu::batch_norm_backward,
                                 &cpu::cross_entropy,
                                 &cpu::cross_entropy_backward,
                                 &cpu::mse_loss,
                                 &cpu::mse_loss_backward,
                                 &cpu::embedding,
                                 &cpu::embedding_backward,
                                 &cpu::dropout,
                                 &cpu::dropout_backward};
  return k;
}

}  // namespace ampcheck::kernels
