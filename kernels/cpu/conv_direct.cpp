// Direct CPU kernels for grouped and depthwise convolution (kernels/cpu/conv_direct.h):
// the chains of im2col + GEMM, in the same order, without the column matrix.
//
// Reads top to bottom: the phase planes (the padded input split by stride phase), the
// forward, the input gradient, the weight gradient, the entries.
//
// Why the bits are im2col + GEMM's (conv_direct.h has the definitions):
// - forward: y[co, p] = fma chains over (ci, i, j) ascending from +0, the weight first
//   (the GEMM's A) and the input or a padding zero second (its B), then + bias; here one
//   lane per output pixel, the taps in the same order;
// - input gradient: the column value of (ci, i, j) at output pixel p is the fma chain over
//   the group's output channels q ascending from +0 of w[q, ci, i, j] and grad_y[q, p];
//   col2im adds it into grad_x (zeroed) tap by tap in (i, j) order; here the same values,
//   added in the same tap order, into a zeroed padded plane whose padding is dropped (a
//   1x1 convolution with unit stride and no padding has no col2im: its value is stored);
// - weight gradient: per slot of samples (weight_gradient_slots), the chain over the
//   slot's samples in order and each sample's pixels in row-major order of
//   fma(grad_y, input or padding zero, acc) from +0; the slots added in order into +0.
//   Here one lane per output channel.
// Each output element is computed whole by one work item, and the items depend on the
// shapes only, so no thread count changes a bit; each lane is one IEEE chain, so no
// vector width does either (vectorize.h).
#include "kernels/cpu/conv_direct.h"

#include <algorithm>
#include <cmath>  // std::fma: one rounding, as the GEMM's vfmadd
#include <cstdint>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_io.h"
#include "kernels/cpu/vectorize.h"

namespace ampcheck::kernels::cpu {
namespace {

using i64 = std::int64_t;

std::size_t usize(i64 n) { return static_cast<std::size_t>(n); }

// A work buffer per thread and type that grows without zeroing: every use writes what it
// reads.
template <typename T, int Which>
T* scratch(i64 n) {
  thread_local std::vector<T> buf;
  if (static_cast<i64>(buf.size()) < n) buf.resize(usize(n));
  return buf.data();
}

i64 ceil_div(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// ---------------------------------------------------------------------------------
// Phase planes: the zero-padded input (h + 2ph rows, w + 2pw columns) split into sh * sw
// planes by (row mod sh, column mod sw); plane (pr, pc) holds padded row R * sh + pr,
// column C * sw + pc at R * pitch + C. Tap (i, j) of output pixel (oy, ox) then reads
// plane phase[t] at (oy * pitch + ox) + off[t]: a constant offset per tap, so the outputs
// of a whole plane, laid out at the same pitch (columns ow..pitch-1 of each row are junk,
// computed and dropped), are one contiguous loop per tap.
struct Phases {
  i64 nph = 1;    // sh * sw planes
  i64 pitch = 0;  // row pitch of every plane and of the output layout
  i64 rows = 0;   // rows per plane (one spare, so a junk column's reads stay inside)
  i64 plane = 0;  // rows * pitch
  i64 span = 0;   // oh * pitch: the output layout
  i64 taps = 0;   // kh * kw
  std::vector<i64> phase, off;  // per tap (i, j), row-major
};

Phases phases_of(const ConvGeometry& g) {
  Phases p;
  p.nph = g.sh * g.sw;
  const i64 row_reach = ((g.kh - 1) * g.dh) / g.sh, col_reach = ((g.kw - 1) * g.dw) / g.sw;
  p.pitch = std::max(ceil_div(g.w + 2 * g.pw, g.sw), g.ow + col_reach);
  p.rows = std::max(ceil_div(g.h + 2 * g.ph, g.sh), g.oh + row_reach) + 1;
  p.plane = p.rows * p.pitch;
  p.span = g.oh * p.pitch;
  p.taps = g.kh * g.kw;
  for (i64 i = 0; i < g.kh; ++i)
    for (i64 j = 0; j < g.kw; ++j) {
      p.phase.push_back(((i * g.dh) % g.sh) * g.sw + (j * g.dw) % g.sw);
      p.off.push_back(((i * g.dh) / g.sh) * p.pitch + (j * g.dw) / g.sw);
    }
  return p;
}

// The phase planes of one input plane src [h, w] into dst (nph planes of p.plane).
template <typename T>
void fill_phases(const ConvGeometry& g, const Phases& p, const T* src, T* dst) {
  for (i64 pr = 0; pr < g.sh; ++pr)
    for (i64 pc = 0; pc < g.sw; ++pc) {
      T* d = dst + (pr * g.sw + pc) * p.plane;
      // Columns C whose input column C * sw + pc - pw lies in [0, w).
      const i64 c_lo = std::clamp<i64>(ceil_div(g.pw - pc, g.sw), 0, p.pitch);
      const i64 c_hi = std::clamp<i64>(ceil_div(g.w + g.pw - pc, g.sw), c_lo, p.pitch);
      for (i64 r = 0; r < p.rows; ++r) {
        T* row = d + r * p.pitch;
        const i64 iy = r * g.sh + pr - g.ph;
        if (iy < 0 || iy >= g.h) {
          std::fill(row, row + p.pitch, T{0});
          continue;
        }
        std::fill(row, row + c_lo, T{0});
        const T* s = src + iy * g.w + c_lo * g.sw + pc - g.pw;
        if (g.sw == 1)
          std::copy(s, s + (c_hi - c_lo), row + c_lo);
        else
          for (i64 c = c_lo; c < c_hi; ++c) row[c] = s[(c - c_lo) * g.sw];
        std::fill(row + c_hi, row + p.pitch, T{0});
      }
    }
}

// The input plane dst [h, w] read back from phase planes (the inverse of fill_phases on
// the valid positions; padding is dropped).
template <typename T>
void read_phases(const ConvGeometry& g, const Phases& p, const T* src, T* dst) {
  for (i64 iy = 0; iy < g.h; ++iy) {
    const i64 pr = (iy + g.ph) % g.sh, r = (iy + g.ph) / g.sh;
    T* out = dst + iy * g.w;
    if (g.sw == 1) {
      const T* s = src + pr * p.plane + r * p.pitch + g.pw;
      std::copy(s, s + g.w, out);
      continue;
    }
    for (i64 ix = 0; ix < g.w; ++ix) {
      const i64 pc = (ix + g.pw) % g.sw, c = (ix + g.pw) / g.sw;
      out[ix] = src[(pr * g.sw + pc) * p.plane + r * p.pitch + c];
    }
  }
}

// Output rows per block of the forward and input-gradient loops: a block's accumulators
// (up to kQ rows of it) stay in L1.
constexpr i64 kBlock = 1024;
i64 rows_per_block(const ConvGeometry& g, const Phases& p) { return std::clamp<i64>(kBlock / p.pitch, 1, g.oh); }

// Work items of about this many multiply-adds per parallel chunk (the chunking never
// changes a result: each output element is computed whole inside one item).
constexpr i64 kChunkWork = i64{1} << 17;
i64 grain_for(i64 work_per_item) { return std::max<i64>(1, kChunkWork / std::max<i64>(1, work_per_item)); }

// ---------------------------------------------------------------------------------
// Forward: one item per (sample, group). kQ output channels share each load of a tap's
// input run.
constexpr i64 kQ = 4;

template <typename T>
void forward_item(const ConvGeometry& g, const Phases& p, const View& input, const T* weight, const T* bias, i64 s,
                  i64 grp, const View& out) {
  const i64 cin_g = g.cin_g(), cout_g = g.cout_g(), k = g.k(), hw = g.hw(), ohw = g.ohw();
  T* xph = scratch<T, 0>(cin_g * p.nph * p.plane);
  T* xbuf = scratch<T, 1>(hw);
  T* acc = scratch<T, 2>(kQ * std::min(p.span, rows_per_block(g, p) * p.pitch));
  T* ybuf = scratch<T, 3>(cout_g * ohw);
  for (i64 ci = 0; ci < cin_g; ++ci) {
    const T* plane = source(input, (s * g.c_in + grp * cin_g + ci) * hw, hw, xbuf);
    fill_phases(g, p, plane, xph + ci * p.nph * p.plane);
  }
  const T* w_grp = weight + grp * cout_g * k;
  const i64 block_rows = rows_per_block(g, p);
  for (i64 oy0 = 0; oy0 < g.oh; oy0 += block_rows) {
    const i64 nrows = std::min(block_rows, g.oh - oy0), len = nrows * p.pitch, v0 = oy0 * p.pitch;
    for (i64 q0 = 0; q0 < cout_g; q0 += kQ) {
      const i64 nq = std::min(kQ, cout_g - q0);
      std::fill(acc, acc + nq * len, T{0});
      for (i64 ci = 0; ci < cin_g; ++ci)
        for (i64 t = 0; t < p.taps; ++t) {
          const T* __restrict src = xph + (ci * p.nph + p.phase[usize(t)]) * p.plane + p.off[usize(t)] + v0;
          for (i64 qq = 0; qq < nq; ++qq) {
            const T w = w_grp[(q0 + qq) * k + ci * p.taps + t];
            T* __restrict a = acc + qq * len;
            for (i64 v = 0; v < len; ++v) a[v] = std::fma(w, src[v], a[v]);
          }
        }
      for (i64 qq = 0; qq < nq; ++qq) {
        const i64 co = grp * cout_g + q0 + qq;
        for (i64 r = 0; r < nrows; ++r) {
          const T* a = acc + qq * len + r * p.pitch;
          T* y = ybuf + (q0 + qq) * ohw + (oy0 + r) * g.ow;
          if (bias) {
            const T b = bias[co];
            for (i64 ox = 0; ox < g.ow; ++ox) y[ox] = a[ox] + b;
          } else {
            std::copy(a, a + g.ow, y);
          }
        }
      }
    }
  }
  store(out, (s * g.c_out + grp * cout_g) * ohw, cout_g * ohw, ybuf);
}

template <typename T>
void forward(const ConvGeometry& g, const View& input, const View& weight_v, const View& bias_v, const View& out,
             GemmIsa isa) {
  std::vector<T> weight_buf(usize(weight_v.numel())), bias_buf(usize(g.c_out));
  const T* weight = source(weight_v, 0, weight_v.numel(), weight_buf.data());
  const T* bias = bias_v.data != nullptr ? source(bias_v, 0, g.c_out, bias_buf.data()) : nullptr;
  const Phases p = phases_of(g);
  const i64 items = g.n * g.groups;
  parallel_for(items, grain_for(g.cout_g() * g.k() * p.span), [&](i64 begin, i64 end) {
    vectorized(isa, [&] {
      for (i64 item = begin; item < end; ++item)
        forward_item<T>(g, p, input, weight, bias, item / g.groups, item % g.groups, out);
    });
  });
}

// ---------------------------------------------------------------------------------
// Input gradient: one item per (sample, group).

template <typename T>
void backward_data_item(const ConvGeometry& g, const Phases& p, const View& grad, const T* weight, i64 s, i64 grp,
                        const View& gx) {
  const i64 cin_g = g.cin_g(), cout_g = g.cout_g(), k = g.k(), hw = g.hw(), ohw = g.ohw();
  const i64 block_rows = rows_per_block(g, p);
  T* gyp = scratch<T, 0>(cout_g * p.span);  // grad_y at the phase pitch
  T* gph = scratch<T, 1>(p.nph * p.plane);  // one input channel's gradient, padded
  T* val = scratch<T, 2>(std::min(p.span, block_rows * p.pitch));
  T* gybuf = scratch<T, 3>(ohw);
  T* gxbuf = scratch<T, 4>(cin_g * hw);
  for (i64 q = 0; q < cout_g; ++q) {
    const T* plane = source(grad, (s * g.c_out + grp * cout_g + q) * ohw, ohw, gybuf);
    T* dst = gyp + q * p.span;
    for (i64 oy = 0; oy < g.oh; ++oy) {
      std::copy(plane + oy * g.ow, plane + (oy + 1) * g.ow, dst + oy * p.pitch);
      std::fill(dst + oy * p.pitch + g.ow, dst + (oy + 1) * p.pitch, T{0});
    }
  }
  const T* w_grp = weight + grp * cout_g * k;
  const bool pointwise = g.pointwise();
  for (i64 ci = 0; ci < cin_g; ++ci) {
    std::fill(gph, gph + p.nph * p.plane, T{0});
    for (i64 t = 0; t < p.taps; ++t) {
      T* dst_t = gph + p.phase[usize(t)] * p.plane + p.off[usize(t)];
      for (i64 oy0 = 0; oy0 < g.oh; oy0 += block_rows) {
        const i64 nrows = std::min(block_rows, g.oh - oy0), len = nrows * p.pitch, v0 = oy0 * p.pitch;
        T* __restrict v_out = val;
        std::fill(v_out, v_out + len, T{0});
        for (i64 q = 0; q < cout_g; ++q) {
          const T w = w_grp[q * k + ci * p.taps + t];
          const T* __restrict src = gyp + q * p.span + v0;
          for (i64 v = 0; v < len; ++v) v_out[v] = std::fma(w, src[v], v_out[v]);
        }
        for (i64 r = 0; r < nrows; ++r) {
          T* __restrict d = dst_t + (oy0 + r) * p.pitch;
          const T* __restrict src = val + r * p.pitch;
          if (pointwise)  // im2col + GEMM stores a 1x1 column as is: -0 stays -0
            std::copy(src, src + g.ow, d);
          else
            for (i64 ox = 0; ox < g.ow; ++ox) d[ox] += src[ox];
        }
      }
    }
    read_phases(g, p, gph, gxbuf + ci * hw);
  }
  store(gx, (s * g.c_in + grp * cin_g) * hw, cin_g * hw, gxbuf);
}

template <typename T>
void backward_data(const ConvGeometry& g, const View& grad, const View& weight_v, const View& gx, GemmIsa isa) {
  std::vector<T> weight_buf(usize(weight_v.numel()));
  const T* weight = source(weight_v, 0, weight_v.numel(), weight_buf.data());
  const Phases p = phases_of(g);
  const i64 items = g.n * g.groups;
  parallel_for(items, grain_for(g.cout_g() * g.k() * p.span), [&](i64 begin, i64 end) {
    vectorized(isa, [&] {
      for (i64 item = begin; item < end; ++item)
        backward_data_item<T>(g, p, grad, weight, item / g.groups, item % g.groups, gx);
    });
  });
}

// ---------------------------------------------------------------------------------
// Weight gradient: one item per (slot, block of kLanes output channels); lane l of a
// block is output channel co0 + l, whose input channels are those of its group.
constexpr i64 kLanes = 16;

template <typename T>
void backward_filter_item(const ConvGeometry& g, const Phases& p, const View& input, const View& grad, i64 s0, i64 s1,
                          i64 co0, T* partial) {
  const i64 cin_g = g.cin_g(), cout_g = g.cout_g(), k = g.k(), hw = g.hw(), ohw = g.ohw();
  const i64 lanes = std::min(kLanes, g.c_out - co0);
  T* acc = scratch<T, 0>(k * kLanes);
  T* gyt = scratch<T, 1>(ohw * kLanes);        // grad_y, [pixel][lane]
  T* xt = scratch<T, 2>(p.nph * p.plane * kLanes);  // input phase planes, [position][lane]
  T* xph = scratch<T, 3>(p.nph * p.plane);     // one lane's phase planes
  T* buf = scratch<T, 4>(std::max(hw, ohw));
  std::fill(acc, acc + k * kLanes, T{0});
  if (lanes < kLanes) {  // idle lanes compute on zeros; their results are dropped
    std::fill(gyt, gyt + ohw * kLanes, T{0});
    std::fill(xt, xt + p.nph * p.plane * kLanes, T{0});
  }
  for (i64 s = s0; s < s1; ++s) {
    for (i64 l = 0; l < lanes; ++l) {
      const T* plane = source(grad, (s * g.c_out + co0 + l) * ohw, ohw, buf);
      for (i64 i = 0; i < ohw; ++i) gyt[i * kLanes + l] = plane[i];
    }
    for (i64 ci = 0; ci < cin_g; ++ci) {
      for (i64 l = 0; l < lanes; ++l) {
        const i64 c = ((co0 + l) / cout_g) * cin_g + ci;
        fill_phases(g, p, source(input, (s * g.c_in + c) * hw, hw, buf), xph);
        for (i64 i = 0; i < p.nph * p.plane; ++i) xt[i * kLanes + l] = xph[i];
      }
      T* acc_ci = acc + ci * p.taps * kLanes;
      for (i64 oy = 0; oy < g.oh; ++oy)
        for (i64 ox = 0; ox < g.ow; ++ox) {
          const T* __restrict gv = gyt + (oy * g.ow + ox) * kLanes;
          const i64 at = oy * p.pitch + ox;
          for (i64 t = 0; t < p.taps; ++t) {
            const T* __restrict xv = xt + (p.phase[usize(t)] * p.plane + p.off[usize(t)] + at) * kLanes;
            T* __restrict a = acc_ci + t * kLanes;
            for (i64 l = 0; l < kLanes; ++l) a[l] = std::fma(gv[l], xv[l], a[l]);
          }
        }
    }
  }
  for (i64 l = 0; l < lanes; ++l)
    for (i64 r = 0; r < k; ++r) partial[(co0 + l) * k + r] = acc[r * kLanes + l];
}

template <typename T>
void backward_filter(const ConvGeometry& g, const View& input, const View& grad, const View& gw_out, GemmIsa isa) {
  const i64 w_size = g.c_out * g.k();
  std::vector<T> gw(usize(w_size), T{0});
  if (g.n > 0) {
    const Phases p = phases_of(g);
    const i64 slots = weight_gradient_slots(g), blocks = (g.c_out + kLanes - 1) / kLanes;
    std::vector<T> partial(usize(slots * w_size));
    const i64 work = (g.n / slots + 1) * kLanes * g.k() * g.ohw();
    parallel_for(slots * blocks, grain_for(work), [&](i64 begin, i64 end) {
      vectorized(isa, [&] {
        for (i64 item = begin; item < end; ++item) {
          const i64 slot = item / blocks, block = item % blocks;
          backward_filter_item<T>(g, p, input, grad, slot * g.n / slots, (slot + 1) * g.n / slots, block * kLanes,
                                  partial.data() + slot * w_size);
        }
      });
    });
    for (i64 slot = 0; slot < slots; ++slot)
      for (i64 i = 0; i < w_size; ++i) gw[usize(i)] += partial[usize(slot * w_size + i)];
  }
  store(gw_out, 0, w_size, gw.data());
}

}  // namespace

// Depthwise convolutions (one input channel per group): an im2col column there is one
// channel's taps, so its GEMM is K = kh * kw deep and mostly packing. Grouped ones with
// several channels per group (ResNeXt's 4 to 32) keep im2col + GEMM, whose weight gradient
// is 3-8x faster there (bench/conv_bench.cpp, bench/results/*-conv-direct-*.md).
bool direct_conv_takes(const ConvGeometry& g) { return g.groups > 1 && g.cin_g() == 1; }

void direct_conv_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y,
                         GemmIsa isa) {
  with_compute_type(y.dtype, [&](auto zero) { forward<decltype(zero)>(g, x, weight, bias, y, isa); });
}
void direct_conv_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x,
                               GemmIsa isa) {
  with_compute_type(grad_x.dtype, [&](auto zero) { backward_data<decltype(zero)>(g, grad_y, weight, grad_x, isa); });
}
void direct_conv_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight,
                                 GemmIsa isa) {
  with_compute_type(grad_weight.dtype,
                    [&](auto zero) { backward_filter<decltype(zero)>(g, x, grad_y, grad_weight, isa); });
}

}  // namespace ampcheck::kernels::cpu
