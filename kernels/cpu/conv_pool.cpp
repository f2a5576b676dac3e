// The convolution and pooling family on the CPU (kernels/conv_pool_kernels.h).
//   conv2d: im2col + GEMM per group over several samples at once (float GEMM for
//           f32/f16/bf16, double for f64), parallel over groups of samples; depthwise
//           convolutions on the direct kernels of conv_direct.cpp, which
//           compute the same chains in the same order (kernels/cpu/conv_direct.h);
//   max_pool2d, avg_pool2d, adaptive_avg_pool2d: direct loops, parallel over planes.
// Every kernel loads its inputs into the compute type, works there, and stores each
// result once, so f16/bf16 results are the f32 results rounded once. No reduction is
// split across threads in a thread-count-dependent way: results are bit-identical for
// every thread count.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/conv_pool_kernels.h"
#include "kernels/cpu/conv_direct.h"  // the direct kernels depthwise convolutions take
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_io.h"

namespace ampcheck::kernels::cpu {
namespace {

using i64 = std::int64_t;

std::size_t usize(i64 n) { return static_cast<std::size_t>(n); }

// A work buffer that grows without zeroing (every use below writes it whole before
// reading it): a megabyte column matrix is not memset first on every call.
template <typename T>
class Buffer {
 public:
  T* get(i64 n) {
    if (n > size_) {
      data_ = std::make_unique_for_overwrite<T[]>(usize(n));
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  i64 size_ = 0;
};

// ---------------------------------------------------------------------------------
// conv2d

// The output columns ox whose input column ox*sw - pw + j*dw lies inside [0, w): one
// range per kernel column j, so the copy loops below carry no per-element bounds test.
struct ColumnRange {
  i64 lo = 0, hi = 0;  // ox in [lo, hi)
};
ColumnRange valid_columns(const ConvGeometry& g, i64 j) {
  const i64 shift = j * g.dw - g.pw;  // ix = ox*sw + shift
  auto ceil_div = [](i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const i64 lo = std::clamp<i64>(ceil_div(-shift, g.sw), 0, g.ow);
  const i64 hi = std::clamp<i64>(ceil_div(g.w - shift, g.sw), lo, g.ow);
  return {lo, hi};
}

// col[(c, i, j), (oy, ox)] = x[c, oy*sh - ph + i*dh, ox*sw - pw + j*dw], 0 in the padding,
// into the columns [0, OH*OW) of rows `ld` apart (a sample's block of a batched column
// matrix); rows are channel-major, so group g's rows are the contiguous block [g*k, (g+1)*k).
template <typename T>
void im2col(const ConvGeometry& g, const T* x, T* col, i64 ld) {
  for (i64 c = 0; c < g.c_in; ++c) {
    const T* plane = x + c * g.hw();
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const ColumnRange r = valid_columns(g, j);
        const i64 shift = j * g.dw - g.pw;
        for (i64 oy = 0; oy < g.oh; ++oy) {
          T* dst = row + oy * g.ow;
          const i64 iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.ow, T{0});
            continue;
          }
          const T* src = plane + iy * g.w + shift;
          std::fill(dst, dst + r.lo, T{0});
          if (g.sw == 1)
            std::copy(src + r.lo, src + r.hi, dst + r.lo);
          else
            for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox] = src[ox * g.sw];
          std::fill(dst + r.hi, dst + g.ow, T{0});
        }
      }
    }
  }
}

// The adjoint of im2col: x[c, iy, ix] += col[(c, i, j), (oy, ox)] (x zeroed first), the
// columns read from rows `ld` apart.
template <typename T>
void col2im(const ConvGeometry& g, const T* col, i64 ld, T* x) {
  std::fill(x, x + g.c_in * g.hw(), T{0});
  for (i64 c = 0; c < g.c_in; ++c) {
    T* plane = x + c * g.hw();
    for (i64 i = 0; i < g.kh; ++i) {
      for (i64 j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const ColumnRange r = valid_columns(g, j);
        const i64 shift = j * g.dw - g.pw;
        for (i64 oy = 0; oy < g.oh; ++oy) {
          const i64 iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const T* src = row + oy * g.ow;
          T* dst = plane + iy * g.w + shift;
          for (i64 ox = r.lo; ox < r.hi; ++ox) dst[ox * g.sw] += src[ox];
        }
      }
    }
  }
}

// The GEMMs take several samples at once: the column matrices of samples [s0, s0 + S)
// side by side ([rows, S*OH*OW], sample j in columns [j*OH*OW, (j+1)*OH*OW)), so that a
// late layer's 2x2 or 4x4 output still gives the GEMM whole vectors of columns, and the
// weight gradient's chain runs S*OH*OW steps per call instead of OH*OW. Each element of
// C is the same fma chain over k either way (the forward and input-gradient chains run
// over the channels and taps; the weight gradient's over the samples in order, then the
// pixels), so how the batch is cut changes the speed, not the bits.
constexpr i64 kColumnBudget = i64{1} << 21;  // elements of one batched column matrix

// Sample groups of at most `cap` samples: at least one per thread (the forward and input
// gradient are parallel over groups), each column matrix within the budget.
struct SampleGroups {
  i64 count = 0, size = 0;
  i64 first(i64 grp, i64 n) const { return std::min(n, grp * size); }
};
SampleGroups sample_groups(i64 n, i64 per_sample, i64 threads) {
  const i64 cap = std::max<i64>(1, kColumnBudget / std::max<i64>(1, per_sample));
  i64 count = std::max(std::min(n, threads), (n + cap - 1) / cap);
  const i64 size = n == 0 ? 1 : (n + count - 1) / count;
  count = n == 0 ? 0 : (n + size - 1) / size;
  return {count, size};
}

// Samples [s0, s1) of x as one batched GEMM operand [C_in*kh*kw, S*OH*OW] (for a
// pointwise convolution: x's planes themselves, [C_in, S*H*W]).
template <typename T>
void batched_columns(const ConvGeometry& g, const View& input, i64 s0, i64 s1, Buffer<T>& x, T* cols) {
  const i64 x_size = g.c_in * g.hw(), ld = (s1 - s0) * g.ohw();
  for (i64 s = s0; s < s1; ++s) {
    T* block = cols + (s - s0) * g.ohw();
    if (g.pointwise()) {
      for (i64 c = 0; c < g.c_in; ++c) load(input, s * x_size + c * g.hw(), g.hw(), block + c * ld);
      continue;
    }
    im2col(g, source(input, s * x_size, x_size, x.get(x_size)), block, ld);
  }
}

// Rows of `per_row` elements of samples [s0, s1) of a [N, rows, per_row] tensor, side by
// side: out[r, (s - s0)*per_row + i] = v[s, r, i].
template <typename T>
void load_batched_rows(const View& v, i64 rows, i64 per_row, i64 s0, i64 s1, T* out) {
  const i64 ld = (s1 - s0) * per_row;
  for (i64 s = s0; s < s1; ++s)
    for (i64 r = 0; r < rows; ++r) load(v, (s * rows + r) * per_row, per_row, out + r * ld + (s - s0) * per_row);
}

template <typename T>
void conv_forward(const ConvGeometry& g, const View& input, const View& weight_v, const View& bias_v,
                  const View& out) {
  Buffer<T> weight_buf, bias_buf;
  const T* weight = source(weight_v, 0, weight_v.numel(), weight_buf.get(weight_v.numel()));
  const bool has_bias = bias_v.data != nullptr;
  const T* bias = has_bias ? source(bias_v, 0, g.c_out, bias_buf.get(g.c_out)) : nullptr;
  const i64 rows = g.c_in * g.kh * g.kw;
  const SampleGroups sg = sample_groups(g.n, rows * g.ohw(), num_threads());
  parallel_for(sg.count, 1, [&](i64 begin, i64 end) {
    Buffer<T> x, cols_buf, y_buf;
    for (i64 grp_s = begin; grp_s < end; ++grp_s) {
      const i64 s0 = sg.first(grp_s, g.n), s1 = sg.first(grp_s + 1, g.n), ld = (s1 - s0) * g.ohw();
      T* cols = cols_buf.get(rows * ld);
      T* y = y_buf.get(g.c_out * ld);
      batched_columns(g, input, s0, s1, x, cols);
      // y_g [C_out/g, S*OH*OW] = W_g [C_out/g, k] . cols_g [k, S*OH*OW]
      for (i64 grp = 0; grp < g.groups; ++grp)
        gemm(false, false, g.cout_g(), ld, g.k(), weight + grp * g.cout_g() * g.k(), g.k(),
             cols + grp * g.k() * ld, ld, y + grp * g.cout_g() * ld, ld);
      for (i64 c = 0; c < g.c_out; ++c) {
        T* row = y + c * ld;
        if (has_bias)
          for (i64 i = 0; i < ld; ++i) row[i] += bias[c];
        for (i64 s = s0; s < s1; ++s) store(out, (s * g.c_out + c) * g.ohw(), g.ohw(), row + (s - s0) * g.ohw());
      }
    }
  });
}

// Cap on the per-slot partial weight gradients (elements over all slots).
constexpr i64 kWeightSlotBudget = i64{1} << 22;
constexpr i64 kMaxWeightSlots = 16;

// grad_x_n = col2im(W^T . gy_n), per group: gcol_g [k, S*OH*OW] = W_g^T . gy_g
template <typename T>
void conv_grad_x(const ConvGeometry& g, const View& grad, const View& weight_v, const View& gx) {
  Buffer<T> weight_buf;
  const T* weight = source(weight_v, 0, weight_v.numel(), weight_buf.get(weight_v.numel()));
  const i64 x_size = g.c_in * g.hw(), rows = g.c_in * g.kh * g.kw;
  const SampleGroups sg = sample_groups(g.n, (rows + g.c_out) * g.ohw(), num_threads());
  parallel_for(sg.count, 1, [&](i64 begin, i64 end) {
    Buffer<T> gy_buf, gcol_buf, gx_buf;
    for (i64 grp_s = begin; grp_s < end; ++grp_s) {
      const i64 s0 = sg.first(grp_s, g.n), s1 = sg.first(grp_s + 1, g.n), ld = (s1 - s0) * g.ohw();
      T* gy = gy_buf.get(g.c_out * ld);
      T* gcol = gcol_buf.get(rows * ld);
      load_batched_rows(grad, g.c_out, g.ohw(), s0, s1, gy);
      for (i64 grp = 0; grp < g.groups; ++grp)
        gemm(true, false, g.k(), ld, g.cout_g(), weight + grp * g.cout_g() * g.k(), g.k(),
             gy + grp * g.cout_g() * ld, ld, gcol + grp * g.k() * ld, ld);
      for (i64 s = s0; s < s1; ++s) {
        const T* block = gcol + (s - s0) * g.ohw();
        if (g.pointwise()) {
          for (i64 c = 0; c < g.c_in; ++c) store(gx, s * x_size + c * g.hw(), g.hw(), block + c * ld);
        } else {
          T* x = gx_buf.get(x_size);
          col2im(g, block, ld, x);
          store(gx, s * x_size, x_size, x);
        }
      }
    }
  });
}

// grad_W_g = sum_n gy_n,g [C_out/g, OH*OW] . col_n,g^T. The batch is cut into a number
// of slots that depends on the shapes only; each slot sums its samples in order (one
// chain per weight over the slot's samples, then pixels) and the slots are added in
// order, so the result does not depend on the thread count.
template <typename T>
void conv_grad_w(const ConvGeometry& g, const View& input, const View& grad, const View& gw_out) {
  const i64 rows = g.c_in * g.kh * g.kw;
  const i64 w_size = g.c_out * g.k();
  std::vector<T> gw(usize(w_size), T{0});
  if (g.n > 0) {
    const i64 slots = weight_gradient_slots(g);
    // Samples per GEMM within a slot: a function of the shapes only, as the slots are.
    const i64 per_gemm = std::max<i64>(1, kColumnBudget / ((rows + g.c_out) * g.ohw()));
    std::vector<std::vector<T>> partial(usize(slots));
    parallel_for(slots, 1, [&](i64 begin, i64 end) {
      Buffer<T> x, gy_buf, cols_buf;
      for (i64 slot = begin; slot < end; ++slot) {
        std::vector<T>& acc = partial[usize(slot)];
        acc.assign(usize(w_size), T{0});
        const i64 last = (slot + 1) * g.n / slots;
        for (i64 s0 = slot * g.n / slots; s0 < last; s0 += per_gemm) {
          const i64 s1 = std::min(last, s0 + per_gemm), ld = (s1 - s0) * g.ohw();
          T* gy = gy_buf.get(g.c_out * ld);
          T* cols = cols_buf.get(rows * ld);
          batched_columns(g, input, s0, s1, x, cols);
          load_batched_rows(grad, g.c_out, g.ohw(), s0, s1, gy);
          for (i64 grp = 0; grp < g.groups; ++grp)
            gemm(false, true, g.cout_g(), g.k(), ld, gy + grp * g.cout_g() * ld, ld,
                 cols + grp * g.k() * ld, ld, acc.data() + grp * g.cout_g() * g.k(), g.k(),
                 /*accumulate=*/true);
        }
      }
    });
    for (const std::vector<T>& acc : partial)
      for (std::size_t i = 0; i < gw.size(); ++i) gw[i] += acc[i];
  }
  store(gw_out, 0, w_size, gw.data());
}

// grad_b[c] = sum over n, oy, ox of gy[n, c, oy, ox]; one channel per work item.
template <typename T>
void conv_grad_b(const ConvGeometry& g, const View& grad, const View& gb_out) {
  std::vector<T> gb(usize(g.c_out), T{0});
  parallel_for(g.c_out, 1, [&](i64 begin, i64 end) {
    std::vector<T> row(usize(g.ohw()));
    for (i64 c = begin; c < end; ++c) {
      T acc{0};
      for (i64 s = 0; s < g.n; ++s) {
        load(grad, (s * g.c_out + c) * g.ohw(), g.ohw(), row.data());
        for (const T v : row) acc += v;
      }
      gb[usize(c)] = acc;
    }
  });
  store(gb_out, 0, g.c_out, gb.data());
}

// ---------------------------------------------------------------------------------
// pooling

// Runs f(plane, src_plane, dst_plane) for each of the planes: src planes of src_size
// elements loaded from `src` in the compute type, dst planes of dst_size stored once into
// `out`. Each plane is one work item.
template <typename T, typename F>
void per_plane(const View& src, i64 planes, i64 src_size, i64 dst_size, const View& out, F f) {
  const i64 grain = std::max<i64>(1, kChunk / std::max<i64>(1, src_size + dst_size));
  parallel_for(planes, grain, [&](i64 begin, i64 end) {
    std::vector<T> a(usize(src_size)), b(usize(dst_size));
    for (i64 p = begin; p < end; ++p) {
      load(src, p * src_size, src_size, a.data());
      f(p, a.data(), b.data());
      store(out, p * dst_size, dst_size, b.data());
    }
  });
}

// Index (within its H*W plane) of each window's maximum (max_pool_takes decides).
// Padding never wins: it is not visited.
template <typename T>
void argmax_plane(const PoolGeometry& g, const T* x, std::int64_t* idx) {
  for (i64 oy = 0; oy < g.oh; ++oy) {
    const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
    const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
    for (i64 ox = 0; ox < g.ow; ++ox) {
      const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
      const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
      i64 best = -1;
      for (i64 iy = y0; iy < y1; ++iy)
        for (i64 ix = x0; ix < x1; ++ix) {
          const i64 i = iy * g.w + ix;
          if (best < 0 || max_pool_takes(x[i], x[best])) best = i;
        }
      idx[oy * g.ow + ox] = best;
    }
  }
}

template <typename T>
void max_pool_forward(const PoolGeometry& g, const View& x, const View& out, const View& indices) {
  std::int64_t* idx = indices.as<std::int64_t>();
  per_plane<T>(x, g.planes(), g.hw(), g.ohw(), out, [&](i64 p, const T* src, T* dst) {
    std::int64_t* ip = idx + p * g.ohw();
    argmax_plane(g, src, ip);
    for (i64 o = 0; o < g.ohw(); ++o) dst[o] = src[ip[o]];
  });
}

template <typename T>
void max_pool_indices(const PoolGeometry& g, const View& x, const View& indices) {
  std::int64_t* out_idx = indices.as<std::int64_t>();
  parallel_for(g.planes(), 1, [&](i64 begin, i64 end) {
    std::vector<T> plane(usize(g.hw()));
    for (i64 p = begin; p < end; ++p) {
      load(x, p * g.hw(), g.hw(), plane.data());
      argmax_plane(g, plane.data(), out_idx + p * g.ohw());
    }
  });
}

// grad_x[argmax(o)] += gy[o]
template <typename T>
void max_pool_backward(const PoolGeometry& g, const View& grad, const View& indices, const View& gx_out) {
  const std::int64_t* idx = indices.as<const std::int64_t>();
  per_plane<T>(grad, g.planes(), g.ohw(), g.hw(), gx_out, [&](i64 p, const T* gy, T* gx) {
    std::fill(gx, gx + g.hw(), T{0});
    const std::int64_t* ip = idx + p * g.ohw();
    for (i64 o = 0; o < g.ohw(); ++o) gx[ip[o]] += gy[o];
  });
}

// y[o] = sum of the window (padding counts as zeros) / (kH*kW)
template <typename T>
void avg_pool_forward(const PoolGeometry& g, const View& x, const View& out) {
  const T divisor = static_cast<T>(g.kh * g.kw);
  per_plane<T>(x, g.planes(), g.hw(), g.ohw(), out, [&](i64, const T* src, T* dst) {
    for (i64 oy = 0; oy < g.oh; ++oy) {
      const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
      const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
      for (i64 ox = 0; ox < g.ow; ++ox) {
        const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
        const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
        T acc{0};
        for (i64 iy = y0; iy < y1; ++iy)
          for (i64 ix = x0; ix < x1; ++ix) acc += src[iy * g.w + ix];
        dst[oy * g.ow + ox] = acc / divisor;
      }
    }
  });
}

// grad_x[i] = sum over the windows o holding i of gy[o] / (kH*kW)
template <typename T>
void avg_pool_backward(const PoolGeometry& g, const View& grad, const View& gx_out) {
  const T divisor = static_cast<T>(g.kh * g.kw);
  per_plane<T>(grad, g.planes(), g.ohw(), g.hw(), gx_out, [&](i64, const T* gy, T* gx) {
    std::fill(gx, gx + g.hw(), T{0});
    for (i64 oy = 0; oy < g.oh; ++oy) {
      const i64 y0 = std::max<i64>(oy * g.sh - g.ph, 0);
      const i64 y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
      for (i64 ox = 0; ox < g.ow; ++ox) {
        const i64 x0 = std::max<i64>(ox * g.sw - g.pw, 0);
        const i64 x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
        const T v = gy[oy * g.ow + ox] / divisor;
        for (i64 iy = y0; iy < y1; ++iy)
          for (i64 ix = x0; ix < x1; ++ix) gx[iy * g.w + ix] += v;
      }
    }
  });
}

// y[oy, ox] = mean of x over rows [hs, he) and columns [ws, we) (adaptive windows)
template <typename T>
void adaptive_forward(const PoolGeometry& g, const View& x, const View& out) {
  per_plane<T>(x, g.planes(), g.hw(), g.ohw(), out, [&](i64, const T* src, T* dst) {
    for (i64 oy = 0; oy < g.oh; ++oy) {
      const i64 y0 = adaptive_start(oy, g.h, g.oh);
      const i64 y1 = adaptive_end(oy, g.h, g.oh);
      for (i64 ox = 0; ox < g.ow; ++ox) {
        const i64 x0 = adaptive_start(ox, g.w, g.ow);
        const i64 x1 = adaptive_end(ox, g.w, g.ow);
        T acc{0};
        for (i64 iy = y0; iy < y1; ++iy)
          for (i64 ix = x0; ix < x1; ++ix) acc += src[iy * g.w + ix];
        dst[oy * g.ow + ox] = acc / static_cast<T>((y1 - y0) * (x1 - x0));
      }
    }
  });
}

// grad_x[i] = sum over the windows o holding i of gy[o] / |window o|
template <typename T>
void adaptive_backward(const PoolGeometry& g, const View& grad, const View& gx_out) {
  per_plane<T>(grad, g.planes(), g.ohw(), g.hw(), gx_out, [&](i64, const T* gy, T* gx) {
    std::fill(gx, gx + g.hw(), T{0});
    for (i64 oy = 0; oy < g.oh; ++oy) {
      const i64 y0 = adaptive_start(oy, g.h, g.oh);
      const i64 y1 = adaptive_end(oy, g.h, g.oh);
      for (i64 ox = 0; ox < g.ow; ++ox) {
        const i64 x0 = adaptive_start(ox, g.w, g.ow);
        const i64 x1 = adaptive_end(ox, g.w, g.ow);
        const T v = gy[oy * g.ow + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
        for (i64 iy = y0; iy < y1; ++iy)
          for (i64 ix = x0; ix < x1; ++ix) gx[iy * g.w + ix] += v;
      }
    }
  });
}

// The table's entries: each runs its kernel in the compute type of the result's dtype
// (the engine has made every float input share it).

void conv2d_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y) {
  if (direct_conv_takes(g)) return direct_conv_forward(g, x, weight, bias, y, active_gemm_isa());
  im2col_conv_forward(g, x, weight, bias, y);
}
void conv2d_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x) {
  if (direct_conv_takes(g)) return direct_conv_backward_data(g, grad_y, weight, grad_x, active_gemm_isa());
  im2col_conv_backward_data(g, grad_y, weight, grad_x);
}
void conv2d_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight) {
  if (direct_conv_takes(g)) return direct_conv_backward_filter(g, x, grad_y, grad_weight, active_gemm_isa());
  im2col_conv_backward_filter(g, x, grad_y, grad_weight);
}
void conv2d_backward_bias(const ConvGeometry& g, const View& grad_y, const View& grad_bias) {
  with_compute_type(grad_bias.dtype, [&](auto zero) { conv_grad_b<decltype(zero)>(g, grad_y, grad_bias); });
}

void max_pool2d_forward(const PoolGeometry& g, const View& x, const View& y, const View& indices) {
  with_compute_type(y.dtype, [&](auto zero) { max_pool_forward<decltype(zero)>(g, x, y, indices); });
}
void max_pool2d_indices(const PoolGeometry& g, const View& x, const View& indices) {
  with_compute_type(x.dtype, [&](auto zero) { max_pool_indices<decltype(zero)>(g, x, indices); });
}
void max_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& indices, const View& grad_x) {
  with_compute_type(grad_x.dtype, [&](auto zero) { max_pool_backward<decltype(zero)>(g, grad_y, indices, grad_x); });
}
void avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y) {
  with_compute_type(y.dtype, [&](auto zero) { avg_pool_forward<decltype(zero)>(g, x, y); });
}
void avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x) {
  with_compute_type(grad_x.dtype, [&](auto zero) { avg_pool_backward<decltype(zero)>(g, grad_y, grad_x); });
}
void adaptive_avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y) {
  with_compute_type(y.dtype, [&](auto zero) { adaptive_forward<decltype(zero)>(g, x, y); });
}
void adaptive_avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x) {
  with_compute_type(grad_x.dtype, [&](auto zero) { adaptive_backward<decltype(zero)>(g, grad_y, grad_x); });
}

}  // namespace

void im2col_conv_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y) {
  with_compute_type(y.dtype, [&](auto zero) { conv_forward<decltype(zero)>(g, x, weight, bias, y); });
}
void im2col_conv_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x) {
  with_compute_type(grad_x.dtype, [&](auto zero) { conv_grad_x<decltype(zero)>(g, grad_y, weight, grad_x); });
}
void im2col_conv_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight) {
  with_compute_type(grad_weight.dtype, [&](auto zero) { conv_grad_w<decltype(zero)>(g, x, grad_y, grad_weight); });
}

std::int64_t weight_gradient_slots(const ConvGeometry& g) {
  const i64 w_size = g.c_out * g.k();
  return std::max<i64>(1, std::min({g.n, kMaxWeightSlots, kWeightSlotBudget / w_size}));
}

}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const ConvPoolKernels& ConvPoolKernels::cpu() {
  static const ConvPoolKernels k{&cpu::conv2d_forward,
                                 &cpu::conv2d_backward_data,
                                 &cpu::conv2d_backward_filter,
                                 &cpu::conv2d_backward_bias,
                                 &cpu::max_pool2d_forward,
                                 &cpu::max_pool2d_indices,
                                 &cpu::max_pool2d_backward,
                                 &cpu::avg_pool2d_forward,
                                 &cpu::avg_pool2d_backward,
                                 &cpu::adaptive_avg_pool2d_forward,
                                 &cpu::adaptive_avg_pool2d_backward};
  return k;
}

}  // namespace ampcheck::kernels
